"""``wanreduce demo-net``: every site as processes on this machine, over real UDP multicast.

It optimises the schedule as ``wanreduce demo`` does (same topology, memory, seed and search time), starts
one software aggregator (``wanreduce aggd``'s library) and one host process (the UDP transport) per site,
and runs one period on the same seeded tensors. The WAN is emulated where each datagram is received: the
topology's one-way delay per site pair (times ``--delay-scale``), and ``--loss``, ``--dup``,
``--reorder``, ``--corrupt`` faults from ``--seed``. It prints the schedule, per-round wall-clock time
against the cost model, every aggregator's counters and the check (every site equal, bit for bit, to the
numpy model of the schedule the RTL demo is checked against, and to each other); writes
build/demo_net.json. ``--kill SITE@ROUND`` stops a site: the run must end with one line naming it and the
round, and a non-zero exit.
"""

import contextlib
import json
import sys
from pathlib import Path

import numpy as np

from ..host import netdemo, wan
from ..host.aggd import site_layout
from ..host.costmodel import CostModel, CostParams
from ..host.netns import NamespacesUnavailable, SiteNamespaces
from ..host.reference import run_reference
from ..host.schedule import optimize, plan_to_schedule
from ..host.topology import load_topology
from ..host.units import format_seconds, format_size, parse_size
from ..sim.verify.cosim import CLOCK_HZ
from ..sim.verify.demo import FAULTS, faults_of, parse_kill
from ..spec.errors import WanreduceError
from ..spec.protocol import Drop, DType
from ._common import (
    DEFAULT_CHUNK_BYTES,
    Outputs,
    add_command,
    add_experiment_options,
    add_fault_options,
    add_port_option,
    add_report_options,
    chunk_elems_of,
    int_option,
)
from .aggd import add_engine_option, make_engine

__all__ = ["register", "run"]

#: The report's file unless ``-o`` names another (the command's own: replaced on each run).
REPORT = Path("build/demo_net.json")

#: The counters that count work, not drops.
_WORK = (
    "frames_in",
    "results",
    "results_reemitted",
    "evictions",
    "bypassed",
    "datagrams_received",
    "results_sent",
)


def register(sub):
    p = add_command(
        sub,
        "demo-net",
        help="all sites as processes over real UDP multicast, with an emulated WAN",
        doc=__doc__,
    )
    add_experiment_options(p)
    add_engine_option(p, "each site's aggregator")
    add_fault_options(p)
    p.add_argument(
        "--delay-scale",
        type=float,
        default=1.0,
        help="factor on the topology's one-way delays (default: 1; 0: loopback speed)",
    )
    p.add_argument(
        "--interface", default="127.0.0.1", help="IPv4 address of the interface to use (default: 127.0.0.1)"
    )
    p.add_argument(
        "--netns",
        action="store_true",
        help="each site in a network namespace of its own, on a veth link whose rate a tbf qdisc sets to the "
        "site's access rate (needs root and iproute2; otherwise one line says so and the run uses "
        "--interface)",
    )
    add_port_option(p, "UDP port")
    int_option(
        p,
        "--job",
        0,
        0xFFFF,
        default=0,
        help="job id, which picks the multicast groups (default: 0)",
    )
    int_option(
        p,
        "--deadline",
        1,
        3600,
        default=300,
        help="seconds the whole run may take (default: 300)",
    )
    add_report_options(p, default_help=f"{REPORT}, replaced on each run")
    p.add_argument(
        "--demo-json",
        default="build/demo.json",
        help="the RTL demo's report to compare with (default: build/demo.json)",
    )
    p.set_defaults(func=run)


def _progress(msg):
    print(f"demo-net: {msg}", file=sys.stderr, flush=True)


def _write(outs, path, report):
    with outs.commit():
        outs.write_text(path, json.dumps(report, indent=1) + "\n")
    print(f"wrote {outs.shown(path)}")


def _rtl_demo(path, args, schedule):
    """What the RTL demo recorded for the same seed, elements and dtype: ``(schedule matches, it passed)``,
    or None when there is no such record."""
    try:
        demo = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    same = (demo.get("seed"), demo.get("elements"), demo.get("dtype"), demo.get("aggregator")) == (
        args.seed,
        args.elements,
        args.dtype,
        "rtl",
    )
    if not same or "schedule" not in demo:
        return None
    ours = [list(map(list, r)) for r in schedule.rounds]
    return demo["schedule"] == ours, bool(demo.get("exact")) and demo.get("distinct_results") == 1


