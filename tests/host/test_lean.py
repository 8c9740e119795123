"""Root aggregation (issue #10): the cost by hand, the optimizer, the schedule file's lean section and the
co-simulation (bit-exact against the numpy reference, identical everywhere, its times against the model)."""

import json
import math

import numpy as np
import pytest

from wanreduce.host import lean, wan_lean
from wanreduce.host.baselines import all_baselines
from wanreduce.host.costmodel import CostModel, CostParams
from wanreduce.host.pacing import aggregator_slots
from wanreduce.host.reference import run_reference
from wanreduce.host.topology import from_rtt_matrix, load_topology
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import load_schedule, schedule_from_obj, write_schedule

# Three sites: one-way A-B 5 ms, A-C 10 ms, B-C 8 ms. Eccentricities 10, 8, 10 ms: B is the best root.
RTT = [[0, 10, 20], [10, 0, 16], [20, 16, 0]]


def _three(tensor, memory=64 << 20):
    topo = from_rtt_matrix(["A", "B", "C"], RTT)
    return CostModel(topo, CostParams(memory_bytes=memory, chunk_bytes=1024, tensor_bytes=tensor))


# Figures by hand for 1 KiB chunks at 100 Gbit/s and the 512-bit, 250 MHz datapath.
FRAME_S = (1024 + 98) / 12.5e9  # one frame on the wire
SITE = 12.5e9 * 1024 / 1122  # payload rate of an access link
DATAPATH = 1024 * 250e6 / math.ceil((1024 + 74) / 64)  # 18 beats per packet


def test_one_root_by_hand():
    model = _three(64 << 20)
    plan = lean.lean_plan(model, [[[0, 1, 2]]], jitter_s=0.5e-3, max_roots=1)
    (grp,) = plan.round_costs[0].groups
    (st,) = grp.stripes
    assert st.root == 1
    rate = DATAPATH / 3  # the datapath takes 3 streams; the access link (SITE) allows more
    assert st.rate_Bps == pytest.approx(rate, rel=1e-12)
    assert st.bound == "fpga"
    latency = 2 * 8e-3 + 2 * FRAME_S
    assert st.latency_s == pytest.approx(latency, rel=1e-12)
    assert plan.period_s == pytest.approx(latency + (64 * 1024 - 1) * 1024 / rate, rel=1e-12)
    # A is 5 ms from B, C 8 ms, B itself 0: each waits what it is closer than the farthest
    assert st.offsets_s == pytest.approx((3e-3, 8e-3, 0.0), abs=1e-12)
    # 1 ms jitter margin plus one frame: ceil(rate * life / chunk) + 1 slots of 3 member buffers and a
    # shadow RESULT, 1088 B each
    inflight = math.ceil(rate * (1e-3 + FRAME_S) / 1024) + 1
    assert st.inflight_chunks == inflight
    assert st.peak_slot_bytes == inflight * 4 * 1088


def test_stripes_by_hand():
    # 256 MiB: B alone would need 56 ms more; A joins (L = 20 ms), then C gets what is left of the link.
    model = _three(256 << 20)
    plan = lean.lean_plan(model, [[[0, 1, 2]]], jitter_s=0.5e-3)
    (grp,) = plan.round_costs[0].groups
    by_root = {s.root: s for s in grp.stripes}
    cap = DATAPATH / 3
    rates = {1: cap, 0: cap, 2: SITE - 2 * cap}
    lat = {1: 16e-3 + 2 * FRAME_S, 0: 20e-3 + 2 * FRAME_S, 2: 20e-3 + 2 * FRAME_S}
    # sum_q r_q (T - L_q) = tensor, every root busy by T
    t = (256 * 2**20 + sum(rates[q] * lat[q] for q in rates)) / sum(rates.values())
    assert set(by_root) == {0, 1, 2}
    for q, st in by_root.items():
        assert st.rate_Bps == pytest.approx(rates[q], rel=1e-9)
        # whole chunks: each stripe ends within two chunk intervals of T
        assert abs(st.time_s - t) <= 2 * st.interval_s
    assert by_root[2].bound == "site"
    assert sum(s.chunks for s in grp.stripes) == 256 * 1024
    assert [s.first_chunk for s in grp.stripes] == [
        0,
        grp.stripes[0].chunks,
        grp.stripes[0].chunks + grp.stripes[1].chunks,
    ]


