"""The demonstration experiment: every site's aggregator synchronising under the optimised schedule.

:func:`run` optimises the sync schedule for a topology at a given aggregator memory, builds one aggregator
per site (a Verilated core, or the golden model as the fast path) sized for that memory (slots of G_max
member buffers and a shadow RESULT, one bank per round), and runs one period of the discrete-event WAN:
every site multicasts its seeded random tensor chunk by chunk under the self-clocked window, each
aggregator sums what the WAN delivers in the order it arrives, and every site's hosts apply their RESULTs.
The report says whether every site holds, bit for bit, what a numpy model of the same schedule computes,
whether all sites hold the same bits, whether anything was dropped, and how far the simulated period is
from the cost model's.

With faults (loss, duplication, reordering, corruption, a killed site) the WAN misbehaves (seeded) and the
hosts recover (docs/reliability.md): the check is then that every site's final tensor is, bit for bit, the
fault-free one, and the report says what the recovery cost. A killed site ends the run with a report
naming it and the round.

In root mode (docs/lean.md) it runs the best root-mode plan on in-line cores with a bypass port, with
frames of other traffic mixed into every site's input and WAN jitter; it checks, beyond the above, each
root's peak slot memory against the model's and every background frame out of its bypass port unchanged.

The command ``wanreduce demo`` is a thin layer over :func:`run`.
"""

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from ...host import lean, pacing, wan, wan_lean
from ...host.costmodel import CostModel, CostParams
from ...host.reference import run_reference
from ...host.schedule import optimize, plan_to_schedule
from ...host.topology import load_topology
from ...host.units import format_seconds, format_size
from ...spec.errors import WanreduceError
from ...spec.protocol import Drop, DType
from .cosim import CLOCK_HZ, RtlCores, inline_sites, site_core

__all__ = [
    "DemoConfig",
    "run",
    "parse_kill",
    "faults_of",
    "FAULTS",
    "TOLERANCE",
    "ROOT_TOLERANCE",
    "cores_slots",
    "figures_of",
]

#: Largest relative difference between the simulated and the modelled period that passes (README.md states
#: these bounds; the tests hold the demo to them).
TOLERANCE = 0.005
#: The same for root mode, whose senders' jitter the model covers with a margin.
ROOT_TOLERANCE = 0.02

#: Counters that count work, not drops.
_NOT_DROPS = ("frames_in", "results", "results_reemitted", "evictions", "bypassed")


#: The WAN's seeded faults, by the name they have alike in :class:`DemoConfig`, in the options of the
#: commands that run a demonstration and in :class:`wan.Faults`; each is off at its zero.
FAULTS = ("loss", "dup", "reorder", "corrupt")


@dataclass(frozen=True)
class DemoConfig:
    """One demonstration run. ``memory`` in bytes; ``kill`` is ``SITE@ROUND`` or None."""

    topology: str = "nine-city"
    memory: int = 1 << 20
    elements: int = 65536
    chunk_elems: int = 256
    dtype: DType = DType.FP32
    seed: int = 1
    aggregator: str = "rtl"
    width: int = 64
    time_limit: int = 5
    mode: str = "gather"
    jitter_s: float = 0.0005
    background: int = 40
    loss: float = 0.0
    dup: float = 0.0
    reorder: bool = False
    corrupt: float = 0.0
    kill: str | None = None

    @property
    def faulty(self):
        return bool(any(getattr(self, name) for name in FAULTS) or self.kill)

    def faults_json(self):
        return {name: getattr(self, name) for name in (*FAULTS, "kill")}


def parse_kill(text, sites, rounds=None):
    """``SITE@ROUND`` -> ``(rank, round)``; SITE is a site name of the topology or a rank; the round is
    checked against ``rounds`` when given."""
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


def cores_slots(memory_slots, *, n_chunks, period):
    """Slots the simulated cores get: what the memory holds, but no more than one slot per chunk of every
    round (a larger table holds nothing more in one period, and the 16 GiB of slots of the ample-memory
    build, the external one with a card's whole HBM, would not fit this machine's memory)."""
    need = period << max(n_chunks - 1, 0).bit_length()
    return min(memory_slots, need)


def _noop(_text):
    pass


