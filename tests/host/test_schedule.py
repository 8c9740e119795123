import itertools
import json
import math

import numpy as np
import pytest

from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.schedule import (
    consensus,
    evaluate,
    exhaustive,
    expected_bitmap,
    grid_rounds,
    load_schedule,
    mixing_matrix,
    optimize,
    plan_to_schedule,
    shapes,
    write_schedule,
)
from wanreduce.host.topology import load_topology, parse_topology_csv, synthetic_regions
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.schedfile import Schedule, parse_schedule


def gossip(values, rounds):
    """Reference: every member of a group takes the group's mean, round after round (plain Python)."""
    v = [float(x) for x in values]
    for groups in rounds:
        new = list(v)
        for g in groups:
            mean = sum(v[i] for i in g) / len(g)
            for i in g:
                new[i] = mean
        v = new
    return v


def assert_exact(n, rounds):
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    out = gossip(x, rounds)
    assert max(abs(o - x.mean()) for o in out) < 1e-12
    assert consensus(n, rounds)[0]


@pytest.mark.parametrize("shape", [(3, 3), (2, 3), (2, 2, 2), (4, 4), (2, 3, 4), (5,)])
def test_every_grid_placement_reaches_exact_consensus(shape):
    n = math.prod(shape)
    rng = np.random.default_rng(1)
    for _ in range(5):
        rounds = grid_rounds(shape, rng.permutation(n))
        # each round partitions all sites into groups of its axis size
        for r, groups in enumerate(rounds):
            assert sorted(s for g in groups for s in g) == list(range(n))
            assert {len(g) for g in groups} == {shape[r]}
        assert_exact(n, rounds)


def test_mixing_matrix_and_inexact_schedules():
    w = mixing_matrix(4, [[0, 1, 2]])
    assert np.allclose(w.sum(axis=0), 1) and np.allclose(w.sum(axis=1), 1) and np.allclose(w, w.T)
    assert w[3, 3] == 1 and w[0, 2] == pytest.approx(1 / 3)
    # a pair that never meets the third site never converges
    exact, sigma2, periods = consensus(3, [[[0, 1]]])
    assert not exact and sigma2 == pytest.approx(1) and math.isinf(periods)
    # alternating pairs on a path of 3: sigma2 is the worst one-period shrink of the disagreement;
    # build the period's matrix from plain gossip on unit vectors, independently of mixing_matrix
    rounds = [[[0, 1]], [[1, 2]]]
    exact, sigma2, periods = consensus(3, rounds, epsilon=1e-6)
    assert not exact and 0 < sigma2 < 1
    period = np.array([gossip(np.eye(3)[k], rounds) for k in range(3)]).T
    assert np.linalg.svd(period - 1 / 3, compute_uv=False)[0] == pytest.approx(sigma2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.normal(size=3)
        y = np.array(gossip(x, rounds))
        assert np.linalg.norm(y - y.mean()) <= sigma2 * np.linalg.norm(x - x.mean()) + 1e-12
    assert sigma2**periods <= 1e-6 < sigma2 ** (periods - 1)


def test_shapes():
    assert set(shapes(9, holes=False)) == {(9,), (3, 3)}
    assert set(shapes(12, holes=False)) == {(12,), (2, 6), (3, 4), (2, 2, 3)}
    assert shapes(9, group_size=3) == [(3, 3)]
    assert shapes(10, group_size=3) == [(3, 3, 3)]
    assert all(math.prod(s) >= 7 for s in shapes(7))
    with pytest.raises(WanreduceError, match="group size"):
        shapes(9, group_size=1)


def _partitions_into_pairs(items):
    if not items:
        yield []
        return
    a = items[0]
    for i in range(1, len(items)):
        rest = items[1:i] + items[i + 1 :]
        for p in _partitions_into_pairs(rest):
            yield [[a, items[i]], *p]


def test_exhaustive_matches_an_independent_enumeration():
    # 4 sites in a 2x2 grid: round 0 any pairing, round 1 one of the two pairings orthogonal to it.
    rng = np.random.default_rng(2)
    rtt = rng.uniform(5, 150, (4, 4))
    text = "City1,City2,Latency\n" + "\n".join(
        f"S{i},S{j},{rtt[i, j]:.2f}" for i in range(4) for j in range(i + 1, 4)
    )
    m = CostModel(parse_topology_csv(text), CostParams(memory_bytes=200_000))
    best = math.inf
    for r0 in _partitions_into_pairs([0, 1, 2, 3]):
        for r1 in _partitions_into_pairs([0, 1, 2, 3]):
            if any(sorted(a) == sorted(b) for a in r0 for b in r1):
                continue  # not orthogonal
            best = min(best, m.period([r0, r1]).period_s)
    assert exhaustive(m, (2, 2)).score_s == pytest.approx(best)


@pytest.mark.parametrize("memory", [256 << 10, 64 << 20, 1 << 30])
def test_heuristic_finds_the_exhaustive_optimum_on_nine_cities(memory):
    m = CostModel(load_topology(), CostParams(memory_bytes=memory))
    _, per = optimize(m, time_limit_s=3, seed=1)
    ex = exhaustive(m, (3, 3))
    assert per[(3, 3)].score_s <= ex.score_s * 1.01
    assert per[(3, 3)].score_s >= ex.score_s * (1 - 1e-12)


def test_best_3x3_is_not_one_group_per_continent():
    m = CostModel(load_topology(), CostParams(memory_bytes=1 << 20))
    ex = exhaustive(m, (3, 3))
    continents = [{"AMS", "FRA", "LON"}, {"NYC", "LAX", "BAR"}, {"SEO", "SIN", "TYO"}]
    by_continent = [
        [sorted(m.topology.index(c) for c in cont) for cont in continents],
        [
            [m.topology.index(c) for c in row]
            for row in (("AMS", "NYC", "SEO"), ("FRA", "LAX", "SIN"), ("LON", "BAR", "TYO"))
        ],
    ]
    naive = evaluate(m, by_continent).score_s
    assert ex.score_s < naive
    groups = [set(m.topology.sites[i] for i in g) for rnd in ex.rounds for g in rnd]
    assert all(g not in continents for g in groups)


def test_optimize_on_a_prime_and_a_synthetic_network():
    topo = load_topology("nine-city", sites=["AMS", "BAR", "FRA", "LAX", "LON", "NYC", "TYO"])
    best, per = optimize(CostModel(topo, CostParams(memory_bytes=1 << 20)), time_limit_s=2)
    assert (7,) in per and any(math.prod(s) > 7 for s in per)
    assert best.score_s == min(p.score_s for p in per.values())
    # 16 sites in 4 regions: the chosen schedule is exact and no worse than all-to-all
    m = CostModel(synthetic_regions(16, regions=4, seed=1), CostParams(memory_bytes=1 << 20))
    best, per = optimize(m, time_limit_s=2)
    assert best.exact and best.score_s <= per[(16,)].score_s
    assert_exact(16, best.rounds)


def test_emitted_schedule_file_is_exact_and_consistent(tmp_path):
    m = CostModel(load_topology(), CostParams(memory_bytes=1 << 20))
    best, _ = optimize(m, time_limit_s=2)
    path = tmp_path / "s.json"
    write_schedule(plan_to_schedule(best, m), path)
    sched = load_schedule(path)
    assert sched.sites == m.topology.sites
    assert sched.metrics["exact_consensus"] is True
    assert sched.metrics["period_s"] == pytest.approx(sum(sched.metrics["round_s"]))
    assert sched.params["memory_bytes"] == 1 << 20
    assert_exact(sched.n, sched.rounds)
    # the round times in the file are what each round adds to the model's period of the file's groups
    finish = m.period([list(g) for g in sched.rounds]).finish_s
    assert sched.metrics["finish_s"] == pytest.approx(list(finish))
    steps = [b - a for a, b in zip(finish, finish[1:], strict=False)]
    assert sched.metrics["round_s"] == pytest.approx([finish[0], *steps])


def test_expected_bitmap_on_protocol_example():
    sched = parse_schedule(
        json.dumps(
            {
                "version": 1,
                "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO"],
                "rounds": [{"groups": [[0, 2, 4], [1, 3, 5], [6, 7, 8]]}, {"groups": [[0, 1, 6], [2, 3, 7]]}],
            }
        )
    )
    assert expected_bitmap(sched, 0, 0) == 0b10101
    assert expected_bitmap(sched, 0, 3) == (1 << 0) | (1 << 1) | (1 << 6)  # round 3 = round 1
    assert expected_bitmap(sched, 8, 1) == 0  # rank 8 waits in round 1
    for rank, r in itertools.product(range(9), range(4)):
        bm = expected_bitmap(sched, rank, r)
        assert bm == 0 or bm >> rank & 1
    with pytest.raises(WanreduceError):
        expected_bitmap(sched, 9, 0)


