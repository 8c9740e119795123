"""The software aggregator over real UDP: one site's aggregator as a process (``wanreduce aggd``).

It takes the place of the site's FPGA: it joins the CONTRIB multicast group of every round its site takes
part in (the addressing plan, :mod:`wanreduce.spec.addressing`), feeds each datagram to an aggregation
engine, and multicasts every RESULT the engine emits to the site's host group (``239.87.83.<rank>``). The
engine is the golden model's rules on whole batches (:class:`BatchEngine`, the default: read by
``recvmmsg`` into preallocated rows, RESULTs sent by ``sendmmsg``), the golden model itself one datagram at
a time (:class:`GoldenEngine`: the drop rules, counters, shadow RESULTs and summation order of
:class:`~wanreduce.host.golden.GoldenAggregator`) or the Verilated core
(``wanreduce.sim.verify.netcore.RtlEngine``), behind the same three methods.

The kernel has already checked the Ethernet, IPv4 and UDP framing of what a socket delivers (drop codes
1-8 cannot reach the engine, except for copies the emulated WAN corrupted: those are handed to the engine as
whole frames, so the same checksum rules drop them under the same counters as on the FPGA).

Latency: a datagram is aggregated when it is read (after the emulated WAN delay, if any); a completed
chunk's RESULT is sent before the next datagram (the batch engine: the next batch) is read. Back-pressure:
none beyond the socket's receive buffer (what overflows it is lost, as on a link, and recovered by the
hosts' retransmissions).
"""

import dataclasses
import json
import select
import selectors
import socket
import time

import numpy as np

from ..spec import addressing
from ..spec.errors import WanreduceError
from ..spec.protocol import HEADER_BYTES, HEADER_LAYOUT, MAX_RANKS, UDP_PORT, DType
from ..spec.schedfile import check_rank, group_of, period_members
from .batchagg import BatchAggregator
from .frames import frame_between, parse_frame
from .golden import Destination
from .mmsg import Receiver, Sender
from .netio import RECV_BYTES, drain, drain_stamped, enable_timestamps, flip_bit, open_socket
from .pacing import aggregator_slots
from .packet import decode_headers
from .wan import bank_layout, host_end, site_aggregator

__all__ = [
    "SiteLayout",
    "site_layout",
    "GoldenEngine",
    "BatchEngine",
    "Aggd",
    "contrib_frame_of",
    "members_of",
]

#: Longest the daemon waits for a datagram before looking at its stop flag and control requests again.
POLL_S = 0.05
#: Datagrams read per system call by a batch engine's daemon: Linux's most per recvmmsg (UIO_MAXIOV), so
#: that a whole window's queued contributions meet in one batch and complete there, judged and summed at
#: once.
BATCH = 1024
#: Longest the daemon waits for room in its socket's send buffer before a RESULT counts as lost.
SEND_WAIT_S = 0.2


@dataclasses.dataclass(frozen=True)
class SiteLayout:
    """How one site's aggregator is built for a schedule: the gateware's slots and round banks."""

    slots: int
    members: int
    slot_bytes: int
    bank_bits: int
    bank_slots: int
    chunk_elems: int
    width: int

    def table(self):
        """The slot table's sizes, as the aggregators take them."""
        return dict(
            slots=self.slots, members=self.members, slot_bytes=self.slot_bytes, bank_bits=self.bank_bits
        )


def _param(schedule, key, default=None):
    value = schedule.params.get(key, default)
    if value is None:
        raise WanreduceError(f"the schedule's params have no {key}; write it with `wanreduce schedule`")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WanreduceError(f"the schedule's params.{key} {value!r} is not a positive whole number")
    return value


