"""The batched aggregator against the golden model, datagram for datagram, and the batched system calls.

The reference is :class:`wanreduce.host.golden.GoldenAggregator`, which checks one datagram at a time in
plain Python; the batched one must give the same RESULT bytes in the same order and the same counters for
any split of the same sequence into batches, malformed datagrams mixed in.
"""

import socket

import numpy as np
import pytest

from wanreduce.host import mmsg
from wanreduce.host.batchagg import BatchAggregator
from wanreduce.host.golden import GoldenAggregator
from wanreduce.host.packet import pack_tensor
from wanreduce.spec.protocol import HEADER_LAYOUT, Drop, DType

JOB = 3
# Two rounds of one three-member group in two summation orders, plus a round this site waits.
PERIOD = ([0, 1, 2], [2, 0, 1], [])
SLOTS, MEMBERS, SLOT_BYTES, BANK_BITS = 8, 3, 256, 2


def _pair():
    golden = GoldenAggregator(
        rank=1,
        jobs={JOB: PERIOD},
        slots=SLOTS,
        members=MEMBERS,
        slot_bytes=SLOT_BYTES,
        bank_bits={JOB: BANK_BITS},
    )
    batch = BatchAggregator(
        rank=1,
        job=JOB,
        period=PERIOD,
        slots=SLOTS,
        members=MEMBERS,
        slot_bytes=SLOT_BYTES,
        bank_bits=BANK_BITS,
        batch=64,
    )
    return golden, batch


def _set(payload, name, value):
    pos, size = HEADER_LAYOUT[name]
    out = bytearray(payload)
    out[pos : pos + size] = int(value).to_bytes(size, "big")
    return bytes(out)


def _traffic(seed, dtype):
    """Every member's chunks of rounds 0..5, shuffled, with copies and malformed datagrams mixed in."""
    rng = np.random.default_rng(seed)
    good, seq = [], []
    for rnd in range(12):
        order = PERIOD[rnd % len(PERIOD)] or [0, 1]  # a waiting round: every copy is unexpected_src
        for rank in order:
            t = rng.standard_normal(400).astype(np.float32) * np.float32(10.0) ** rng.integers(-4, 5)
            t[rng.integers(0, 400, 3)] = [np.nan, np.inf, -np.inf]
            chunks = list(pack_tensor(t, dtype=dtype, rank=rank, job=JOB, round=rnd, chunk_elems=50))
            good += chunks
            seq += [rnd * len(chunks) + c for c in range(len(chunks))]
    # Chunk by chunk with the members' copies interleaved across neighbouring chunks, so that chunks
    # complete, meet their slot held by the one before (ahead of the window) and are evicted.
    keys = np.array(seq) + rng.uniform(0, 6, len(good))
    stream = [good[i] for i in np.argsort(keys)]
    out = []
    for p in stream:
        draw = rng.random()
        if 0.35 <= draw < 0.37:
            size = (len(p) - 32) // 50
            out.append(_set(p[: 32 + 20 * size], "count", 20))  # well-formed, another count: slot_mismatch
        out.append(p)
        if draw < 0.1:
            out.append(p)  # a copy
        elif draw < 0.3:
            field, value = [
                ("magic", 0x1234),
                ("version", 9),
                ("kind", 1),
                ("kind", 7),
                ("dtype", 5),
                ("flags", 0x80),
                ("reserved", 1),
                ("count", 0),
                ("src", 5),
                ("src", 70),
                ("bitmap", 3),
                ("job", JOB + 1),
                ("dtype", int(DType.FP16) if dtype == DType.FP32 else int(DType.FP32)),
            ][rng.integers(13)]
            out.append(_set(p, field, value))
        elif draw < 0.35:
            out.append(p[: rng.integers(0, 40)])  # short header or bad length
        elif 0.37 <= draw < 0.38:
            out.append(_set(p, "count", 200) + bytes(800 - (len(p) - 32)))  # too large
    return out


def _golden_run(golden, stream):
    results = []
    for p in stream:
        results += golden.feed_payload(p)
    return results


def _batch_run(batch, stream, rng):
    results, i = [], 0
    rows = np.zeros((64, 2048), np.uint8)
    while i < len(stream):
        n = int(rng.integers(1, 65))
        part = stream[i : i + n]
        lengths = np.array([len(p) for p in part])
        for j, p in enumerate(part):
            rows[j, : len(p)] = np.frombuffer(p, np.uint8)
        k = batch.feed_batch(rows, lengths)
        results += batch.results(k)
        i += n
    return results


@pytest.mark.parametrize("dtype", [DType.FP32, DType.FP16, DType.BF16])
def test_batches_mixing_good_and_malformed_datagrams_equal_the_golden_model(dtype):
    stream = _traffic(50 + int(dtype), dtype)
    golden, batch = _pair()
    want = _golden_run(golden, stream)
    got = _batch_run(batch, stream, np.random.default_rng(5))
    assert got == want
    assert batch.counters == golden.counters
    c = golden.counters
    # The mix exercises what it is meant to: completions, re-emissions, evictions and many drop codes.
    assert c["results"] > 20 and c["results_reemitted"] > 0 and c["duplicate"] > 0
    assert c["ahead_of_window"] > 0
    assert sum(1 for d in Drop if c[d.counter]) >= 12
    for job, rnd, chunk in ((JOB, 11, 3), (JOB, 10, 0), (JOB + 1, 0, 0)):
        assert batch.missing(job, rnd, chunk) == golden.missing(job, rnd, chunk)


