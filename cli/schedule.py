"""``wanreduce schedule``: the best sync schedule for a topology, written as PROTOCOL.md's JSON file.

It compares the gather mode (every member aggregates; :func:`wanreduce.host.schedule.optimize`) with root
aggregation (``docs/lean.md``; :func:`wanreduce.host.lean.best_plan`), writes the winner and says why.
"""

import contextlib
import math
import os
import time

from ..host.baselines import all_baselines
from ..host.costmodel import CostModel
from ..host.lean import LeanPlan, best_plan, lean_to_schedule
from ..host.schedule import exhaustive, optimize, shapes, write_schedule
from ..host.units import format_seconds, format_size
from ..spec.errors import WanreduceError
from ..spec.schedfile import MAX_RANKS
from ._common import (
    SLOW_SEARCH_S,
    int_option,
    modes_from_args,
    print_json,
    progress,
    topology_from_args,
)
from ._extmem import add_cost_options, add_result_options, params_of, result_outputs

__all__ = ["register", "run"]


DEFAULT_OUT = os.path.join("build", "schedule.json")


def register(subparsers):
    p = subparsers.add_parser(
        "schedule",
        help="compute the best sync schedule for a topology and write it as JSON",
        description="Search group sizes, partitions, rotations and site placements under the WAN cost "
        "model; print the rounds and what bounds each, compare with the baselines, and write "
        "PROTOCOL.md's schedule file.",
    )
    add_cost_options(p, memory_help="FPGA reorder-buffer memory per site (default: 1MiB)")
    int_option(
        p,
        "--group-size",
        2,
        MAX_RANKS,
        default=None,
        metavar="K",
        help="only rotating groups of K sites (default: any size from 2 to N)",
    )
    add_result_options(
        p,
        metavar="FILE.json",
        what="schedule file to write, - for stdout (the table then goes to stderr)",
        default=DEFAULT_OUT,
    )
    p.set_defaults(func=run)


def _names(topo, group):
    return "{" + ",".join(topo.sites[i] for i in group) + "}"


def _stripes(topo, plan):
    """The stripes of a root-mode plan, one dict each, for the table and --json."""
    out = []
    for r, rc in enumerate(plan.round_costs):
        for g, grp in enumerate(rc.groups):
            for st in grp.stripes:
                out.append(
                    {
                        "round": r,
                        "group": g,
                        "root": topo.sites[st.root],
                        "first_chunk": st.first_chunk,
                        "chunks": st.chunks,
                        "rate_Bps": st.rate_Bps,
                        "bound": st.bound,
                        "time_s": st.time_s,
                        "peak_slot_bytes": st.peak_slot_bytes,
                    }
                )
    return out


