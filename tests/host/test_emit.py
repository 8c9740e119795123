"""The emitter: gradients files, the WAN check, and rank R's CONTRIB frames read back by an independent
decoder and checked against a plain model of the schedule and the self-clocked window's data rule."""

import struct

import ml_dtypes
import numpy as np
import pytest

from tests.support.wire import decode_frame, decode_payload
from wanreduce.host.emit import bank_slots_of, emit_site, emit_sites, frame_seconds, load_grads, topology_for
from wanreduce.host.topology import load_topology
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import DType
from wanreduce.spec.schedfile import schedule_from_obj

NINE = ["AMS", "BAR", "FRA", "LAX", "LON", "NYC", "SEO", "SIN", "TYO"]


def nine_city(rounds, **params):
    return schedule_from_obj(
        {
            "version": 1,
            "sites": NINE,
            "rounds": [{"groups": g} for g in rounds],
            "params": {"memory_bytes": 1 << 14, "chunk_bytes": 64, **params},
        }
    )


ROTATING = nine_city([[[0, 2, 4], [1, 3, 5], [6, 7, 8]], [[0, 1, 6], [2, 3, 7], [4, 5, 8]]])


def grads_for(n=9, elems=40, seed=3, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(elems).astype(dtype) for _ in range(n)]


def plain_model(schedule, grads, rounds):
    """What every site holds before each round, fp32, rank-order sums (the groups here are sorted)."""
    vals = [np.asarray(g, np.float32).copy() for g in grads]
    before = [list(vals)]
    for r in range(rounds):
        new = list(vals)
        for grp in schedule.rounds[r % schedule.period]:
            acc = vals[grp[0]].copy()
            for m in grp[1:]:
                acc = np.float32(acc + vals[m])
            avg = (acc / np.float32(len(grp))).astype(np.float32)
            for m in grp:
                new[m] = avg
        vals = new
        before.append(list(vals))
    return before


def test_grads_by_site_name_or_rank(tmp_path):
    g = grads_for()
    path = tmp_path / "g.npz"
    arrays = {NINE[i] if i % 2 else f"rank{i}": g[i] for i in range(9)}
    np.savez(path, **arrays)
    got = load_grads(path, ROTATING)
    assert all(np.array_equal(a, b) for a, b in zip(got, g, strict=True))


def test_grads_bfloat16_survives_npz(tmp_path):
    g = grads_for(dtype=ml_dtypes.bfloat16)
    path = tmp_path / "g.npz"
    np.savez(path, **{f"rank{i}": a for i, a in enumerate(g)})
    got = load_grads(path, ROTATING)
    assert got[0].dtype == ml_dtypes.bfloat16
    assert np.array_equal(got[5].view(np.uint16), g[5].view(np.uint16))


def test_grads_float64_are_rounded_to_the_wire_dtype_once(tmp_path):
    # numpy's default dtype is accepted, as `pack` accepts it; the emitter rounds it straight to fp16
    rng = np.random.default_rng(3)
    g64 = [rng.standard_normal(40) for _ in range(9)]
    path = tmp_path / "g.npz"
    np.savez(path, **{f"rank{i}": a for i, a in enumerate(g64)})
    got = load_grads(path, ROTATING)
    assert got[4].dtype == np.float64 and np.array_equal(got[4], g64[4])
    em = emit_site(
        ROTATING,
        got,
        rank=4,
        dtype=DType.FP16,
        one_way_s=load_topology("nine-city").one_way_s,
        gbps=100,
        bank_slots=bank_slots_of(ROTATING),
        chunk_elems=16,
        rounds=1,
    )
    values = []
    for frame in sorted(em.frames, key=lambda f: decode_payload(decode_frame(f)[3])[0]["chunk"]):
        values += decode_payload(decode_frame(frame)[3])[1]
    assert np.array_equal(np.array(values, np.float16), g64[4].astype(np.float16))


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({f"rank{i}": np.zeros(4, np.float32) for i in range(8)}, "no gradients for TYO"),
        (
            {**{f"rank{i}": np.zeros(4, np.float32) for i in range(9)}, "PAR": np.zeros(4, np.float32)},
            "'PAR' is neither a site",
        ),
        (
            {**{f"rank{i}": np.zeros(4, np.float32) for i in range(9)}, "AMS": np.zeros(4, np.float32)},
            "has two arrays",
        ),
        (
            {**{f"rank{i}": np.zeros(4, np.float32) for i in range(9)}, "rank3": np.zeros(5, np.float32)},
            "has shape (5,)",
        ),
        (
            {**{f"rank{i}": np.zeros(4, np.float32) for i in range(9)}, "rank2": np.zeros(4, np.int32)},
            "is int32",
        ),
        ({f"rank{i}": np.zeros(4, np.float32) for i in range(10)}, "'rank9' is neither"),
    ],
)
def test_grads_refused_in_one_line(tmp_path, arrays, message):
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    with pytest.raises(WanreduceError, match=message.replace("(", r"\(").replace(")", r"\)")) as exc:
        load_grads(path, ROTATING)
    assert "\n" not in str(exc.value)