def run(args):
    memory = parse_size(args.memory, what="--memory")
    dtype = DType.from_label(args.dtype)
    if not 0 <= args.delay_scale <= 100:
        raise WanreduceError(f"--delay-scale must be in 0..100, not {args.delay_scale}")
    outs = Outputs(force=args.force, inputs=[args.topology, args.demo_json])
    report_path = outs.add(args.output, "-o", default=REPORT, stdout="text")
    # With -o - the report is stdout's alone: the account goes to stderr.
    with contextlib.redirect_stdout(outs.log):
        return _run(args, outs, report_path, memory=memory, dtype=dtype)


def _run(args, outs, report_path, *, memory, dtype):
    topo = load_topology(args.topology)
    chunk_elems = chunk_elems_of(args, dtype, default=DEFAULT_CHUNK_BYTES)
    params = CostParams.for_tensor(
        args.elements, chunk_elems, dtype, memory_bytes=memory, bus_bits=args.width, clock_mhz=CLOCK_HZ / 1e6
    )
    model = CostModel(topo, params)
    if args.kill:
        parse_kill(args.kill, list(topo.sites))
    _progress(f"searching schedules for {topo.n} sites ({args.time_limit} s)")
    best, _ = optimize(model, time_limit_s=args.time_limit, seed=args.seed)
    if not np.isfinite(best.score_s):
        raise WanreduceError(f"{format_size(memory)} of aggregator memory holds no schedule (infeasible)")
    schedule = plan_to_schedule(best, model)
    layout = site_layout(schedule, dtype=dtype)
    print(
        f"{topo.name}: {topo.n} sites over UDP "
        f"{'in network namespaces' if args.netns else 'on ' + args.interface}, "
        f"{format_size(memory)} of aggregator memory each; schedule {best.name}, "
        f"modelled period {format_seconds(best.period_s)}"
    )
    for r, rnd in enumerate(schedule.rounds):
        print(f"  round {r}: " + "  ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for g in rnd))
    print(
        f"  aggregators: {args.engine} engine, {layout.slots} slots of {layout.members} members, "
        f"{schedule.period} round banks of {layout.bank_slots}; WAN delays x{args.delay_scale:g}"
    )
    faults = faults_of(args, list(topo.sites), schedule.period, print, netdemo.NetFaults)
    faulty = faults is not None
    # The WAN emulators take their seeds from here with or without faults.
    faults = faults or netdemo.NetFaults(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    tensors = [rng.standard_normal(args.elements).astype(np.float32) for _ in range(topo.n)]
    engine = make_engine(args.engine, args.job, _progress)
    if args.engine == "rtl":
        _progress("loading the Verilated core (built once per configuration)")
        engine(schedule, 0, layout)  # loaded here once; every aggregator process inherits it
    base = {
        "sites": topo.n,
        "site_names": list(topo.sites),
        "transport": "udp",
        "engine": args.engine,
        "seed": args.seed,
    }
    site_Bps = model.site_rate / params.wire_eff
    spaces, base["network"] = None, f"one interface ({args.interface})"
    if args.netns:
        try:
            spaces = SiteNamespaces(topo.n, np.broadcast_to(site_Bps, (topo.n,))).__enter__()
            base["network"] = "network namespaces, veth links rate-limited by tbf"
        except NamespacesUnavailable as exc:
            _progress(f"network namespaces unavailable ({exc}); running on {args.interface}")
            base["netns_unavailable"] = str(exc)
    try:
        run = netdemo.run_sites(
            schedule,
            tensors,
            layout=layout,
            one_way_s=topo.one_way_s,
            site_Bps=site_Bps,
            make_engine=engine,
            dtype=dtype,
            faults=faults,
            delay_scale=args.delay_scale,
            interface=args.interface,
            port=args.port,
            job=args.job,
            deadline_s=args.deadline,
            progress=_progress,
            netns=spaces,
        )
    except wan.SiteTimeout as exc:
        counters = getattr(exc, "counters", None) or []
        for name, c in zip(topo.sites, counters, strict=False):
            if c:
                print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in c.items() if v))
        print(f"demo-net: {exc}", file=sys.stderr)
        print("demo-net: FAIL")
        _write(
            outs,
            report_path,
            {
                **base,
                "error": str(exc),
                "timeout_site": topo.sites[exc.site],
                "timeout_round": exc.round,
                "missing_sites": [topo.sites[m] for m in exc.missing],
                "pass": False,
            },
        )
        return 1
    finally:
        if spaces is not None:
            spaces.__exit__(None, None, None)
    report, ok = _report(args, topo, schedule, best, layout, tensors, run, base, faulty)
    _write(outs, report_path, report)
    print("demo-net: PASS" if ok else "demo-net: FAIL")
    return 0 if ok else 1