def test_memory_bounds_the_rate():
    # 64 KiB holds S slots of 3 members (the gateware's rule, a power of two); a slot lives
    # 2J + one frame (one stripe), so a root moves S chunks per lifetime.
    model = _three(1 << 20, memory=64 << 10)
    slots = aggregator_slots(64 << 10, chunk_bytes=1024, members=3)
    assert 4 <= slots <= 16
    plan = lean.lean_plan(model, [[[0, 1, 2]]], jitter_s=0.5e-3, max_roots=1)
    (st,) = plan.round_costs[0].groups[0].stripes
    assert st.bound == "memory"
    assert st.rate_Bps == pytest.approx(slots * 1024 / (1e-3 + FRAME_S), rel=1e-12)
    assert plan.round_costs[0].bound == "memory"
    # no memory for one slot: the plan does not run
    tiny = lean.lean_plan(_three(1 << 20, memory=2048), [[[0, 1, 2]]])
    assert math.isinf(tiny.period_s) and tiny.round_costs[0].bound == "memory"


def test_more_roots_never_slower_and_root_beats_gather_on_chip():
    topo = load_topology("nine-city")
    model = CostModel(topo, CostParams(memory_bytes=42_000_000, tensor_bytes=1 << 30))
    times = [lean.lean_plan(model, [[list(range(9))]], max_roots=k).period_s for k in (1, 3, 9)]
    assert times[0] >= times[1] >= times[2]
    choice = lean.best_plan(model, time_limit_s=1)
    assert choice.mode == "root" and "root mode wins" in choice.reason
    best_baseline = min(b.time_s for b in all_baselines(model) if b.name != "colocated")
    assert best_baseline / choice.best.score_s >= 2.0
    for rc in choice.best.round_costs:
        for grp in rc.groups:
            assert sum(s.chunks for s in grp.stripes) == model.n_chunks
            for s in grp.stripes:
                # the root's own contribution leaves last; nobody is asked to send before time 0
                assert min(s.offsets_s) >= 0
                assert s.offsets_s[grp.members.index(s.root)] == pytest.approx(max(s.offsets_s), abs=1e-12)


def test_gather_can_win():
    # Ample memory and a small tensor on a link-only network: gather's one all-to-all multicast round
    # pays the WAN delay once; root mode pays it twice.
    model = _three(64 << 10, memory=1 << 30)
    choice = lean.best_plan(model, time_limit_s=0.5)
    assert choice.mode == "gather" and "gather mode wins" in choice.reason
    assert choice.best.score_s < choice.root.score_s


def _lean_schedule(model, rounds, jitter_s=lean.DEFAULT_JITTER_S):
    return lean.lean_to_schedule(lean.lean_plan(model, rounds, jitter_s=jitter_s), model)


def test_schedule_file_round_trip(tmp_path):
    model = _three(256 << 20)
    sched = _lean_schedule(model, [[[0, 1, 2]]])
    path = tmp_path / "lean.json"
    write_schedule(sched, path)
    obj = json.loads(path.read_text())
    assert obj["version"] == 3 and obj["lean"]["mode"] == "root"
    back = load_schedule(path)
    assert back.mode == "root" and back.lean == sched.lean and back.rounds == sched.rounds


def _obj():
    return {
        "version": 3,
        "sites": ["A", "B", "C"],
        "rounds": [{"groups": [[0, 1, 2]]}],
        "params": {"chunk_bytes": 1024, "tensor_bytes": 4096},
        "lean": {
            "mode": "root",
            "jitter_s": 0.0005,
            "rounds": [
                {
                    "start_s": 0.0,
                    "groups": [
                        {
                            "stripes": [
                                {
                                    "root": 1,
                                    "first_chunk": 0,
                                    "chunks": 3,
                                    "interval_s": 1e-6,
                                    "offsets_s": [0.003, 0.008, 0],
                                },
                                {
                                    "root": 0,
                                    "first_chunk": 3,
                                    "chunks": 1,
                                    "interval_s": 1e-6,
                                    "offsets_s": [0, 0, 0],
                                },
                            ]
                        }
                    ],
                }
            ],
        },
    }


def _bad(path, value):
    obj = _obj()
    *keys, last = path
    node = obj
    for k in keys:
        node = node[k]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return obj


