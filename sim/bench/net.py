"""Throughput of the UDP path on loopback, without emulated delay: payload bytes per CPU second of one core.

* ``aggd_GBps_1k`` / ``_8k``: the aggregator daemon (its default, batched engine) of a three-member group.
  Each batch of CONTRIBs (every member's copy of ``BATCH`` chunks, or as many as half the socket's receive
  buffer holds: ``aggd_batch_chunks_*``) is queued in its socket first, sent as
  the members' transports send them: each member's runs of whole chunks as one UDP GSO send, the
  members' runs of the same chunks together. Then the daemon's loop reads them (the native loop with UDP
  GRO, :mod:`wanreduce.host.fastio`, where it builds; ``recvmmsg`` otherwise), aggregates and multicasts
  the RESULTs (GSO sends); the figure is the contributions' payload bytes over the CPU time the daemon's
  process spent on them, system calls included, over its batches after the first (a daemon runs for
  hours; a new one's first batch also touches its slot memory for the first time).
* ``transport_GBps_1k`` / ``_8k``: one site's host transport synchronising a tensor through its own
  aggregator process (a one-member group, so the aggregator answers at once; a window of ``WINDOW``
  chunks) into a result array it keeps (``run(out=...)``, as a trainer keeps one from step to step): the
  tensor's bytes over the CPU time of the host's process (every CONTRIB sent and every RESULT received
  and applied), over four syncs after a first on the same transport (as a trainer syncs every step; the
  first sync of a new transport also builds its state and touches its buffers).

1 KiB chunks fit a standard Ethernet MTU; 8 KiB chunks need jumbo frames on a real network (loopback's MTU
is 64 KiB). Both are single-threaded Python over a small native loop (``host/udpio.cc``: GRO reads into
numpy rows, GSO sends of payloads from where they lie, binary32 sums), numpy per batch of headers and of
values; ``WANREDUCE_FASTIO=0`` measures the Python paths alone. Medians of ``REPEATS`` runs; CPU time, so
other work on the machine costs them less than it costs wall time, but caches and memory bandwidth are
shared, and on an oversubscribed machine the figures drop by a third or more.
"""

import socket
import statistics
import time

import numpy as np

from wanreduce.host import netdemo
from wanreduce.host.aggd import Aggd, BatchEngine, site_layout
from wanreduce.host.mmsg import Sender
from wanreduce.host.netio import open_socket
from wanreduce.host.pacing import member_buffer_bytes
from wanreduce.host.packet import pack_tensor
from wanreduce.host.transport import SiteTransport
from wanreduce.spec import addressing
from wanreduce.spec.protocol import HEADER_BYTES, DType
from wanreduce.spec.schedfile import Schedule

REPEATS = 21
#: Chunks per queued batch of the daemon's at most (a batch is also held to half the receive buffer the
#: daemon's socket got: see :func:`_batch_chunks`).
BATCH = {1024: 512, 8192: 320}
#: The transport's window (its aggregator's round bank) in chunks: 8 MiB of 8 KiB chunks in flight (a WAN
#: path's bandwidth-delay product is far larger), within a socket's buffer; a window's fixed costs are
#: shared by this many chunks.
WINDOW = {1024: 2048, 8192: 1024}
TENSOR_BYTES = 16 << 20
PORT = 47990
JOB = 7


def _schedule(n, chunk_bytes, window):
    """One round of one group of ``n`` sites, its aggregators sized for a window of ``window`` chunks."""
    memory = window * (n + 1) * member_buffer_bytes(chunk_bytes, 512)
    return Schedule(
        sites=tuple(f"S{i}" for i in range(n)),
        rounds=([list(range(n))],),
        params={"memory_bytes": memory, "chunk_bytes": chunk_bytes, "bus_bits": 512},
    )


