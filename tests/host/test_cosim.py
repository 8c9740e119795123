import numpy as np
import pytest

from wanreduce.host.cosim import run_schedule
from wanreduce.host.protocol import DType, bits_dtype, np_dtype
from wanreduce.spec.schedfile import schedule_from_obj

GRID = {"version": 1, "sites": [f"S{i}" for i in range(9)],
        "rounds": [{"groups": [[0, 1, 2], [3, 4, 5], [6, 7, 8]]},
                   {"groups": [[0, 3, 6], [1, 4, 7], [2, 5, 8]]}]}


def delays(n, seed):
    d = np.random.default_rng(seed).uniform(0.001, 0.1, (n, n))
    np.fill_diagonal(d, 0)
    return d


@pytest.mark.parametrize("dtype", list(DType))
def test_grid_reaches_the_average_and_groups_agree_to_the_bit(dtype):
    sched = schedule_from_obj(GRID)
    rng = np.random.default_rng(3)
    tensors = [rng.standard_normal(1000).astype(np.float32) for _ in range(9)]
    rep = run_schedule(sched, tensors, one_way_s=delays(9, 1), dtype=dtype, chunk_elems=64)
    assert all(all(r.identical) and not r.drops and r.results == 9 * 16 for r in rep.rounds)
    # After round 1 a site holds the average of its row, after round 2 of all nine (exact consensus):
    # compare with an independent float64 computation, allowing the rounding of a few fp operations.
    wire = np.array([t.astype(np_dtype(dtype)).astype(np.float64) for t in tensors])
    eps = {DType.FP32: 2.0**-23, DType.FP16: 2.0**-10, DType.BF16: 2.0**-7}[dtype]
    tol = 12 * eps * np.abs(wire).mean(axis=0)
    for v in rep.values:
        assert np.all(np.abs(v.astype(np.float64) - wire.mean(axis=0)) <= tol)
    # Members of one last-round group hold the same bits.
    for g in GRID["rounds"][1]["groups"]:
        assert len({rep.values[m].view(bits_dtype(dtype)).tobytes() for m in g}) == 1


def test_a_site_that_waits_keeps_its_value():
    sched = schedule_from_obj({"version": 1, "sites": ["A", "B", "C"], "rounds": [{"groups": [[0, 1]]}]})
    tensors = [np.full(10, v, np.float32) for v in (1.0, 3.0, 7.0)]
    rep = run_schedule(sched, tensors, one_way_s=delays(3, 2), chunk_elems=4)
    assert rep.values[0].tolist() == [2.0] * 10 and rep.values[1].tolist() == [2.0] * 10
    assert rep.values[2].tolist() == [7.0] * 10