def test_one_payload_at_a_time_and_a_corrupt_frame_match_too():
    golden, batch = _pair()
    stream = _traffic(3, DType.FP32)[:120]
    assert [r for p in stream for r in batch.feed_payload(p)] == _golden_run(golden, stream)
    # Another member's chunk of another count, well formed: slot_mismatch in both.
    (a,) = pack_tensor(np.ones(30, np.float32), dtype=DType.FP32, rank=0, job=JOB, round=6, chunk_elems=64)
    (b,) = pack_tensor(np.ones(20, np.float32), dtype=DType.FP32, rank=2, job=JOB, round=6, chunk_elems=64)
    assert [batch.feed_payload(x) for x in (a, b)] == [golden.feed_payload(x) for x in (a, b)]
    assert batch.counters["slot_mismatch"] == golden.counters["slot_mismatch"] == 1
    frame = bytes(60)  # not IPv4: the framing rules, as for a copy the emulated WAN corrupted
    assert batch.feed_frame(frame) == [] and golden.feed_frame(frame) == []
    assert batch.counters == golden.counters and batch.counters["not_ipv4"] == 1


@pytest.mark.parametrize("use_mmsg", [True, False])
def test_batched_send_and_receive_carry_every_datagram_intact(use_mmsg):
    if use_mmsg and not mmsg.HAVE_MMSG:
        pytest.skip("this libc has no recvmmsg/sendmmsg")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tx.setblocking(False)
        rng = np.random.default_rng(2)
        lengths = rng.integers(1, 3000, 40)
        block = rng.integers(0, 256, (40, 3000), dtype=np.uint8)
        sender = mmsg.Sender(rx.getsockname(), batch=16, mmsg=use_mmsg)
        assert sender.send(tx, block, np.arange(40) * 3000, lengths) == 40
        receiver = mmsg.Receiver(batch=32, row_bytes=4096, mmsg=use_mmsg)
        got = []
        # Loopback queues a datagram in the receiver's socket within the send call.
        while n := receiver.recv(rx):
            got += [receiver.rows[i, : receiver.lengths[i]].tobytes() for i in range(n)]
        assert got == [block[i, : lengths[i]].tobytes() for i in range(40)]
        assert receiver.recv(rx) == 0
        # Longer than a row: the row holds its start, the length is its real one.
        long = rng.integers(0, 256, 5000, dtype=np.uint8)
        assert sender.send(tx, long, [0], [5000]) == 1
        assert receiver.recv(rx) == 1 and receiver.lengths[0] == 5000
        assert receiver.rows[0].tobytes() == long[:4096].tobytes()
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize("use_mmsg", [True, False])
def test_two_part_sends_join_a_header_row_and_a_payload_left_in_place(use_mmsg):
    if use_mmsg and not mmsg.HAVE_MMSG:
        pytest.skip("this libc has no recvmmsg/sendmmsg")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tx.setblocking(False)
        rng = np.random.default_rng(3)
        heads = rng.integers(0, 256, (50, 32), dtype=np.uint8)
        body = rng.integers(0, 256, 50 * 1000, dtype=np.uint8)
        order = rng.permutation(50)[:37]  # any rows, in any order
        lengths = rng.integers(0, 1000, 37)
        sender = mmsg.Sender(rx.getsockname(), batch=16, mmsg=use_mmsg)
        addrs = body.ctypes.data + order.astype(np.uint64) * 1000
        assert sender.send_parts(tx, heads, order * 32, 32, addrs, lengths) == 37
        receiver = mmsg.Receiver(batch=64, row_bytes=2048, mmsg=use_mmsg)
        n = receiver.recv(rx)
        got = [receiver.rows[i, : receiver.lengths[i]].tobytes() for i in range(n)]
        want = [
            heads[c].tobytes() + body[c * 1000 : c * 1000 + k].tobytes()
            for c, k in zip(order.tolist(), lengths.tolist(), strict=True)
        ]
        assert got == want
        # The one-part sends of the same sender still address the same socket.
        assert sender.send(tx, heads, [0], [32]) == 1
        assert receiver.recv(rx) == 1 and receiver.rows[0, :32].tobytes() == heads[0].tobytes()
    finally:
        rx.close()
        tx.close()