def run(config, *, echo=_noop, progress=_noop):
    """Run one demonstration and return its report (a JSON-able dict; ``report["pass"]`` is the verdict).

    ``echo(line)`` receives the human-readable account, ``progress(line)`` the long steps as they start.
    Raises :class:`WanreduceError` for a configuration that cannot run (an infeasible memory, a kill spec
    naming no site).
    """
    topo = load_topology(config.topology)
    params = CostParams.for_tensor(
        config.elements,
        config.chunk_elems,
        config.dtype,
        memory_bytes=config.memory,
        bus_bits=config.width,
        clock_mhz=CLOCK_HZ / 1e6,
    )
    model = CostModel(topo, params)
    chunk_bytes, n_chunks = params.chunk_bytes, model.n_chunks
    if config.mode == "root":
        return _run_root(config, topo, model, params, echo, progress)
    if config.kill:
        parse_kill(config.kill, list(topo.sites))  # a misspelt site is refused before the search
    progress(f"searching schedules for {topo.n} sites ({config.time_limit} s)")
    best, _ = optimize(model, time_limit_s=config.time_limit, seed=config.seed)
    if not np.isfinite(best.score_s):
        raise WanreduceError(
            f"{format_size(config.memory)} of aggregator memory cannot hold one slot per round "
            "for any schedule (infeasible)"
        )
    schedule = plan_to_schedule(best, model)
    gmax = max(len(g) for rnd in schedule.rounds for g in rnd)
    held = pacing.aggregator_slots(config.memory, chunk_bytes=chunk_bytes, members=gmax, width=config.width)
    slots = cores_slots(held, n_chunks=n_chunks, period=schedule.period)
    bank_bits, bank_slots = wan.bank_layout(slots, schedule.period)
    echo(
        f"{topo.name}: {topo.n} sites, {format_size(config.memory)} of aggregator memory each; best schedule "
        f"{best.name}, period {format_seconds(best.period_s)} for {config.elements} "
        f"{config.dtype.label} elements"
    )
    for r, rnd in enumerate(schedule.rounds):
        echo(f"  round {r}: " + "  ".join("{" + ",".join(topo.sites[i] for i in g) + "}" for g in rnd))
    what = f"cores: W={config.width}" if config.aggregator == "rtl" else "golden aggregators"
    spare = (
        f" (the memory holds {held}; more than one per chunk of every round is never used)"
        if held > slots
        else ""
    )
    echo(
        f"  {what}, {slots} slots of {gmax} member buffers and a shadow RESULT{spare}, "
        f"{schedule.period} round bank{'s' if schedule.period != 1 else ''} of {bank_slots} slots"
    )
    faults = faults_of(config, list(topo.sites), schedule.period, echo)
    tensors = _tensors(config, topo.n)
    if config.aggregator == "rtl":
        core = site_core(width=config.width, slots=slots, members=gmax, chunk_bytes=chunk_bytes)
        cores = RtlCores(core, count=topo.n, progress=progress)
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
                datapath=wan.Datapath(width=config.width, clock_hz=CLOCK_HZ),
            )
            for s in range(topo.n)
        ]
    wan_args = dict(_link(config, model), backbone=topo, bank_slots=bank_slots)
    progress(f"co-simulating one period on the {config.aggregator} aggregators")
    t0 = time.perf_counter()
    try:
        result = wan.simulate(
            schedule, sites=sites, tensors=tensors, progress=progress, faults=faults, **wan_args
        )
    except wan.SiteTimeout as exc:
        return {
            "sites": list(topo.sites),
            "aggregator": config.aggregator,
            "seed": config.seed,
            "faults": config.faults_json(),
            "error": str(exc),
            "timeout_site": exc.site,
            "timeout_round": exc.round,
            "missing_sites": [topo.sites[m] for m in exc.missing],
            "pass": False,
        }
    wall = time.perf_counter() - t0
    check = _check(schedule, tensors, result.values, config.dtype, [c for c in result.counters])
    rows = _round_rows(result.rounds, best.finish_s, echo)
    rel = (result.finish_s - best.period_s) / best.period_s
    echo(
        f"period: simulated {format_seconds(result.finish_s)}, modelled {format_seconds(best.period_s)} "
        f"({rel:+.1%}); {wall:.1f} s of wall clock"
    )
    for s, name in enumerate(topo.sites):
        echo(f"  {name}: {result.ingress_bytes[s]:,} bytes into its aggregator")
    echo(
        f"check: every site equal to the numpy model of the schedule: {check['exact']} (max |error| "
        f"{check['max_abs_err_vs_numpy']:g}); distinct results across sites: {check['distinct_results']}; "
        f"drops: {check['drops'] or 'none'}"
    )
    recovery = _recovery(config, schedule, wan_args, result, echo) if config.faulty else {}
    ok = check["exact"] and check["distinct_results"] == 1
    if not config.faulty:
        ok = ok and not check["drops"] and abs(rel) <= TOLERANCE
    return {
        "sites": list(topo.sites),
        "rounds": rows,
        "schedule": [list(map(list, r)) for r in schedule.rounds],
        "construction": best.name,
        "aggregator": config.aggregator,
        "width": config.width,
        "slots": slots,
        "members": gmax,
        "bank_slots": bank_slots,
        "memory_bytes": config.memory,
        "elements": config.elements,
        "dtype": config.dtype.label,
        "seed": config.seed,
        "sim_time_s": result.finish_s,
        "model_time_s": best.period_s,
        "sim_vs_model": rel,
        **check,
        "ingress_bytes": dict(zip(topo.sites, result.ingress_bytes, strict=True)),
        "results_emitted": result.results_emitted,
        "wall_s": wall,
        **recovery,
        "pass": bool(ok),
    }


