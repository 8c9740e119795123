"""Root aggregation (docs/lean.md) on the nine-city network, in the model of the gather mode and baselines.

CLI defaults unless stated (1 KiB chunks, 100 Gbit/s sites, 400 Gbit/s FPGA ingress, 512-bit x 250 MHz
datapath, jitter J = 0.5 ms); 42 MB is 42,000,000 bytes (on-chip RAM of an Alveo U55C class device).

* The results table, at each point of :data:`POINTS` (``8mib_1mib`` is 8 MiB per site at 1 MiB per FPGA;
  ``16gib`` the external build, member buffers in an Alveo U55C's 16 GiB of HBM through K = 2 ports):
  ``lean_sync_s_<point>`` the best root-mode plan's time of one sync, ``lean_roots_<point>`` its roots,
  ``lean_gather_s_<point>`` and ``lean_gather_plan_<point>`` the gather mode's best,
  ``lean_gather_over_root_<point>`` their ratio, ``lean_baseline_<point>`` / ``lean_baseline_s_<point>``
  the best WAN baseline (ring, parameter server, unicast; hosts with DRAM) and
  ``lean_vs_baseline_<point>`` its time over root mode's (also named
  ``lean_speedup_vs_best_baseline_1gib_42mb`` at 1 GiB, 42 MB: the goal is at least 2).
* The 1 GiB, 42 MB plan: its roots by stripe size (``lean_roots_list_1gib_42mb``), how many the datapath
  bounds, the fastest stream's rate, the largest and smallest stripes, the chunks a root holds during the
  margin (``lean_inflight_chunks_1gib_42mb``) against the slots of its bank; ``lean_sync_s_1gib_42mb_3roots``
  the same sync with at most 3 roots (the independent study's shape).
* ``lean_private_*``: 8 MiB at 1 MiB and 1 GiB at 42 MB on ``nine-city-private`` (shared 10 Gbit/s backbone).
* ``lean_lon_sync_s_*``: one root at LON for the whole group (the study's shape), at 1 MiB and 42 MB, the
  latter also without the FPGA's caps (``_nocaps``: a clock and ports far beyond any stream);
  ``lean_sync_s_8mib_1mib_j<J>`` the best plan at other margins J; ``lean_bank_slots_1mib`` the slots
  of a one-round bank at 1 MiB for groups of nine.
* ``lean_peak_slot_bytes``: the most bytes of slots one root holds at once in the co-simulation
  (:func:`wanreduce.host.wan_lean.simulate_lean`) of the 1 GiB plan with 0.5 ms of uniform jitter, and
  ``lean_peak_slot_ratio`` its ratio to the model's figure (goal: at most 1.1). The run is timing-only
  and simulates the first ``PEAK_CHUNKS`` chunks of every stripe (all roots at once, four times the
  chunks one root holds during the jitter margin), which reaches the steady state that sets the peak;
  the full 10^6 chunks x 9 senders would take hours in Python. ``lean_jitter_sim_over_model_2mib_1mib``:
  a whole 2 MiB sync at 1 MiB with 0.5 ms of jitter, simulated over modelled.
* ``lean_rtl_*``: the same mode on the RTL, at a size the Verilated cores run in under a minute: nine
  in-line W = 64 cores at 322 MHz (the model is given that datapath), 256 KiB per FPGA, a 256 KiB fp32
  sync in 1 KiB chunks, 0.5 ms of jitter, 40 background frames per site: the stripes, the simulated time
  (``lean_rtl_sim_s``) against the model (``lean_rtl_model_s``, ratio ``lean_rtl_vs_model``), the roots,
  the worst root's peak slots and slot memory against the model's (``lean_rtl_peak_slot_ratio``), whether
  every site holds the numpy reference's bits (``lean_rtl_exact``) and forwarded its background frames
  unchanged (``lean_rtl_bypass_ok``), and the wall-clock seconds.

Every figure of the model is one deterministic evaluation; the co-simulations are one seeded run each.
"""

import time

import numpy as np

from wanreduce.host import hbm, lean, wan_lean
from wanreduce.host.baselines import all_baselines
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.sim.quiet import unused_ok
from wanreduce.spec.protocol import DType

__all__ = ["run", "POINTS", "UNITS", "NOTES", "RUNS"]

MB42 = 42_000_000
#: docs/lean.md's results table: sync size and memory per FPGA (bytes on chip, or the external build's
#: 16 GiB of HBM, :data:`wanreduce.host.hbm.AMPLE`), keyed as the figure names say.
POINTS = {
    "8mib_256kib": (8 << 20, 256 << 10),
    "8mib_1mib": (8 << 20, 1 << 20),
    "8mib_42mb": (8 << 20, MB42),
    "8mib_16gib": (8 << 20, hbm.AMPLE),
    "1gib_1mib": (1 << 30, 1 << 20),
    "1gib_42mb": (1 << 30, MB42),
    "1gib_16gib": (1 << 30, hbm.AMPLE),
}
#: Other jitter margins J for the 8 MiB, 1 MiB point, by the suffix of their figures.
JITTERS = {"50us": 0.05e-3, "250us": 0.25e-3, "1ms": 1e-3}
#: Chunks of each stripe the peak-memory co-simulation runs.
PEAK_CHUNKS = 6000