def test_grads_not_an_npz(tmp_path):
    path = tmp_path / "g.npz"
    path.write_bytes(b"hello")
    with pytest.raises(WanreduceError, match="not a readable .npz"):
        load_grads(path, ROTATING)
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(WanreduceError, match="single array"):
        load_grads(tmp_path / "one.npy", ROTATING)


def test_topology_must_match_the_schedule():
    assert topology_for("nine-city", tuple(NINE)).sites == tuple(NINE)
    sub = topology_for("nine-city", ("TYO", "AMS", "NYC"))
    full = load_topology("nine-city")
    assert sub.one_way_s[0, 1] == full.one_way_s[NINE.index("TYO"), NINE.index("AMS")]
    with pytest.raises(WanreduceError, match="another order"):
        topology_for("nine-city", tuple(reversed(NINE)))
    with pytest.raises(WanreduceError, match="PAR are not in topology"):
        topology_for("nine-city", ("AMS", "PAR"))


@pytest.mark.parametrize("rank", [0, 4, 8])
def test_frames_carry_the_models_values_to_the_groups_address(rank):
    g = grads_for()
    topo = load_topology("nine-city")
    rounds = 3
    em = emit_site(
        ROTATING,
        g,
        rank=rank,
        dtype=DType.FP32,
        one_way_s=topo.one_way_s,
        gbps=100,
        bank_slots=bank_slots_of(ROTATING),
        rounds=rounds,
        job=5,
    )
    before = plain_model(ROTATING, g, rounds)
    assert em.n_chunks == 3 and len(em.frames) == rounds * 3  # 40 fp32 in chunks of 16
    got = {}
    for frame in em.frames:
        ethertype, proto, dport, payload = decode_frame(frame)
        h, elems = decode_payload(payload)
        assert (ethertype, proto, dport, h["kind"], h["src"], h["job"]) == (0x0800, 17, 47000, 0, rank, 5)
        assert h["bitmap"] == 1 << rank
        gid = next(i for i, grp in enumerate(ROTATING.rounds[h["round"] % 2]) if rank in grp)
        assert h["group"] == gid
        assert frame[30:34] == bytes([239, 88 + 5, h["round"] % 2, gid])  # IPv4 destination
        assert frame[0:6] == bytes([1, 0, 0x5E, (88 + 5) & 0x7F, h["round"] % 2, gid])
        assert frame[26:30] == bytes([10, 87, 82, rank]) and frame[6:12] == bytes([2, 0x57, 0x52, 0, 0, rank])
        assert struct.unpack(">H", frame[34:36])[0] == 47000
        got.setdefault(h["round"], {})[h["chunk"]] = (elems, h["flags"])
    for r in range(rounds):
        chunks = got[r]
        assert sorted(chunks) == [0, 1, 2] and chunks[2][1] == 1 and chunks[0][1] == 0  # LAST on the last
        sent = np.array(chunks[0][0] + chunks[1][0] + chunks[2][0], np.float32)
        assert np.array_equal(sent.view(np.uint32), before[r][rank].view(np.uint32))


