"""Faults on the WAN (issue #12), on the golden model: whatever is lost, copied, reordered or corrupted, every
site ends with the fault-free bits, every aggregator completes each of its chunks exactly once, and a dead
site stops the run with an error naming it and the round.

The set-up is the RTL co-simulation's (three sites, two rounds a period, four rounds, banks of 4 slots, 24
chunks of 1 KiB), with probabilities high enough that every fault happens many times in one run.
"""

import numpy as np
import pytest

from wanreduce.host import wan
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import load_topology
from wanreduce.spec.protocol import Drop
from wanreduce.spec.schedfile import schedule_from_obj

SCHEDULE = schedule_from_obj(
    {"version": 2, "sites": ["AMS", "NYC", "SIN"], "rounds": [{"groups": [[1, 0]]}, {"groups": [[2, 0, 1]]}]}
)
TOPO = load_topology("nine-city", sites=list(SCHEDULE.sites))
ELEMENTS, CHUNK, ROUNDS = 24 * 256, 256, 4
# Chunks each site's aggregator completes: site 2 (SIN) waits in rounds 0 and 2.
CHUNKS_DONE = [4 * 24, 4 * 24, 2 * 24]
FRAME_DROPS = [d.counter for d in Drop if int(d) <= 20]


def tensors(seed=11):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(ELEMENTS).astype(np.float32) for _ in range(3)]


def run(faults, data=None):
    data = tensors() if data is None else data
    sites = [
        wan.GoldenSite(SCHEDULE, s, slots=256, members=3, slot_bytes=1024, bank_bits=2) for s in range(3)
    ]
    return wan.simulate(
        SCHEDULE,
        one_way_s=TOPO.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=CHUNK,
        elements=ELEMENTS,
        bank_slots=4,
        sites=sites,
        tensors=data,
        rounds=ROUNDS,
        faults=faults,
    )


def total(r, name):
    return sum(c[name] for c in r.counters)


def assert_exact(r, data=None):
    """Bit for bit the numpy model of the fault-free schedule, and every chunk completed exactly once."""
    ref = run_reference(SCHEDULE, tensors() if data is None else data, rounds=ROUNDS)[-1]
    for s, (got, want) in enumerate(zip(r.values, ref, strict=True)):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"site {s} differs"
    assert [c["results"] for c in r.counters] == CHUNKS_DONE


def test_recovery_on_without_faults_changes_nothing():
    plain, armed = run(None), run(wan.Faults(seed=1))
    assert_exact(armed)
    assert armed.finish_s == plain.finish_s and armed.recovery == wan.Recovery()
    assert all(v == 0 for c in armed.counters for k, v in c.items() if k not in ("frames_in", "results"))


def test_loss_contributions_and_results():
    r = run(wan.Faults(loss=0.05, seed=2))
    assert_exact(r)
    assert r.recovery.lost > 10 and r.recovery.results_lost > 2 and r.recovery.retransmits > 0
    # A lost RESULT comes back from the shadow: the site's retransmission makes its aggregator send it again.
    assert total(r, "results_reemitted") > 0


def test_duplication():
    r = run(wan.Faults(dup=0.1, seed=3))
    assert_exact(r)
    assert r.recovery.duplicated > 50 and r.recovery.results_duplicated > 5
    # Copies are dropped, never added: while the chunk is live (rank bit set) or after (shadow).
    assert total(r, "duplicate") >= r.recovery.duplicated // 2 and total(r, "results_reemitted") > 0
    assert r.recovery.results_ignored > 0


def test_reordering_within_a_round_trip():
    r = run(wan.Faults(reorder=True, seed=4))
    assert_exact(r)
    late = total(r, "duplicate") + total(r, "stale") + total(r, "ahead_of_window")
    assert r.recovery.lost == 0 and late > 0
    assert r.finish_s > run(None).finish_s


def test_corruption_is_dropped_by_checksums_and_header_rules():
    r = run(wan.Faults(corrupt=0.03, seed=5))
    assert_exact(r)
    dropped = sum(total(r, k) for k in FRAME_DROPS)
    # A flipped bit in the MAC addresses is harmless and passes; every other one is caught.
    assert r.recovery.corrupted > 20 and r.recovery.corrupted * 0.6 < dropped <= r.recovery.corrupted
    assert total(r, "bad_udp_checksum") > 0 and r.recovery.retransmits > 0


@pytest.mark.parametrize("seed", [6, 7])
def test_all_faults_together(seed):
    r = run(wan.Faults(loss=0.01, dup=0.01, reorder=True, corrupt=0.001, seed=seed))
    assert_exact(r)
    assert r.recovery.lost + r.recovery.duplicated > 0


def test_seeded_runs_repeat():
    f = wan.Faults(loss=0.02, dup=0.02, reorder=True, corrupt=0.01, seed=8)
    a, b = run(f), run(f)
    assert a.recovery == b.recovery and a.counters == b.counters and a.finish_s == b.finish_s


def test_dead_site_stops_the_run_naming_site_and_round():
    # NYC stops at round 2 (its pair with AMS): AMS times out and its aggregator lacks NYC's contribution.
    with pytest.raises(wan.SiteTimeout) as e:
        run(wan.Faults(kill=(1, 2), seed=9))
    assert e.value.round == 2 and e.value.missing == (1,) and e.value.site == 0
    assert str(e.value).startswith("round 2: site NYC (rank 1) missing") and "\n" not in str(e.value)
    # With loss as well the diagnosis is the same: retransmissions recover everyone else.
    with pytest.raises(wan.SiteTimeout) as e:
        run(wan.Faults(kill=(2, 3), loss=0.02, seed=10))
    assert e.value.round == 3 and e.value.missing == (2,) and "SIN" in str(e.value)


def test_fault_arguments_are_checked():
    with pytest.raises(ValueError, match="loss probability"):
        wan.Faults(loss=1.5)
    with pytest.raises(ValueError, match="needs a run with data"):
        wan.simulate(
            SCHEDULE,
            one_way_s=TOPO.one_way_s,
            site_Bps=12.5e9,
            chunk_elems=CHUNK,
            elements=ELEMENTS,
            bank_slots=4,
            faults=wan.Faults(),
        )


def test_nine_cities_grid_under_heavy_faults():
    # The optimizer's 3 x 3 grid for nine cities, banks of 4 slots: six groups over two rounds, each lane
    # reused six times a round, at five times the fault rates.
    topo = load_topology("nine-city")
    schedule = schedule_from_obj(
        {
            "version": 2,
            "sites": list(topo.sites),
            "rounds": [
                {"groups": [[8, 2, 5], [7, 6, 4], [0, 3, 1]]},
                {"groups": [[8, 7, 0], [2, 6, 3], [5, 4, 1]]},
            ],
        }
    )
    rng = np.random.default_rng(12)
    data = [rng.standard_normal(ELEMENTS).astype(np.float32) for _ in range(9)]
    sites = [wan.GoldenSite(schedule, s, slots=8, members=3, slot_bytes=1024, bank_bits=2) for s in range(9)]
    r = wan.simulate(
        schedule,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=CHUNK,
        elements=ELEMENTS,
        bank_slots=4,
        sites=sites,
        tensors=data,
        faults=wan.Faults(loss=0.05, dup=0.05, reorder=True, corrupt=0.005, seed=13),
    )
    ref = run_reference(schedule, data)[-1]
    for s, (got, want) in enumerate(zip(r.values, ref, strict=True)):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"site {s} differs"
    assert [c["results"] for c in r.counters] == [2 * 24] * 9
    assert r.recovery.lost > 50 and total(r, "results_reemitted") > 0
