"""Training through wanreduce (issue #13): the sync's numbers, the simulated clock, a reduced run.

The aggregation checks need only numpy; the reduced training run needs PyTorch and scikit-learn (the
``train`` extra) and is skipped without them; the RTL check needs Verilator.
"""

import math

import ml_dtypes
import numpy as np
import pytest

from tests.support.quiet import unused_ok
from wanreduce.host.protocol import np_dtype
from wanreduce.host.train.aggregate import run_rounds, summation_order, wire_dtype
from wanreduce.host.train.methods import Method, Setting, SyncCost, simulate_clock

GRID = [[[0, 4, 8], [1, 5, 6], [2, 3, 7]], [[8, 1, 3], [0, 5, 7], [4, 6, 2]]]


def reference_rounds(values, rounds, dtype):
    """Group averages element by element with numpy scalars: add in the listed order, one rounding per
    addition in the wire dtype, then divide by the group size in that dtype."""
    scalar = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    x = [list(map(scalar, row)) for row in values]
    for groups in rounds:
        new = [list(row) for row in x]
        for g in groups:
            if len(g) < 2:
                continue
            for e in range(len(x[0])):
                acc = x[g[0]][e]
                for m in g[1:]:
                    acc = scalar(acc + x[m][e])
                avg = scalar(acc / scalar(len(g)))
                for m in g:
                    new[m][e] = avg
        x = new
    return np.array(x, dtype=np_dtype(wire_dtype(dtype)))


def _values(n, length, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, length)) * 10.0 ** rng.integers(-3, 3, (n, length))).astype(
        np_dtype(wire_dtype(dtype))
    )


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_sync_is_the_numpy_group_average_bit_for_bit(dtype):
    x = _values(9, 300, dtype, seed=1)
    want = reference_rounds(x, GRID, dtype)
    got = run_rounds(x, GRID, dtype, engine="packets", chunk_elems=64)
    assert np.array_equal(_bits(got), _bits(want))
    assert np.array_equal(_bits(run_rounds(x, GRID, dtype, engine="fast")), _bits(want))


def test_summation_order_matters_and_is_the_schedules():
    # Values whose fp32 sum depends on the order: the sync must follow the listed order, not sorted ranks.
    x = np.array([[1e8], [1.0], [-1e8]], dtype=np.float32)
    fwd = run_rounds(x, [[[0, 1, 2]]], "fp32", engine="packets", chunk_elems=1)
    rev = run_rounds(x, [[[0, 2, 1]]], "fp32", engine="packets", chunk_elems=1)
    assert summation_order([0, 2, 1]) == (0, 2, 1)
    assert fwd[0, 0] == np.float32(0.0) and rev[0, 0] == np.float32(1.0 / 3.0)
    assert np.array_equal(rev, run_rounds(x, [[[0, 2, 1]]], "fp32", engine="fast"))


def test_nan_and_waiting_sites():
    x = _values(5, 40, "fp32", seed=2)
    x[1, 3] = np.nan
    rounds = [[[0, 1], [3, 2]]]  # site 4 waits
    got = run_rounds(x, rounds, "fp32", engine="packets", chunk_elems=16)
    assert np.array_equal(_bits(got), _bits(run_rounds(x, rounds, "fp32", engine="fast")))
    assert np.array_equal(_bits(got[4]), _bits(x[4]))
    assert got[0].view(np.uint32)[3] == 0x7FC00000  # the canonical NaN


def test_exact_grid_leaves_every_site_with_identical_bits():
    from wanreduce.host.costmodel import CostModel, CostParams
    from wanreduce.host.schedule import optimize
    from wanreduce.host.topology import load_topology

    model = CostModel(load_topology("nine-city"), CostParams(memory_bytes=1 << 20, tensor_bytes=1 << 30))
    best, _ = optimize(model, time_limit_s=1.0, seed=0)
    assert best.exact and len(best.rounds) == 2
    x = _values(9, 500, "fp32", seed=3)
    y = run_rounds(x, best.rounds, "fp32", engine="fast")
    assert all(np.array_equal(_bits(y[0]), _bits(y[i])) for i in range(9))
    assert np.allclose(y[0], x.astype(np.float64).mean(0), rtol=1e-5, atol=1e-3)


def _cost(groups_time, n, bucket_s=0.0):
    return SyncCost([[[list(range(n))]]], [[[(groups_time, bucket_s)]]])


def test_clock_overlap_rules():
    s = Setting()
    step = s.step_s
    n = 3
    # All-reduce hidden under the backward pass: every step costs its compute only.
    hidden = simulate_clock(Method("a", "allreduce", "ring"), _cost(0.5 * s.bwd_share * step, n), s, 4, n)
    assert hidden[4] == pytest.approx(4 * step)
    # Longer than the backward pass: forward + sync.
    long = simulate_clock(Method("a", "allreduce", "ring"), _cost(2 * step, n), s, 3, n)
    assert long[3] == pytest.approx(3 * ((1 - s.bwd_share) * step + 2 * step))
    # The last bucket leaves after the backward pass.
    tail = simulate_clock(Method("a", "allreduce", "ring"), _cost(0.1 * step, n, 0.25 * step), s, 2, n)
    assert tail[2] == pytest.approx(2 * 1.25 * step)
    # DiLoCo: no overlap, one sync every h steps.
    di = simulate_clock(Method("d", "diloco", "ring", h=5), _cost(0.7, n), s, 10, n)
    assert di[5] == pytest.approx(5 * step + 0.7) and di[10] == pytest.approx(10 * step + 1.4)
    assert di[7] == pytest.approx(7 * step + 0.7)
    # Gossip: one round per step, overlapping the whole step.
    g = simulate_clock(Method("g", "gossip", "wanreduce", per_sync="round"), _cost(0.9 * step, n), s, 5, n)
    assert g[5] == pytest.approx(5 * step)


