"""The native receive loop (host/udpio.cc through wanreduce.host.fastio) against the Python paths it replaces:
the same datagrams, rows, lengths and order; the same sums; a clear fallback when it cannot be built."""

import socket

import numpy as np
import pytest

from wanreduce.host import fastio, mmsg
from wanreduce.host.batchagg import BatchAggregator
from wanreduce.host.packet import pack_tensor
from wanreduce.spec.errors import WanreduceError
from wanreduce.spec.protocol import DType

NATIVE = fastio.library() is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="the native loop cannot be built here")


def _pair():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    rx.setblocking(False)
    tx.setblocking(False)
    return rx, tx


def _traffic(rng):
    """Runs of datagrams as senders make them: ``(segment or None, [datagram lengths])``. Whole runs of
    the size the receiver expects, runs of other sizes, lone datagrams longer than a row, empty ones."""
    return [
        (1032, [1032] * 40),  # the expected size, more than one GSO send
        (1032, [1032] * 5 + [17]),  # a run whose last datagram is shorter
        (500, [500] * 30),  # another size: re-cut
        (None, [3000]),  # longer than a row: cut, its real length kept
        (None, [0]),  # empty
        (None, rng.integers(1, 2000, 25).tolist()),  # one by one, any length
        (1032, [1032] * 63),  # one whole GSO send
        (2000, [2000] * 20),  # longer than the expected size, shorter than a row
    ]


def _send_all(dest, runs, rng):
    """Send ``runs`` to ``dest``, each from a socket of its own (a GSO segment size stays set on a socket);
    returns the datagrams sent, in order."""
    sent = []
    for segment, lengths in runs:
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.setblocking(False)
        heads = rng.integers(0, 256, (len(lengths), 8), dtype=np.uint8)
        body = rng.integers(0, 256, (len(lengths), max(max(lengths), 8)), dtype=np.uint8)
        bodies = np.maximum(np.asarray(lengths) - 8, 0)
        head_len = 8 if min(lengths) >= 8 else 0
        if head_len == 0:
            bodies = np.asarray(lengths)
        sender = mmsg.Sender(dest, batch=8, segment=segment, native=False)
        addrs = body.ctypes.data + np.arange(len(lengths), dtype=np.uint64) * body.shape[1]
        try:
            done = sender.send_parts(tx, heads, np.arange(len(lengths)) * 8, head_len, addrs, bodies)
        finally:
            tx.close()
        assert done == len(lengths)
        for i, n in enumerate(bodies.tolist()):
            sent.append(heads[i, :head_len].tobytes() + body[i, :n].tobytes())
    return sent


def _read_all(receiver, sock, limit=None):
    got = []
    while n := receiver.recv(sock, limit):
        got += [
            (
                int(receiver.lengths[i]),
                receiver.rows[i, : min(receiver.lengths[i], receiver.row_bytes)].tobytes(),
            )
            for i in range(n)
        ]
    return got


@needs_native
@pytest.mark.parametrize("limit", [None, 5])
def test_native_reads_give_the_rows_lengths_and_order_of_recvmmsg(limit):
    rng = np.random.default_rng(21)
    runs = _traffic(rng)
    results = []
    for native in (True, False):
        rx, tx = _pair()
        try:
            receiver = mmsg.Receiver(batch=48, row_bytes=2048, segment=1032, native=native)
            assert receiver.native is native
            receiver.attach(rx)
            sent = _send_all(rx.getsockname(), runs, np.random.default_rng(5))
            got = _read_all(receiver, rx, limit)
            results.append(got)
        finally:
            rx.close()
            tx.close()
    native_got, python_got = results
    assert native_got == python_got
    # and both are what was sent: whole datagrams, those longer than a row cut with their real length
    assert [n for n, _ in native_got] == [len(d) for d in sent]
    assert [data for _, data in native_got] == [d[:2048] for d in sent]


@needs_native
def test_native_sends_give_the_datagrams_of_the_python_sends():
    rng = np.random.default_rng(22)
    heads = rng.integers(0, 256, (200, 32), dtype=np.uint8)
    body = rng.integers(0, 256, 200 * 1000, dtype=np.uint8)
    lengths = np.full(200, 1000)
    lengths[[3, 4, 90, 199]] = [10, 999, 0, 7]
    order = rng.permutation(200)
    addrs = body.ctypes.data + order.astype(np.uint64) * 1000
    got = {}
    for native in (True, False):
        rx, tx = _pair()
        try:
            sender = mmsg.Sender(rx.getsockname(), batch=4, segment=1032, native=native)
            assert sender.send_parts(tx, heads, order * 32, 32, addrs, lengths) == 200
            got[native] = [
                d for _, d in _read_all(mmsg.Receiver(batch=512, row_bytes=2048, native=False), rx)
            ]
            with pytest.raises(ValueError, match="longer than the 1032-byte segment"):
                sender.send_parts(tx, heads, [0], 32, [body.ctypes.data], [1001])
        finally:
            rx.close()
            tx.close()
    want = [
        heads[c].tobytes() + body[c * 1000 : c * 1000 + k].tobytes()
        for c, k in zip(order, lengths, strict=True)
    ]
    assert got[True] == got[False] == want