def figures_of(report):
    """The figures a report quotes, by name (``demo_``, ``demo_faults_`` or ``demo_root_`` and the
    figure; ``_golden`` after the prefix for the golden model's run)."""
    if report.get("mode") == "root":
        prefix = "demo_root"
        values = {k: report[k] for k in ("sim_time_s", "model_time_s", "sim_vs_model", "exact")}
        values.update({k: report[k] for k in ("distinct_results", "peak_slot_ratio", "background_unchanged")})
        values.update(drops=sum(report["drops"].values()), wall_s=report["wall_s"])
        values["roots"] = ", ".join(dict.fromkeys(st["root"] for st in report["stripes"]))
    elif "error" in report:
        return {}
    else:
        faulty = "faults" in report
        prefix = "demo_faults" if faulty else "demo"
        sites = report["sites"]
        values = {
            k: report[k] for k in ("sim_time_s", "model_time_s", "sim_vs_model", "exact", "distinct_results")
        }
        values.update(
            max_abs_err=report["max_abs_err_vs_numpy"],
            drops=sum(report["drops"].values()),
            construction=report["construction"],
            schedule=" then ".join(
                " ".join("{" + ",".join(sites[i] for i in g) + "}" for g in rnd) for rnd in report["schedule"]
            ),
            wall_s=report["wall_s"],
        )
        if faulty:
            for k in (
                "retransmits",
                "retransmits_on_timeout",
                "resends_on_result",
                "duplicates_dropped",
                "corrupt_dropped",
                "results_reemitted",
                "evictions",
                "recovery_time_s",
                "fault_free_time_s",
                "fault_free_ingress_bytes",
            ):
                values[k] = report[k]
            values["ingress_bytes"] = sum(report["ingress_bytes"].values())
            values.update({f"wan_{k}": v for k, v in report["wan"].items()})
    if report["aggregator"] != "rtl":
        prefix += f"_{report['aggregator']}"
    return {f"{prefix}_{k}": v for k, v in values.items()}


def faults_of(options, sites, period, echo, kind=wan.Faults):
    """The seeded WAN faults that ``options`` (a :class:`DemoConfig` or the parsed options of a command
    with the same fault fields, ``kill`` as ``SITE@ROUND``) ask for, as a ``kind`` (:class:`wan.Faults` or
    the UDP demo's like of it), after ``echo`` of the line that states them; None when there are none."""
    kill = parse_kill(options.kill, sites, period) if options.kill else None
    rates = {name: getattr(options, name) for name in FAULTS}
    if not (any(rates.values()) or kill):
        return None
    echo(
        f"  faults: loss {options.loss:g}, duplication {options.dup:g}, reordering "
        f"{'within a round trip' if options.reorder else 'none'}, corruption {options.corrupt:g}"
        + (f", {sites[kill[0]]} stops at round {kill[1]}" if kill else "")
        + f" (seed {options.seed})"
    )
    return kind(**rates, kill=kill, seed=options.seed)