def test_clock_groups_wait_only_for_their_members():
    s = Setting()
    step = s.step_s
    # Round 0: {0, 1} slow, {2, 3} fast; round 1: {1, 2}. Site 2 waits for site 1's slow round.
    cost = SyncCost(
        [[[[0, 1], [2, 3]]], [[[1, 2]]]], [[[(3 * step, 0), (0.1 * step, 0)]], [[(0.1 * step, 0)]]]
    )
    c = simulate_clock(Method("g", "gossip", "wanreduce", per_sync="round"), cost, s, 2, 4)
    assert c[1] == pytest.approx(3 * step)  # sites 0 and 1 end step 1 at 3 steps; 2 and 3 at 1
    # Step 2: sites 0 and 1 compute until 4 steps; site 2 (free at 1) waits for site 1 (at 3) and mixes
    # until 3.1 steps; site 3 is in no group and ends at 2. The slowest site ends at 4 steps.
    assert c[2] == pytest.approx(4 * step)


def test_setting_states_its_numbers():
    s = Setting()
    assert s.sync_bytes == 4_000_000_000
    assert s.step_s == pytest.approx(6 * 1e9 * 256 * 2048 / (8 * 989e12 * 0.40))
    assert "1B parameters" in s.describe()
    assert math.isclose(s.bwd_share, 2 / 3)


def test_reduced_training_syncs_are_the_numpy_group_average():
    """Three site processes, a few steps of each algorithm, through the golden aggregator and through the
    fast path: every sync equals the numpy reference bit for bit and both engines train identical bits."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from wanreduce.host.train.runner import run_sites

    cfg = dict(
        seed=0,
        hidden=8,
        lr=0.1,
        momentum=0.9,
        outer_lr=0.7,
        batch=16,
        dtype="fp32",
        engine="fast",
        chunk_elems=128,
        target=1.0,
        past_target=1.0,
        record=True,
    )
    syncs = {
        "allreduce": [[[[2, 0, 1]]]],
        "gossip": [[[[0, 1]]], [[[2, 1]]]],
        "diloco": [[[[1, 2]], [[0, 2]]]],
    }
    trajs = [
        dict(key=f"{algo}-{engine}", algorithm=algo, h=2, steps=4, eval_every=2, syncs=rounds, engine=engine)
        for algo, rounds in syncs.items()
        for engine in ("packets", "fast")
    ]
    trajs.append(
        dict(
            key="pipelined",
            algorithm="allreduce",
            pipelined=True,
            h=1,
            steps=4,
            eval_every=2,
            syncs=syncs["allreduce"],
            dtype="bf16",
        )
    )
    res = run_sites(3, cfg, trajs, timeout_s=600)
    for algo in syncs:
        packets, fast = res[f"{algo}-packets"], res[f"{algo}-fast"]
        assert packets["syncs"] == (2 if algo == "diloco" else 4)
        assert np.array_equal(_bits(packets["final"]), _bits(fast["final"]))
        for x, rounds, y in packets["record"]:
            assert np.array_equal(_bits(y), _bits(reference_rounds(x, rounds, "fp32")))
        # The model trained: accuracy moved off chance at the last evaluation.
        assert packets["evals"][-1][1] != packets["evals"][0][1]
    # Pipelined in bf16: the same sync rule in the wire dtype; the gradients land one step late.
    pipe = res["pipelined"]
    assert pipe["syncs"] == 4 and pipe["record"][0][0].dtype == ml_dtypes.bfloat16
    for x, rounds, y in pipe["record"]:
        assert np.array_equal(_bits(y), _bits(reference_rounds(x, rounds, "bf16")))
    assert not np.array_equal(_bits(pipe["final"]), _bits(res["allreduce-fast"]["final"]))
    # An exact all-reduce keeps the replicas identical; gossip in pairs does not.
    final = res["allreduce-packets"]["final"]
    assert all(np.array_equal(_bits(final[0]), _bits(final[i])) for i in range(3))
    assert not np.array_equal(_bits(res["gossip-fast"]["final"][0]), _bits(res["gossip-fast"]["final"][2]))


def _core_aggregator(sim):
    from wanreduce.host.golden import Destination

    def aggregate(payloads, *, rank, jobs, slots, members, slot_bytes):
        assert slots <= sim.config.slots and slot_bytes <= sim.config.chunk_bytes
        res = sim.run(
            payloads,
            rank=rank,
            jobs=jobs,
            destinations=[Destination("02:57:52:00:00:01", "10.87.82.1", 47000)],
        )
        return res.packets

    return aggregate


@pytest.mark.rtl
def test_sync_through_the_rtl_core_matches_the_fast_path():
    from tests.support.cores import fuzz_core_sim

    with unused_ok():
        sim = fuzz_core_sim("payload")
    rounds = [[[2, 0, 1]], [[1, 3]]]
    for dtype in ("fp32", "bf16"):
        # As many 64-byte chunks per round as the build has slots.
        x = _values(4, sim.config.slots * 64 // wire_dtype(dtype).size, dtype, seed=4)
        got = run_rounds(
            x,
            rounds,
            dtype,
            engine="packets",
            chunk_elems=64 // wire_dtype(dtype).size,
            aggregator=_core_aggregator(sim),
        )
        assert np.array_equal(_bits(got), _bits(run_rounds(x, rounds, dtype, engine="fast")))
        assert np.array_equal(_bits(got), _bits(reference_rounds(x, rounds, dtype)))
