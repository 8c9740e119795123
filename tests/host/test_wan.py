"""The discrete-event WAN on the golden model: exact against the numpy model, identical everywhere, no
drops, and its times equal to the cost model's closed form."""

import numpy as np
import pytest

from wanreduce.host import pacing, wan
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.reference import run_reference
from wanreduce.host.schedule import optimize, plan_to_schedule
from wanreduce.host.topology import load_topology
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import schedule_from_obj


def _golden_run(schedule, topo, *, memory, elements, chunk_elems, dtype, seed, rounds=None):
    chunk_bytes = chunk_elems * dtype.size
    gmax = max(len(g) for rnd in schedule.rounds for g in rnd)
    slots = pacing.aggregator_slots(memory, chunk_bytes=chunk_bytes, members=gmax)
    bits, bank = wan.bank_layout(slots, schedule.period)
    sites = [
        wan.GoldenSite(schedule, s, slots=slots, members=gmax, slot_bytes=chunk_bytes, bank_bits=bits)
        for s in range(schedule.n)
    ]
    rng = np.random.default_rng(seed)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(schedule.n)]
    run = wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=chunk_elems,
        elements=elements,
        dtype=dtype,
        bank_slots=bank,
        sites=sites,
        tensors=tensors,
        rounds=rounds,
    )
    return run, run_reference(schedule, tensors, dtype=dtype, rounds=rounds)[-1]


@pytest.mark.parametrize("dtype", list(DType))
def test_nine_cities_windowed_exact_and_identical(dtype):
    topo = load_topology("nine-city")
    # 40 KiB of memory: 8 slots of 3 members, 4 per round bank, so 24 chunks take 6 windows per round and
    # rounds of the second period reuse the first period's banks.
    model = CostModel(topo, CostParams(memory_bytes=40 << 10, chunk_bytes=1024, tensor_bytes=24 << 10))
    best, _ = optimize(model, time_limit_s=1, seed=3)
    schedule = plan_to_schedule(best, model)
    run, ref = _golden_run(
        schedule,
        topo,
        memory=40 << 10,
        elements=24 * 1024 // dtype.size,
        chunk_elems=1024 // dtype.size,
        dtype=dtype,
        seed=4,
        rounds=2 * schedule.period,
    )
    pairs = zip(run.values, ref, strict=True)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in pairs)
    assert len({v.tobytes() for v in run.values}) == 1
    drops = {k: v for c in run.counters for k, v in c.items() if v and k not in ("frames_in", "results")}
    assert drops == {}


def test_listed_order_is_the_summation_order():
    # Two sites summing in opposite orders would differ for these values; the listed order is honoured.
    obj = {"version": 2, "sites": ["A", "B", "C"], "rounds": [{"groups": [[2, 0, 1]]}]}
    schedule = schedule_from_obj(obj)
    topo = load_topology("nine-city", sites=["AMS", "FRA", "LON"])
    run, ref = _golden_run(
        schedule, topo, memory=1 << 20, elements=4096, chunk_elems=256, dtype=DType.FP32, seed=7
    )
    assert all(np.array_equal(a, b) for a, b in zip(run.values, ref, strict=True))


def test_closed_form_matches_the_event_simulation():
    topo = load_topology("nine-city")
    for memory, tensor in ((256 << 10, 1 << 20), (1 << 20, 2 << 20), (64 << 20, 1 << 20)):
        model = CostModel(topo, CostParams(memory_bytes=memory, chunk_bytes=1024, tensor_bytes=tensor))
        best, _ = optimize(model, time_limit_s=1, seed=1)
        schedule = plan_to_schedule(best, model)
        bank = model.schedule_bank_slots(schedule.rounds)
        tl = pacing.timeline(
            schedule, topo.one_way_s, n_chunks=tensor // 1024, frame_s=model.frame_s, bank_slots=bank
        )
        assert tl.finish_s == pytest.approx(best.period_s, rel=0.005)  # README: within 0.5 %
        assert np.isnan(tl.send).sum() == 0  # every site takes part in every round of a 3x3 grid