def _link(config, model):
    """What both modes' simulations take alike: the WAN and the tensors' layout."""
    return model.sim_args(elements=config.elements, chunk_elems=config.chunk_elems, dtype=config.dtype)


def _tensors(config, n):
    """Every site's seeded input tensor."""
    rng = np.random.default_rng(config.seed)
    return [rng.standard_normal(config.elements).astype(np.float32) for _ in range(n)]


def _check(schedule, tensors, values, dtype, counters):
    """Every site against the numpy model of the schedule, bit for bit; distinct results; drops."""
    reference = run_reference(schedule, tensors, dtype=dtype)[-1]
    bits = [v.view(np.uint8) for v in values]
    exact = all(np.array_equal(a, b.view(np.uint8)) for a, b in zip(bits, reference, strict=True))
    with np.errstate(all="ignore"):
        err = max(
            float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(values, reference, strict=True)
        )
    drops = {}
    for c in counters:
        for k, v in c.items():
            if k not in _NOT_DROPS and v:
                drops[k] = drops.get(k, 0) + v
    return {
        "max_abs_err_vs_numpy": err,
        "exact": bool(exact),
        "distinct_results": len({b.tobytes() for b in bits}),
        "drops": drops,
    }


def _round_rows(rounds, model_finish, echo):
    echo("round  simulated   modelled   difference")
    rows, prev_s, prev_m = [], 0.0, 0.0
    for rs, mf in zip(rounds, list(model_finish), strict=True):
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
        echo(
            f"  {rs.round:3d}  {format_seconds(sim_r):>9}  {format_seconds(mod_r):>9}  "
            f"{(sim_r - mod_r) / mod_r:+.1%}"
        )
    return rows


def _recovery(config, schedule, wan_args, result, echo):
    """What the faults cost: the same schedule on a perfect WAN (timing only) against the faulty run."""
    clean = wan.simulate(schedule, **wan_args)
    rec = result.recovery

    def total(*names):
        return sum(c.get(name, 0) for c in result.counters for name in names)

    recovery = {
        "faults": config.faults_json(),
        "retransmits": rec.retransmits + rec.resends_on_result,
        "retransmits_on_timeout": rec.retransmits,
        "resends_on_result": rec.resends_on_result,
        "duplicates_dropped": total("duplicate"),
        "corrupt_dropped": total(*(d.counter for d in Drop if int(d) <= 20)),
        "results_reemitted": total("results_reemitted"),
        "evictions": total("evictions"),
        "recovery_time_s": result.finish_s - clean.finish_s,
        "fault_free_time_s": clean.finish_s,
        "fault_free_ingress_bytes": sum(clean.ingress_bytes),
        "wan": dataclasses.asdict(rec),
    }
    echo(
        f"recovery: {recovery['retransmits']} retransmissions ({rec.retransmits} on timeout, "
        f"{rec.resends_on_result} on a repeated RESULT), {recovery['duplicates_dropped']} duplicates "
        f"dropped, {recovery['corrupt_dropped']} corrupt frames dropped, "
        f"{recovery['results_reemitted']} RESULTs re-emitted, {recovery['evictions']} evictions; the "
        f"faults cost {format_seconds(recovery['recovery_time_s'])} over the fault-free "
        f"{format_seconds(clean.finish_s)}"
    )
    return recovery