def _point(topo, tensor, memory, **kw):
    build = memory if isinstance(memory, dict) else {"memory_bytes": memory}
    model = CostModel(topo, CostParams(tensor_bytes=tensor, **build))
    choice = lean.best_plan(model, time_limit_s=5.0, modes=("gather", "root"), **kw)
    return model, choice


def _roots(plan):
    return len({s.root for rc in plan.round_costs for g in rc.groups for s in g.stripes})


def _stripes(plan):
    return [s for rc in plan.round_costs for g in rc.groups for s in g.stripes]


def _baseline(model):
    return min((b for b in all_baselines(model) if b.name != "colocated"), key=lambda b: b.time_s)


def _results_table(topo):
    """docs/lean.md's results table: both modes' best plans and the best WAN baseline at each point."""
    out = {}
    for key, (tensor, memory) in POINTS.items():
        model, choice = _point(topo, tensor, memory)
        base = _baseline(model)
        out[f"lean_sync_s_{key}"] = choice.root.score_s
        out[f"lean_gather_s_{key}"] = choice.gather.score_s
        out[f"lean_gather_plan_{key}"] = choice.gather.name
        out[f"lean_gather_over_root_{key}"] = choice.gather.score_s / choice.root.score_s
        out[f"lean_roots_{key}"] = _roots(choice.root)
        out[f"lean_baseline_{key}"] = base.name.replace("_", " ")
        out[f"lean_baseline_s_{key}"] = base.time_s
        out[f"lean_vs_baseline_{key}"] = base.time_s / choice.root.score_s
    return out


def _private(out):
    """The same on nine-city-private (shared 10 Gbit/s backbone)."""
    topo = load_topology("nine-city-private")
    for key in ("8mib_1mib", "1gib_42mb"):
        model, choice = _point(topo, *POINTS[key])
        base = _baseline(model)
        out[f"lean_private_sync_s_{key}"] = choice.root.score_s
        out[f"lean_private_gather_s_{key}"] = choice.gather.score_s
        out[f"lean_private_baseline_{key}"] = base.name.replace("_", " ")
        out[f"lean_private_baseline_s_{key}"] = base.time_s


def _one_root(topo, out):
    """The independent study's shape: one root at LON for the whole group, with and without the FPGA's
    datapath and ingress caps (a clock and ports far beyond any stream), and the best plan at other J."""
    lon, members = list(topo.sites).index("LON"), list(range(topo.n))
    for key, memory, extra in (
        ("8mib_1mib", 1 << 20, {}),
        ("8mib_42mb", MB42, {}),
        ("8mib_42mb_nocaps", MB42, {"clock_mhz": 1e6, "fpga_ingress_gbps": 1e6}),
    ):
        model = CostModel(topo, CostParams(tensor_bytes=8 << 20, memory_bytes=memory, **extra))
        group = lean.lean_round(model, [members], roots=[lon], bank_slots=model.bank_slots(1, topo.n))
        out[f"lean_lon_sync_s_{key}"] = group.time_s
    for label, jitter in JITTERS.items():
        _, choice = _point(topo, *POINTS["8mib_1mib"], jitter_s=jitter)
        out[f"lean_sync_s_8mib_1mib_j{label}"] = choice.root.score_s
    out["lean_bank_slots_1mib"] = CostModel(topo, CostParams(memory_bytes=1 << 20)).bank_slots(1, topo.n)


def run():
    topo = load_topology("nine-city")
    out = _results_table(topo)
    tensor, memory = POINTS["1gib_42mb"]
    model, choice = _point(topo, tensor, memory)
    three = lean.lean_plan(model, [[list(range(topo.n))]], max_roots=3)
    out["lean_sync_s_1gib_42mb_3roots"] = three.score_s
    out["lean_speedup_vs_best_baseline_1gib_42mb"] = out["lean_vs_baseline_1gib_42mb"]
    plan = choice.root
    stripes = sorted(_stripes(plan), key=lambda s: -s.chunks)
    fpga = [s for s in stripes if s.bound == "fpga"]
    out["lean_roots_list_1gib_42mb"] = ", ".join(topo.sites[s.root] for s in stripes)
    out["lean_fpga_roots_1gib_42mb"] = len(fpga)
    out["lean_stream_GBps_1gib_42mb"] = max(s.rate_Bps for s in stripes) / 1e9
    out["lean_largest_stripe_1gib_42mb"] = f"{topo.sites[stripes[0].root]} {stripes[0].chunks:,}"
    out["lean_smallest_stripe_1gib_42mb"] = f"{topo.sites[stripes[-1].root]} {stripes[-1].chunks:,}"
    out["lean_inflight_chunks_1gib_42mb"] = max(s.inflight_chunks for s in stripes)
    out["lean_bank_slots_1gib_42mb"] = model.bank_slots(1, topo.n)
    out["lean_peak_slot_bytes_model"] = plan.peak_slot_bytes
    sched = lean.lean_to_schedule(plan, model)
    t0 = time.perf_counter()
    sim = wan_lean.simulate_lean(
        sched,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=tensor // 4,
        jitter_s=plan.jitter_s,
        seed=0,
        stripe_limit=PEAK_CHUNKS,
    )
    out["lean_cosim_seconds"] = time.perf_counter() - t0
    model_peak = {s.root: s.peak_slot_bytes for s in stripes}
    out["lean_peak_slot_bytes"] = max(sim.peak_slot_bytes.values())
    out["lean_peak_slot_ratio"] = max(v / model_peak[q] for q, v in sim.peak_slot_bytes.items())
    out["lean_slot_conflicts"] = sim.slot_conflicts
    out.update(_jitter_cosim(topo))
    _private(out)
    _one_root(topo, out)
    out.update(_rtl(topo))
    return {k: v if isinstance(v, str) else float(v) for k, v in out.items()}