def run(args):
    model = CostModel(topology_from_args(args), params_of(args))
    topo, params = model.topology, model.params
    if topo.n > MAX_RANKS:
        raise WanreduceError(
            f"schedule files hold at most {MAX_RANKS} ranks; the topology has {topo.n} sites"
        )
    if args.group_size is not None:
        shapes(topo.n, group_size=args.group_size)  # validates the size
    if params.memory_bytes < 2 * params.chunk_bytes:
        raise WanreduceError(
            f"no schedule reaches consensus: {format_size(params.memory_bytes)} of memory cannot hold "
            f"one slot of {format_size(params.chunk_bytes)} chunks for any group of 2 or more sites"
        )
    jitter_s, modes = modes_from_args(args)
    outs, out = result_outputs(args, DEFAULT_OUT, stdout="text")
    t0 = time.perf_counter()
    if args.time_limit > SLOW_SEARCH_S:
        progress("schedule", f"searching {topo.n} sites for up to {args.time_limit:g} s (--time-limit)")
    best, per = optimize(model, group_size=args.group_size, time_limit_s=args.time_limit, seed=args.seed)
    gap_line = None
    if topo.n <= 9 and len(best.shape) > 1 and math.prod(best.shape) == topo.n:
        exact = exhaustive(model, best.shape)
        gap = best.score_s / exact.score_s - 1 if exact.score_s > 0 else 0.0
        gap_line = (
            f"exhaustive check over all {math.factorial(topo.n)} placements on {best.name}: "
            f"optimum {format_seconds(exact.score_s)}, heuristic gap {gap * 100:.2f}%"
        )
        if exact.score_s < best.score_s:
            best = exact
    choice = best_plan(model, jitter_s=jitter_s, group_size=args.group_size, gather=(best, per), modes=modes)
    best = choice.best
    if not math.isfinite(best.score_s):
        raise WanreduceError(
            f"no schedule reaches consensus: {format_size(params.memory_bytes)} of memory cannot hold "
            f"one slot of {format_size(params.chunk_bytes)} chunks for any group of 2 or more sites"
        )
    if time.perf_counter() - t0 > SLOW_SEARCH_S:
        progress("schedule", f"search done in {time.perf_counter() - t0:.1f} s")
    sched = lean_to_schedule(best, model)
    with outs.commit():
        if out is not None:
            write_schedule(sched, outs.temp(out))
    baselines = all_baselines(model)
    others = sorted([*per.values(), *choice.root_per_shape.values()], key=lambda p: p.score_s)
    stripes = _stripes(topo, best) if isinstance(best, LeanPlan) else []
    if args.json:
        print_json(
            {
                "topology": topo.name,
                "sites": list(topo.sites),
                "params": {
                    "memory_bytes": params.memory_bytes,
                    "chunk_bytes": params.chunk_bytes,
                    "tensor_bytes": params.tensor_bytes,
                    "site_gbps": params.site_gbps,
                    "fpga_ingress_gbps": params.fpga_ingress_gbps,
                    "bus_bits": params.bus_bits,
                    "clock_mhz": params.clock_mhz,
                    "epsilon": params.epsilon,
                },
                "schedule": {
                    "name": best.name,
                    "exact": bool(best.exact),
                    "period_s": best.period_s,
                    "time_to_consensus_s": best.score_s,
                    "mode": choice.mode,
                },
                "mode": {
                    "winner": choice.mode,
                    "reason": choice.reason,
                    "jitter_s": jitter_s,
                    "gather_s": choice.gather.score_s,
                    "root_s": choice.root.score_s,
                },
                "stripes": stripes,
                "rounds": [
                    {
                        "time_s": cost.time_s,
                        "bound": cost.bound,
                        "groups": [[topo.sites[i] for i in g] for g in rnd],
                    }
                    for rnd, cost in zip(best.rounds, best.round_costs, strict=True)
                ],
                "shapes": {p.name: p.score_s for p in others},
                "exhaustive_check": gap_line,
                "baselines": [
                    {
                        "name": b.name,
                        "time_s": b.time_s,
                        "speedup": b.time_s / best.score_s,
                        "detail": b.detail,
                    }
                    for b in baselines
                ],
                "output": None if out is None else str(out),
            }
        )
        return 0

    # With -o - the schedule file is stdout's alone: the table goes to stderr.
    with contextlib.redirect_stdout(outs.log):
        print(
            f"topology {topo.name}: {topo.n} sites; memory {format_size(params.memory_bytes)}, "
            f"chunk {params.chunk_bytes} B, tensor {format_size(params.tensor_bytes)}, "
            f"site {params.site_gbps:g} Gbit/s, FPGA ingress {params.fpga_ingress_gbps:g} Gbit/s, "
            f"datapath {params.bus_bits} bits x {params.clock_mhz:g} MHz"
        )
        kind = "exact consensus" if best.exact else f"sigma2 {best.sigma2:.3g}, {best.periods} periods"
        print(
            f"schedule: {best.name} ({kind}), period {format_seconds(best.period_s)}, "
            f"time to consensus {format_seconds(best.score_s)}"
        )
        print(f"{'round':>5}  {'time':>10}  {'bound':<9}  groups")
        for r, (rnd, cost) in enumerate(zip(best.rounds, best.round_costs, strict=True)):
            groups = " ".join(_names(topo, g) for g in rnd)
            print(f"{r:>5}  {format_seconds(cost.time_s):>10}  {cost.bound:<9}  {groups}")
        for st in stripes:
            print(
                f"{'':>5}  stripe of round {st['round']} group {st['group']}: root {st['root']}, "
                f"{st['chunks']} chunks at {st['rate_Bps'] * 8 / 1e9:.3g} Gbit/s per sender ({st['bound']}), "
                f"peak {format_size(st['peak_slot_bytes'])} of slots"
            )
        print(f"mode: {choice.reason}")
        print("shapes: " + "; ".join(f"{p.name} {format_seconds(p.score_s)}" for p in others))
        if gap_line:
            print(gap_line)
        for b in baselines:
            speed = b.time_s / best.score_s
            print(f"baseline {b.name:<12} {format_seconds(b.time_s):>10}  speedup {speed:.3g}x  ({b.detail})")
        print(f"wrote {outs.shown(out)}")
    return 0
