import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.support.wire import decode_frame, decode_payload
from wanreduce.host.frames import build_frame
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.host.packet import pack_tensor
from wanreduce.host.protocol import bits_dtype
from wanreduce.spec.protocol import DType

NP = {DType.FP32: np.float32, DType.FP16: np.float16, DType.BF16: ml_dtypes.bfloat16}


def reference_sum(tensors, dtype):
    """Rank-order sum, one rounding per addition: the exact sum of two p-bit floats fits a float64, and
    rounding it once to the target (via float32 for bf16, which is innocuous since 24 >= 2*8+2) is IEEE."""
    acc = tensors[0].astype(NP[dtype])
    for t in tensors[1:]:
        exact = acc.astype(np.float64) + t.astype(NP[dtype]).astype(np.float64)
        acc = exact.astype(np.float32).astype(NP[dtype]) if dtype == DType.BF16 else exact.astype(NP[dtype])
    return acc


def contributions(ranks, dtype, n=40, chunk=8, *, job=0, round_=0, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    tensors = {r: (rng.standard_normal(n) * scale).astype(np.float32) for r in ranks}
    packets = {
        r: list(pack_tensor(tensors[r], dtype=dtype, rank=r, job=job, round=round_, chunk_elems=chunk))
        for r in ranks
    }
    return tensors, packets


def agg(rank=0, expected=0b111, **kw):
    args = dict(rank=rank, jobs={0: [expected]}, slots=8, members=4, slot_bytes=64) | kw
    return GoldenAggregator(**args)


@pytest.mark.parametrize("dtype", list(DType))
@settings(max_examples=25, deadline=None)
@given(ranks=st.sets(st.integers(0, 63), min_size=1, max_size=5), seed=st.integers(0, 2**16), data=st.data())
def test_any_arrival_order_gives_identical_bits_equal_to_reference(dtype, ranks, seed, data):
    ranks = sorted(ranks)
    expected = sum(1 << r for r in ranks)
    tensors, packets = contributions(ranks, dtype, seed=seed, scale=10.0 ** data.draw(st.integers(-3, 3)))
    stream = [p for r in ranks for p in packets[r]]
    results = []
    for _ in range(2):
        order = data.draw(st.permutations(range(len(stream))))
        a = agg(rank=ranks[0], expected=expected, members=5)
        out = [x for i in order for x in a.feed_payload(stream[i])]
        assert a.counters["results"] == 5 and len(out) == 5
        results.append(sorted(out, key=lambda p: decode_payload(p)[0]["chunk"]))
    assert results[0] == results[1]
    ref = reference_sum([tensors[r] for r in ranks], dtype).view(np.uint16 if dtype.size == 2 else np.uint32)
    got = np.concatenate([np.frombuffer(p[32:], bits_dtype(dtype)) for p in results[0]])
    nan = np.isnan(got.view(NP[dtype]).astype(np.float32))
    assert np.array_equal(got[~nan], ref[~nan])
    h, _ = decode_payload(results[0][0])
    assert (h["kind"], h["src"], h["bitmap"], h["count"]) == (1, ranks[0], expected, 8)


@pytest.mark.parametrize("dtype", list(DType))
def test_specials_and_canonical_nan(dtype):
    a = np.array([np.inf, np.inf, -0.0, 1.0, np.nan, 0.0], np.float32)
    b = np.array([-np.inf, 1.0, -0.0, -1.0, 2.0, -0.0], np.float32)
    g = agg(expected=0b11)
    g.feed_payload(next(iter(pack_tensor(a, dtype=dtype, rank=0, chunk_elems=6))))
    (out,) = g.feed_payload(next(iter(pack_tensor(b, dtype=dtype, rank=1, chunk_elems=6))))
    bits = np.frombuffer(out[32:], bits_dtype(dtype))
    v = bits.view(NP[dtype]).astype(np.float32)
    assert bits[0] == dtype.canonical_nan and bits[4] == dtype.canonical_nan
    assert np.isposinf(v[1])
    assert np.signbit(v[2]) and v[2] == 0  # -0 + -0 = -0
    assert not np.signbit(v[3]) and v[3] == 0  # x + (-x) = +0
    assert not np.signbit(v[5])


def test_rank_order_not_arrival_order():
    # 1e8 + 1 + (-1e8): in rank order (ranks 0, 1, 2) fp32 gives 0 (the 1 is absorbed), while arriving as
    # 2, 0, 1 and summing in arrival order would give 1.
    vals = {0: 1e8, 1: 1.0, 2: -1e8}
    g = agg()
    out = []
    for r in (2, 0, 1):
        out += g.feed_payload(
            next(iter(pack_tensor(np.array([vals[r]], np.float32), dtype=DType.FP32, rank=r, chunk_elems=1)))
        )
    assert np.frombuffer(out[0][32:], np.float32)[0] == 0.0


def one(rank, *, chunk=0, round_=0, job=0, value=1.0, dtype=DType.FP32, count=4, flags_last=False):
    t = np.full(count, value, np.float32)
    return next(
        iter(
            pack_tensor(
                t,
                dtype=dtype,
                rank=rank,
                job=job,
                round=round_,
                chunk_elems=count,
                first_chunk=chunk,
                last=flags_last,
            )
        )
    )


def test_unexpected_src_job_and_waiting_round():
    g = GoldenAggregator(rank=0, jobs={0: [0b011, 0]}, slots=4, members=2, slot_bytes=64)
    g.feed_payload(one(2))  # not in the group
    g.feed_payload(one(0, job=1))  # a job it was not told about
    g.feed_payload(one(0, round_=1))  # round 1: this site waits
    assert g.counters["unexpected_src"] == 3 and all(s.state == "empty" for s in g.slots)
    g.feed_payload(one(0, round_=2))  # round 2 = round 0 of the next period
    assert g.slots[0].state == "live"


def test_duplicate_while_live_and_after_completion():
    g = agg(expected=0b11)
    g.feed_payload(one(0))
    g.feed_payload(one(0))
    assert g.counters["duplicate"] == 1
    assert len(g.feed_payload(one(1))) == 1
    g.feed_payload(one(1))  # a retransmission after the RESULT must not reopen the slot
    assert g.counters["duplicate"] == 2 and g.slots[0].state == "done"


def test_ahead_of_window_and_stale():
    g = agg(expected=0b11, slots=4)
    g.feed_payload(one(0, chunk=1))
    g.feed_payload(one(0, chunk=5))  # slot 1 is live with chunk 1
    assert g.counters["ahead_of_window"] == 1
    g.feed_payload(one(1, chunk=1))  # completes chunk 1
    g.feed_payload(one(0, chunk=5))  # now claims slot 1
    g.feed_payload(one(1, chunk=5))  # completes chunk 5: the shadow now holds chunk 5
    g.feed_payload(one(1, chunk=1))  # late retransmission of a chunk older than the shadow: stale
    assert g.counters["stale"] == 1 and g.counters["results_reemitted"] == 0
    g.feed_payload(one(0, chunk=1, round_=0, job=0))
    assert g.counters["stale"] == 2
    g.feed_payload(one(0, chunk=1, round_=1))  # a newer round reuses the done slot
    assert g.slots[1].tag == (0, 1, 1) and g.counters["results"] == 2


def test_shadow_result_is_sent_again_never_counted_twice():
    g = agg(expected=0b11, slots=4)
    g.feed_payload(one(0, chunk=1))
    (first,) = g.feed_payload(one(1, chunk=1))
    # The slot is done: a retransmission from either member gets the same RESULT bytes back.
    assert g.feed_payload(one(0, chunk=1)) == [first] and g.feed_payload(one(1, chunk=1)) == [first]
    assert g.counters["duplicate"] == 2 and g.counters["results_reemitted"] == 2
    assert g.counters["results"] == 1
    # A newer chunk makes the slot live; the shadow still answers for chunk 1 and the live chunk is untouched.
    g.feed_payload(one(0, chunk=5))
    assert g.feed_payload(one(1, chunk=1)) == [first]
    assert g.counters["stale"] == 0 and g.counters["duplicate"] == 3 and g.slots[1].bitmap == 0b01
    assert g.missing(0, 0, 5) == (1,) and g.missing(0, 0, 1) == ()
    (second,) = g.feed_payload(one(1, chunk=5))
    assert second != first and g.counters["results"] == 2
    # Chunk 5 overwrote the shadow: chunk 1 is now stale, and nothing is sent.
    assert g.feed_payload(one(0, chunk=1)) == [] and g.counters["stale"] == 1
    assert g.counters["results_reemitted"] == 3


def test_older_chunk_not_completed_here_takes_its_slot_back():
    g = agg(expected=0b11, slots=4)
    g.feed_payload(one(0, chunk=1, round_=3))
    g.feed_payload(one(1, chunk=1, round_=2))  # round 2 never completed here: it evicts round 3
    assert g.counters["evictions"] == 1 and g.counters["stale"] == 0 and g.counters["ahead_of_window"] == 0
    assert g.slots[1].tag == (0, 2, 1) and g.slots[1].bitmap == 0b10
    g.feed_payload(one(0, chunk=1, round_=3))  # the newer chunk waits its turn
    assert g.counters["ahead_of_window"] == 1
    (res,) = g.feed_payload(one(0, chunk=1, round_=2, value=2.0))
    assert np.frombuffer(res, np.float32, offset=32).tolist() == [3.0] * 4
    g.feed_payload(one(1, chunk=1, round_=1))  # older than the slot's last completed chunk
    assert g.counters["stale"] == 1 and g.counters["evictions"] == 1
    g.feed_payload(one(0, chunk=1, round_=3))
    assert len(g.feed_payload(one(1, chunk=1, round_=3))) == 1 and g.counters["results"] == 2


def test_slot_mismatch_leaves_slot_as_it_was():
    g = agg(expected=0b11)
    g.feed_payload(one(0, count=4))
    g.feed_payload(one(1, count=3))
    g.feed_payload(one(1, count=4, dtype=DType.FP16))
    assert g.counters["slot_mismatch"] == 2 and g.slots[0].bitmap == 0b01
    (out,) = g.feed_payload(one(1, count=4, value=2.0))
    assert np.frombuffer(out[32:], np.float32).tolist() == [3.0] * 4


def test_flags_are_ored_whatever_the_order():
    for order in ((0, 1), (1, 0)):
        g = agg(expected=0b11)
        out = []
        for r in order:
            out += g.feed_payload(one(r, flags_last=(r == 1)))
        assert decode_payload(out[0])[0]["flags"] == 1


def test_drops_are_counted_and_results_too():
    g = agg(expected=0b11, slot_bytes=8)
    g.feed_payload(one(0, count=4))  # 16 bytes > 8
    assert g.counters["too_large"] == 1
    g.feed_payload(b"WR")
    assert g.counters["short_header"] == 1 and g.counters["frames_in"] == 2


def test_too_many_members_is_a_configuration_error():
    with pytest.raises(ValueError, match="more than the 2 buffers"):
        GoldenAggregator(rank=0, jobs={0: [0b111]}, slots=1, members=2, slot_bytes=8)


def test_result_frames_one_per_destination():
    dests = [
        Destination("02:00:00:00:00:0a", "10.0.0.10", 5000),
        Destination("02:00:00:00:00:0b", "10.0.0.11", 6000),
    ]
    g = agg(expected=0b11, mac="02:57:52:00:00:07", ip="10.87.82.7", destinations=dests)
    addr = dict(
        src_mac="02:00:00:00:00:01",
        dst_mac="01:00:5e:00:00:01",
        src_ip="10.0.0.1",
        dst_ip="239.87.82.0",
        sport=47000,
        dport=47000,
    )
    assert g.feed_frame(build_frame(one(0), **addr)) == []
    out = g.feed_frame(build_frame(one(1), **addr))
    assert len(out) == 2
    for f, d in zip(out, dests, strict=True):
        e = Ether(f)
        assert e.dst == d.mac and e.src == "02:57:52:00:00:07"
        assert e[IP].dst == d.ip and e[IP].src == "10.87.82.7" and e[IP].ttl == 64 and e[IP].flags == "DF"
        assert e[UDP].dport == d.port and e[UDP].sport == 47000 and e[UDP].chksum == 0
        ip_sum = e[IP].chksum
        del e[IP].chksum
        assert Ether(bytes(e))[IP].chksum == ip_sum
        h, elems = decode_payload(decode_frame(f)[3])
        assert h["kind"] == 1 and elems == [2.0] * 4
    g.feed_frame(build_frame(one(1), **(addr | dict(dport=47001))))
    assert g.counters["wrong_port"] == 1 and g.counters["frames_in"] == 3


@pytest.mark.parametrize("dtype", list(DType))
def test_golden_nan_is_the_adder_lanes_nan(dtype):
    from wanreduce.hw.fadd import FloatFormat

    assert dtype.canonical_nan == FloatFormat.from_dtype(int(dtype)).qnan