def _stream(rng):
    period = [[0, 1, 2]]
    stream = []
    for rnd in range(4):
        per_rank = {}
        for rank in period[0]:
            t = rng.standard_normal(600).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30)
            t[rng.integers(0, 600, 3)] = [np.nan, np.inf, -np.inf]
            per_rank[rank] = list(
                pack_tensor(t, dtype=DType.FP32, rank=rank, job=3, round=rnd, chunk_elems=64)
            )
        for c in range(len(per_rank[0])):
            stream += [per_rank[r][c] for r in rng.permutation(3).tolist()]
    return period, stream


@needs_native
def test_native_sums_are_the_numpy_sums_bit_for_bit():
    period, stream = _stream(np.random.default_rng(23))
    out = {}
    for native in (True, False):
        agg = BatchAggregator(
            rank=0,
            job=3,
            period=period,
            slots=16,
            members=3,
            slot_bytes=256,
            bank_bits=4,
            batch=64,
            native=native,
        )
        assert (agg._lib is not None) is native
        rows = np.zeros((64, agg.row_bytes), np.uint8)
        results = []
        for at in range(0, len(stream), 60):
            part = stream[at : at + 60]
            for i, d in enumerate(part):
                rows[i, : len(d)] = np.frombuffer(d, np.uint8)
            k = agg.feed_batch(rows, np.array([len(d) for d in part]))
            results += agg.results(k)
        out[native] = (results, dict(agg.counters))
    assert out[True] == out[False]
    assert out[True][1]["results"] == len(out[True][0]) > 0


def test_off_switch_gives_the_python_paths(monkeypatch):
    monkeypatch.setenv(fastio.ENV, "0")
    assert fastio.library() is None
    receiver = mmsg.Receiver(batch=4, row_bytes=64)
    assert not receiver.native
    rx, tx = _pair()
    try:
        tx.sendto(b"abc", rx.getsockname())
        assert receiver.recv(rx) == 1 and receiver.rows[0, :3].tobytes() == b"abc"
    finally:
        rx.close()
        tx.close()


def test_a_failed_build_falls_back_with_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("WANREDUCE_BUILD_DIR", raising=False)
    monkeypatch.delenv(fastio.ENV, raising=False)
    assert fastio.library(source=b"this is not C++\n") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "failed" in err[0] and "recvmmsg instead" in err[0]
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert fastio.library(source=b"int x;\n") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no C++ compiler (no-such-compiler-here)" in err[0]


def test_a_failed_build_is_an_error_when_the_native_loop_is_required(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("WANREDUCE_BUILD_DIR", raising=False)
    monkeypatch.setenv(fastio.ENV, "1")
    with pytest.raises(WanreduceError, match=r"required \(WANREDUCE_FASTIO=1\) but .*failed"):
        fastio.library(source=b"this is not C++ either\n")


@needs_native
def test_the_build_is_cached_by_the_source(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("WANREDUCE_BUILD_DIR", raising=False)
    source = fastio.source_text() + b"\n// another build\n"
    assert fastio.library(source=source) is not None
    built = list((tmp_path / "wanreduce" / "fastio").glob("udpio-*.so"))
    assert len(built) == 1


def test_an_unwritable_cache_falls_back_with_one_line(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("WANREDUCE_BUILD_DIR", str(blocker))
    monkeypatch.delenv(fastio.ENV, raising=False)
    assert fastio.library(source=b"int y;\n") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot build into" in err[0]


@needs_native
def test_native_division_is_numpys_bit_for_bit():
    lib = fastio.library()
    rng = np.random.default_rng(24)
    rows = rng.integers(0, 256, (7, 4 * 203 + 36), dtype=np.uint8)  # rows of another stride, any bits
    vals = rows[:, 36:].view(np.float32)  # a word-aligned start, as after a header
    vals[0, :6] = [np.nan, np.inf, -np.inf, 1e-45, -0.0, 3.4e38]
    for g in (1, 2, 3, 7):
        with np.errstate(invalid="ignore"):  # signalling NaNs among the random bits: quieted, as x86 does
            want = vals / np.float32(g)
        got = np.full((7, 205), np.float32(-1))
        at = got.ctypes.data + 4  # an unaligned destination row start too
        assert lib.udpio_div_f32(rows.ctypes.data + 36, rows.shape[1], at, 205 * 4, 7, 203, float(g)) == 0
        assert np.array_equal(got[:, 1:204].view(np.uint32), want.view(np.uint32))
        assert (got[:, 0] == -1).all() and (got[:, 204] == -1).all()  # nothing outside the rows