def test_send_times_wait_for_the_previous_round():
    """Self-clocked: a chunk of round r leaves only after every member of the site's round r - 1 group sent
    that chunk and it crossed the WAN to the site (its RESULT cannot be in earlier)."""
    g = grads_for(elems=200)
    topo = load_topology("nine-city")
    ems = [
        emit_site(
            ROTATING, g, rank=r, dtype=DType.FP16, one_way_s=topo.one_way_s, gbps=10, bank_slots=2, rounds=3
        )
        for r in range(9)
    ]
    frame_s = frame_seconds(32, DType.FP16, 10)
    sent = {}
    for em in ems:
        assert np.all(np.diff(em.times) >= 0) and em.times[0] == 0
        for t, frame in zip(em.times, em.frames, strict=True):
            h, _ = decode_payload(decode_frame(frame)[3])
            sent[em.rank, h["round"], h["chunk"]] = t
    for (rank, r, c), t in sent.items():
        if r == 0:
            continue
        grp = next(grp for grp in ROTATING.rounds[(r - 1) % 2] if rank in grp)
        data_in = max(sent[m, r - 1, c] + frame_s + topo.one_way_s[m, rank] for m in grp)
        assert t >= data_in - 1e-12, (rank, r, c)
    # and a site's link carries one frame at a time
    for em in ems:
        assert np.all(np.diff(em.times) >= frame_s - 1e-15)


def test_a_waiting_round_sends_nothing():
    sched = nine_city([[[0, 1, 2]], [[3, 4, 5, 6, 7, 8], [0, 1]]])
    g = grads_for(elems=16)
    topo = load_topology("nine-city")
    em = emit_site(
        sched, g, rank=2, dtype=DType.FP32, one_way_s=topo.one_way_s, gbps=100, bank_slots=4, rounds=4
    )
    rounds = sorted(decode_payload(decode_frame(f)[3])[0]["round"] for f in em.frames)
    assert rounds == [0, 2] and em.rounds_sent == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rank=9), "rank 9 is outside 0..8"),
        (dict(rounds=0), "emit at least one"),
        (dict(chunk_elems=0), "outside 1..65535"),
    ],
)
def test_bad_emit_arguments(kwargs, message):
    topo = load_topology("nine-city")
    args = dict(rank=0, dtype=DType.FP32, one_way_s=topo.one_way_s, gbps=100, bank_slots=4) | kwargs
    with pytest.raises(WanreduceError, match=message):
        emit_site(ROTATING, grads_for(), **args)


def test_gradients_too_large_for_the_wire_dtype():
    g = grads_for()
    g[7] = g[7].copy()
    g[7][3] = 1e6
    topo = load_topology("nine-city")
    with pytest.raises(WanreduceError, match="SIN's gradient element 3 is too large for fp16"):
        emit_site(ROTATING, g, rank=0, dtype=DType.FP16, one_way_s=topo.one_way_s, gbps=100, bank_slots=4)


def test_a_slow_member_link_delays_the_next_round():
    sched = nine_city([[[0, 1, 2]], [[0, 1, 2]]])
    g = grads_for(elems=64)
    topo = load_topology("nine-city")

    def round1_start(gbps):
        em = emit_site(
            sched, g, rank=0, dtype=DType.FP32, one_way_s=topo.one_way_s, gbps=gbps, bank_slots=4, rounds=2
        )
        return min(
            t
            for t, f in zip(em.times, em.frames, strict=True)
            if decode_payload(decode_frame(f)[3])[0]["round"] == 1
        )

    fast = round1_start(100)
    slow = round1_start([100, 0.01] + [100] * 7)
    # AMS's chunk 0 of round 1 waits for its RESULT of chunk 0 of round 0: the last member's frame (16 fp32
    # and 98 bytes of headers, FCS, preamble and gap) in at AMS; BAR's now takes 1296 bits / 10 Mbit/s
    bits = (16 * 4 + 98) * 8
    ow = topo.one_way_s[:3, 0]
    in_fast = max(bits / 100e9 + ow)
    in_slow = max(bits / 100e9 + ow[0], bits / 10e6 + ow[1], bits / 100e9 + ow[2])
    assert slow - fast == pytest.approx(in_slow - in_fast, abs=1e-9)
    assert slow - fast > 1e-4


def test_all_sites_at_once_equal_one_at_a_time():
    g = grads_for(elems=50)
    topo = load_topology("nine-city")
    kw = dict(dtype=DType.BF16, one_way_s=topo.one_way_s, gbps=40, bank_slots=2, rounds=3, job=2)
    together = emit_sites(ROTATING, g, ranks=[7, 1], **kw)
    for em in together:
        alone = emit_site(ROTATING, g, rank=em.rank, **kw)
        assert em.frames == alone.frames and np.array_equal(em.times, alone.times)
    with pytest.raises(WanreduceError, match="rank 9 is outside"):
        emit_sites(ROTATING, g, ranks=[0, 9], **kw)
