"""The host transport over real UDP: one site's hosts synchronising a tensor through the aggregators.

:class:`SiteTransport` does over sockets what the hosts of :func:`wanreduce.host.wan.simulate` do in
simulated time. For every round of the schedule the site takes part in, it multicasts each chunk of its
tensor as a CONTRIB to its group's address (:mod:`wanreduce.spec.addressing`) once both conditions of the
self-clocked window hold (PROTOCOL.md): its own RESULT for the chunk in the previous round it took part in
is in (the value sent is that RESULT divided by the group size, in the wire dtype), and its own RESULT for
the previous chunk of the same slot is in. It receives its aggregator's RESULTs on the site's host group,
divides, and moves on. Every sent chunk has a retransmission timer. Its floor is the co-simulation's
(:mod:`wanreduce.host.wan`: ``TIMEOUT_DELAYS`` times the group's widest one-way delay plus ``TIMEOUT_FRAMES``
frame times of the site's link) plus the software path's slack; on real processes it also adapts as TCP's
does (RFC 6298: an initial timeout until a RESULT has been timed, then the smoothed latency and its
variation, at least ``RTT_MAX_FACTOR`` times the slowest so far, Karn's rule, a backoff after an expiry),
because a member may send a chunk much later than this site does. A RESULT for a chunk already applied
makes it send its contribution once more (a member may lack it), with a doubling hold-off; after its own
tensor is done a site lingers (:meth:`SiteTransport.linger`) to keep answering so. After ``RETRIES``
retries the run stops with :class:`~wanreduce.host.wan.SiteTimeout` naming the site, the round and the
group. A whole run also has a deadline: it never blocks without one.

Latency: one window of ``bank_slots`` chunks per round trip to the group's farthest member. Back-pressure:
a full socket send buffer makes it wait until the socket is writable (bounded by the deadline).
"""

import collections
import dataclasses
import heapq
import math
import selectors
import time

import numpy as np

from ..spec import addressing
from ..spec.errors import WanreduceError
from ..spec.protocol import HEADER_BYTES, HEADER_LAYOUT, UDP_PORT, WIRE_OVERHEAD, DType, Kind
from .aggd import members_of
from .netio import drain, open_socket
from .packet import pack_tensor
from .protocol import bits_dtype, np_dtype
from .wan import RETRIES, TIMEOUT_DELAYS, TIMEOUT_FRAMES, SiteTimeout, chunk_count

__all__ = ["SiteTransport", "TransportRun", "SLACK_S"]

#: Added to every first retransmission timeout: what reading, aggregating and answering in software on a
#: shared machine may take on top of the WAN's delays.
SLACK_S = 0.1
#: A chunk's retransmission interval doubles this many times and then stays: with the measured timeouts
#: of a loaded machine, doubling all ``RETRIES`` times would take minutes to find a dead site.
BACKOFF_STEPS = 2
#: The measured part of a retransmission timeout is capped at this many times the model's first timeout.
RTO_CAP = 8
#: The timeout before any RESULT has been timed (RFC 6298's initial RTO): the first window of a run
#: meets every process starting at once.
INITIAL_RTO_S = 2.0
#: A timeout is at least this many times the slowest RESULT timed so far: a chunk's RESULT waits for the
#: member that sends it last, and members of a round come from rounds that ended at different times.
RTT_MAX_FACTOR = 3


def _field(name):
    pos, size = HEADER_LAYOUT[name]
    return slice(pos, pos + size)


_KIND, _JOB, _ROUND, _CHUNK, _SRC = (_field(f) for f in ("kind", "job", "round", "chunk", "src"))


@dataclasses.dataclass
class TransportRun:
    """What one site's transport did: its final tensor, per round the first send and last RESULT times
    (monotonic seconds minus the run's ``t0``; NaN where the site waits) and its recovery work."""

    values: np.ndarray
    first_send_s: list
    last_result_s: list
    sent: int = 0
    retransmits: int = 0
    resends_on_result: int = 0
    results_ignored: int = 0
    results_foreign: int = 0
    killed_at: int | None = None