def site_layout(schedule, *, dtype=DType.FP32):
    """The aggregator layout every site of ``schedule`` uses: from its ``memory_bytes``, ``chunk_bytes``
    and ``bus_bits`` parameters, as ``wanreduce demo`` sizes its cores (slots of G_max member buffers and a
    shadow, one bank per round), by the slot rule of the build its ``buffers`` parameter names (the
    internal build when it names none). A ``bank_slots`` parameter must agree with that build's."""
    if schedule.lean is not None:
        raise WanreduceError(
            "the schedule is a root-mode (lean) schedule; aggd and the transport run gather mode"
        )
    dtype = DType(dtype)
    memory = _param(schedule, "memory_bytes")
    chunk_bytes = _param(schedule, "chunk_bytes")
    width = _param(schedule, "bus_bits", 512)
    if chunk_bytes % dtype.size:
        raise WanreduceError(f"chunks of {chunk_bytes} bytes do not hold whole {dtype.label} elements")
    buffers = schedule.params.get("buffers", "internal")
    members = max(len(g) for rnd in schedule.rounds for g in rnd)
    slots = aggregator_slots(memory, chunk_bytes=chunk_bytes, members=members, width=width, buffers=buffers)
    bank_bits, bank_slots = bank_layout(slots, schedule.period)
    if not bank_slots:
        raise WanreduceError(
            f"{memory} bytes of aggregator memory hold no round bank of {members}-member slots of "
            f"{chunk_bytes}-byte chunks for a {schedule.period}-round period"
        )
    if "bank_slots" in schedule.params and _param(schedule, "bank_slots") != bank_slots:
        raise WanreduceError(
            f"the schedule's params.bank_slots {schedule.params['bank_slots']} is not the {bank_slots} "
            f"that {memory} bytes of the {buffers} build give; the file was edited or made for another build"
        )
    return SiteLayout(slots, members, chunk_bytes, bank_bits, bank_slots, chunk_bytes // dtype.size, width)


def members_of(schedule, rank, round_index):
    """``(group id, members in summation order)`` of ``rank`` in a round, or ``(None, ())``."""
    gid, grp = group_of(schedule, rank, round_index)
    return gid, tuple(grp)


def contrib_frame_of(payload, *, period):
    """The frame a CONTRIB datagram travelled in (its sender's host addresses, its group's multicast
    address, UDP checksum computed): what an FPGA would have received."""
    h = decode_headers(np.frombuffer(bytes(payload).ljust(HEADER_BYTES, b"\0"), np.uint8))[0]
    src = min(int(h["src"]), MAX_RANKS - 1)
    dst = addressing.contrib_group_ip(
        job=int(h["job"]), round=int(h["round"]), group=int(h["group"]) & 0xFF, period=period
    )
    return frame_between(payload, host_end(src), Destination(addressing.multicast_mac(dst), dst))


class GoldenEngine:
    """The golden aggregator of site ``rank`` configured for ``schedule`` (job ``job``)."""

    def __init__(self, schedule, rank, layout, *, job=0):
        self.period = schedule.period
        self.agg = site_aggregator(schedule, rank, job=job, **layout.table())

    def feed(self, payload):
        """A UDP payload in → the RESULT payloads it completes or re-emits."""
        return self.agg.feed_payload(payload)

    def feed_frame(self, frame):
        """A whole Ethernet frame in (a corrupted copy) → the RESULT payloads it causes."""
        return [parse_frame(f, port=UDP_PORT)[0] for f in self.agg.feed_frame(frame)]

    def counters(self):
        return dict(self.agg.counters)

    def missing(self, job, round_, chunk):
        return self.agg.missing(job, round_, chunk)


class BatchEngine(GoldenEngine):
    """The golden model's rules and arithmetic on whole batches (:class:`~.batchagg.BatchAggregator`):
    ``feed_batch(rows, lengths)`` → k RESULTs (:attr:`out`), besides the three methods."""

    def __init__(self, schedule, rank, layout, *, job=0, batch=BATCH):
        self.period = schedule.period
        self.agg = BatchAggregator(
            rank=rank,
            job=job,
            period=period_members(schedule, rank),
            batch=batch,
            **layout.table(),
        )

    def feed_batch(self, rows, lengths, heads=None):
        return self.agg.feed_batch(rows, lengths, heads)

    @property
    def row_bytes(self):
        """The longest datagram it can take, rounded up to whole words."""
        return self.agg.row_bytes

    @property
    def slot_bytes(self):
        """The longest payload it takes (a whole chunk)."""
        return self.agg.slot_bytes

    @property
    def out(self):
        """``(array, byte offsets, lengths)`` of the last batch's RESULTs (first k of each)."""
        a = self.agg
        return a.store, a.out_rows * a.row_bytes, a.out_len

    def feed_frame(self, frame):
        return self.agg.feed_frame(frame)


class SiteSocket:
    """What a site's aggregator process and its hosts' transport have alike: site ``rank`` of ``schedule``
    (job ``job``) on a UDP socket bound at ``interface``:``port``, once opened; ``wan`` is a
    :class:`~wanreduce.host.netio.WanEmulator` for what arrives (None: the real network only)."""

    def __init__(self, schedule, rank, *, interface="127.0.0.1", port=UDP_PORT, job=0, wan=None):
        check_rank(schedule, rank, " of the schedule")
        self.schedule, self.rank = schedule, rank
        self.interface, self.port, self.job, self.wan = interface, port, job, wan
        self.sock = None


class Aggd(SiteSocket):
    """Site ``rank``'s aggregator process: sockets, the emulated WAN in front, an engine behind.

    ``engine`` has ``feed(payload)``, ``feed_frame(frame)`` (both → RESULT payloads) and ``counters()``;
    the other keywords are :class:`SiteSocket`'s.
    """

    def __init__(self, schedule, rank, engine, *, local_results=False, **where):
        super().__init__(schedule, rank, **where)
        self.engine = engine
        # RESULTs only to this machine's hosts (multicast TTL 0): the aggregator sits at the site's edge, so
        # its RESULTs do not cross the site's access link, which is what a rate-limited link models.
        self.local_results = bool(local_results)
        self.groups = sorted(
            {
                addressing.contrib_group_ip(job=self.job, round=r, group=gid, period=schedule.period)
                for r in range(schedule.period)
                for gid, _ in [members_of(schedule, rank, r)]
                if gid is not None
            }
        )
        self.result_to = (addressing.site_group_ip(rank), self.port)
        self.sent = 0
        self.received = 0
        self._rx = self._tx = self._sel = None

    def open(self):
        """Bind and join every group (raises :class:`WanreduceError` with one line when it cannot)."""
        self.sock = open_socket(interface=self.interface, port=self.port, groups=self.groups)
        if self.local_results:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        if self.wan is not None:
            enable_timestamps(self.sock)
        if hasattr(self.engine, "feed_batch") and self._rx is None:
            # Rows as long as the longest datagram the engine can take: a longer one is dropped on its
            # header and length alone (its real length is reported), so its tail is never needed. Made
            # here, with the socket, so that the first datagrams do not wait for a batch's pages.
            whole = getattr(self.engine, "slot_bytes", None)
            whole = whole and HEADER_BYTES + whole
            rows = getattr(self.engine, "row_bytes", RECV_BYTES)
            self._rx = Receiver(batch=BATCH, row_bytes=rows, segment=whole, head_bytes=HEADER_BYTES)
            self._tx = Sender(self.result_to, batch=BATCH, segment=whole)
        if self._rx is not None and self.wan is None:
            self._rx.attach(self.sock)  # with the emulated WAN, datagrams are read one by one instead
        return self

    def close(self):
        if self._sel is not None:
            self._sel.close()
            self._sel = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def counters(self):
        out = dict(self.engine.counters())
        out["datagrams_received"] = self.received
        out["results_sent"] = self.sent
        if self.wan is not None:
            out.update({f"wan_{k}": v for k, v in self.wan.stats.items()})
        return out

    def _process(self, data, corrupt):
        if corrupt:
            frame = flip_bit(contrib_frame_of(data, period=self.schedule.period), self.wan.rng)
            outs = self.engine.feed_frame(frame)
        else:
            outs = self.engine.feed(data)
        for out in outs:
            self.sock.sendto(out, self.result_to)
            self.sent += 1

    def _send_rows(self, k):
        """Send the batch engine's first ``k`` RESULT rows, waiting a little for room if need be."""
        rows, starts, lengths = self.engine.out
        # Header and payload as two parts of one datagram: runs of whole chunks go as one GSO send.
        addrs = rows.ctypes.data + HEADER_BYTES + starts[:k].astype(np.uint64)
        bodies = lengths[:k] - HEADER_BYTES
        done, end = 0, time.monotonic() + SEND_WAIT_S
        while done < k:
            done += self._tx.send_parts(
                self.sock, rows, starts[done:k], HEADER_BYTES, addrs[done:], bodies[done:]
            )
            room = done >= k or select.select([], [self.sock], [], SEND_WAIT_S)[1]
            if not room or time.monotonic() > end:
                break  # lost, as on a congested link; the hosts' retransmissions recover it
        self.sent += done

    def _read_batches(self):
        """Read and aggregate whatever is queued, a batch per system call (no emulated WAN)."""
        rx = self._rx
        while n := rx.recv(self.sock):
            self.received += n
            k = self.engine.feed_batch(rx.rows, rx.lengths[:n], rx.heads)
            if k:
                self._send_rows(k)
            if n < rx.batch:
                break

    def _feed_due(self, due):
        """Datagrams the emulated WAN delivers now: runs of intact ones as batches, corrupted ones alone."""
        rx, run = self._rx, []

        def flush():
            for i, data in enumerate(run):
                cut = min(len(data), rx.row_bytes)
                rx.rows[i, :cut] = np.frombuffer(data[:cut], np.uint8)
                rx.lengths[i] = len(data)
            k = self.engine.feed_batch(rx.rows, rx.lengths[: len(run)])
            if k:
                self._send_rows(k)
            run.clear()

        for data, corrupt in due:
            if corrupt:
                if run:
                    flush()
                self._process(data, True)
            else:
                run.append(data)
                if len(run) == rx.batch:
                    flush()
        if run:
            flush()

    def serve(self, should_stop, *, on_tick=None):
        """Aggregate until ``should_stop()`` is true (checked at least every :data:`POLL_S`).
        ``on_tick()`` runs on every wake-up (control requests, counter dumps)."""
        src_pos, src_size = HEADER_LAYOUT["src"]
        batched = hasattr(self.engine, "feed_batch")
        if self._sel is None:
            self._sel = selectors.DefaultSelector()
            self._sel.register(self.sock, selectors.EVENT_READ)
        sel, wan = self._sel, self.wan
        while not should_stop():
            wait = POLL_S
            if wan is not None and wan.queue:
                wait = min(wait, max(0.0, wan.next_due() - time.monotonic()))
            sel.select(wait)
            if wan is None and batched:
                self._read_batches()
            elif wan is None:
                batch = drain(self.sock)
                self.received += len(batch)
                for data in batch:
                    self._process(data, False)
            else:
                batch = drain_stamped(self.sock)
                self.received += len(batch)
                for stamp, data in batch:
                    src = int.from_bytes(data[src_pos : src_pos + src_size], "big") if len(data) >= 32 else -1
                    wan.admit(stamp, src, data)
                due = wan.due(time.monotonic())
                if batched:
                    self._feed_due(due)
                else:
                    for data, corrupt in due:
                        self._process(data, corrupt)
            if on_tick is not None:
                on_tick()


def counters_line(site, counters):
    """One JSON line of an aggregator's counters (what ``wanreduce aggd`` prints on request and on exit)."""
    return json.dumps({"site": site, "counters": {k: int(v) for k, v in counters.items()}})