def _batch_chunks(sock, chunk_bytes, members):
    """Chunks per queued batch: :data:`BATCH`, or fewer where the daemon's socket got a smaller receive
    buffer than it asked for (no CAP_NET_ADMIN): its members' copies take at most half of it (the kernel
    reports twice the size it was given, the other half being its own bookkeeping)."""
    room = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 4
    return max(1, min(BATCH[chunk_bytes], room // (members * (HEADER_BYTES + chunk_bytes))))


def aggd_rate(chunk_bytes, batches=12):
    """Contribution payload bytes the daemon aggregates per CPU second, over its batches after the first
    (a new daemon's first batch also touches its slot memory for the first time)."""
    schedule = _schedule(3, chunk_bytes, 4 * BATCH[chunk_bytes])
    layout = site_layout(schedule)
    daemon = Aggd(schedule, 0, BatchEngine(schedule, 0, layout, job=JOB), port=PORT, job=JOB).open()
    tx = open_socket(port=PORT + 1)
    group = addressing.contrib_group_ip(job=JOB, round=0, group=0, period=1)
    sender = Sender((group, PORT), segment=HEADER_BYTES + chunk_bytes)
    rng = np.random.default_rng(0)
    k = _batch_chunks(daemon.sock, chunk_bytes, 3)
    elems = chunk_bytes // 4
    cpu = 0.0
    try:
        for b in range(batches):
            # The members' copies of a chunk arrive together, as the three hosts' windows send them.
            per_rank = [
                pack_tensor(
                    rng.standard_normal(k * elems).astype(np.float32),
                    dtype=DType.FP32,
                    rank=rank,
                    job=JOB,
                    chunk_elems=elems,
                    first_chunk=b * k,
                ).blocks[0]
                for rank in range(3)
            ]
            # As the hosts' transports send them: each member's runs of whole chunks as GSO sends.
            for at in range(0, k, sender.per_send):
                for block in per_rank:
                    cs = np.arange(at, min(at + sender.per_send, k))
                    row = block.shape[1]
                    sent = sender.send_parts(
                        tx,
                        block,
                        cs * row,
                        HEADER_BYTES,
                        block.ctypes.data + (cs * row + HEADER_BYTES).astype(np.uint64),
                        np.full(cs.size, row - HEADER_BYTES),
                    )
                    if sent != cs.size:
                        raise AssertionError("the sending socket's buffer is full")
            goal = daemon.engine.counters()["results"] + k
            t0 = time.process_time()
            deadline = time.monotonic() + 30

            def done(goal=goal, deadline=deadline):
                return daemon.engine.counters()["results"] >= goal or time.monotonic() > deadline

            daemon.serve(done)
            if b:
                cpu += time.process_time() - t0
        c = daemon.engine.counters()
        if c["results"] != batches * k:
            raise AssertionError(
                f"the daemon completed {c['results']} of {batches * k} chunks (socket overflow)"
            )
    finally:
        daemon.close()
        tx.close()
    return 3 * (batches - 1) * k * chunk_bytes / cpu / 1e9


def transport_rate(chunk_bytes, syncs=4):
    """Tensor bytes one site's transport synchronises per CPU second of its process, over ``syncs`` syncs
    after a first one (as a trainer syncs step after step on one transport; the first sync of a new
    transport also builds its per-chunk state and touches its buffers for the first time)."""
    schedule = _schedule(1, chunk_bytes, WINDOW[chunk_bytes])
    layout = site_layout(schedule)
    tensor = np.random.default_rng(1).standard_normal(TENSOR_BYTES // 4).astype(np.float32)

    def engine(s, r, lay):
        return BatchEngine(s, r, lay, job=JOB)

    with netdemo.aggregators(schedule, layout=layout, make_engine=engine, port=PORT, job=JOB):
        # The result goes into an array the caller keeps, as a trainer keeps its gradients' from one step
        # to the next (a new one costs its pages' first writes, once per array rather than per sync); made
        # after the aggregator's fork, or every page of it is copied on its first write.
        out = np.ones_like(tensor)
        tp = SiteTransport(
            schedule, 0, layout=layout, one_way_s=np.zeros((1, 1)), site_Bps=1e12, port=PORT, job=JOB
        ).open()
        cpu = 0.0
        try:
            for step in range(syncs + 1):
                t0 = time.process_time()
                run = tp.run(tensor, deadline_s=120, out=out, first_round=step)
                if step:
                    cpu += time.process_time() - t0
                if not np.array_equal(run.values, tensor):
                    raise AssertionError("a one-member group must give the tensor back unchanged")
        finally:
            tp.close()
    return syncs * TENSOR_BYTES / cpu / 1e9


#: Each figure is a median over this many runs.
RUNS = {f"{who}_GBps_{tag}": REPEATS for who in ("aggd", "transport") for tag in ("1k", "8k")}


def run():
    out = {}
    for chunk_bytes, tag in ((1024, "1k"), (8192, "8k")):
        probe = open_socket(port=PORT)
        try:
            out[f"aggd_batch_chunks_{tag}"] = _batch_chunks(probe, chunk_bytes, 3)
        finally:
            probe.close()
        out[f"aggd_GBps_{tag}"] = round(statistics.median(aggd_rate(chunk_bytes) for _ in range(REPEATS)), 4)
        out[f"transport_GBps_{tag}"] = round(
            statistics.median(transport_rate(chunk_bytes) for _ in range(REPEATS)), 4
        )
    return out
