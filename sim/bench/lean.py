"""Root aggregation (issue #10) on the nine-city network, in the same model as the gather mode and baselines.

* ``lean_sync_s_8mib_1mib``, ``lean_sync_s_1gib_42mb``: time of one sync (all nine cities reach the
  average) with the best root-mode plan, 8 MiB per site at 1 MiB of FPGA memory and 1 GiB at 42 MB
  (42,000,000 bytes: on-chip RAM of an Alveo U55C class device), CLI defaults otherwise (1 KiB chunks,
  100 Gbit/s sites, 400 Gbit/s FPGA ingress, 512-bit x 250 MHz datapath), jitter 0.5 ms;
  ``lean_gather_s_*`` the gather mode's best at the same point, ``lean_roots_*`` how many roots the plan
  uses.
* ``lean_sync_s_1gib_42mb_3roots``: the same sync with at most 3 roots (the independent study's shape,
  which it estimated at about 354 ms); ``lean_sync_s_8mib_42mb``: 8 MiB at 42 MB.
* ``lean_speedup_vs_best_baseline_1gib_42mb``: the best of ring, parameter server and unicast (hosts
  with DRAM, same WAN model) over ``lean_sync_s_1gib_42mb``; the goal is at least 2.
* ``lean_peak_slot_bytes``: the most bytes of slots one root holds at once in the co-simulation
  (:func:`wanreduce.host.wan_lean.simulate_lean`) of that 1 GiB plan with 0.5 ms of uniform jitter, and
  ``lean_peak_slot_ratio`` its ratio to the model's figure (goal: at most 1.1). The run is timing-only
  and simulates the first ``PEAK_CHUNKS`` chunks of every stripe (all roots at once, four times the
  chunks one root holds during the jitter margin), which reaches the steady state that sets the peak;
  the full 10^6 chunks x 9 senders would take hours in Python.
* ``lean_rtl_*``: the same mode on the RTL, at a size the Verilated cores run in under a minute: nine
  in-line W = 64 cores at 322 MHz (the model is given that datapath), 256 KiB per FPGA, a 256 KiB fp32
  sync in 1 KiB chunks, 0.5 ms of jitter, 40 background frames per site: the simulated time
  (``lean_rtl_sim_s``) against the model (``lean_rtl_model_s``, ratio ``lean_rtl_vs_model``), the roots,
  the worst root's peak slot memory against the model's (``lean_rtl_peak_slot_ratio``), whether every
  site holds the numpy reference's bits (``lean_rtl_exact``) and forwarded its background frames
  unchanged (``lean_rtl_bypass_ok``), and the wall-clock seconds.
"""

import time
import warnings

import numpy as np

from wanreduce.host import lean, wan_lean
from wanreduce.host.baselines import all_baselines
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.spec.protocol import DType

__all__ = ["run"]

MB42 = 42_000_000
#: Chunks of each stripe the peak-memory co-simulation runs.
PEAK_CHUNKS = 6000


def _point(topo, tensor, memory):
    model = CostModel(topo, CostParams(tensor_bytes=tensor, memory_bytes=memory))
    choice = lean.best_plan(model, time_limit_s=5.0, modes=("gather", "root"))
    return model, choice


def _roots(plan):
    return len({s.root for rc in plan.round_costs for g in rc.groups for s in g.stripes})


def run():
    topo = load_topology("nine-city")
    out = {}
    for key, tensor, memory in (
        ("8mib_1mib", 8 << 20, 1 << 20),
        ("8mib_42mb", 8 << 20, MB42),
        ("1gib_42mb", 1 << 30, MB42),
    ):
        model, choice = _point(topo, tensor, memory)
        out[f"lean_sync_s_{key}"] = choice.root.score_s
        out[f"lean_gather_s_{key}"] = choice.gather.score_s
        out[f"lean_roots_{key}"] = _roots(choice.root)
        if key == "1gib_42mb":
            best = min(b.time_s for b in all_baselines(model) if b.name != "colocated")
            out["lean_speedup_vs_best_baseline_1gib_42mb"] = best / choice.root.score_s
            three = lean.lean_plan(model, [[list(range(topo.n))]], max_roots=3)
            out["lean_sync_s_1gib_42mb_3roots"] = three.score_s
            plan = choice.root
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
            peak = max(sim.peak_slot_bytes.values())
            model_peak = {
                s.root: s.peak_slot_bytes for rc in plan.round_costs for g in rc.groups for s in g.stripes
            }
            out["lean_peak_slot_bytes"] = peak
            out["lean_peak_slot_bytes_model"] = max(model_peak.values())
            out["lean_peak_slot_ratio"] = max(v / model_peak[q] for q, v in sim.peak_slot_bytes.items())
            out["lean_slot_conflicts"] = sim.slot_conflicts
    out.update(_rtl(topo))
    return {k: float(v) for k, v in out.items()}


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = wan_lean.simulate_lean(
            sched,
            one_way_s=topo.one_way_s,
            site_Bps=model.site_wire_Bps,
            chunk_elems=chunk // 4,
            elements=tensor // 4,
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
    return {
        "lean_rtl_sim_s": sim.finish_s,
        "lean_rtl_model_s": plan.period_s,
        "lean_rtl_vs_model": sim.finish_s / plan.period_s,
        "lean_rtl_roots": len(model_peak),
        "lean_rtl_peak_slot_ratio": max(v / model_peak[q] for q, v in sim.peak_slot_bytes.items()),
        "lean_rtl_exact": exact and len({v.tobytes() for v in sim.values}) == 1,
        "lean_rtl_bypass_ok": all(a == b for a, b in zip(sim.background_in, sim.background_out, strict=True)),
        "lean_rtl_seconds": wall,
    }
