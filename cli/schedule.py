"""``wanreduce schedule``: the best sync schedule for a topology, written as PROTOCOL.md's JSON file.

It compares the gather mode (every member aggregates; :func:`wanreduce.host.schedule.optimize`) with root
aggregation (``docs/lean.md``; :func:`wanreduce.host.lean.best_plan`), writes the winner and says why.
"""

import math
import os
import time

from ..host.baselines import all_baselines
from ..host.costmodel import CostModel, CostParams
from ..host.lean import DEFAULT_JITTER_S, LeanPlan, best_plan, lean_to_schedule
from ..host.schedule import exhaustive, optimize, shapes, write_schedule
from ..host.topology import EMBEDDED, load_topology
from ..host.units import format_seconds, format_size, parse_size
from ..spec.errors import WanreduceError
from ..spec.schedfile import MAX_RANKS
from ._common import Outputs, add_force_option, add_json_option, print_json, progress

__all__ = [
    "register",
    "run",
    "add_model_arguments",
    "model_from_args",
    "topology_from_args",
    "number",
    "add_mode_arguments",
    "modes_from_args",
    "MODES",
]

#: ``--mode`` choices: which aggregation modes may win.
MODES = {"auto": ("gather", "root"), "gather": ("gather",), "root": ("root",)}

DEFAULT_OUT = os.path.join("build", "schedule.json")

#: Jitter beyond a minute is no WAN's: a typo, which would give a period of centuries.
MAX_JITTER_MS = 60_000


def add_model_arguments(p, *, memory_help=None):
    """Options shared by ``schedule`` and ``sweep``: the topology and every cost-model parameter."""
    d = CostParams()
    p.add_argument(
        "--topology",
        default="nine-city",
        metavar="NAME|FILE.csv",
        help=f"{' or '.join(EMBEDDED)}, or a CSV of public links (City1,City2,Latency[,Bandwidth]"
        ") or private links (Device1,Device2,Latency,Bandwidth); latencies are RTT in ms "
        "(default: nine-city)",
    )
    p.add_argument(
        "--sites",
        default=None,
        metavar="A,B,...",
        help="use only these cities, in this rank order (default: every city, sorted)",
    )
    if memory_help is not None:
        p.add_argument("--memory", default=format_size(d.memory_bytes), metavar="SIZE", help=memory_help)
    p.add_argument(
        "--chunk-bytes",
        default=str(d.chunk_bytes),
        metavar="SIZE",
        help=f"payload bytes per packet (default: {d.chunk_bytes})",
    )
    p.add_argument(
        "--tensor-bytes",
        default=format_size(d.tensor_bytes),
        metavar="SIZE",
        help=f"bytes each site contributes per sync (default: {format_size(d.tensor_bytes)})",
    )
    p.add_argument(
        "--site-gbps",
        default=d.site_gbps,
        metavar="GBPS",
        help=f"each site's access link, Gbit/s per direction, unless the topology gives it "
        f"(default: {d.site_gbps:g})",
    )
    p.add_argument(
        "--fpga-ingress-gbps",
        default=d.fpga_ingress_gbps,
        metavar="GBPS",
        help=f"sum of the aggregator's input ports, Gbit/s (default: {d.fpga_ingress_gbps:g})",
    )
    p.add_argument(
        "--clock-mhz",
        default=d.clock_mhz,
        metavar="MHZ",
        help=f"aggregator datapath clock, one bus beat per cycle (default: {d.clock_mhz:g})",
    )
    p.add_argument(
        "--bus-bits",
        default=d.bus_bits,
        metavar="BITS",
        help=f"aggregator datapath width in bits (default: {d.bus_bits})",
    )
    p.add_argument(
        "--link-gbps",
        default=None,
        metavar="GBPS",
        help="capacity of public links without a Bandwidth column, Gbit/s per direction (default: unlimited)",
    )
    p.add_argument(
        "--epsilon",
        default=d.epsilon,
        metavar="EPS",
        help=f"consensus target for schedules that are not exact (default: {d.epsilon:g})",
    )
    p.add_argument(
        "--time-limit",
        default=20.0,
        metavar="SECONDS",
        help="search budget for the optimizer; small networks finish well before (default: 20)",
    )
    p.add_argument("--seed", default=0, help="seed of the randomised search (default: 0)")


def add_mode_arguments(p):
    """Options shared by ``schedule`` and ``sweep``: the aggregation modes and the WAN jitter."""
    p.add_argument(
        "--mode",
        choices=sorted(MODES),
        default="auto",
        help="aggregation mode: gather (every member aggregates), root (one root per stripe "
        "sums and multicasts the RESULT, docs/lean.md) or auto, the faster (default: auto)",
    )
    p.add_argument(
        "--jitter-ms",
        default=DEFAULT_JITTER_S * 1e3,
        metavar="MS",
        help="one-way WAN jitter that root mode's send offsets absorb; a root's slot lives 2x "
        f"this (default: {DEFAULT_JITTER_S * 1e3:g})",
    )