def _run_root(config, topo, model, params, echo, progress):
    """Root mode: the root-mode plan on in-line aggregators, with other traffic mixed in."""
    if config.faulty:
        raise WanreduceError("fault injection is for the gather mode; root mode does not retransmit yet")
    progress(f"planning root aggregation for {topo.n} sites ({config.time_limit} s)")
    choice = lean.best_plan(
        model, time_limit_s=config.time_limit, seed=config.seed, jitter_s=config.jitter_s, modes=("root",)
    )
    plan = choice.root
    if plan is None or not np.isfinite(plan.score_s):
        raise WanreduceError(
            f"{format_size(config.memory)} of aggregator memory holds no root-mode plan (infeasible)"
        )
    schedule = lean.lean_to_schedule(plan, model)
    echo(
        f"{topo.name}: {topo.n} sites, {format_size(config.memory)} of aggregator memory each; root "
        f"aggregation, {format_seconds(plan.period_s)} for {config.elements} {config.dtype.label} elements, "
        f"jitter {format_seconds(config.jitter_s)}"
    )
    stripes = []
    for r, rc in enumerate(plan.round_costs):
        for g in rc.groups:
            names = ",".join(topo.sites[i] for i in g.members)
            parts = ", ".join(f"{topo.sites[st.root]} {st.chunks} chunks" for st in g.stripes)
            echo(f"  round {r}: {{{names}}} roots: {parts}")
            stripes += list(g.stripes)
    tensors = _tensors(config, topo.n)
    sites = None
    if config.aggregator == "rtl":
        sites = inline_sites(width=config.width, clock_hz=CLOCK_HZ, progress=progress)
    progress(f"co-simulating root aggregation on the {config.aggregator} aggregators, in line")
    t0 = time.perf_counter()
    sim = wan_lean.simulate_lean(
        schedule,
        **_link(config, model),
        memory_bytes=config.memory,
        tensors=tensors,
        jitter_s=config.jitter_s,
        seed=config.seed,
        width=config.width,
        sites=sites,
        background=config.background,
    )
    wall = time.perf_counter() - t0
    check = _check(schedule, tensors, sim.values, config.dtype, list(sim.counters.values()))
    rel = (sim.finish_s - plan.period_s) / plan.period_s
    model_peak = {}
    for st in stripes:
        model_peak[st.root] = max(model_peak.get(st.root, 0), st.peak_slot_bytes)
    peak_ratio = max(sim.peak_slot_bytes[q] / model_peak[q] for q in sim.peak_slot_bytes)
    bypass_ok = all(a == b for a, b in zip(sim.background_in, sim.background_out, strict=True))
    echo(
        f"sync: simulated {format_seconds(sim.finish_s)}, modelled {format_seconds(plan.period_s)} "
        f"({rel:+.1%}); {wall:.1f} s of wall clock"
    )
    for q in sorted(sim.peak_slot_bytes):
        echo(
            f"  root {topo.sites[q]}: peak {sim.peak_slots[q]} slots, "
            f"{format_size(sim.peak_slot_bytes[q])} (model {format_size(model_peak[q])})"
        )
    for q, name in enumerate(topo.sites):
        c = sim.counters[q]
        echo(
            f"  {name}: {c['frames_in']} frames in, {c['results']} RESULTs, {c['bypassed']} forwarded "
            f"({len(sim.background_out[q])} of {len(sim.background_in[q])} background frames unchanged)"
        )
    echo(
        f"check: every site equal to the numpy model: {check['exact']}; distinct results across sites: "
        f"{check['distinct_results']}; drops: {check['drops'] or 'none'}; other traffic forwarded unchanged: "
        f"{bypass_ok}; peak slot memory {peak_ratio:.2f}x the model's"
    )
    ok = (
        check["exact"]
        and check["distinct_results"] == 1
        and not check["drops"]
        and abs(rel) <= ROOT_TOLERANCE
        and bypass_ok
        and peak_ratio <= 1.1
    )
    return {
        "mode": "root",
        "sites": list(topo.sites),
        "aggregator": config.aggregator,
        "width": config.width,
        "memory_bytes": config.memory,
        "elements": config.elements,
        "dtype": config.dtype.label,
        "seed": config.seed,
        "jitter_s": config.jitter_s,
        "stripes": [{"root": topo.sites[st.root], "chunks": st.chunks} for st in stripes],
        "sim_time_s": sim.finish_s,
        "model_time_s": plan.period_s,
        "sim_vs_model": rel,
        **check,
        "peak_slot_bytes": {topo.sites[q]: v for q, v in sim.peak_slot_bytes.items()},
        "peak_slot_bytes_model": {topo.sites[q]: v for q, v in model_peak.items()},
        "peak_slot_ratio": peak_ratio,
        "slot_conflicts": sim.slot_conflicts,
        "background_frames": config.background,
        "background_unchanged": bypass_ok,
        "counters": {topo.sites[q]: c for q, c in sim.counters.items()},
        "wall_s": wall,
        "pass": bool(ok),
    }
