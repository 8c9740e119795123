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
makes it send its contribution once more (a member may lack it), at most once per timeout; after its
own tensor is done a site lingers (:meth:`SiteTransport.linger`)
to keep answering so. After ``RETRIES`` retries a chunk is still resent at that capped interval, and once
``DEAD_AFTER`` times the longest a live member may wait between two sends of the chunk has passed since
its first send, the run stops with :class:`~wanreduce.host.wan.SiteTimeout` naming the
site, the round and the group. A whole run also has a deadline: it never blocks without one.

Latency: one window of ``bank_slots`` chunks per round trip to the group's farthest member. Back-pressure:
a full socket send buffer makes it wait until the socket is writable (bounded by the deadline).
"""

import collections
import dataclasses
import math
import selectors
import time

import numpy as np

from ..spec import addressing
from ..spec.errors import WanreduceError
from ..spec.protocol import HEADER_BYTES, HEADER_LAYOUT, WIRE_OVERHEAD, DType, Kind
from . import fastio
from .aggd import SiteSocket, members_of
from .mmsg import Receiver, Sender
from .netio import open_socket
from .packet import contrib_headers
from .protocol import HEADER_DTYPE, bits_dtype, np_dtype
from .wan import RETRIES, TIMEOUT_DELAYS, TIMEOUT_FRAMES, SiteTimeout, chunk_count

__all__ = ["SiteTransport", "TransportRun", "SLACK_S"]


def _word(name, size):
    """``(byte offset, index as a word of size bytes)`` of a header field of that size."""
    pos, n = HEADER_LAYOUT[name]
    if n != size or pos % size:
        raise AssertionError(f"the header field {name} is not an aligned {size}-byte word")
    return pos, pos // size


_ROUND, _CHUNK, _JOB, _SRC = _word("round", 4), _word("chunk", 4), _word("job", 2), _word("src", 2)
_KIND = HEADER_LAYOUT["kind"][0]
#: The header bytes a run of RESULTs shares (udpio_run_of's mask).
_SAME = np.zeros(HEADER_BYTES, np.uint8)
for _name in ("kind", "job", "round", "src"):
    _pos, _size = HEADER_LAYOUT[_name]
    _SAME[_pos : _pos + _size] = 1


def _run_slice(cs):
    """``cs`` as a slice when it lists consecutive chunks in increasing order (the usual block: views, not
    copies, then), else ``cs`` itself. Its ends and length alone do not say so: a block released out of
    order, such as ``[40, 39, 42]``, has the ends and length of ``40:43``."""
    a, b = int(cs[0]), int(cs[-1]) + 1
    if b - a == len(cs) and (len(cs) < 3 or bool((np.diff(cs) == 1).all())):
        return slice(a, b)
    return cs


#: Added to every first retransmission timeout: what reading, aggregating and answering in software on a
#: shared machine may take on top of the WAN's delays.
SLACK_S = 0.1
#: A chunk's retransmission interval doubles this many times and then stays: with the measured timeouts
#: of a loaded machine, doubling all ``RETRIES`` times would take minutes to find a dead site.
BACKOFF_STEPS = 2
#: The measured part of a retransmission timeout is capped at this many times the model's first timeout.
RTO_CAP = 8
#: A chunk runs out of retransmissions only once this many times the longest wait between two sends of a
#: live member (:meth:`_Run.longest_wait`) has passed since its first send: a member's own timeout may be
#: backed off to its cap while this site's is at its floor, and its next resend must be given the time to
#: come before this site calls it dead.
DEAD_AFTER = 1.25
#: The timeout before any RESULT has been timed (RFC 6298's initial RTO): the first window of a run
#: meets every process starting at once.
INITIAL_RTO_S = 2.0
#: A timeout is at least this many times the slowest RESULT timed so far: a chunk's RESULT waits for the
#: member that sends it last, and members of a round come from rounds that ended at different times.
RTT_MAX_FACTOR = 3
#: The scheduling margin: a timeout also allows this many times the longest this process has been seen to
#: wake up late (every process of a site, aggregator and members alike, shares the machine's scheduler).
MARGIN_FACTOR = 4
#: Datagrams read (and sent) per system call.
RECV_BATCH = 256
#: When a read finds only a few RESULTs and nothing waits to be sent, the transport lets more arrive for
#: this long before reading again (interrupt coalescing, as NICs do): a batch's fixed cost is then shared
#: by many RESULTs, at the price of this much latency, small beside any WAN's.
COALESCE_S = 0.0005


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


class SiteTransport(SiteSocket):
    """Site ``rank``'s hosts over UDP.

    ``layout`` is the aggregators' :class:`~wanreduce.host.aggd.SiteLayout` (chunk size and round-bank
    window); ``one_way_s`` the topology's one-way delay matrix (for the timeouts) and ``site_Bps`` the
    site's access-link rate in bytes/s on the wire (its frames are paced to it). ``wan`` emulates faults
    on the RESULTs this site receives (a :class:`~wanreduce.host.netio.WanEmulator`, or None).
    """

    def __init__(
        self, schedule, rank, *, layout, one_way_s, site_Bps, dtype=DType.FP32, slack_s=SLACK_S, **where
    ):
        super().__init__(schedule, rank, **where)
        if not site_Bps > 0:
            raise ValueError(f"The site's link rate must be positive, not {site_Bps}.")
        self.layout = layout
        self.dtype = DType(dtype)
        self.D = np.asarray(one_way_s, float)
        self.frame_s = (layout.chunk_elems * self.dtype.size + WIRE_OVERHEAD) / float(site_Bps)
        self.slack_s = float(slack_s)
        # Kept from one run to the next (a trainer syncs every step): the receive rows, and a sender per
        # group address with its message headers.
        self._rx = None
        self._senders = {}

    def open(self):
        self.sock = open_socket(
            interface=self.interface, port=self.port, groups=[addressing.site_group_ip(self.rank)]
        )
        self._receiver().attach(self.sock)
        return self

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        # Its native state read that socket, and the senders marked it as cutting GSO runs by its number,
        # which the next socket may reuse.
        self._rx = None
        self._senders = {}

    def _receiver(self):
        """The receive rows: one word longer than a RESULT, so that a longer datagram is cut, and fails
        the length check."""
        body = self.layout.chunk_elems * self.dtype.size
        if self._rx is None:
            row = HEADER_BYTES + (body + 7) // 4 * 4
            self._rx = Receiver(
                batch=RECV_BATCH, row_bytes=row, segment=HEADER_BYTES + body, head_bytes=HEADER_BYTES
            )
        return self._rx

    def _sender(self, ip):
        sender = self._senders.get(ip)
        if sender is None:
            whole = HEADER_BYTES + self.layout.chunk_elems * self.dtype.size
            sender = self._senders[ip] = Sender((ip, self.port), batch=RECV_BATCH, segment=whole)
        return sender

    def timeout0(self, members):
        """First retransmission timeout of a chunk in a round with group ``members``."""
        widest = max((self.D[j, k] for j in members for k in members), default=0.0)
        return TIMEOUT_DELAYS * widest + TIMEOUT_FRAMES * self.frame_s + self.slack_s

    def run(
        self,
        tensor,
        *,
        rounds=None,
        first_round=0,
        t0=None,
        deadline_s=600.0,
        kill_round=None,
        progress=None,
        out=None,
    ):
        """Synchronise ``tensor`` over ``rounds`` rounds (default one period) numbered from ``first_round``
        (a later sync of the same job continues the numbering, so that no chunk of it looks like a
        retransmission of an earlier one); returns a :class:`TransportRun` whose per-round lists are
        indexed from 0 at ``first_round``. ``kill_round`` (counted the same way): send nothing of that
        round or later (a dead site), and return once every earlier round is done. Raises
        :class:`SiteTimeout` when a chunk runs out of retransmissions, :class:`WanreduceError` when
        ``deadline_s`` passes. ``out``: where the result goes (a C-contiguous array of the tensor's size
        in the wire dtype, not the tensor itself, as numpy's ``out``): a caller that syncs again and again
        keeps one, rather than a new result array's pages each time; the run's ``values`` is then ``out``
        (flattened)."""
        if self.sock is None:
            self.open()
        self._last = _Run(self, tensor, rounds, first_round, t0, deadline_s, kill_round, progress, out)
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
    """One synchronisation: the per-chunk state machine of the module docstring, on real time, kept in
    (round, chunk) arrays and advanced a batch of datagrams at a time."""

    def __init__(self, tp, tensor, rounds, first_round, t0, deadline_s, kill_round, progress, out):
        sch, lay = tp.schedule, tp.layout
        self.tp, self.sch, self.progress = tp, sch, progress
        self.rounds = R = sch.period if rounds is None else int(rounds)
        self.vt = np_dtype(tp.dtype)
        self.bits = bits_dtype(tp.dtype)
        # The tensor itself (not copied when it is contiguous in the wire dtype): the first round this site
        # takes part in sends its chunks straight from it.
        self.flat = flat = np.ascontiguousarray(np.asarray(tensor).astype(self.vt, copy=False).reshape(-1))
        if flat.size == 0:
            raise WanreduceError("the tensor is empty; there is nothing to synchronise")
        self.ce, self.bank = lay.chunk_elems, lay.bank_slots
        self.n_chunks = N = chunk_count(flat.size, self.ce)
        # The result padded to whole chunks, one row per chunk; ``values`` is the tensor's part of it. A
        # chunk holds the tensor's values only once no RESULT came for it (``fresh``, see _settle).
        self.dest = None
        if out is not None:
            if not (
                isinstance(out, np.ndarray)
                and out.dtype == self.vt
                and out.size == flat.size
                and out.flags.c_contiguous
                and out.flags.writeable
            ):
                raise ValueError(
                    f"The result's array must be a writeable C-contiguous {self.vt} array of {flat.size} "
                    "elements."
                )
            if np.may_share_memory(out, flat):
                raise ValueError(
                    "The result's array must not overlap the tensor (its chunks are sent from it)."
                )
            self.dest = out.reshape(-1)
        if self.dest is not None and flat.size == N * self.ce:
            self.grid = self.dest.reshape(N, self.ce)  # RESULTs divided straight into it
        else:
            self.grid = np.empty((N, self.ce), self.vt)
        self.values = self.grid.reshape(-1)[: flat.size]
        self.fresh = np.ones(N, bool)
        self.counts = np.full(N, self.ce, np.int64)
        self.counts[-1] = flat.size - (N - 1) * self.ce
        self.t0 = time.monotonic() if t0 is None else t0
        self.deadline = time.monotonic() + deadline_s
        self.kill_round = kill_round
        self.first = int(first_round)
        self.group = [members_of(sch, tp.rank, self.first + r) for r in range(R)]
        self.timeout = [tp.timeout0(m) if m else math.inf for _, m in self.group]
        self.prev_round, self.next_round = [None] * R, [None] * R
        last = None
        for r in range(R):
            if self.group[r][1]:
                self.prev_round[r] = last
                if last is not None:
                    self.next_round[last] = r
                last = r
        # Rounds this site sends in (it takes part and, if killed, before the kill).
        self.live = np.array(
            [bool(self.group[r][1]) and (kill_round is None or r < kill_round) for r in range(R)], bool
        )
        self.applied = np.zeros((R, N), bool)
        self.sent_at = np.full((R, N), np.nan)  # first send, until retransmitted (Karn: then not timed)
        self.first_sent = np.full((R, N), np.nan)
        self.due = np.full((R, N), np.inf)  # when the chunk's retransmission timer expires
        self.retries = np.zeros((R, N), np.int64)
        self.next_check = math.inf
        self.heads = [None] * R  # per round: the CONTRIB headers, one row per chunk, written once
        self.payloads = [None] * R  # per later round: the contributions as sent, kept for retransmissions
        self.senders = [None] * R
        self.payload_at = [None] * R  # where each round's payloads are, a chunk a row
        self.ready = collections.deque()  # blocks (round, chunk array, again)
        self.echoed = {}
        self.link_free = 0.0
        self.srtt = self.rttvar = None
        self.rtt_max = 0.0
        self.lateness = 0.0  # the most this process has woken up after it meant to (seconds)
        self.backoff = 1
        nan = [math.nan] * R
        self.out = TransportRun(self.values, list(nan), list(nan), killed_at=kill_round)
        self.outstanding = int(self.live.sum()) * N
        self.lanes = lanes = np.arange(N)
        self.waiting = np.zeros((R, N), np.int64)
        for r in np.flatnonzero(self.live).tolist():
            need = np.full(N, int(self.prev_round[r] is not None))
            need += (lanes >= self.bank) | (r - sch.period >= 0)  # the window's predecessor exists
            self.waiting[r] = need
            free = lanes[need == 0]
            if free.size:
                self.ready.append((r, free, False))
        self.rx = tp._receiver()
        # What a RESULT of this site's is, per round and chunk, for the check of a whole batch at once.
        self.payload_len = self.counts * tp.dtype.size
        self.head_at = self.lanes * HEADER_BYTES  # a chunk's header in its round's header rows
        self.wanted_len = HEADER_BYTES + self.payload_len
        # The chunk numbers as numpy reads their big-endian header words natively.
        self.chunk_words = np.arange(N, dtype=">u4").view(np.uint32)
        self.takes = np.array([bool(g[1]) for g in self.group])
        if kill_round is not None:
            self.takes[max(0, min(kill_round, R)) : R] = False
        self.last_read = 0  # RESULTs the last read found
        self._rv = self.rx.rows[:, HEADER_BYTES:].view(self.bits)
        lib = fastio.library()
        binary32 = lib is not None and self.vt == np.float32 and self.grid.flags.c_contiguous
        self._div = lib.udpio_div_f32 if binary32 else None
        self._run_of = None if lib is None else lib.udpio_run_of
        self._heads_at = self.rx.heads.ctypes.data
        self._same_at = _SAME.ctypes.data
        self._rows_at = self.rx.rows.ctypes.data + HEADER_BYTES
        self._grid_at = self.grid.ctypes.data

    # The window of PROTOCOL.md: round r uses bank r mod P, chunk c the slot c mod bank_slots of it.
    def rto(self, r, *, backed_off=True):
        """The retransmission timeout of a chunk of round ``r``: the model's first timeout plus the
        scheduling margin measured so far, or longer when the RESULTs measured so far take longer (members
        send later than this site, a loaded machine), doubled after each expiry until a RESULT comes back in
        time (as TCP backs off), and at most ``RTO_CAP`` times the model's, so that a dead site is still
        found in bounded time."""
        t = self.timeout[r] + MARGIN_FACTOR * self.lateness
        measured = (
            INITIAL_RTO_S
            if self.srtt is None
            else max(self.srtt + 4 * self.rttvar, RTT_MAX_FACTOR * self.rtt_max)
        )
        return min(max(t, measured) * (self.backoff if backed_off else 1), max(RTO_CAP * t, INITIAL_RTO_S))

    def longest_wait(self, r):
        """The longest a live member of round ``r`` waits between two sends of a chunk: a timeout at its
        cap, doubled ``BACKOFF_STEPS`` times (as :meth:`_expire` steps it)."""
        t = self.timeout[r] + MARGIN_FACTOR * self.lateness
        return max(RTO_CAP * t, INITIAL_RTO_S) * (1 << BACKOFF_STEPS)

    def _sample(self, rtt):
        """One RESULT latency of a chunk sent once (Karn: retransmitted chunks are not sampled)."""
        self.backoff = 1
        self.rtt_max = max(self.rtt_max, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar += (abs(self.srtt - rtt) - self.rttvar) / 4
            self.srtt += (rtt - self.srtt) / 8

    def _succ(self, r, cs):
        """The chunks whose window waits on ``(r, cs)``: ``(r, c + bank)``, else ``(r + P, c mod bank)``."""
        nxt = cs + self.bank
        inside = nxt < self.n_chunks
        out = [(r, nxt[inside])]
        if r + self.sch.period < self.rounds:
            out.append((r + self.sch.period, cs[~inside] % self.bank))
        return out

    def _round_heads(self, r):
        heads = self.heads[r]
        if heads is None:
            gid = self.group[r][0]
            heads = self.heads[r] = contrib_headers(
                self.flat.size,
                dtype=self.tp.dtype,
                rank=self.tp.rank,
                job=self.tp.job,
                round=self.first + r,
                group=gid,
                chunk_elems=self.ce,
            )
            if self.prev_round[r] is not None:
                # A later round's contribution is the previous round's result, which the grid holds only
                # until the next RESULT for the chunk: a retransmission must send the same bits again.
                self.payloads[r] = np.empty((self.n_chunks, self.ce), self.vt)
            ip = addressing.contrib_group_ip(
                job=self.tp.job, round=self.first + r, group=gid, period=self.sch.period
            )
            self.senders[r] = self.tp._sender(ip)
        return heads

    def _payload_addrs(self, r):
        """Where the payloads of round ``r``'s chunks are (the tensor, or the round's own copy), a chunk a
        row."""
        at = self.payload_at[r]
        if at is None:
            src = self.flat if self.payloads[r] is None else self.payloads[r]
            at = self.payload_at[r] = src.ctypes.data + self.lanes.astype(np.uint64) * np.uint64(
                self.ce * self.tp.dtype.size
            )
        return at

    def _settle(self):
        """The chunks no RESULT came for keep the tensor's values (a site with no round, or killed)."""
        idx = np.flatnonzero(self.fresh)
        if idx.size:
            ce, N = self.ce, self.n_chunks
            whole = idx[idx < N - 1]
            self.grid[whole] = self.flat[: (N - 1) * ce].reshape(N - 1, ce)[whole]
            if self.fresh[N - 1]:
                self.values[(N - 1) * ce :] = self.flat[(N - 1) * ce :]
            self.fresh[idx] = False

    def _send_ready(self, now):
        """Send what is ready, paced to the access link; False if the socket's buffer is full."""
        frame_s = self.tp.frame_s
        while self.ready:
            if self.link_free > now + 1e-3:
                return True  # the link is booked a millisecond ahead: let time pass
            r, cs, again = self.ready[0]
            room = int((now + 1e-3 - max(now, self.link_free)) / frame_s) + 1 if frame_s > 0 else len(cs)
            part = cs[:room]
            heads = self._round_heads(r)
            pick = _run_slice(part)
            if not again and self.payloads[r] is not None:
                # The contribution is the tensor's chunk now: the last RESULT applied divided by the group.
                self.payloads[r][pick] = self.grid[pick]
            k = self.senders[r].send_parts(
                self.tp.sock,
                heads,
                self.head_at[pick],
                HEADER_BYTES,
                self._payload_addrs(r)[pick],
                self.payload_len[pick],
            )
            if k == len(cs):
                self.ready.popleft()
            else:
                self.ready[0] = (r, cs[k:], again)
            done = pick if k == len(part) else part[:k]
            self.out.sent += k
            self.link_free = max(now, self.link_free) + k * frame_s
            if not again and k:
                if math.isnan(self.out.first_send_s[r]):
                    self.out.first_send_s[r] = now - self.t0
                self.sent_at[r, done] = now
                self.first_sent[r, done] = now
                due = now + self.rto(r)
                self.due[r, done] = due
                self.next_check = min(self.next_check, due)
            if k < len(part):
                return False
        return True

    def _expire(self, now):
        if now < self.next_check:
            return
        rs, cs = np.nonzero(self.due <= now)
        for r, c in zip(rs.tolist(), cs.tolist(), strict=True):
            if self.applied[r, c]:
                self.due[r, c] = math.inf
                continue
            k = int(self.retries[r, c])
            sent_at = self.sent_at[r, c]
            if k == 0 and not math.isnan(sent_at) and now < sent_at + self.rto(r):
                # The timeout grew since this timer was set (a slow RESULT elsewhere): wait it out.
                self.due[r, c] = sent_at + self.rto(r)
                continue
            dead_at = math.inf
            if k >= RETRIES:
                # Out of retransmissions, but a member whose timeout is backed off to its cap may still
                # resend: keep sending at the capped interval (each copy also makes members that have the
                # RESULT echo their contributions) until the dead-site horizon.
                first = self.first_sent[r, c]
                dead_at = (self.t0 if math.isnan(first) else first) + DEAD_AFTER * self.longest_wait(r)
                if now >= dead_at:
                    self._give_up(r, c)
            self.out.retransmits += 1
            self.sent_at[r, c] = math.nan
            if k == 0:
                self.backoff = min(2 * self.backoff, RTO_CAP)
            self.ready.append((r, np.array([c]), True))
            step = 1 << min(k + 1, BACKOFF_STEPS)
            self.due[r, c] = min(now + self.rto(r, backed_off=False) * step, dead_at)
            self.retries[r, c] = k + 1
        self.next_check = float(self.due.min())

    def _give_up(self, r, c):
        names, rank = self.sch.sites, self.tp.rank
        members = self.group[r][1]
        first = self.first_sent[r, c]
        waited = time.monotonic() - (self.t0 if math.isnan(first) else first)
        raise SiteTimeout(
            f"round {self.first + r}: {names[rank]} has no RESULT for chunk {c} of group "
            f"{{{','.join(names[m] for m in members)}}} after {waited:.3g} s "
            f"({int(self.retries[r, c])} retransmissions); "
            "a member is dead or unreachable; stopping rather than summing without it",
            site=rank,
            round=self.first + r,
            chunk=c,
            missing=(),
        )

    def _holds(self, r, c):
        for sr, sc in self._succ(r, np.array([c])):
            if sc.size:
                return not self.group[sr][1] or not self.applied[sr, sc[0]]
        return True

    def _one_run(self, hb, c0, c1):
        """Whether headers ``hb`` agree with the first on kind, job, round and source and number the
        chunks ``c0:c1`` in order: in udpio.cc for the receive loop's own packed headers, else on the
        header words as they lie (big-endian fields against big-endian constants: no conversions)."""
        if self._run_of is not None and hb.base is self.rx.heads:
            return bool(self._run_of(self._heads_at, HEADER_BYTES, len(hb), self._same_at, _CHUNK[0]))
        w16, w32 = hb.view(np.uint16), hb.view(np.uint32)
        return bool(
            (w32[:, _CHUNK[1]] == self.chunk_words[c0:c1]).all()
            and (w32[:, _ROUND[1]] == w32[0, _ROUND[1]]).all()
            and (hb[:, _KIND] == hb[0, _KIND]).all()
            and (w16[:, _JOB[1]] == w16[0, _JOB[1]]).all()
            and (w16[:, _SRC[1]] == w16[0, _SRC[1]]).all()
        )

    def _on_results(self, rows, heads, lengths, now):
        """A batch of datagrams on the site's host group: RESULTs for this site checked all at once on
        their headers, applied (divided by the group size in the wire dtype) and their successors
        released; anything else is counted as foreign or ignored."""
        n = len(lengths)
        hb = heads[:n]
        # The usual batch first: new RESULTs of this site for a run of chunks of one round, in order (what
        # the general rules below make of it too): its first header judged field by field, the others
        # against it (the same kind, job, round and source, the chunk counting up by one).
        first = hb[0].tobytes()
        r0 = int.from_bytes(first[_ROUND[0] : _ROUND[0] + 4], "big") - self.first
        c0 = int.from_bytes(first[_CHUNK[0] : _CHUNK[0] + 4], "big")
        c1 = c0 + n
        if (
            0 <= r0 < self.rounds
            and self.takes[r0]
            and c1 <= self.n_chunks
            and first[_KIND] == Kind.RESULT
            and int.from_bytes(first[_JOB[0] : _JOB[0] + 2], "big") == self.tp.job
            and int.from_bytes(first[_SRC[0] : _SRC[0] + 2], "big") == self.tp.rank
            and self._one_run(hb, c0, c1)
            and (lengths == self.wanted_len[c0:c1]).all()
            and not self.applied[r0, c0:c1].any()
        ):
            self._apply_run(r0, c0, c1, now)
            return
        h = hb.view(HEADER_DTYPE)[:, 0]
        r = h["round"].astype(np.int64) - self.first
        c = h["chunk"].astype(np.int64)
        ours = (
            (lengths >= HEADER_BYTES)
            & (h["kind"] == Kind.RESULT)
            & (h["job"] == self.tp.job)
            & (h["src"] == self.tp.rank)
            & (r >= 0)
            & (r < self.rounds)
            & (c < self.n_chunks)
        )
        rr, cc = np.where(ours, r, 0), np.where(ours, c, 0)
        ours &= np.array([bool(g[1]) for g in self.group])[rr]
        ours &= lengths == HEADER_BYTES + self.counts[cc] * self.tp.dtype.size
        self.out.results_foreign += int(n - ours.sum())
        if self.kill_round is not None:
            ours &= rr < self.kill_round
        idx = np.flatnonzero(ours)
        if not idx.size:
            return
        key = (rr[idx] * self.n_chunks + cc[idx]).tolist()
        if len(set(key)) == len(key):
            new = ~self.applied[rr[idx], cc[idx]]
        else:  # the same RESULT twice in one batch: the first copy applies
            seen, new = set(), np.zeros(idx.size, bool)
            for j, kk in enumerate(key):
                new[j] = kk not in seen
                seen.add(kk)
            new &= ~self.applied[rr[idx], cc[idx]]
        for i in idx[~new].tolist():
            self._echo(int(rr[i]), int(cc[i]), now)
        fresh = idx[new]
        rounds = rr[fresh]
        distinct = set(rounds.tolist())
        for rnd in distinct:
            pick = fresh if len(distinct) == 1 else fresh[rounds == rnd]
            self._apply(rnd, cc[pick], pick, now)

    def _echo(self, r, c, now):
        """A RESULT for a chunk already applied: a member may lack this site's contribution."""
        self.out.results_ignored += 1
        # At most once per timeout, never backed off: the member asking retransmits at intervals of a few
        # timeouts until its dead-site horizon, and each of its tries must find this site ready to answer.
        # Done members answering each other's resends keep that rate, and stop when they stop lingering.
        if now - self.echoed.get((r, c), -math.inf) >= self.rto(r, backed_off=False) and self._holds(r, c):
            self.echoed[(r, c)] = now
            self.out.resends_on_result += 1
            self.ready.append((r, np.array([c]), True))

    def _apply_run(self, r, c0, c1, now):
        """:meth:`_apply` of chunks ``c0:c1`` of round ``r`` from receive rows ``0:c1 - c0``, on slices."""
        g = self.vt.type(len(self.group[r][1]))
        if self._div is not None:
            # binary32 in udpio.cc: the same division, without numpy's buffering of strided rows
            size = self.ce * 4
            self._div(
                self._rows_at, self.rx.row_bytes, self._grid_at + c0 * size, size, c1 - c0, self.ce, float(g)
            )
        else:
            with np.errstate(all="ignore"):
                np.divide(self._rv[: c1 - c0, : self.ce].view(self.vt), g, out=self.grid[c0:c1])
        self.fresh[c0:c1] = False
        self.applied[r, c0:c1] = True
        self.due[r, c0:c1] = math.inf
        oldest = float(np.fmin.reduce(self.sent_at[r, c0:c1]))  # NaN: none was timed
        if not math.isnan(oldest):
            self._sample(now - oldest)
        self.outstanding -= c1 - c0
        last = self.out.last_result_s[r]
        self.out.last_result_s[r] = max(now - self.t0, 0.0 if math.isnan(last) else last)
        P, bank, N = self.sch.period, self.bank, self.n_chunks
        nr = self.next_round[r]
        if nr is not None:
            self._release(nr, c0, c1)
        # The window's successors: (r, c + bank) inside the tensor, else (r + P, c mod bank).
        inside = min(c1, max(c0, N - bank))
        self._release(r, c0 + bank, inside + bank)
        if inside < c1 and r + P < self.rounds:
            cs = self.lanes[inside:c1] % bank
            if self.live[r + P]:
                waiting = self.waiting[r + P]
                waiting[cs] -= 1
                go = cs[waiting[cs] == 0]
                if go.size:
                    self.ready.append((r + P, go, False))
        if self.progress is not None and self.applied[r].all():
            self.progress(f"round {r} done at {now - self.t0:.3f} s")

    def _release(self, r, a, b):
        """Chunks ``a:b`` of round ``r`` have one predecessor fewer to wait for; those with none are ready."""
        if a < b and self.live[r]:
            waiting = self.waiting[r, a:b]
            waiting -= 1
            go = np.flatnonzero(waiting == 0)
            if go.size:
                self.ready.append((r, go + a, False))

    def _apply(self, r, cs, rows_idx, now):
        g = self.vt.type(len(self.group[r][1]))
        k = len(cs)
        with np.errstate(all="ignore"):
            # The wire dtype's own division, as the numpy model of the schedule divides.
            c0, i0 = int(cs[0]), int(rows_idx[0])
            if k == 1 or ((np.diff(cs) == 1).all() and (np.diff(rows_idx) == 1).all()):
                # In order (the usual case): divided from the received rows straight into the grid.
                np.divide(self._rv[i0 : i0 + k, : self.ce].view(self.vt), g, out=self.grid[c0 : c0 + k])
            else:
                self.grid[cs] = self._rv[rows_idx, : self.ce].view(self.vt) / g
        self.fresh[cs] = False
        self.applied[r, cs] = True
        self.due[r, cs] = math.inf
        sent = self.sent_at[r, cs]
        timed = sent[~np.isnan(sent)]
        if timed.size:
            # One sample per batch (RFC 6298 asks for at least one per round trip), its slowest RESULT:
            # a batch's RESULTs come back together, and a timer had better err long.
            self._sample(now - float(timed.min()))
        self.outstanding -= len(cs)
        self.out.last_result_s[r] = max(
            now - self.t0, 0.0 if math.isnan(self.out.last_result_s[r]) else self.out.last_result_s[r]
        )
        released = []
        nr = self.next_round[r]
        if nr is not None:
            released.append((nr, cs))
        released += self._succ(r, cs)
        for sr, sc in released:  # each part lists distinct chunks
            if sc.size and self.live[sr]:
                waiting = self.waiting[sr]
                waiting[sc] -= 1
                go = sc[waiting[sc] == 0]
                if go.size:
                    self.ready.append((sr, go, False))
        if self.progress is not None and self.applied[r].all():
            self.progress(f"round {r} done at {now - self.t0:.3f} s")

    def _receive(self, now):
        """Everything queued on the socket, a batch per system call (through the emulated WAN if any)."""
        tp, rx = self.tp, self.rx
        if tp.wan is None:
            self.last_read = 0
            while n := rx.recv(tp.sock):
                self.last_read += n
                self._on_results(rx.rows, rx.heads, rx.lengths[:n], now)
                if n < rx.batch:
                    break
            return
        while n := rx.recv(tp.sock):
            for i in range(n):
                tp.wan.admit(now, tp.rank, rx.rows[i, : rx.lengths[i]].tobytes())
            if n < rx.batch:
                break
        # The UDP checksum drops a corrupted RESULT: a loss to the host.
        due = [data for data, corrupt in tp.wan.due(now) if not corrupt]
        for at in range(0, len(due), rx.batch):
            part = due[at : at + rx.batch]
            for i, data in enumerate(part):
                rx.rows[i, : len(data)] = np.frombuffer(data, np.uint8)
                rx.lengths[i] = len(data)
            k = len(part)
            self._on_results(rx.rows, np.ascontiguousarray(rx.rows[:k, :HEADER_BYTES]), rx.lengths[:k], now)

    def go(self, until=None):
        tp = self.tp
        sel = selectors.DefaultSelector()
        sel.register(tp.sock, selectors.EVENT_READ)
        watching = selectors.EVENT_READ
        writable = True
        rx_few = self.rx.batch // 4
        self._receive(time.monotonic())
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
                # RESULTs that arrived while this process was not running were read (at the end of the
                # previous turn) before any timer is judged: a busy machine delays the reader, not the RESULT.
                self._expire(now)
                if writable:
                    writable = self._send_ready(now)
                wait = 0.05
                if self.next_check < math.inf:
                    wait = min(wait, max(0.0, self.next_check - now))
                if self.ready:
                    wait = min(wait, max(0.0, self.link_free - now))
                if self.tp.wan is not None and self.tp.wan.queue:
                    wait = min(wait, max(0.0, self.tp.wan.next_due() - now))
                if 0 < self.last_read < rx_few and not self.ready and wait >= COALESCE_S:
                    time.sleep(COALESCE_S)
                    wait = 0.0
                mask = selectors.EVENT_READ | (0 if writable else selectors.EVENT_WRITE)
                if mask != watching:  # a system call: only when it changes
                    sel.modify(tp.sock, mask)
                    watching = mask
                asleep = time.monotonic()
                events = sel.select(wait)
                woke = time.monotonic()
                if not events:  # slept its whole wait: how much longer than asked is the scheduler's delay
                    self.lateness = max(self.lateness, woke - asleep - wait)
                for _, mask in events:
                    if mask & selectors.EVENT_WRITE:
                        writable = True
                self._receive(woke)
        finally:
            sel.close()
            self._settle()
            if self.dest is not None and self.grid.base is None:
                self.dest[:] = self.values  # a tensor of a part chunk: the grid was padded apart
                self.out.values = self.values = self.dest
        return self.out