def modes_from_args(args):
    """``(jitter_s, modes)`` from ``--jitter-ms`` and ``--mode``."""
    jitter_ms = number(args.jitter_ms, "--jitter-ms", positive=False)
    if not 0 <= jitter_ms <= MAX_JITTER_MS:
        raise WanreduceError(
            f"--jitter-ms must be in 0..{MAX_JITTER_MS} (a WAN's one-way jitter), got {args.jitter_ms}"
        )
    return jitter_ms / 1e3, MODES[args.mode]


def number(text, what, *, kind=float, positive=True, allow_none=False):
    """Convert an option's text, with a one-line error naming the option (argparse's would be two)."""
    if text is None and allow_none:
        return None
    try:
        value = kind(text)
    except (TypeError, ValueError):
        noun = "an integer" if kind is int else "a number"
        raise WanreduceError(f"{what} must be {noun}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise WanreduceError(f"{what} must be a finite number, got {text!r}")
    if positive and value <= 0:
        raise WanreduceError(f"{what} must be positive, got {text}")
    return value


def topology_from_args(args):
    sites = None
    if args.sites is not None:
        sites = [s.strip() for s in args.sites.split(",")]
        if any(not s for s in sites):
            raise WanreduceError(f"--sites {args.sites!r} has an empty name")
    link = number(args.link_gbps, "--link-gbps", allow_none=True)
    return load_topology(args.topology, link_gbps=link, sites=sites)


def params_from_args(args, *, memory=None):
    args.time_limit = number(args.time_limit, "--time-limit")
    args.seed = number(args.seed, "--seed", kind=int, positive=False)
    if memory is None:
        memory = parse_size(args.memory, what="--memory")
    return CostParams(
        memory_bytes=memory,
        chunk_bytes=parse_size(args.chunk_bytes, what="--chunk-bytes"),
        tensor_bytes=parse_size(args.tensor_bytes, what="--tensor-bytes"),
        site_gbps=number(args.site_gbps, "--site-gbps"),
        fpga_ingress_gbps=number(args.fpga_ingress_gbps, "--fpga-ingress-gbps"),
        clock_mhz=number(args.clock_mhz, "--clock-mhz"),
        bus_bits=number(args.bus_bits, "--bus-bits", kind=int),
        epsilon=number(args.epsilon, "--epsilon"),
    )


def model_from_args(args):
    return CostModel(topology_from_args(args), params_from_args(args))


def register(subparsers):
    p = subparsers.add_parser(
        "schedule",
        help="compute the best sync schedule for a topology and write it as JSON",
        description="Search group sizes, partitions, rotations and site placements under the WAN cost "
        "model; print the rounds and what bounds each, compare with the baselines, and write "
        "PROTOCOL.md's schedule file.",
    )
    add_model_arguments(p, memory_help="FPGA reorder-buffer memory per site (default: 1MiB)")
    add_mode_arguments(p)
    p.add_argument(
        "--group-size",
        default=None,
        metavar="K",
        help="only rotating groups of K sites (default: any size from 2 to N)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE.json",
        help=f"schedule file to write; a FILE that exists needs --force (default: {DEFAULT_OUT}, replaced "
        "each run)",
    )
    add_force_option(p, "FILE.json")
    add_json_option(p)
    p.set_defaults(func=run)


#: Searches allowed longer than this print a progress line first.
SLOW_SEARCH_S = 5.0


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
    model = model_from_args(args)
    topo, params = model.topology, model.params
    if topo.n > MAX_RANKS:
        raise WanreduceError(
            f"schedule files hold at most {MAX_RANKS} ranks; the topology has {topo.n} sites"
        )
    if args.group_size is not None:
        args.group_size = number(args.group_size, "--group-size", kind=int)
        shapes(topo.n, group_size=args.group_size)  # validates the size
    if params.memory_bytes < 2 * params.chunk_bytes:
        raise WanreduceError(
            f"no schedule reaches consensus: {format_size(params.memory_bytes)} of memory cannot hold "
            f"one slot of {format_size(params.chunk_bytes)} chunks for any group of 2 or more sites"
        )
    jitter_s, modes = modes_from_args(args)
    outs = Outputs(force=args.force, inputs=[args.topology] if os.path.exists(args.topology) else [])
    out = outs.add(args.output, "--output", default=DEFAULT_OUT)
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
                "output": str(out),
            }
        )
        return 0

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
    print(f"wrote {out}")
    return 0