STRIPE = ("lean", "rounds", 0, "groups", 0, "stripes", 0)


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("version",), 2, "needs schedule file version 3"),
        (("lean",), KeyError, "version must be one of 1, 2 for a file without a 'lean' section"),
        (("lean", "mode"), "gather", "lean.mode must be one of root"),
        (("lean", "jitter_s"), -1, "lean.jitter_s must be a non-negative"),
        (("lean", "rounds"), [], "one entry per round (1), got 0"),
        (("lean", "extra"), 1, "unknown key 'extra'"),
        ((*STRIPE, "root"), 5, "is not a member of round 0 group 0"),
        ((*STRIPE, "first_chunk"), 1, "first_chunk must be 0"),
        (("lean", "rounds", 0, "groups", 0, "stripes", 1, "chunks"), 2, "cover 5 chunks, but params give 4"),
        ((*STRIPE, "interval_s"), 0, "interval_s must be a positive"),
        ((*STRIPE, "offsets_s"), [0, 0], "offsets_s must list 3 non-negative seconds"),
        ((*STRIPE, "offsets_s"), [0, 0, float("nan")], "offsets_s must list 3"),
        ((*STRIPE, "root"), KeyError, "lacks 'root'"),
    ],
)
def test_bad_lean_sections_are_one_line_errors(path, value, message):
    obj = _bad(path, value)
    with pytest.raises(WanreduceError) as exc:
        schedule_from_obj(obj, source="s.json")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_good_lean_section_is_read():
    sched = schedule_from_obj(_obj())
    assert sched.mode == "root" and sched.lean["rounds"][0]["groups"][0]["stripes"][1]["root"] == 0
    gather = {"version": 2, "sites": ["A", "B"], "rounds": [{"groups": [[0, 1]]}]}
    assert schedule_from_obj(gather).lean is None and schedule_from_obj(gather).mode == "gather"


# -- co-simulation ---------------------------------------------------------------------------------
def _data_run(sched, topo, dtype, *, elements, chunk_elems, jitter_s, memory, seed=5):
    rng = np.random.default_rng(seed)
    tensors = [
        rng.standard_normal(elements).astype(np.float32) * 10 ** rng.uniform(-3, 3, elements)
        for _ in range(sched.n)
    ]
    run = wan_lean.simulate_lean(
        sched,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=chunk_elems,
        elements=elements,
        dtype=dtype,
        memory_bytes=memory,
        tensors=tensors,
        jitter_s=jitter_s,
        seed=seed,
    )
    return run, run_reference(sched, tensors, dtype=dtype)[-1]


@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_cosim_exact_and_identical_with_jitter(dtype):
    # Four cities in one group; the listed order is not rank order, and jitter reorders arrivals.
    topo = load_topology("nine-city", sites=["AMS", "NYC", "SIN", "TYO"])
    chunk_bytes, memory = 256, 16 << 10
    model = CostModel(topo, CostParams(memory_bytes=memory, chunk_bytes=chunk_bytes, tensor_bytes=32 << 10))
    sched = _lean_schedule(model, [[[2, 0, 3, 1]]])
    assert len(sched.lean["rounds"][0]["groups"][0]["stripes"]) > 1  # striped over several roots
    run, ref = _data_run(
        sched,
        topo,
        dtype,
        elements=(32 << 10) // dtype.size,
        chunk_elems=chunk_bytes // dtype.size,
        jitter_s=0.5e-3,
        memory=memory,
    )
    pairs = zip(run.values, ref, strict=True)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in pairs)
    assert len({v.tobytes() for v in run.values}) == 1
    drops = {
        q: {k: v for k, v in c.items() if v and k not in ("frames_in", "results", "bypassed")}
        for q, c in run.counters.items()
    }
    assert all(not d for d in drops.values()) and run.slot_conflicts == 0
    # Each site's in-line aggregator forwarded the other roots' RESULTs to its hosts, and only those.
    stripes = sched.lean["rounds"][0]["groups"][0]["stripes"]
    for q, c in run.counters.items():
        assert c["bypassed"] == sum(st["chunks"] for st in stripes if st["root"] != q)


def test_cosim_two_rounds_exact():
    # A 2x2 grid in root mode: the second round waits for the first round's RESULTs of each chunk.
    topo = load_topology("nine-city", sites=["AMS", "LON", "NYC", "LAX"])
    model = CostModel(topo, CostParams(memory_bytes=1 << 20, chunk_bytes=512, tensor_bytes=16 << 10))
    sched = _lean_schedule(model, [[[0, 1], [2, 3]], [[0, 2], [1, 3]]])
    run, ref = _data_run(
        sched, topo, DType.FP32, elements=4096, chunk_elems=128, jitter_s=0.2e-3, memory=1 << 20
    )
    assert all(np.array_equal(a, b) for a, b in zip(run.values, ref, strict=True))
    assert len({v.tobytes() for v in run.values}) == 1
    assert not np.isnan(run.result).any()