BAD_FILES = [
    ("[]", "JSON object"),
    ("{", "not valid JSON"),
    ('{"version": 3, "sites": ["A", "B"], "rounds": [{"groups": [[0, 1]]}]}', "version must be one of 1, 2"),
    (
        '{"version": true, "sites": ["A", "B"], "rounds": [{"groups": [[0, 1]]}]}',
        "version must be one of 1, 2",
    ),
    ('{"version": 1, "sites": [], "rounds": [{"groups": [[0]]}]}', "sites"),
    ('{"version": 1, "sites": ["A", "A"], "rounds": [{"groups": [[0, 1]]}]}', "twice"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": []}', "rounds"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[0, 2]]}]}', "outside 0..1"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[0, -1]]}]}', "outside 0..1"),
    ('{"version": 1, "sites": ["A", "B", "C"], "rounds": [{"groups": [[0, 1], [1, 2]]}]}', "disjoint"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[0, 0]]}]}', "twice"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[0, true]]}]}', "not a rank"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[]]}]}', "non-empty"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [[0, 1]]}', "groups"),
    ('{"version": 1, "sites": ["A", "B"], "rounds": [{"groups": [[0, 1]]}], "metrics": 3}', "metrics"),
]


@pytest.mark.parametrize("text,message", BAD_FILES)
def test_bad_schedule_files(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(WanreduceError, match=message) as info:
        load_schedule(path)
    assert "\n" not in str(info.value)


def test_too_many_ranks_for_v1(tmp_path):
    sites = [f"S{i}" for i in range(65)]
    with pytest.raises(WanreduceError, match="at most 64"):
        write_schedule(Schedule(sites=tuple(sites), rounds=([[0, 1]],)), tmp_path / "x.json")
    with pytest.raises(WanreduceError, match="missing.json: no such file"):
        load_schedule(tmp_path / "missing.json")
