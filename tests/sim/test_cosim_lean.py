"""Root aggregation end to end on the RTL: nine Verilated in-line cores over the simulated nine-city WAN.

All nine sites in one group, striped over several roots (little memory per FPGA makes one root too slow),
senders offset so that contributions arrive together, 0.5 ms of jitter. Every site's core sees its
stripe's contributions, the other roots' RESULTs and other traffic; the run must leave every site with the
numpy reference's bits, take the model's time to within 10 %, hold no more slot memory than the model says
(to 1.1x), forward every other frame unchanged and in order, and drop nothing.
"""

import numpy as np
import pytest

from tests.support.quiet import unused_ok
from wanreduce.host import lean, wan_lean
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.spec.protocol import DType

pytestmark = pytest.mark.rtl

CLOCK_MHZ = 322.265625
TENSOR, CHUNK, MEMORY = 256 << 10, 1024, 256 << 10


@pytest.fixture(scope="module")
def run():
    from wanreduce.sim.verify.cosim import inline_sites

    topo = load_topology("nine-city")
    params = CostParams(
        memory_bytes=MEMORY, chunk_bytes=CHUNK, tensor_bytes=TENSOR, bus_bits=64, clock_mhz=CLOCK_MHZ
    )
    model = CostModel(topo, params)
    plan = lean.lean_plan(model, [[list(range(9))]])
    sched = lean.lean_to_schedule(plan, model)
    rng = np.random.default_rng(3)
    elements = TENSOR // 4
    tensors = [rng.standard_normal(elements).astype(np.float32) * 10 ** rng.uniform(-3, 3) for _ in range(9)]
    with unused_ok():
        sim = wan_lean.simulate_lean(
            sched,
            one_way_s=topo.one_way_s,
            site_Bps=params.site_gbps * 1e9 / 8,
            chunk_elems=CHUNK // 4,
            elements=elements,
            memory_bytes=MEMORY,
            tensors=tensors,
            jitter_s=0.5e-3,
            seed=1,
            width=64,
            sites=inline_sites(width=64, clock_hz=CLOCK_MHZ * 1e6),
            background=40,
        )
    ref = run_reference(sched, tensors, dtype=DType.FP32)[-1]
    return plan, sched, sim, ref


def _exact_and_identical(run):
    plan, sched, sim, ref = run
    stripes = plan.round_costs[0].groups[0].stripes
    assert len(stripes) >= 2, "the plan should stripe over several roots at this memory"
    assert all(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(sim.values, ref, strict=True)
    )
    assert len({v.tobytes() for v in sim.values}) == 1


def _time_and_memory_against_the_model(run):
    plan, sched, sim, ref = run
    assert abs(sim.finish_s / plan.period_s - 1) <= 0.02, (sim.finish_s, plan.period_s)  # README: 2 %
    for st in plan.round_costs[0].groups[0].stripes:
        assert 0 < sim.peak_slot_bytes[st.root] <= 1.1 * st.peak_slot_bytes, (st.root, sim.peak_slot_bytes)
    assert sim.slot_conflicts == 0


def _bypass_and_counters(run):
    plan, sched, sim, ref = run
    stripes = sched.lean["rounds"][0]["groups"][0]["stripes"]
    for q in range(9):
        assert sim.background_out[q] == sim.background_in[q] and len(sim.background_in[q]) == 40
        c = sim.counters[q]
        mine = sum(st["chunks"] for st in stripes if st["root"] == q)
        others = sum(st["chunks"] for st in stripes if st["root"] != q)
        assert c["results"] == mine
        assert c["bypassed"] == 40 + others  # the other traffic and the other roots' RESULTs
        assert c["frames_in"] == 9 * mine + c["bypassed"]
        drops = {k: v for k, v in c.items() if v and k not in ("frames_in", "results", "bypassed")}
        assert not drops, (q, drops)


def test_lean_root_mode_on_the_rtl(run):
    """The run's three checks in one test: the nine-site run is a module fixture, which xdist would make
    again on each worker given one of three separate tests."""
    _exact_and_identical(run)
    _time_and_memory_against_the_model(run)
    _bypass_and_counters(run)