class SiteTransport:
    """Site ``rank``'s hosts over UDP.

    ``layout`` is the aggregators' :class:`~wanreduce.host.aggd.SiteLayout` (chunk size and round-bank
    window); ``one_way_s`` the topology's one-way delay matrix (for the timeouts) and ``site_Bps`` the
    site's access-link rate in bytes/s on the wire (its frames are paced to it). ``wan`` emulates faults
    on the RESULTs this site receives (a :class:`~wanreduce.host.netio.WanEmulator`, or None).
    """

    def __init__(
        self,
        schedule,
        rank,
        *,
        layout,
        one_way_s,
        site_Bps,
        dtype=DType.FP32,
        interface="127.0.0.1",
        port=UDP_PORT,
        job=0,
        wan=None,
        slack_s=SLACK_S,
    ):
        if not 0 <= rank < schedule.n:
            raise WanreduceError(f"rank {rank} is outside 0..{schedule.n - 1} of the schedule")
        if not site_Bps > 0:
            raise ValueError(f"The site's link rate must be positive, not {site_Bps}.")
        self.schedule, self.rank, self.layout = schedule, rank, layout
        self.dtype = DType(dtype)
        self.D = np.asarray(one_way_s, float)
        self.frame_s = (layout.chunk_elems * self.dtype.size + WIRE_OVERHEAD) / float(site_Bps)
        self.interface, self.port, self.job, self.wan = interface, port, job, wan
        self.slack_s = float(slack_s)
        self.sock = None

    def open(self):
        self.sock = open_socket(
            interface=self.interface, port=self.port, groups=[addressing.site_group_ip(self.rank)]
        )
        return self

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def timeout0(self, members):
        """First retransmission timeout of a chunk in a round with group ``members``."""
        widest = max((self.D[j, k] for j in members for k in members), default=0.0)
        return TIMEOUT_DELAYS * widest + TIMEOUT_FRAMES * self.frame_s + self.slack_s

    def run(
        self, tensor, *, rounds=None, first_round=0, t0=None, deadline_s=600.0, kill_round=None, progress=None
    ):
        """Synchronise ``tensor`` over ``rounds`` rounds (default one period) numbered from ``first_round``
        (a later sync of the same job continues the numbering, so that no chunk of it looks like a
        retransmission of an earlier one); returns a :class:`TransportRun` whose per-round lists are
        indexed from 0 at ``first_round``. ``kill_round`` (counted the same way): send nothing of that
        round or later (a dead site), and return once every earlier round is done. Raises
        :class:`SiteTimeout` when a chunk runs out of retransmissions, :class:`WanreduceError` when
        ``deadline_s`` passes."""
        if self.sock is None:
            self.open()
        self._last = _Run(self, tensor, rounds, first_round, t0, deadline_s, kill_round, progress)
        return self._last.go()

    def linger(self, until, *, deadline_s=60.0):
        """After :meth:`run`: keep answering repeated RESULTs with this site's contribution (a member whose
        copy of it was lost asks that way) until ``until()`` is true or ``deadline_s`` passes, as a TCP
        connection lingers in TIME_WAIT. A site that leaves as soon as its own tensor is done can strand a
        member still waiting for it."""
        run = getattr(self, "_last", None)
        if run is not None and self.sock is not None:
            run.deadline = time.monotonic() + deadline_s
            run.go(until=until)


