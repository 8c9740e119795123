"""Root mode with senders that pace themselves (:class:`wanreduce.host.wan_lean.SelfPacing`) against the
plan's offsets, on the nine-city network at the demo-root point (256 KiB per FPGA, a 256 KiB fp32 sync in
1 KiB chunks, W = 64 at 322 MHz, 0.5 ms of WAN jitter). Timing only.

* ``root_plan_sim_over_model``: the plan's senders (offsets and interval from the schedule) under the WAN's
  jitter: simulated sync time over the model's.
* ``root_plan_offset_range_ms``: the widest spread of the plan's send offsets within a stripe.
* ``root_selfpaced_offset_gap_ms``: senders clocked by their own RESULT arrivals, each allowed the root's
  bank of slots in flight, with 0.2 ms (mean, exponential) of host-side jitter of their own: the largest
  distance between a member's plan offset and the offset it takes (median over its chunks after the
  first window), over every member and stripe.
* ``root_selfpaced_over_plan``: their sync time over the plan-paced run's; ``root_selfpaced_peak_slots``
  the most slots a root held.

The self-paced figures are the median over three host-jitter seeds; the plan-paced run is one seeded run.
"""

import statistics

from wanreduce.host import lean, wan_lean
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.pacing import aggregator_slots
from wanreduce.host.topology import load_topology
from wanreduce.host.wan import bank_layout
from wanreduce.spec.protocol import DType

__all__ = ["run", "NOTES", "RUNS"]

HOST_JITTER_S = 0.2e-3
SEEDS = (5, 6, 7)


def run():
    topo = load_topology("nine-city")
    tensor = memory = 256 << 10
    params = CostParams(
        memory_bytes=memory, chunk_bytes=1024, tensor_bytes=tensor, bus_bits=64, clock_mhz=322.265625
    )
    model = CostModel(topo, params)
    plan = lean.best_plan(model, time_limit_s=2.0, modes=("root",)).root
    sched = lean.lean_to_schedule(plan, model)
    _, bank = bank_layout(aggregator_slots(memory, chunk_bytes=1024, members=topo.n, width=64), 1)
    kw = dict(
        model.sim_args(elements=tensor // 4, chunk_elems=256, dtype=DType.FP32),
        memory_bytes=memory,
        jitter_s=0.5e-3,
        seed=1,
        width=64,
    )
    base = wan_lean.simulate_lean(sched, **kw)
    gaps, ratios, peaks = [], [], []
    for seed in SEEDS:
        paced = wan_lean.SelfPacing(window=bank, jitter_s=HOST_JITTER_S, seed=seed)
        r = wan_lean.simulate_lean(sched, pacing=paced, **kw)
        gap = wan_lean.offset_gap(sched, r, skip=bank)
        gaps.append(max(abs(p - o) for _, _, p, o in gap))
        ratios.append(r.finish_s / base.finish_s)
        peaks.append(max(r.peak_slots.values()))
    spread = wan_lean.offset_gap(sched, base)
    return {
        "root_plan_sim_over_model": base.finish_s / plan.period_s,
        "root_plan_offset_range_ms": max(p for _, _, p, _ in spread) * 1e3,
        "root_selfpaced_offset_gap_ms": statistics.median(gaps) * 1e3,
        "root_selfpaced_over_plan": statistics.median(ratios),
        "root_selfpaced_peak_slots": statistics.median(peaks),
        "root_selfpaced_window": bank,
    }


_MEDIAN = "median of 3 runs whose host-jitter seeds differ"
NOTES = {
    "root_plan_sim_over_model": "one seeded run (WAN jitter seed 1)",
    "root_selfpaced_offset_gap_ms": _MEDIAN,
    "root_selfpaced_over_plan": _MEDIAN,
    "root_selfpaced_peak_slots": _MEDIAN,
}
RUNS = {"root_selfpaced_offset_gap_ms": 3, "root_selfpaced_over_plan": 3, "root_selfpaced_peak_slots": 3}