def test_cosim_time_and_peak_memory_against_the_model():
    topo = load_topology("nine-city")
    model = CostModel(topo, CostParams(memory_bytes=1 << 20, chunk_bytes=1024, tensor_bytes=2 << 20))
    plan = lean.lean_plan(model, [[list(range(9))]])
    sched = lean.lean_to_schedule(plan, model)
    assert len(plan.round_costs[0].groups[0].stripes) > 1
    run = wan_lean.simulate_lean(
        sched,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=(2 << 20) // 4,
        jitter_s=0.5e-3,
        seed=1,
    )
    assert run.slot_conflicts == 0
    assert run.finish_s == pytest.approx(plan.period_s, rel=0.10)
    assert run.finish_s >= plan.period_s * (1 - 1e-9)  # jitter only delays
    model_peak = {s.root: s.peak_slot_bytes for s in plan.round_costs[0].groups[0].stripes}
    for q, got in run.peak_slot_bytes.items():
        assert got <= 1.1 * model_peak[q]
    # ... and the margin is used: the busiest root holds more than half of it
    assert max(run.peak_slot_bytes.values()) > 0.5 * max(model_peak.values())


def test_cosim_without_jitter_matches_the_model_exactly():
    topo = load_topology("nine-city", sites=["FRA", "LON", "SEO", "TYO", "LAX"])
    model = CostModel(topo, CostParams(memory_bytes=4 << 20, chunk_bytes=1024, tensor_bytes=1 << 20))
    plan = lean.lean_plan(model, [[[0, 1, 2, 3, 4]]], jitter_s=0.5e-3)
    run = wan_lean.simulate_lean(
        lean.lean_to_schedule(plan, model),
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=1 << 18,
    )
    assert run.finish_s == pytest.approx(plan.period_s, rel=1e-9)


def test_cosim_grid_timing_matches_the_model():
    # Two groups per round, mirror images of each other, so their contributions to the same chunk index
    # arrive at their own roots at the same instants: each root must count only its own group. Without
    # jitter the co-simulation ends when the model says, with no slot conflict, every site in every round.
    rtt = [[0, 10, 50, 50], [10, 0, 50, 50], [50, 50, 0, 10], [50, 50, 10, 0]]
    topo = from_rtt_matrix(["A", "B", "C", "D"], rtt)
    model = CostModel(topo, CostParams(memory_bytes=64 << 10, chunk_bytes=1024, tensor_bytes=256 << 10))
    plan = lean.lean_plan(model, [[[0, 1], [2, 3]], [[0, 2], [1, 3]]])
    run = wan_lean.simulate_lean(
        lean.lean_to_schedule(plan, model),
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=1 << 16,
    )
    assert run.slot_conflicts == 0 and not np.isnan(run.result).any()
    assert run.finish_s == pytest.approx(plan.period_s, rel=1e-9)
    assert run.results_emitted == 2 * 2 * 256


def test_jitter_beyond_the_margin_is_seen():
    # Plan for no jitter (a slot lives a few frame times), then run with 0.5 ms: slots are reused early.
    topo = load_topology("nine-city", sites=["AMS", "NYC", "SIN"])
    model = CostModel(topo, CostParams(memory_bytes=64 << 10, chunk_bytes=1024, tensor_bytes=1 << 20))
    sched = _lean_schedule(model, [[[0, 1, 2]]], jitter_s=0.0)
    run = wan_lean.simulate_lean(
        sched,
        one_way_s=topo.one_way_s,
        site_Bps=12.5e9,
        chunk_elems=256,
        elements=1 << 18,
        jitter_s=0.5e-3,
        seed=3,
    )
    assert run.slot_conflicts > 0


def test_gather_schedule_is_refused():
    sched = schedule_from_obj({"version": 2, "sites": ["A", "B"], "rounds": [{"groups": [[0, 1]]}]})
    with pytest.raises(WanreduceError, match="no 'lean' section"):
        wan_lean.simulate_lean(
            sched, one_way_s=np.zeros((2, 2)), site_Bps=1e9, chunk_elems=4, elements=8, memory_bytes=1 << 20
        )