def _jitter_cosim(topo):
    """The timing-only co-simulation at 2 MiB and 1 MiB with 0.5 ms of jitter against the model."""
    model = CostModel(topo, CostParams(memory_bytes=1 << 20, chunk_bytes=1024, tensor_bytes=2 << 20))
    plan = lean.lean_plan(model, [[list(range(topo.n))]])
    sim = wan_lean.simulate_lean(
        lean.lean_to_schedule(plan, model),
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=(2 << 20) // 4,
        jitter_s=0.5e-3,
        seed=1,
    )
    return {"lean_jitter_sim_over_model_2mib_1mib": sim.finish_s / plan.period_s}


def _rtl(topo):
    from wanreduce.sim.verify.cosim import CLOCK_HZ, inline_sites

    tensor, chunk, memory = 256 << 10, 1024, 256 << 10
    params = CostParams(
        memory_bytes=memory, chunk_bytes=chunk, tensor_bytes=tensor, bus_bits=64, clock_mhz=CLOCK_HZ / 1e6
    )
    model = CostModel(topo, params)
    plan = lean.lean_plan(model, [[list(range(topo.n))]])
    sched = lean.lean_to_schedule(plan, model)
    rng = np.random.default_rng(3)
    tensors = [rng.standard_normal(tensor // 4).astype(np.float32) for _ in range(topo.n)]
    t0 = time.perf_counter()
    with unused_ok():
        sim = wan_lean.simulate_lean(
            sched,
            **model.sim_args(elements=tensor // 4, chunk_elems=chunk // 4, dtype=DType.FP32),
            memory_bytes=memory,
            tensors=tensors,
            jitter_s=0.5e-3,
            seed=1,
            width=64,
            sites=inline_sites(width=64, clock_hz=CLOCK_HZ),
            background=40,
        )
    wall = time.perf_counter() - t0
    ref = run_reference(sched, tensors, dtype=DType.FP32)[-1]
    exact = all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(sim.values, ref, strict=True)
    )
    model_peak = {}
    for g in plan.round_costs[0].groups:
        for st in g.stripes:
            model_peak[st.root] = max(model_peak.get(st.root, 0), st.peak_slot_bytes)
    stripes = sorted(plan.round_costs[0].groups[0].stripes, key=lambda st: -st.chunks)
    return {
        "lean_rtl_stripes": ", ".join(f"{topo.sites[st.root]} {st.chunks}" for st in stripes),
        "lean_rtl_peak_slots": max(sim.peak_slots.values()),
        "lean_rtl_peak_slot_bytes": max(sim.peak_slot_bytes.values()),
        "lean_rtl_model_peak_slot_bytes": max(model_peak.values()),
        "lean_rtl_sim_s": sim.finish_s,
        "lean_rtl_model_s": plan.period_s,
        "lean_rtl_vs_model": sim.finish_s / plan.period_s,
        "lean_rtl_roots": len(model_peak),
        "lean_rtl_peak_slot_ratio": max(v / model_peak[q] for q, v in sim.peak_slot_bytes.items()),
        "lean_rtl_exact": exact and len({v.tobytes() for v in sim.values}) == 1,
        "lean_rtl_bypass_ok": all(a == b for a, b in zip(sim.background_in, sim.background_out, strict=True)),
        "lean_rtl_seconds": wall,
    }


UNITS = {
    "lean_stream_GBps_1gib_42mb": "GB/s",
    "lean_peak_slot_bytes_model": "B",
    "lean_cosim_seconds": "s",
    "lean_rtl_seconds": "s",
}
_SEEDED = "one seeded run (jitter seed fixed)"
NOTES = {
    "lean_peak_slot_bytes": _SEEDED,
    "lean_peak_slot_ratio": _SEEDED,
    "lean_slot_conflicts": _SEEDED,
    "lean_jitter_sim_over_model_2mib_1mib": _SEEDED,
    "lean_rtl_sim_s": _SEEDED + ", nine Verilated cores",
    "lean_rtl_vs_model": _SEEDED + ", nine Verilated cores",
    "lean_rtl_peak_slot_ratio": _SEEDED + ", nine Verilated cores",
    "lean_rtl_seconds": "wall clock of one run",
    "lean_cosim_seconds": "wall clock of one run",
}
RUNS = dict.fromkeys(NOTES, 1)