class _Run:
    """One synchronisation: the per-chunk state machine of the module docstring, on real time."""

    def __init__(self, tp, tensor, rounds, first_round, t0, deadline_s, kill_round, progress):
        sch, lay = tp.schedule, tp.layout
        self.tp, self.sch, self.progress = tp, sch, progress
        self.rounds = sch.period if rounds is None else int(rounds)
        self.vt = np_dtype(tp.dtype)
        self.bits = bits_dtype(tp.dtype)
        self.values = np.asarray(tensor).astype(self.vt).reshape(-1).copy()
        if self.values.size == 0:
            raise WanreduceError("the tensor is empty; there is nothing to synchronise")
        self.ce, self.bank = lay.chunk_elems, lay.bank_slots
        self.n_chunks = chunk_count(self.values.size, self.ce)
        self.t0 = time.monotonic() if t0 is None else t0
        self.deadline = time.monotonic() + deadline_s
        self.kill_round = kill_round
        rank = tp.rank
        self.first = int(first_round)
        self.group = [members_of(sch, rank, self.first + r) for r in range(self.rounds)]
        self.timeout = [tp.timeout0(m) if m else math.inf for _, m in self.group]
        self.prev_round, self.next_round = [None] * self.rounds, [None] * self.rounds
        last = None
        for r in range(self.rounds):
            if self.group[r][1]:
                self.prev_round[r] = last
                if last is not None:
                    self.next_round[last] = r
                last = r
        self.headers = {}
        self.applied = np.zeros((self.rounds, self.n_chunks), bool)
        self.waiting = {}
        self.ready = collections.deque()
        self.timers = []
        self.sent_payload = {}
        self.echoed = {}
        self.link_free = 0.0
        self.send_time = {}
        self.srtt = self.rttvar = None
        self.rtt_max = 0.0
        self.first_sent = {}
        self.backoff = 1
        nan = [math.nan] * self.rounds
        self.out = TransportRun(self.values, list(nan), list(nan), killed_at=kill_round)
        self.outstanding = 0
        for r in range(self.rounds):
            if not self.group[r][1] or (kill_round is not None and r >= kill_round):
                continue
            self.outstanding += self.n_chunks
            for c in range(self.n_chunks):
                need = (self.prev_round[r] is not None) + (self._window_pred(r, c) is not None)
                if need:
                    self.waiting[(r, c)] = need
                else:
                    self.ready.append((r, c))

    # The window of PROTOCOL.md: round r uses bank r mod P, chunk c the slot c mod bank_slots of it.
    def rto(self, r, *, backed_off=True):
        """The retransmission timeout of a chunk of round ``r``: the model's first timeout, or longer when
        the RESULTs measured so far take longer (members send later than this site, a loaded machine),
        doubled after each expiry until a RESULT comes back in time (as TCP backs off), and at most
        ``RTO_CAP`` times the model's, so that a dead site is still found in bounded time."""
        t = self.timeout[r]
        measured = (
            INITIAL_RTO_S
            if self.srtt is None
            else max(self.srtt + 4 * self.rttvar, RTT_MAX_FACTOR * self.rtt_max)
        )
        return min(max(t, measured) * (self.backoff if backed_off else 1), max(RTO_CAP * t, INITIAL_RTO_S))

    def _sample(self, rtt):
        """One RESULT latency of a chunk sent once (Karn: retransmitted chunks are not sampled)."""
        self.backoff = 1
        self.rtt_max = max(self.rtt_max, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar += (abs(self.srtt - rtt) - self.rttvar) / 4
            self.srtt += (rtt - self.srtt) / 8

    def _window_pred(self, r, c):
        if c >= self.bank:
            return r, c - self.bank
        if r - self.sch.period < 0:
            return None
        lane_last = c + ((self.n_chunks - 1 - c) // self.bank) * self.bank
        return r - self.sch.period, lane_last

    def _window_succ(self, r, c):
        if c + self.bank < self.n_chunks:
            return r, c + self.bank
        if r + self.sch.period < self.rounds:
            return r + self.sch.period, c % self.bank
        return None

    def _header_rows(self, r):
        rows = self.headers.get(r)
        if rows is None:
            gid = self.group[r][0]
            payloads = pack_tensor(
                np.zeros(self.values.size, self.vt),
                dtype=self.tp.dtype,
                rank=self.tp.rank,
                job=self.tp.job,
                round=self.first + r,
                group=gid,
                chunk_elems=self.ce,
            )
            rows = [bytes(p[:HEADER_BYTES]) for p in payloads]
            self.headers[r] = rows
        return rows

    def _payload(self, r, c):
        lo = c * self.ce
        data = self.values[lo : lo + self.ce].view(self.bits)
        return self._header_rows(r)[c] + data.tobytes()

    def _dest(self, r):
        gid = self.group[r][0]
        ip = addressing.contrib_group_ip(
            job=self.tp.job, round=self.first + r, group=gid, period=self.sch.period
        )
        return ip, self.tp.port

    def _met(self, r, c):
        key = (r, c)
        left = self.waiting.get(key)
        if left is None:
            return
        if left > 1:
            self.waiting[key] = left - 1
        else:
            del self.waiting[key]
            self.ready.append(key)

    def _send_ready(self, now):
        """Send what is ready, paced to the access link; False if the socket's buffer is full."""
        sock = self.tp.sock
        while self.ready:
            if self.link_free > now + 1e-3:
                return True  # the link is booked a millisecond ahead: let time pass
            r, c, *again = self.ready[0]
            if self.kill_round is not None and r >= self.kill_round:
                self.ready.popleft()
                continue
            payload = self.sent_payload.get((r, c)) if again else None
            if payload is None:
                payload = self._payload(r, c)
            try:
                sock.sendto(payload, self._dest(r))
            except BlockingIOError:
                return False
            self.ready.popleft()
            self.out.sent += 1
            self.link_free = max(now, self.link_free) + self.tp.frame_s
            if not again:
                self.sent_payload[(r, c)] = payload
                if math.isnan(self.out.first_send_s[r]):
                    self.out.first_send_s[r] = now - self.t0
                self.send_time[(r, c)] = now
                self.first_sent[(r, c)] = now
                heapq.heappush(self.timers, (now + self.rto(r), r, c, 0))
        return True

    def _resend(self, r, c):
        self.ready.append((r, c, True))

    def _expire(self, now):
        while self.timers and self.timers[0][0] <= now:
            _, r, c, k = heapq.heappop(self.timers)
            if self.applied[r, c]:
                continue
            sent_at = self.send_time.get((r, c))
            if k == 0 and sent_at is not None and now < sent_at + self.rto(r):
                # The timeout grew since this timer was set (a slow RESULT elsewhere): wait it out.
                heapq.heappush(self.timers, (sent_at + self.rto(r), r, c, 0))
                continue
            if k >= RETRIES:
                self._give_up(r, c)
            self.out.retransmits += 1
            self.send_time.pop((r, c), None)
            if k == 0:
                self.backoff = min(2 * self.backoff, RTO_CAP)
            self._resend(r, c)
            step = 1 << min(k + 1, BACKOFF_STEPS)
            heapq.heappush(self.timers, (now + self.rto(r, backed_off=False) * step, r, c, k + 1))

    def _give_up(self, r, c):
        names, rank = self.sch.sites, self.tp.rank
        members = self.group[r][1]
        waited = time.monotonic() - self.first_sent.get((r, c), self.t0)
        raise SiteTimeout(
            f"round {self.first + r}: {names[rank]} has no RESULT for chunk {c} of group "
            f"{{{','.join(names[m] for m in members)}}} after {waited:.3g} s ({RETRIES} retransmissions); "
            "a member is dead or unreachable; stopping rather than summing without it",
            site=rank,
            round=self.first + r,
            chunk=c,
            missing=(),
        )

    def _holds(self, r, c):
        succ = self._window_succ(r, c)
        return succ is None or not self.group[succ[0]][1] or not self.applied[succ]

    def _on_result(self, data, now):
        tp = self.tp
        if (
            len(data) < HEADER_BYTES
            or data[_KIND][0] != Kind.RESULT
            or int.from_bytes(data[_JOB], "big") != tp.job
            or int.from_bytes(data[_SRC], "big") != tp.rank
        ):
            self.out.results_foreign += 1
            return
        r, c = int.from_bytes(data[_ROUND], "big") - self.first, int.from_bytes(data[_CHUNK], "big")
        if not (0 <= r < self.rounds and c < self.n_chunks and self.group[r][1]):
            self.out.results_foreign += 1
            return
        if self.kill_round is not None and r >= self.kill_round:
            return
        if self.applied[r, c]:
            self.out.results_ignored += 1
            last, n_echo = self.echoed.get((r, c), (-math.inf, 0))
            if now - last >= self.rto(r) * (1 << n_echo) and self._holds(r, c):
                self.echoed[(r, c)] = (now, n_echo + 1)
                self.out.resends_on_result += 1
                self._resend(r, c)
            return
        lo = c * self.ce
        hi = min(lo + self.ce, self.values.size)
        elems = np.frombuffer(data, self.bits, offset=HEADER_BYTES).view(self.vt)
        if elems.size != hi - lo:
            self.out.results_foreign += 1
            return
        g = len(self.group[r][1])
        with np.errstate(all="ignore"):
            np.divide(elems, self.vt.type(g), out=self.values[lo:hi])  # the wire dtype's own division
        self.applied[r, c] = True
        sent_at = self.send_time.pop((r, c), None)
        if sent_at is not None:
            self._sample(now - sent_at)
        self.outstanding -= 1
        self.out.last_result_s[r] = max(
            now - self.t0, 0.0 if math.isnan(self.out.last_result_s[r]) else self.out.last_result_s[r]
        )
        nr = self.next_round[r]
        if nr is not None:
            self._met(nr, c)
        succ = self._window_succ(r, c)
        if succ is not None and self.group[succ[0]][1]:
            self._met(*succ)
        if self.progress is not None and not (~self.applied[r]).any():
            self.progress(f"round {r} done at {now - self.t0:.3f} s")

    def go(self, until=None):
        tp = self.tp
        sel = selectors.DefaultSelector()
        sel.register(tp.sock, selectors.EVENT_READ)
        writable = True
        try:
            while self.outstanding if until is None else not until():
                now = time.monotonic()
                if until is not None and now > self.deadline:
                    break
                if now > self.deadline:
                    r = int(np.argmin(self.applied.all(axis=1)))
                    raise WanreduceError(
                        f"round {r}: {self.sch.sites[tp.rank]} did not finish before its deadline"
                    )
                self._expire(now)
                if writable:
                    writable = self._send_ready(now)
                wait = 0.05
                if self.timers:
                    wait = min(wait, max(0.0, self.timers[0][0] - now))
                if self.ready:
                    wait = min(wait, max(0.0, self.link_free - now))
                if self.tp.wan is not None and self.tp.wan.queue:
                    wait = min(wait, max(0.0, self.tp.wan.next_due() - now))
                sel.modify(tp.sock, selectors.EVENT_READ | (0 if writable else selectors.EVENT_WRITE))
                for _, mask in sel.select(wait):
                    if mask & selectors.EVENT_WRITE:
                        writable = True
                batch = drain(tp.sock)
                now = time.monotonic()
                if tp.wan is None:
                    for data in batch:
                        self._on_result(data, now)
                else:
                    for data in batch:
                        tp.wan.admit(now, tp.rank, data)
                    for data, corrupt in tp.wan.due(now):
                        if not corrupt:  # the UDP checksum drops a corrupted RESULT: a loss to the host
                            self._on_result(data, now)
        finally:
            sel.close()
        return self.out