def test_emitter_applies_offsets_and_sends_to_the_roots():
    from wanreduce.host.emit import emit_sites
    from wanreduce.host.frames import parse_frame
    from wanreduce.host.golden import GoldenAggregator
    from wanreduce.host.packet import decode_headers
    from wanreduce.host.reference import ordered_sum
    from wanreduce.spec import addressing
    from wanreduce.spec.protocol import UDP_PORT

    topo = load_topology("nine-city", sites=["AMS", "FRA", "LON"])
    model = CostModel(topo, CostParams(memory_bytes=16 << 10, chunk_bytes=1024, tensor_bytes=32 << 10))
    sched = _lean_schedule(model, [[[1, 0, 2]]])
    stripes = sched.lean["rounds"][0]["groups"][0]["stripes"]
    assert len(stripes) > 1
    rng = np.random.default_rng(9)
    grads = [rng.standard_normal(8192).astype(np.float32) for _ in range(3)]
    ems = emit_sites(sched, grads, dtype=DType.FP32, one_way_s=topo.one_way_s, gbps=100.0, bank_slots=1)
    root_of = {
        c: st["root"] for st in stripes for c in range(st["first_chunk"], st["first_chunk"] + st["chunks"])
    }
    aggs = {
        st["root"]: GoldenAggregator(
            rank=st["root"], jobs={0: [(1, 0, 2)]}, slots=8, members=3, slot_bytes=1024
        )
        for st in stripes
    }
    arrivals = []
    for em in ems:
        first_sent = {}
        for t, frame in zip(em.times, em.frames, strict=True):
            payload, info, reason = parse_frame(frame, port=UDP_PORT)
            assert reason is None
            h = decode_headers(np.frombuffer(payload[:32], np.uint8).reshape(1, -1))[0]
            chunk = int(h["chunk"])
            q = root_of[chunk]
            assert ".".join(str(b) for b in info.dst_ip) == addressing.aggregator_ip(q)
            first_sent.setdefault(q, t)
            arrivals.append((t + topo.one_way_s[em.rank, q], q, payload))
        for st in stripes:
            # the stripe's first chunk leaves at the member's offset (its link is idle then)
            k = sched.rounds[0][0].index(em.rank)
            assert first_sent[st["root"]] == pytest.approx(st["offsets_s"][k], abs=1e-7)
    sums = {}
    for _, q, payload in sorted(arrivals, key=lambda a: a[0]):
        for out in aggs[q].feed_payload(payload):
            h = decode_headers(np.frombuffer(out[:32], np.uint8).reshape(1, -1))[0]
            sums[int(h["chunk"])] = np.frombuffer(out[32:], np.float32)
    assert sorted(sums) == list(range(32))
    want = ordered_sum([grads[1], grads[0], grads[2]], DType.FP32)
    assert np.array_equal(np.concatenate([sums[c] for c in range(32)]), want)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(DType))
def test_nine_cities_with_data_and_jitter(dtype):
    # Every city, striped over the roots the optimizer picks at 256 KiB of memory, 0.5 ms of jitter.
    topo = load_topology("nine-city")
    model = CostModel(topo, CostParams(memory_bytes=256 << 10, chunk_bytes=1024, tensor_bytes=512 << 10))
    plan = lean.lean_plan(model, [[[4, 0, 2, 5, 3, 7, 8, 6, 1]]])
    sched = lean.lean_to_schedule(plan, model)
    run, ref = _data_run(
        sched,
        topo,
        dtype,
        elements=(512 << 10) // dtype.size,
        chunk_elems=1024 // dtype.size,
        jitter_s=0.5e-3,
        memory=256 << 10,
    )
    pairs = zip(run.values, ref, strict=True)
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in pairs)
    assert len({v.tobytes() for v in run.values}) == 1 and run.slot_conflicts == 0
    assert run.finish_s == pytest.approx(plan.period_s, rel=0.10)


def test_group_of_one_waits():
    # A grid with a hole: a group of one in some round sends nothing and keeps its value.
    topo = load_topology("nine-city", sites=["AMS", "FRA", "LON", "NYC", "LAX"])
    model = CostModel(topo, CostParams(memory_bytes=1 << 20, chunk_bytes=512, tensor_bytes=8 << 10))
    rounds = [[[0, 1], [2, 3], [4]], [[0, 2, 4], [1, 3]]]
    sched = _lean_schedule(model, rounds)
    assert sched.lean["rounds"][0]["groups"][2]["stripes"] == []
    run, ref = _data_run(
        sched, topo, DType.FP32, elements=2048, chunk_elems=128, jitter_s=0.0, memory=1 << 20
    )
    assert all(np.array_equal(a, b) for a, b in zip(run.values, ref, strict=True))
    assert np.isnan(run.send[4, 0]).all() and not np.isnan(run.send[4, 1]).any()
    from wanreduce.host.emit import emit_sites

    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(2048).astype(np.float32) for _ in range(5)]
    (em,) = emit_sites(
        sched, grads, ranks=[4], dtype=DType.FP32, one_way_s=topo.one_way_s, gbps=100.0, bank_slots=1
    )
    assert em.rounds_sent == 1 and len(em.frames) == 16