def test_gso_sends_deliver_the_same_datagrams_as_one_per_message():
    if not mmsg.HAVE_MMSG:
        pytest.skip("this libc has no recvmmsg/sendmmsg")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        rx.setblocking(False)
        tx.setblocking(False)
        rng = np.random.default_rng(4)
        heads = rng.integers(0, 256, (300, 32), dtype=np.uint8)
        body = rng.integers(0, 256, 300 * 1000, dtype=np.uint8)
        # Whole 1032-byte datagrams in runs longer than one send (63 a send), broken by short ones.
        lengths = np.full(300, 1000)
        lengths[[5, 6, 150, 299]] = [10, 999, 0, 7]
        order = np.arange(300)
        order[200:210] = order[200:210][::-1]  # any rows, in any order
        sender = mmsg.Sender(rx.getsockname(), batch=4, segment=1032)
        assert sender.per_send == 63
        addrs = body.ctypes.data + order.astype(np.uint64) * 1000
        assert sender.send_parts(tx, heads, order * 32, 32, addrs, lengths) == 300
        receiver = mmsg.Receiver(batch=512, row_bytes=2048)
        n = receiver.recv(rx)
        got = [receiver.rows[i, : receiver.lengths[i]].tobytes() for i in range(n)]
        want = [
            heads[c].tobytes() + body[c * 1000 : c * 1000 + k].tobytes()
            for c, k in zip(order.tolist(), lengths.tolist(), strict=True)
        ]
        assert got == want
        with pytest.raises(ValueError, match="longer than the 1032-byte segment"):
            sender.send_parts(tx, heads, [0], 32, [body.ctypes.data], [1001])
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_clean_batches_take_the_whole_chunk_path_and_still_equal_the_golden_model(dtype):
    rng = np.random.default_rng(11)
    stream, cuts = [], []
    for rnd in range(9):
        order = PERIOD[rnd % len(PERIOD)]
        if not order:
            continue
        per_rank = {}
        for rank in order:
            t = rng.standard_normal(420).astype(np.float32) * np.float32(10.0) ** rng.integers(-4, 5)
            t[rng.integers(0, 420, 2)] = [np.nan, -np.inf]
            per_rank[rank] = list(pack_tensor(t, dtype=dtype, rank=rank, job=JOB, round=rnd, chunk_elems=50))
        for c in range(len(per_rank[order[0]])):  # the members' copies of a chunk together, any order
            stream += [per_rank[rank][c] for rank in rng.permutation(order).tolist()]
            cuts.append(len(stream))
    golden, batch = _pair()
    want = _golden_run(golden, stream)
    taken = []
    whole = batch._whole_chunks

    def spy(h, good, *rest):
        used = whole(h, good, *rest)
        taken.append((used, good.size))
        return used

    batch._whole_chunks = spy
    results, rows, at = [], np.zeros((64, 2048), np.uint8), 0
    # Batches of whole chunks (two at most: a bank has two slots), and now and then a cut inside a chunk.
    ends = [e for e in cuts[1::2]] + [cuts[-1]]
    ends = sorted(set(ends + [int(x) + 1 for x in rng.choice(cuts[:-1], 4, replace=False)]))
    for end in ends:
        part = stream[at:end]
        for j, p in enumerate(part):
            rows[j, : len(p)] = np.frombuffer(p, np.uint8)
        results += batch.results(batch.feed_batch(rows, np.array([len(p) for p in part])))
        at = end
    assert results == want and len(want) == 6 * 9
    assert batch.counters == golden.counters
    # Whole batches went at once, and batches cut inside a chunk went partly datagram by datagram.
    assert sum(used == n for used, n in taken) >= 10 and any(used < n for used, n in taken)


@pytest.mark.parametrize("seed", [16, 42, 43, 56])
def test_a_reemitted_shadow_is_sent_before_its_slot_completes_again_in_the_batch(seed):
    # These streams re-emit a slot's shadow (a copy of a completed chunk) and complete the slot's next
    # chunk later in the same batch: the re-emitted RESULT must still be the first chunk's, header and
    # payload, as the golden model sends it (the batch engine once sent the second chunk's twice).
    stream = _traffic(seed, DType.FP32)
    golden, batch = _pair()
    want = _golden_run(golden, stream)
    assert _batch_run(batch, stream, np.random.default_rng(5)) == want
    assert batch.counters == golden.counters


def test_a_chunk_whole_in_a_batch_after_one_cut_short_is_summed_like_the_others():
    # The whole-chunk path takes the batch's start up to a chunk whose copies are not all in yet (B); a
    # chunk after that one whose copies are all in the batch (C) then completes datagram by datagram, with
    # the same dtype, count and group size as the chunks the whole-chunk path summed (A).
    rng = np.random.default_rng(12)
    order = PERIOD[0]
    per_rank = {}
    for rank in order:
        t = rng.standard_normal(200).astype(np.float32)
        per_rank[rank] = list(pack_tensor(t, dtype=DType.FP32, rank=rank, job=JOB, round=0, chunk_elems=50))
    a, b, c = ([per_rank[rank][k] for rank in order] for k in range(3))
    batches = [a + b[:1] + c, b[1:]]
    golden, batch = _pair()
    want = _golden_run(golden, [p for part in batches for p in part])
    rows, got = np.zeros((64, 2048), np.uint8), []
    for part in batches:
        for j, p in enumerate(part):
            rows[j, : len(p)] = np.frombuffer(p, np.uint8)
        got += batch.results(batch.feed_batch(rows, np.array([len(p) for p in part])))
    assert got == want and len(want) == 3
    assert batch.counters == golden.counters
