"""``wanreduce demo``: every site's aggregator, on the RTL, synchronising under the optimised schedule.

It optimises the sync schedule for the topology (default: the embedded nine-city network) at the given
aggregator memory, builds one Verilated aggregator core per site sized for that memory (slots of G_max
member buffers and a shadow RESULT, one bank per round), and runs one period of the discrete-event WAN:
every site multicasts its seeded random tensor chunk by chunk under the self-clocked window, each core
aggregates what the WAN delivers in the order it arrives, and every site's hosts apply their RESULTs. It
then checks that every site holds, bit for bit, what a numpy model of the same schedule computes, that all
sites hold the same bits, that nothing was dropped, and that the simulated period is within 0.5 % of the
cost model's.

With ``--loss``, ``--dup``, ``--reorder``, ``--corrupt`` or ``--kill`` the WAN misbehaves (seeded by
``--seed``) and the hosts recover (retransmission timers, the aggregators' shadow RESULTs; see
docs/reliability.md): the check is then that every site's final tensor is, bit for bit, the fault-free
one (the numpy model), and the report says what the recovery cost. A killed site makes the run stop with a
one-line error naming it and the round, and the demo exit 1.

With ``--mode root`` it runs root aggregation instead (docs/lean.md): the best root-mode plan (stripes,
roots, send offsets) for the memory, one in-line core per site with a bypass port, ``--background``
frames of other traffic mixed into every site's input, ``--jitter-ms`` of WAN jitter. The checks: every
site equal to the numpy model and to each other, the simulated time within 2 % of the model's, each
root's peak slot memory at most 1.1x the model's, no drop anywhere, and every background frame out of its
site's bypass port unchanged and in order.
"""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..host import lean, pacing, wan, wan_lean
from ..host.costmodel import CostModel, CostParams
from ..host.reference import run_reference
from ..host.schedule import optimize, plan_to_schedule
from ..host.topology import load_topology
from ..host.units import format_seconds, format_size, parse_size
from ..hw.layouts import WIDTHS
from ..sim import figures
from ..sim.verify.cosim import CLOCK_HZ, RtlCores, inline_sites
from ..spec.errors import WanreduceError
from ..spec.protocol import Drop, DType
from ._common import int_in

__all__ = ["register", "run"]

#: Largest relative difference between the simulated and the modelled period that passes (README.md states
#: these bounds; the tests hold the demo to them).
TOLERANCE = 0.005
#: The same for root mode, whose senders' jitter the model covers with a margin.
ROOT_TOLERANCE = 0.02
#: What the demo's figures depend on, by aggregator (the CLI module itself holds the run's logic).
_SOURCES = {
    "rtl": ("spec", "hw", "host", "sim/verilator", "sim/verify", "cli/demo.py"),
    "golden": ("spec", "host", "cli/demo.py"),
}
_PARSER = None


