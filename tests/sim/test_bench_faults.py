"""The faults bench (docs/reliability.md's table): one fault-free and one lossy run of its configuration,
counted against what the schedule implies, and the figures named as the page quotes them."""

import pytest

from wanreduce.sim.bench import faults

# Every site sends each of the 64 chunks to the two other members of its group and its own aggregator,
# in each of the grid's two rounds: 64 x 2 x 9 x 3 CONTRIB frames into the aggregators.
FAULT_FREE_FRAMES = faults.CHUNKS * 2 * 9 * 3


def test_fault_free_run_counts_one_frame_per_member_and_no_recovery():
    r = faults._one({}, 0)
    assert r["exact"]
    assert r["frames"] == FAULT_FREE_FRAMES
    assert r["timer_retransmits"] == r["resends"] == r["duplicate"] == r["reemitted"] == 0


def test_lossy_run_recovers_bit_exact_at_a_cost():
    clean, lossy = faults._one({}, 3), faults._one({"loss": 0.05}, 3)
    assert lossy["exact"]
    assert lossy["timer_retransmits"] > 0 and lossy["frames"] > FAULT_FREE_FRAMES
    assert lossy["period"] > clean["period"]


def test_every_row_has_its_medians_range_and_notes(monkeypatch):
    calls = []

    def fake(options, seed):
        calls.append((tuple(sorted(options)), seed))
        period = 1.0 + seed
        return dict(
            period=period,
            frames=10 + seed,
            timer_retransmits=seed,
            resends=0,
            duplicate=0,
            reemitted=0,
            evictions=1,
            exact=True,
        )

    monkeypatch.setattr(faults, "_one", fake)
    out = faults.run()
    for row in faults.ROWS:
        assert out[f"faults_{row}_period_s"] == pytest.approx(3.0)  # median of 1..5
        assert (out[f"faults_{row}_period_min_s"], out[f"faults_{row}_period_max_s"]) == (1.0, 5.0)
        assert out[f"faults_{row}_evictions"] == len(faults.SEEDS)
        assert faults.RUNS[f"faults_{row}_period_s"] == len(faults.SEEDS)
    assert out["faults_exact"] is True
    assert len(calls) == (len(faults.ROWS) + len(faults.LONGER_TIMEOUT_ROWS)) * len(faults.SEEDS)
