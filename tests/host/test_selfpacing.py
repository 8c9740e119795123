"""Root mode with self-paced senders (wan_lean.SelfPacing): the window bounds what a root holds, every
chunk completes, and the plan-paced run keeps the plan's offsets while the self-paced one does not."""

import pytest

from wanreduce.host import lean, wan_lean
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.topology import load_topology


@pytest.fixture(scope="module")
def setup():
    topo = load_topology("nine-city", sites=["AMS", "LON", "NYC", "SIN"])
    model = CostModel(topo, CostParams(memory_bytes=256 << 10, chunk_bytes=1024, tensor_bytes=128 << 10))
    plan = lean.lean_plan(model, [[list(range(topo.n))]])
    sched = lean.lean_to_schedule(plan, model)
    kw = dict(one_way_s=topo.one_way_s, site_Bps=12.5e9, chunk_elems=256, elements=(128 << 10) // 4)
    return sched, kw


def test_plan_paced_senders_keep_the_plan_offsets(setup):
    sched, kw = setup
    run = wan_lean.simulate_lean(sched, **kw)
    gap = wan_lean.offset_gap(sched, run)
    assert gap and max(abs(p - o) for _, _, p, o in gap) < 1e-6
    assert max(p for _, _, p, _ in gap) > 1e-3  # the plan does offset the members


def test_self_paced_senders_complete_within_their_window_and_drift_from_the_plan(setup):
    sched, kw = setup
    run = wan_lean.simulate_lean(sched, pacing=wan_lean.SelfPacing(window=4, jitter_s=1e-4, seed=3), **kw)
    assert (run.result[:, 0, :] > 0).all()  # every site got every chunk's RESULT
    assert max(run.peak_slots.values()) <= 4 and run.slot_conflicts == 0
    gap = wan_lean.offset_gap(sched, run, skip=4)
    assert max(abs(p - o) for _, _, p, o in gap) > 1e-3


def test_self_pacing_refuses_bad_parameters(setup):
    sched, kw = setup
    with pytest.raises(ValueError, match="window"):
        wan_lean.SelfPacing(window=0)
    with pytest.raises(ValueError, match="jitter"):
        wan_lean.SelfPacing(window=2, jitter_s=-1.0)
    with pytest.raises(ValueError, match="one round"):
        wan_lean.simulate_lean(sched, pacing=wan_lean.SelfPacing(window=2), rounds=2, **kw)