def register(sub):
    global _PARSER
    p = _PARSER = sub.add_parser(
        "demo",
        help="all sites synchronise on the RTL under the optimised schedule",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument(
        "--topology",
        default="nine-city",
        help="embedded topology name or a topology CSV (default: nine-city)",
    )
    p.add_argument(
        "--memory",
        default="1MiB",
        help="aggregator memory per site the schedule and the cores are built for (default: 1MiB)",
    )
    p.add_argument(
        "--elements",
        type=int_in(1, 1 << 22, "--elements"),
        default=65536,
        help="elements of each site's tensor (default: 65536)",
    )
    p.add_argument(
        "--chunk-elems",
        type=int_in(1, 2048, "--chunk-elems"),
        default=256,
        help="elements per packet (default: 256, 1 KiB of fp32)",
    )
    p.add_argument(
        "--dtype",
        choices=[d.label for d in DType],
        default="fp32",
        help="element type on the wire (default: fp32)",
    )
    p.add_argument("--seed", type=int_in(0, 2**32 - 1, "--seed"), default=1, help="random seed (default: 1)")
    p.add_argument(
        "--aggregator",
        choices=("rtl", "golden"),
        default="rtl",
        help="the Verilated cores, or the golden model as the fast path (default: rtl)",
    )
    p.add_argument(
        "--width",
        type=int,
        choices=WIDTHS,
        default=64,
        help="datapath width of the cores in bits (default: 64, the quickest to build)",
    )
    p.add_argument(
        "--time-limit",
        type=int_in(1, 600, "--time-limit"),
        default=5,
        help="seconds for the schedule search (default: 5)",
    )
    p.add_argument(
        "--mode",
        choices=("gather", "root"),
        default="gather",
        help="gather: every group member aggregates (the optimised gather schedule); root: one root per "
        "stripe aggregates and multicasts, the other sites' cores forward in line (default: gather)",
    )
    p.add_argument(
        "--jitter-ms",
        type=_non_negative("--jitter-ms"),
        default=0.5,
        help="root mode: uniform WAN jitter J in ms the plan absorbs and the WAN adds (default: 0.5)",
    )
    p.add_argument(
        "--background",
        type=int_in(0, 100_000, "--background"),
        default=40,
        help="root mode: frames of other traffic mixed into each site's input (default: 40)",
    )
    p.add_argument(
        "--loss",
        type=_probability("--loss"),
        default=0.0,
        metavar="P",
        help="probability that the WAN loses a CONTRIB copy or a RESULT (default: 0)",
    )
    p.add_argument(
        "--dup",
        type=_probability("--dup"),
        default=0.0,
        metavar="P",
        help="probability that the WAN delivers a CONTRIB copy or a RESULT twice (default: 0)",
    )
    p.add_argument(
        "--reorder",
        action="store_true",
        help="delay every CONTRIB copy by up to one round trip of its pair, so copies overtake",
    )
    p.add_argument(
        "--corrupt",
        type=_probability("--corrupt"),
        default=0.0,
        metavar="P",
        help="probability that one bit of a CONTRIB copy flips (default: 0)",
    )
    p.add_argument(
        "--kill",
        metavar="SITE@ROUND",
        help="that site (name or rank) sends nothing from that round on; the run must stop with "
        "an error naming it",
    )
    p.add_argument(
        "--json",
        default="build/demo.json",
        help="where to write the report (default: build/demo.json; '-' for none)",
    )
    p.set_defaults(func=run)


def _probability(what):
    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a probability, not {text!r}") from None
        if not 0.0 <= value < 1.0:
            raise argparse.ArgumentTypeError(f"{what} must be in [0, 1), not {text}")
        return value

    return convert


def _non_negative(what):
    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
        if not 0.0 <= value < 1e6:
            raise argparse.ArgumentTypeError(f"{what} must be at least 0, not {text}")
        return value

    return convert


def _kill(text, sites, rounds=None):
    """``SITE@ROUND`` → ``(rank, round)``; SITE is a site name of the topology or a rank; the round is checked
    against ``rounds`` when given."""
    site, sep, rnd = (text or "").partition("@")
    if not sep:
        raise WanreduceError(f"--kill {text!r}: expected SITE@ROUND, for example {sites[0]}@1")
    if site in sites:
        rank = sites.index(site)
    elif site.isdigit() and int(site) < len(sites):
        rank = int(site)
    else:
        raise WanreduceError(
            f"--kill {text!r}: no site {site!r} (the sites are {', '.join(sites)}, or a "
            f"rank 0..{len(sites) - 1})"
        )
    if not rnd.isdigit() or (rounds is not None and int(rnd) >= rounds):
        last = f"0..{rounds - 1} (one period is simulated)" if rounds is not None else "a round number"
        raise WanreduceError(f"--kill {text!r}: the round must be {last}")
    return rank, int(rnd)


def _progress(msg):
    print(f"demo: {msg}", file=sys.stderr, flush=True)


def run(args):
    # The figures' provenance is of the code as it was when the run started.
    args._provenance = figures.provenance(
        _SOURCES[args.aggregator], _command(args), output=None if args.json == "-" else args.json
    )
    memory = parse_size(args.memory, what="--memory")
    dtype = DType.from_label(args.dtype)
    topo = load_topology(args.topology)
    chunk_bytes = args.chunk_elems * dtype.size
    n_chunks = wan.chunk_count(args.elements, args.chunk_elems)
    params = CostParams(
        memory_bytes=memory,
        chunk_bytes=chunk_bytes,
        tensor_bytes=n_chunks * chunk_bytes,
        bus_bits=args.width,
        clock_mhz=CLOCK_HZ / 1e6,
    )
    model = CostModel(topo, params)
    if args.mode == "root":
        return _run_root(args, topo, model, params, memory, dtype, chunk_bytes)
    if args.kill:
        _kill(args.kill, list(topo.sites))  # a misspelt site is refused before the search
    _progress(f"searching schedules for {topo.n} sites ({args.time_limit} s)")
    best, _ = optimize(model, time_limit_s=args.time_limit, seed=args.seed)
    if not np.isfinite(best.score_s):
        raise WanreduceError(
            f"{format_size(memory)} of aggregator memory cannot hold one slot per round "
            "for any schedule (infeasible)"
        )
    schedule = plan_to_schedule(best, model)
    gmax = max(len(g) for rnd in schedule.rounds for g in rnd)
    slots = pacing.aggregator_slots(memory, chunk_bytes=chunk_bytes, members=gmax, width=args.width)
    bank_bits, bank_slots = wan.bank_layout(slots, schedule.period)
    print(
        f"{topo.name}: {topo.n} sites, {format_size(memory)} of aggregator memory each; best schedule "
        f"{best.name}, period {format_seconds(best.period_s)} for {args.elements} {dtype.label} elements"
    )
    for r, rnd in enumerate(schedule.rounds):
        print(f"  round {r}: " + "  ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for g in rnd))
    print(
        f"  cores: W={args.width}, {slots} slots of {gmax} member buffers and a shadow RESULT, "
        f"{schedule.period} round banks of {bank_slots} slots"
    )

    faulty = bool(args.loss or args.dup or args.reorder or args.corrupt or args.kill)
    faults = None
    if faulty:
        kill = _kill(args.kill, list(topo.sites), schedule.period) if args.kill else None
        faults = wan.Faults(
            loss=args.loss,
            dup=args.dup,
            reorder=args.reorder,
            corrupt=args.corrupt,
            kill=kill,
            seed=args.seed,
        )
        print(
            f"  faults: loss {args.loss:g}, duplication {args.dup:g}, reordering "
            f"{'within a round trip' if args.reorder else 'none'}, corruption {args.corrupt:g}"
            + (f", {topo.sites[kill[0]]} stops at round {kill[1]}" if kill else "")
            + f" (seed {args.seed})"
        )

    rng = np.random.default_rng(args.seed)
    tensors = [rng.standard_normal(args.elements).astype(np.float32) for _ in range(topo.n)]
    if args.aggregator == "rtl":
        cores = RtlCores(
            count=topo.n,
            width=args.width,
            slots=slots,
            members=gmax,
            slot_bytes=chunk_bytes,
            dests=1,
            progress=_progress,
        )
        sites = cores.sites(schedule, bank_bits=bank_bits)
    else:
        sites = [
            wan.GoldenSite(
                schedule,
                s,
                slots=slots,
                members=gmax,
                slot_bytes=chunk_bytes,
                bank_bits=bank_bits,
                datapath=wan.Datapath(width=args.width, clock_hz=CLOCK_HZ),
            )
            for s in range(topo.n)
        ]
    site_Bps = model.site_rate / params.wire_eff
    _progress(f"co-simulating one period on the {args.aggregator} aggregators")
    t0 = time.perf_counter()
    try:
        result = wan.simulate(
            schedule,
            one_way_s=topo.one_way_s,
            site_Bps=site_Bps,
            chunk_elems=args.chunk_elems,
            elements=args.elements,
            dtype=dtype,
            bank_slots=bank_slots,
            sites=sites,
            tensors=tensors,
            progress=_progress,
            faults=faults,
        )
    except wan.SiteTimeout as exc:
        print(f"demo: {exc}", file=sys.stderr)
        print("demo: FAIL")
        _write(
            args.json,
            {
                "sites": list(topo.sites),
                "aggregator": args.aggregator,
                "seed": args.seed,
                "faults": _faults_json(args),
                "error": str(exc),
                "timeout_site": exc.site,
                "timeout_round": exc.round,
                "missing_sites": [topo.sites[m] for m in exc.missing],
                "pass": False,
            },
        )
        return 1
    wall = time.perf_counter() - t0

    reference = run_reference(schedule, tensors, dtype=dtype)[-1]
    bits = [v.view(np.uint8) for v in result.values]
    exact = all(np.array_equal(a, b.view(np.uint8)) for a, b in zip(bits, reference, strict=True))
    with np.errstate(all="ignore"):
        err = max(
            float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(result.values, reference, strict=True)
        )
    distinct = len({b.tobytes() for b in bits})
    drops = {}
    for counters in result.counters:
        for k, v in counters.items():
            if k not in ("frames_in", "results", "results_reemitted", "evictions") and v:
                drops[k] = drops.get(k, 0) + v
    model_finish = list(best.finish_s)
    print("round  simulated   modelled   difference")
    rows, prev_s, prev_m = [], 0.0, 0.0
    for rs, mf in zip(result.rounds, model_finish, strict=True):
        sim_r, mod_r = rs.last_result_s - prev_s, mf - prev_m
        prev_s, prev_m = rs.last_result_s, mf
        rows.append(
            {
                "round": rs.round,
                "sim_s": sim_r,
                "model_s": mod_r,
                "finish_s": rs.last_result_s,
                "model_finish_s": mf,
            }
        )
        print(
            f"  {rs.round:3d}  {format_seconds(sim_r):>9}  {format_seconds(mod_r):>9}  "
            f"{(sim_r - mod_r) / mod_r:+.1%}"
        )
    rel = (result.finish_s - best.period_s) / best.period_s
    print(
        f"period: simulated {format_seconds(result.finish_s)}, modelled {format_seconds(best.period_s)} "
        f"({rel:+.1%}); {wall:.1f} s of wall clock"
    )
    for s, name in enumerate(topo.sites):
        print(f"  {name}: {result.ingress_bytes[s]:,} bytes into its aggregator")
    print(
        f"check: every site equal to the numpy model of the schedule: {exact} (max |error| {err:g}); "
        f"distinct results across sites: {distinct}; drops: {drops or 'none'}"
    )
    recovery = {}
    if faulty:
        # The same schedule on a perfect WAN (timing only): what the faults cost in simulated time.
        clean = wan.simulate(
            schedule,
            one_way_s=topo.one_way_s,
            site_Bps=site_Bps,
            chunk_elems=args.chunk_elems,
            elements=args.elements,
            dtype=dtype,
            bank_slots=bank_slots,
        )
        rec = result.recovery

        def total(*names):
            return sum(c.get(name, 0) for c in result.counters for name in names)

        recovery = {
            "faults": _faults_json(args),
            "retransmits": rec.retransmits + rec.resends_on_result,
            "retransmits_on_timeout": rec.retransmits,
            "resends_on_result": rec.resends_on_result,
            "duplicates_dropped": total("duplicate"),
            "corrupt_dropped": total(*(d.counter for d in Drop if int(d) <= 20)),
            "results_reemitted": total("results_reemitted"),
            "evictions": total("evictions"),
            "recovery_time_s": result.finish_s - clean.finish_s,
            "fault_free_time_s": clean.finish_s,
            "wan": dataclasses.asdict(rec),
        }
        print(
            f"recovery: {recovery['retransmits']} retransmissions ({rec.retransmits} on timeout, "
            f"{rec.resends_on_result} on a repeated RESULT), {recovery['duplicates_dropped']} duplicates "
            f"dropped, {recovery['corrupt_dropped']} corrupt frames dropped, "
            f"{recovery['results_reemitted']} RESULTs re-emitted, {recovery['evictions']} evictions; the "
            f"faults cost {format_seconds(recovery['recovery_time_s'])} over the fault-free "
            f"{format_seconds(clean.finish_s)}"
        )
        ok = exact and distinct == 1
    else:
        ok = exact and distinct == 1 and not drops and abs(rel) <= TOLERANCE
    report = {
        "sites": list(topo.sites),
        "rounds": rows,
        "schedule": [list(map(list, r)) for r in schedule.rounds],
        "construction": best.name,
        "aggregator": args.aggregator,
        "width": args.width,
        "slots": slots,
        "members": gmax,
        "bank_slots": bank_slots,
        "memory_bytes": memory,
        "elements": args.elements,
        "dtype": dtype.label,
        "seed": args.seed,
        "sim_time_s": result.finish_s,
        "model_time_s": best.period_s,
        "sim_vs_model": rel,
        "max_abs_err_vs_numpy": err,
        "exact": exact,
        "distinct_results": distinct,
        "drops": drops,
        "ingress_bytes": dict(zip(topo.sites, result.ingress_bytes, strict=True)),
        "results_emitted": result.results_emitted,
        "wall_s": wall,
        **recovery,
        "pass": ok,
    }
    prefix = "demo_faults" if faulty else "demo"
    _record(args, report, prefix, _gather_figures(report, topo, schedule, faulty))
    _write(args.json, report)
    print("demo: PASS" if ok else "demo: FAIL")
    return 0 if ok else 1


def _faults_json(args):
    return {
        "loss": args.loss,
        "dup": args.dup,
        "reorder": args.reorder,
        "corrupt": args.corrupt,
        "kill": args.kill,
    }


def _gather_figures(report, topo, schedule, faulty):
    text = " then ".join(
        " ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for g in rnd) for rnd in schedule.rounds
    )
    out = {k: report[k] for k in ("sim_time_s", "model_time_s", "sim_vs_model", "exact", "distinct_results")}
    out.update(
        max_abs_err=report["max_abs_err_vs_numpy"],
        drops=sum(report["drops"].values()),
        construction=report["construction"],
        schedule=text,
        wall_s=report["wall_s"],
    )
    if faulty:
        for k in ("retransmits", "duplicates_dropped", "corrupt_dropped", "results_reemitted"):
            out[k] = report[k]
        out["fault_free_time_s"] = report["fault_free_time_s"]
    return out


def _command(args):
    """The command line that repeats this run: ``wanreduce demo`` and every option not at its default."""
    argv = ["wanreduce", "demo"]
    for action in _PARSER._actions if _PARSER else ():
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def _record(args, report, prefix, values):
    """Put the run's figures, with their provenance (:mod:`wanreduce.sim.figures`), into the report."""
    if args.aggregator != "rtl":
        prefix += f"_{args.aggregator}"
    named = {f"{prefix}_{k}": v for k, v in values.items()}
    notes = {
        name: "wall clock of one run"
        if name.endswith("_wall_s")
        else f"one deterministic run (seed {args.seed})"
        for name in named
    }
    report["figures"] = figures.records(
        named,
        prov=args._provenance,
        notes=notes,
        runs={name: 1 for name in named},
    )


def _write(where, report):
    if where != "-":
        path = Path(where)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {path}")


def _run_root(args, topo, model, params, memory, dtype, chunk_bytes):
    """``--mode root``: the root-mode plan on in-line aggregators, with other traffic mixed in."""
    if args.loss or args.dup or args.reorder or args.corrupt or args.kill:
        raise WanreduceError("fault injection is for the gather mode; root mode does not retransmit yet")
    jitter_s = args.jitter_ms / 1e3
    _progress(f"planning root aggregation for {topo.n} sites ({args.time_limit} s)")
    choice = lean.best_plan(
        model, time_limit_s=args.time_limit, seed=args.seed, jitter_s=jitter_s, modes=("root",)
    )
    plan = choice.root
    if plan is None or not np.isfinite(plan.score_s):
        raise WanreduceError(
            f"{format_size(memory)} of aggregator memory holds no root-mode plan (infeasible)"
        )
    schedule = lean.lean_to_schedule(plan, model)
    print(
        f"{topo.name}: {topo.n} sites, {format_size(memory)} of aggregator memory each; root aggregation, "
        f"{format_seconds(plan.period_s)} for {args.elements} {dtype.label} elements, jitter "
        f"{format_seconds(jitter_s)}"
    )
    stripes = []
    for r, rc in enumerate(plan.round_costs):
        for g in rc.groups:
            names = ",".join(topo.sites[i] for i in g.members)
            parts = ", ".join(f"{topo.sites[st.root]} {st.chunks} chunks" for st in g.stripes)
            print(f"  round {r}: {{{names}}} roots: {parts}")
            stripes += list(g.stripes)
    rng = np.random.default_rng(args.seed)
    tensors = [rng.standard_normal(args.elements).astype(np.float32) for _ in range(topo.n)]
    sites = None
    if args.aggregator == "rtl":
        sites = inline_sites(width=args.width, clock_hz=CLOCK_HZ, progress=_progress)
    _progress(f"co-simulating root aggregation on the {args.aggregator} aggregators, in line")
    t0 = time.perf_counter()
    run = wan_lean.simulate_lean(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=model.site_rate / params.wire_eff,
        chunk_elems=args.chunk_elems,
        elements=args.elements,
        dtype=dtype,
        memory_bytes=memory,
        tensors=tensors,
        jitter_s=jitter_s,
        seed=args.seed,
        width=args.width,
        sites=sites,
        background=args.background,
    )
    wall = time.perf_counter() - t0
    reference = run_reference(schedule, tensors, dtype=dtype)[-1]
    bits = [v.view(np.uint8) for v in run.values]
    exact = all(np.array_equal(a, b.view(np.uint8)) for a, b in zip(bits, reference, strict=True))
    distinct = len({b.tobytes() for b in bits})
    drops = {}
    for counters in run.counters.values():
        for k, v in counters.items():
            if k not in ("frames_in", "results", "results_reemitted", "evictions", "bypassed") and v:
                drops[k] = drops.get(k, 0) + v
    rel = (run.finish_s - plan.period_s) / plan.period_s
    model_peak = {}
    for st in stripes:
        model_peak[st.root] = max(model_peak.get(st.root, 0), st.peak_slot_bytes)
    peak_ratio = max(run.peak_slot_bytes[q] / model_peak[q] for q in run.peak_slot_bytes)
    bypass_ok = all(a == b for a, b in zip(run.background_in, run.background_out, strict=True))
    print(
        f"sync: simulated {format_seconds(run.finish_s)}, modelled {format_seconds(plan.period_s)} "
        f"({rel:+.1%}); {wall:.1f} s of wall clock"
    )
    for q in sorted(run.peak_slot_bytes):
        print(
            f"  root {topo.sites[q]}: peak {run.peak_slots[q]} slots, "
            f"{format_size(run.peak_slot_bytes[q])} (model {format_size(model_peak[q])})"
        )
    for q, name in enumerate(topo.sites):
        c = run.counters[q]
        print(
            f"  {name}: {c['frames_in']} frames in, {c['results']} RESULTs, {c['bypassed']} forwarded "
            f"({len(run.background_out[q])} of {len(run.background_in[q])} background frames unchanged)"
        )
    print(
        f"check: every site equal to the numpy model: {exact}; distinct results across sites: {distinct}; "
        f"drops: {drops or 'none'}; other traffic forwarded unchanged: {bypass_ok}; peak slot memory "
        f"{peak_ratio:.2f}x the model's"
    )
    ok = (
        exact
        and distinct == 1
        and not drops
        and abs(rel) <= ROOT_TOLERANCE
        and bypass_ok
        and peak_ratio <= 1.1
    )
    report = {
        "mode": "root",
        "sites": list(topo.sites),
        "aggregator": args.aggregator,
        "width": args.width,
        "memory_bytes": memory,
        "elements": args.elements,
        "dtype": dtype.label,
        "seed": args.seed,
        "jitter_s": jitter_s,
        "stripes": [{"root": topo.sites[st.root], "chunks": st.chunks} for st in stripes],
        "sim_time_s": run.finish_s,
        "model_time_s": plan.period_s,
        "sim_vs_model": rel,
        "exact": exact,
        "distinct_results": distinct,
        "drops": drops,
        "peak_slot_bytes": {topo.sites[q]: v for q, v in run.peak_slot_bytes.items()},
        "peak_slot_bytes_model": {topo.sites[q]: v for q, v in model_peak.items()},
        "peak_slot_ratio": peak_ratio,
        "slot_conflicts": run.slot_conflicts,
        "background_frames": args.background,
        "background_unchanged": bypass_ok,
        "counters": {topo.sites[q]: c for q, c in run.counters.items()},
        "wall_s": wall,
        "pass": ok,
    }
    roots = ", ".join(dict.fromkeys(st["root"] for st in report["stripes"]))
    _record(
        args,
        report,
        "demo_root",
        {
            **{k: report[k] for k in ("sim_time_s", "model_time_s", "sim_vs_model", "exact")},
            **{k: report[k] for k in ("distinct_results", "peak_slot_ratio", "background_unchanged")},
            "drops": sum(drops.values()),
            "roots": roots,
            "wall_s": wall,
        },
    )
    _write(args.json, report)
    print("demo: PASS" if ok else "demo: FAIL")
    return 0 if ok else 1