def _report(args, topo, schedule, best, layout, tensors, run, base, faulty):
    dtype = DType.from_label(args.dtype)
    reference = run_reference(schedule, tensors, dtype=dtype)[-1]
    exact = all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(run.values, reference, strict=True)
    )
    with np.errstate(all="ignore"):
        err = max(
            float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(run.values, reference, strict=True)
        )
    distinct = len({v.tobytes() for v in run.values})
    drops = {}
    for c in run.counters:
        for d in Drop:
            if c.get(d.counter):
                drops[d.counter] = drops.get(d.counter, 0) + c[d.counter]
    print("round  wall clock   modelled")
    rows, prev_w, prev_m = [], 0.0, 0.0
    for r in range(schedule.period):
        done = float(np.nanmax(run.last_result_s[:, r]))
        mf = best.finish_s[r] * args.delay_scale
        rows.append({"round": r, "wall_s": done - prev_w, "model_s": mf - prev_m, "finish_s": done})
        print(f"  {r:3d}  {format_seconds(done - prev_w):>10}  {format_seconds(mf - prev_m):>9}")
        prev_w, prev_m = done, mf
    print(f"period: {format_seconds(prev_w)} of wall clock, modelled {format_seconds(prev_m)}")
    print("counters (every aggregator; zero counters left out):")
    for name, c in zip(topo.sites, run.counters, strict=True):
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in c.items() if v))
    tr = run.transports
    retrans = sum(t.retransmits for t in tr)
    resends = sum(t.resends_on_result for t in tr)
    demo = _rtl_demo(args.demo_json, args, schedule)
    if demo is None:
        equal_rtl, how = (
            exact,
            "the numpy model of the schedule (the reference wanreduce demo checks its RTL against)",
        )
    else:
        equal_rtl = exact and all(demo)
        how = f"{args.demo_json} (same schedule: {demo[0]}, RTL exact there: {demo[1]}) and its numpy model"
    print(
        f"check: every site equal to the numpy model: {exact} (max |error| {err:g}); distinct results "
        f"across sites: {distinct}; drops: {drops or 'none'}; equal to the RTL demo via {how}: {equal_rtl}"
    )
    if faulty:
        print(f"recovery: {retrans} retransmissions on timeout, {resends} on a repeated RESULT")
    # Without faults nothing is lost, so nothing may be retransmitted and nothing dropped: a retransmission
    # there is a timeout shorter than the software's own latency, and shows as duplicate drops.
    spurious = retrans + resends
    ok = exact and distinct == 1 and equal_rtl and (faulty or not (drops or spurious))
    if not faulty and spurious:
        print(f"  {retrans} retransmissions and {resends} resends without a fault: timeouts too short")
    report = {
        **base,
        "schedule": [list(map(list, r)) for r in schedule.rounds],
        "construction": best.name,
        "elements": args.elements,
        "dtype": dtype.label,
        "slots": layout.slots,
        "bank_slots": layout.bank_slots,
        "delay_scale": args.delay_scale,
        "faults": {name: getattr(args, name) for name in FAULTS},
        "rounds": rows,
        "wall_s": prev_w,
        "model_s": prev_m,
        "max_abs_err_vs_numpy": err,
        "exact": exact,
        "distinct_results": distinct,
        "drops": drops,
        "equal_to_rtl_demo": equal_rtl,
        "rtl_demo_compared_via": how,
        "retransmits": retrans,
        "resends_on_result": resends,
        "counters": dict(zip(topo.sites, run.counters, strict=True)),
        "pass": ok,
    }
    return report, ok
