"""Discrete-event co-simulation of every site under a sync schedule, over the WAN's delays.

Each site has hosts (which hold the tensor, send CONTRIBs and apply RESULTs) and an aggregator at its WAN
edge. The hosts of site ``j`` send chunk ``c`` of round ``r`` once, to their group's multicast address, when
both of these are true (the self-clocked window of PROTOCOL.md):

* **data**: their own RESULT for chunk ``c`` of the previous round they took part in is in (round 0: at
  once); the value sent is that RESULT divided by the group size, in the wire dtype;
* **window**: their own RESULT for the previous chunk that used the same slot is in. Round ``r`` uses bank
  ``r mod P`` of ``bank_slots`` slots, chunk ``c`` slot ``c mod bank_slots`` of it, so the previous user is
  chunk ``c - bank_slots`` of the same round, or the last chunk of that lane in round ``r - P``.

Frames leave a site's access link back to back (``frame bytes / link rate`` each, first come first served
among the ready chunks), reach each member's aggregator after the one-way delay (with a ``backbone`` whose
links have capacities, also after queueing at each capacitated link of their multicast tree:
:class:`Backbone`), and a RESULT reaches the
site's hosts one frame time after the aggregator emits it. Because the WAN's delays are shortest paths
(the triangle inequality holds) and each member's own RESULT for a chunk implies every contribution to it
reached that member, a contribution never finds its slot held by another live chunk: no
``ahead_of_window`` drop can happen without faults (the proof is in ``docs/PROTOCOL.md``).

**Faults and recovery** (``faults=``, :class:`Faults`; ``docs/reliability.md``): the WAN loses, copies,
reorders and corrupts frames and can stop a site, all from one seeded generator. The hosts then keep a timer
per sent chunk (first timeout ``2 x`` the group's longest one-way delay ``+ 4`` frame times, doubling per
retry) and resend the same CONTRIB to the group while their own RESULT for it is missing; a RESULT for a
chunk already applied is not applied again but makes them resend their contribution (a member is still
asking for the chunk, and may lack theirs; at most once per timeout, the hold-off doubling); after
:data:`RETRIES` retries the run stops with :class:`SiteTimeout`, naming the missing sites and the round.
The aggregators' shadow RESULTs and evictions (``docs/PROTOCOL.md``) make every retransmission safe.

The aggregator of each site is pluggable: :class:`GoldenSite` (the golden model, here), the Verilated
core (:mod:`wanreduce.sim.verify.cosim`), or :class:`CountingSite` (timing only, no data: the pacing model
the emitter uses). An aggregator takes ``feed(t, msgs)`` and returns ``[(t_out, msg), ...]`` for the
RESULTs it emits to its own site's hosts. One that keeps working after a feed (a core clocked only up to
the present) also has ``next_poll(t)`` (when to ask it again, or None) and ``poll(t)`` (the RESULTs out
by then; a RESULT leaves no earlier than the poll that finds it). The golden and counting sites take a
:class:`Datapath`, the input port's beats per clock.
"""

import dataclasses
import heapq
import math

import numpy as np

from ..spec import addressing
from ..spec.errors import WanreduceError
from ..spec.protocol import HEADER_BYTES, UDP_PORT, WIRE_OVERHEAD, DType
from ..spec.schedfile import group_of, period_members
from .frames import frame_between, parse_frame
from .golden import Destination, GoldenAggregator
from .packet import decode_headers, pack_tensor
from .protocol import bits_dtype, np_dtype

__all__ = [
    "Msg",
    "CountingSite",
    "Datapath",
    "Backbone",
    "GoldenSite",
    "WanRun",
    "RoundStats",
    "Faults",
    "Recovery",
    "SiteTimeout",
    "RETRIES",
    "TIMEOUT_DELAYS",
    "TIMEOUT_FRAMES",
    "simulate",
    "bank_layout",
    "chunk_count",
]


@dataclasses.dataclass
class Msg:
    """A CONTRIB on its way (``frame`` is the Ethernet frame, or None in a timing-only run) or a RESULT
    (``payload`` is its UDP payload, or None)."""

    src: int
    round: int
    chunk: int
    group: int = 0
    frame: bytes | None = None
    payload: bytes | None = None


def chunk_count(elements, chunk_elems):
    return -(-int(elements) // int(chunk_elems))


def bank_layout(slots, period):
    """``(bank_bits, bank_slots)`` for ``slots`` slots shared by ``period`` round banks: the largest power of
    two ``bank_slots`` with ``period * bank_slots <= slots``; ``(None, 0)`` when even one slot per bank does
    not fit."""
    if slots < period:
        return None, 0
    bits = (slots // period).bit_length() - 1
    return bits, 1 << bits


class Datapath:
    """An aggregator's input port as one ``width``-bit beat per clock: a frame of ``b`` bytes (its Ethernet,
    IPv4, UDP and wanreduce headers included) takes ``ceil(b / (width / 8))`` cycles, its last beat possibly
    partial, and frames queue in arrival order while the port is busy.

    :meth:`take` returns when a frame arriving at ``t`` is all in. This is the datapath as a queue, frame by
    frame, written apart from the cost model's closed form (``CostParams.datapath_Bps``), which it checks.
    """

    def __init__(self, *, width, clock_hz):
        if not (isinstance(width, int) and width >= 8 and width % 8 == 0):
            raise ValueError(f"The datapath width must be a positive multiple of 8 bits, got {width!r}.")
        if not clock_hz > 0:
            raise ValueError(f"The datapath clock must be positive, got {clock_hz!r} Hz.")
        self.width, self.clock_hz = width, float(clock_hz)
        self.free_s = 0.0

    def beats(self, nbytes):
        return -(-int(nbytes) // (self.width // 8))

    def take(self, t, nbytes):
        start = max(t, self.free_s)
        self.free_s = start + self.beats(nbytes) / self.clock_hz
        return self.free_s


class Backbone:
    """The WAN's links with a capacity: a frame crosses its multicast tree hop by hop, one copy per link
    (store and forward), each capacitated link a first-come-first-served queue at its rate; a link
    without a capacity only delays. Without any capacitated link the WAN is the one-way delays alone.

    This is the packet-level counterpart of the cost model's backbone term (max-min fair shares of each
    link among the multicast trees that use it): the two share the topology, not the sharing rule."""

    def __init__(self, topology):
        self.topology = topology
        self.free = np.zeros(len(topology.link_cap_Bps))
        self.busy_s = np.zeros(len(topology.link_cap_Bps))
        # next link of the path from site s to site m out of each node it passes
        self._next = [[{topology.link_ends[e][0]: e for e in path} for path in row] for row in topology.paths]

    @property
    def limited(self):
        return self.topology.links_limited

    def _forward(self, s, node, t, dests, hops, arrivals):
        topo, by_link = self.topology, {}
        for m in dests:
            if topo.sites[m] == node:
                arrivals.append((m, t))
            else:
                by_link.setdefault(self._next[s][m][node], []).append(m)
        for e, ds in by_link.items():
            if math.isinf(topo.link_cap_Bps[e]):
                self._forward(s, topo.link_ends[e][1], t + topo.link_delay_s[e], ds, hops, arrivals)
            else:
                hops.append((t, e, tuple(ds)))

    def send(self, s, t, dests):
        """A frame of site ``s`` leaves its access link at ``t`` for ``dests``: ``(hops, arrivals)``, the
        queues it joins as ``(time, link, dests)`` and the sites it reaches as ``(site, time)``."""
        hops, arrivals = [], []
        self._forward(s, self.topology.sites[s], t, dests, hops, arrivals)
        return hops, arrivals

    def cross(self, t, s, link, dests, nbytes):
        """The frame joins ``link``'s queue at ``t``: where it goes next, as :meth:`send` returns it."""
        topo = self.topology
        start = max(t, self.free[link])
        done = start + nbytes / topo.link_cap_Bps[link]
        self.free[link] = done
        self.busy_s[link] += done - start
        hops, arrivals = [], []
        self._forward(s, topo.link_ends[link][1], done + topo.link_delay_s[link], dests, hops, arrivals)
        return hops, arrivals


class CountingSite:
    """Timing only: a chunk's RESULT leaves the moment its last expected contribution is in (arrived, or with
    ``datapath`` a :class:`Datapath`, through the input port; frames of ``frame_bytes`` each)."""

    def __init__(self, schedule, rank, *, datapath=None, frame_bytes=None):
        if datapath is not None and not frame_bytes:
            raise ValueError("A datapath needs the frame size (frame_bytes) of a timing-only run.")
        self.schedule, self.rank = schedule, rank
        self.datapath, self.frame_bytes = datapath, frame_bytes
        self.seen = {}

    def feed(self, t, msgs):
        out = []
        for m in msgs:
            t_in = self.datapath.take(t, self.frame_bytes) if self.datapath else t
            members = _members(self.schedule, self.rank, m.round)
            key = (m.round, m.chunk)
            got = self.seen.setdefault(key, set())
            got.add(m.src)
            if got == set(members):
                out.append((t_in, Msg(self.rank, m.round, m.chunk)))
        return out

    def counters(self):
        return {}


class GoldenSite:
    """The golden aggregator of one site, fed real frames, sending RESULTs to the site's host group."""

    def __init__(self, schedule, rank, *, slots, members, slot_bytes, bank_bits, job=0, datapath=None):
        self.datapath = datapath
        table = dict(slots=slots, members=members, slot_bytes=slot_bytes, bank_bits=bank_bits)
        self.agg = site_aggregator(schedule, rank, job=job, **table)

    def feed(self, t, msgs):
        out = []
        for m in msgs:
            t_in = self.datapath.take(t, len(m.frame)) if self.datapath else t
            for frame in self.agg.feed_frame(m.frame):
                out.append((t_in, result_msg(frame)))
        return out

    def counters(self):
        return dict(self.agg.counters)

    def missing(self, job, round_, chunk):
        """Ranks whose contribution the aggregator lacks for that chunk (read from the slot bitmap)."""
        return self.agg.missing(job, round_, chunk)


def result_msg(frame):
    """A RESULT frame (from an aggregator) → :class:`Msg` with its payload."""
    payload, _, reason = parse_frame(frame, port=UDP_PORT)
    if reason is not None:
        raise RuntimeError(f"an aggregator emitted a frame that does not parse ({reason.counter})")
    h = decode_headers(np.frombuffer(payload[:HEADER_BYTES], np.uint8).reshape(1, -1))[0]
    return Msg(int(h["src"]), int(h["round"]), int(h["chunk"]), int(h["group"]), payload=payload)


def _members(schedule, rank, round_index):
    return tuple(group_of(schedule, rank, round_index)[1])


def site_aggregator(schedule, rank, *, slots, members, slot_bytes, bank_bits, job=0):
    """The golden aggregator of site ``rank`` for job ``job`` of ``schedule``: ``slots`` slots of
    ``members`` member buffers of ``slot_bytes``, round banks of ``2**bank_bits`` slots, RESULTs to the
    site's hosts."""
    hosts = Destination(addressing.host_mac(rank), addressing.site_group_ip(rank), UDP_PORT)
    jobs, banks = {job: period_members(schedule, rank)}, {job: bank_bits}
    table = dict(slots=slots, members=members, slot_bytes=slot_bytes)
    return GoldenAggregator(rank=rank, jobs=jobs, bank_bits=banks, destinations=[hosts], **table)


def round_links(member_of):
    """``(prev_round, next_round)``: per site and round, the site's previous and next round that it takes
    part in (None where there is none); ``member_of[s][r]`` is empty or None where site ``s`` sits out
    round ``r``."""
    prev_round = [[None] * len(rows) for rows in member_of]
    next_round = [[None] * len(rows) for rows in member_of]
    for s, rows in enumerate(member_of):
        last = None
        for r, members in enumerate(rows):
            if members:
                prev_round[s][r] = last
                if last is not None:
                    next_round[s][last] = r
                last = r
    return prev_round, next_round


@dataclasses.dataclass
class RoundStats:
    round: int
    first_send_s: float
    last_result_s: float


#: Retransmissions of one chunk before its site gives up and the run stops with :class:`SiteTimeout`.
RETRIES = 6
#: The first retransmission timeout of a chunk: this many times the longest one-way delay between two members
#: of its group, plus TIMEOUT_FRAMES frame times of the sender's link; it doubles on every retry.
TIMEOUT_DELAYS = 2
TIMEOUT_FRAMES = 4


@dataclasses.dataclass(frozen=True)
class Faults:
    """What the WAN does wrong, all drawn from one ``numpy.random.default_rng(seed)`` in event order.

    Every copy of a CONTRIB that reaches a member's aggregator, and every RESULT on its way from an
    aggregator to its site's hosts, is lost with probability ``loss`` and duplicated with probability ``dup``
    (the second copy arrives a frame time plus up to one round trip of the pair later, and is itself subject
    to loss and corruption). ``reorder`` adds to each CONTRIB copy an extra delay uniform in ``[0, RTT)`` of
    its pair, so copies overtake each other within a round trip. ``corrupt`` flips one random bit of a
    CONTRIB copy (the aggregator must drop it by its checksums and header rules). ``kill`` is
    ``(site, round)``: that site's hosts send no frame of that round or any later one.
    """

    loss: float = 0.0
    dup: float = 0.0
    reorder: bool = False
    corrupt: float = 0.0
    kill: tuple | None = None
    seed: int = 0

    def __post_init__(self):
        for name in ("loss", "dup", "corrupt"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ValueError(f"The {name} probability must be in [0, 1), not {p}.")


class SiteTimeout(WanreduceError):
    """A chunk ran out of retransmissions: the run stops instead of summing without a member."""

    def __init__(self, message, *, site, round, chunk, missing):
        super().__init__(message)
        self.site, self.round, self.chunk, self.missing = site, round, chunk, tuple(missing)


@dataclasses.dataclass
class Recovery:
    """What the hosts did about faults (all zero in a fault-free run)."""

    retransmits: int = 0  # CONTRIBs sent again because a chunk's timer expired
    resends_on_result: int = 0  # CONTRIBs sent again because a RESULT for an applied chunk came in
    results_ignored: int = 0  # RESULTs for chunks already applied
    lost: int = 0  # CONTRIB copies the WAN lost
    duplicated: int = 0  # CONTRIB copies the WAN delivered twice
    corrupted: int = 0  # CONTRIB copies with one bit flipped
    results_lost: int = 0  # RESULTs lost on the way to the hosts
    results_duplicated: int = 0  # RESULTs delivered twice


@dataclasses.dataclass
class WanRun:
    """What a co-simulation did: times, traffic, drops and (with data) every site's final tensor."""

    rounds: list
    finish_s: float
    send: np.ndarray  # [site, round, chunk] first send start (NaN: the site waits that round)
    result: np.ndarray  # [site, round, chunk] own RESULT in at the hosts (NaN: waits)
    ingress_bytes: list  # per site: frame bytes delivered to its aggregator
    counters: list  # per site: the aggregator's counters (empty for timing-only runs)
    values: list | None  # per site: the tensor after the last round (wire dtype), with data
    results_emitted: int
    recovery: Recovery = dataclasses.field(default_factory=Recovery)


def simulate(
    schedule,
    *,
    one_way_s,
    site_Bps,
    chunk_elems,
    elements,
    dtype=DType.FP32,
    bank_slots,
    sites=None,
    tensors=None,
    rounds=None,
    job=0,
    progress=None,
    faults=None,
    backbone=None,
):
    """Run ``rounds`` rounds (default: one period) of ``schedule``; returns a :class:`WanRun`.

    ``site_Bps`` is each site's access-link rate in bytes/s on the wire; ``sites`` the aggregators (one per
    site, see the module docstring; default :class:`CountingSite`); ``tensors`` one array per site for a run
    with data (required unless every site is a CountingSite).

    ``faults`` (a :class:`Faults`, even one with every probability 0) turns the recovery on: every sent
    chunk gets a retransmission timer, and a RESULT for a chunk already applied makes the hosts send their
    contribution to it again (see the module docstring). A chunk that runs out of retransmissions raises
    :class:`SiteTimeout`. Without ``faults`` the WAN is perfect and the hosts keep no timers.

    ``backbone`` (a :class:`~wanreduce.host.topology.Topology` whose ``one_way_s`` is ``one_way_s``) makes
    the frames queue on its capacitated links (:class:`Backbone`); without it, or without a capacitated
    link, the backbone only delays.
    """
    sim = _WanSim(
        schedule,
        one_way_s=one_way_s,
        site_Bps=site_Bps,
        chunk_elems=chunk_elems,
        elements=elements,
        dtype=DType(dtype),
        bank_slots=bank_slots,
        sites=sites,
        tensors=tensors,
        rounds=schedule.period if rounds is None else int(rounds),
        job=job,
        progress=progress,
        faults=faults,
        backbone=backbone,
    )
    sim.start()
    sim.run_events()
    if sim.outstanding:
        sim.raise_stalled()
    return sim.report()


class ChunkSender:
    """What both WAN simulators send: a site's CONTRIB frame of one chunk of its tensor. Needs the
    simulator's ``with_data``, ``current`` (each site's chunks), ``dtype``, ``job``, ``period``,
    ``chunk_elems`` and ``n_chunks``."""

    def chunk_frame(self, s, r, c, group, *, root=None):
        """Site ``s``'s CONTRIB frame of chunk ``c`` in round ``r`` from its hosts: to the group's multicast
        address, or unicast to the aggregator of ``root`` (root mode); None in a run without data."""
        if not self.with_data:
            return None
        if root is None:
            ip = addressing.contrib_group_ip(job=self.job, round=r, group=group, period=self.period)
            dst = Destination(addressing.multicast_mac(ip), ip)
        else:
            dst = Destination(addressing.aggregator_mac(root), addressing.aggregator_ip(root))
        payloads = pack_tensor(
            self.current[s][c],
            dtype=self.dtype,
            rank=s,
            job=self.job,
            round=r,
            group=group,
            chunk_elems=self.chunk_elems,
            first_chunk=c,
            last=c == self.n_chunks - 1,
        )
        return frame_between(next(iter(payloads)), host_end(s), dst)


def host_end(rank):
    """Site ``rank``'s hosts as the sender of its CONTRIBs: their address and the wanreduce port."""
    return Destination(addressing.host_mac(rank), addressing.host_ip(rank), UDP_PORT)


class _WanSim(ChunkSender):
    """The state of one :func:`simulate` run: each site's chunks waiting on their data and window, its
    ready queue and access link, the frames on the WAN, the aggregators, and the event queue."""

    def __init__(
        self,
        schedule,
        *,
        one_way_s,
        site_Bps,
        chunk_elems,
        elements,
        dtype,
        bank_slots,
        sites,
        tensors,
        rounds,
        job,
        progress,
        faults,
        backbone,
    ):
        n = self.n = schedule.n
        self.schedule, self.period, self.rounds = schedule, schedule.period, rounds
        self.dtype, self.chunk_elems, self.job, self.progress = dtype, chunk_elems, job, progress
        self.n_chunks = chunk_count(elements, chunk_elems)
        if bank_slots < 1:
            raise ValueError("Every round bank needs at least one slot.")
        self.bank_slots = bank_slots
        D = self.D = np.asarray(one_way_s, float)
        site_Bps = np.broadcast_to(np.asarray(site_Bps, float), (n,))
        self.frame_bytes = chunk_elems * dtype.size + WIRE_OVERHEAD
        self.frame_s = (chunk_elems * dtype.size + WIRE_OVERHEAD) / site_Bps
        self.sites = sites if sites is not None else [CountingSite(schedule, s) for s in range(n)]
        self.with_data = tensors is not None
        if faults is not None and not self.with_data:
            raise ValueError("Fault injection needs a run with data (tensors and frame-level aggregators).")
        self.faults = faults
        self.rng = np.random.default_rng(faults.seed) if faults is not None else None
        self.links = Backbone(backbone) if backbone is not None and backbone.links_limited else None
        if self.links is not None and not np.allclose(backbone.one_way_s, D):
            raise ValueError("The backbone's one-way delays must be the ones the WAN is given.")
        kill = faults.kill if faults is not None and faults.kill is not None else (None, None)
        self.kill_site, self.kill_round = kill
        self.vt = np_dtype(dtype)
        self.current = None
        if self.with_data:
            self._load(tensors, elements)
        self._index_rounds()
        self.send = np.full((n, rounds, self.n_chunks), np.nan)
        self.result = np.full((n, rounds, self.n_chunks), np.nan)
        self.waiting = {}  # (site, round, chunk) -> unmet conditions
        self.ready = [[] for _ in range(n)]  # per site: heap of (ready time, round, chunk, resend)
        self.link_busy = [False] * n
        self.events, self.seq = [], 0
        self.ingress = [0] * n
        self.emitted = 0
        self.rec = Recovery()
        self.sent_frames = {}  # (site, round, chunk) -> the CONTRIB frame, resent byte for byte
        # (site, round, chunk) -> (when a repeated RESULT last caused a resend, how many did)
        self.echoed = {}
        self.outstanding = sum(self.n_chunks for s in range(n) for r in range(rounds) if self.member_of[s][r])
        self.polling = set()
        self.reported = -1

    def _load(self, tensors, elements):
        """Each site's starting chunks, in the wire dtype."""
        vt, ce = self.vt, self.chunk_elems
        values = [np.asarray(t).astype(vt).reshape(-1).copy() for t in tensors]
        if any(v.size != elements for v in values):
            raise ValueError(f"Every tensor must hold {elements} elements.")
        self.current = [[v[c * ce : (c + 1) * ce].copy() for c in range(self.n_chunks)] for v in values]

    def _index_rounds(self):
        """Each site's group and group id per round, its first retransmission timeout per round, and its
        previous and next round (the data dependency)."""
        n, rounds, schedule, D = self.n, self.rounds, self.schedule, self.D
        self.member_of = [[_members(schedule, s, r) for r in range(rounds)] for s in range(n)]
        self.group_id = [
            [
                next((g for g, grp in enumerate(schedule.rounds[r % self.period]) if s in grp), None)
                for r in range(rounds)
            ]
            for s in range(n)
        ]
        # First retransmission timeout of each (site, round): a round trip across the group's widest pair
        # plus a few frame times; doubled on every retry.
        self.timeout0 = [
            [
                TIMEOUT_DELAYS * max((D[j, k] for j in g for k in g), default=0.0)
                + TIMEOUT_FRAMES * self.frame_s[s]
                for g in self.member_of[s]
            ]
            for s in range(n)
        ]
        self.prev_round, self.next_round = round_links(self.member_of)

    def _push(self, t, kind, *data):
        heapq.heappush(self.events, (t, self.seq, kind, data))
        self.seq += 1

    def _killed(self, s, r):
        """Whether site ``s`` has stopped sending by round ``r``."""
        return s == self.kill_site and r >= self.kill_round

    # -- the window: chunk c of round r reuses the slot of the chunk bank_slots before it ----------------
    def _window_pred(self, r, c):
        if c >= self.bank_slots:
            return r, c - self.bank_slots
        if r - self.period < 0:
            return None
        lane_last = c + ((self.n_chunks - 1 - c) // self.bank_slots) * self.bank_slots
        return r - self.period, lane_last

    def _window_succ(self, r, c):
        if c + self.bank_slots < self.n_chunks:
            return r, c + self.bank_slots
        if r + self.period < self.rounds:
            return r + self.period, c % self.bank_slots
        return None

    def _holds_contribution(self, s, r, c):
        """The hosts keep a chunk's CONTRIB until their RESULT for the slot's next chunk is in: then every
        member has its RESULT for this one (the window rule), so nobody can need it again."""
        succ = self._window_succ(r, c)
        return succ is None or not self.member_of[s][succ[0]] or np.isnan(self.result[s, succ[0], succ[1]])

    # -- senders ----------------------------------------------------------------------------------------
    def start(self):
        """Initial conditions: data and window, each counted once per chunk of every round a site takes
        part in; the chunks that need neither are ready at time 0."""
        for s in range(self.n):
            for r in range(self.rounds):
                if not self.member_of[s][r]:
                    continue
                for c in range(self.n_chunks):
                    need = (self.prev_round[s][r] is not None) + (self._window_pred(r, c) is not None)
                    if need:
                        self.waiting[(s, r, c)] = need
                    else:
                        heapq.heappush(self.ready[s], (0.0, r, c, False))
        for s in range(self.n):
            if self.ready[s]:
                self._start_send(s, 0.0)

    def _condition_met(self, s, r, c, t):
        key = (s, r, c)
        left = self.waiting.get(key)
        if left is None:
            return
        left -= 1
        if left:
            self.waiting[key] = left
            return
        del self.waiting[key]
        self._enqueue(s, r, c, t, False)

    def _enqueue(self, s, r, c, t, again):
        heapq.heappush(self.ready[s], (t, r, c, again))
        if not self.link_busy[s]:
            self._start_send(s, t)

    def _start_send(self, s, t):
        """Site ``s``'s access link is free at ``t``: send its earliest ready chunk (a dead site's chunks
        of its last rounds are skipped) to every member of its group."""
        ready = self.ready[s]
        while ready:
            _, r, c, again = heapq.heappop(ready)
            if not self._killed(s, r):
                break
        else:
            self.link_busy[s] = False
            return
        self.link_busy[s] = True
        grp = self.member_of[s][r]
        gid = self.group_id[s][r]
        if again:
            frame = self.sent_frames[(s, r, c)]
        else:
            self.send[s, r, c] = t
            frame = self.chunk_frame(s, r, c, gid)
            if self.faults is not None:
                self.sent_frames[(s, r, c)] = frame
        arrive = t + self.frame_s[s]
        msg = Msg(s, r, c, gid, frame=frame)
        if self.links is None:
            arrivals = [(m, arrive + self.D[s, m]) for m in grp]
        else:
            hops, arrivals = self.links.send(s, arrive, grp)
            for t_hop, e, dests in hops:
                self._push(t_hop, "hop", s, e, dests, msg)
        for m, t_m in arrivals:
            self._arrived(s, m, t_m, msg)
        if self.faults is not None and not again:
            self._push(arrive + self.timeout0[s][r], "timer", s, r, c, 0)
        self._push(arrive, "link_free", s)

    # -- the WAN ----------------------------------------------------------------------------------------
    def _arrived(self, s, m, t, msg):
        if self.faults is None:
            self._push(t, "deliver", m, msg)
        else:
            self._deliver_with_faults(t - self.D[s, m], s, m, msg)

    def _deliver_with_faults(self, t, s, m, msg):
        faults, rng, rec, D = self.faults, self.rng, self.rec, self.D
        rtt = D[s, m] + D[m, s]
        copies = 1
        if rng.random() < faults.dup:
            copies, rec.duplicated = 2, rec.duplicated + 1
        for k in range(copies):
            if faults.loss and rng.random() < faults.loss:
                rec.lost += 1
                continue
            delay = D[s, m]
            if faults.reorder:
                delay += rng.uniform(0.0, rtt) if rtt > 0 else 0.0
            if k:
                delay += self.frame_s[s] + (rng.uniform(0.0, rtt) if rtt > 0 else 0.0)
            frame = msg.frame
            if faults.corrupt and rng.random() < faults.corrupt:
                rec.corrupted += 1
                bit = int(rng.integers(len(frame) * 8))
                frame = bytearray(frame)
                frame[bit // 8] ^= 1 << (bit % 8)
                frame = bytes(frame)
            self._push(t + delay, "deliver", m, dataclasses.replace(msg, frame=frame))

    def _emit(self, m, t, outs):
        """Send a site's RESULTs to its hosts; keep polling an aggregator that works on in time."""
        faults, rng, rec = self.faults, self.rng, self.rec
        for t_out, res in outs:
            self.emitted += 1
            copies = 1
            if faults is not None:
                if rng.random() < faults.dup:
                    copies, rec.results_duplicated = 2, rec.results_duplicated + 1
            for k in range(copies):
                if faults is not None and faults.loss and rng.random() < faults.loss:
                    rec.results_lost += 1
                    continue
                self._push(max(t_out, t) + self.frame_s[m] * (1 + k), "result", m, res)
        later = getattr(self.sites[m], "next_poll", None)
        when = later(t) if later is not None else None
        if when is not None and (m, when) not in self.polling:
            self.polling.add((m, when))
            self._push(when, "poll", m)

    # -- the event loop ---------------------------------------------------------------------------------
    def run_events(self):
        """Pop events in time order until every RESULT is in or nothing is left to happen."""
        events, pop = self.events, heapq.heappop
        while events and self.outstanding:
            t, _, kind, data = pop(events)
            if kind == "link_free":
                self._start_send(data[0], t)
            elif kind == "hop":
                self._hop(t, *data)
            elif kind == "timer":
                self._timer(t, *data)
            elif kind == "deliver":
                m, msg = data
                self.ingress[m] += len(msg.frame) if msg.frame is not None else self.frame_bytes
                self._emit(m, t, self.sites[m].feed(t, [msg]))
            elif kind == "poll":
                self._emit(data[0], t, self.sites[data[0]].poll(t))
            elif kind == "result":
                self._result_in(t, *data)

    def _hop(self, t, s, e, dests, msg):
        """A frame has crossed backbone link ``e``: on to the next links, or in at its members."""
        nbytes = len(msg.frame) if msg.frame is not None else self.frame_bytes
        hops, arrivals = self.links.cross(t, s, e, dests, nbytes)
        for t_hop, e2, ds in hops:
            self._push(t_hop, "hop", s, e2, ds, msg)
        for m, t_m in arrivals:
            self._arrived(s, m, t_m, msg)

    def _timer(self, t, s, r, c, k):
        """A chunk's retransmission timer: send again unless its RESULT is in, and give up after RETRIES."""
        if not np.isnan(self.result[s, r, c]) or self._killed(s, r):
            return
        if k >= RETRIES:
            self._give_up(s, r, c)
        self.rec.retransmits += 1
        self._enqueue(s, r, c, t, True)
        self._push(t + self.timeout0[s][r] * (2 << k), "timer", s, r, c, k + 1)

    def _result_in(self, t, s, res):
        """Site ``s``'s hosts receive a RESULT: apply it once and release what waited on it."""
        r, c = res.round, res.chunk
        if not (0 <= r < self.rounds and 0 <= c < self.n_chunks):
            return  # not ours to apply (the aggregator's counters say why)
        if not np.isnan(self.result[s, r, c]):
            self._repeated_result(t, s, r, c)
            return
        self.result[s, r, c] = t
        self.outstanding -= 1
        if self.with_data:
            vt = self.vt
            g = len(self.member_of[s][r])
            elems = np.frombuffer(res.payload, bits_dtype(self.dtype), offset=HEADER_BYTES).view(vt)
            with np.errstate(all="ignore"):
                self.current[s][c] = (elems / vt.type(g)).astype(vt)
        nr = self.next_round[s][r]
        if nr is not None:
            self._condition_met(s, nr, c, t)
        succ = self._window_succ(r, c)
        if succ is not None and self.member_of[s][succ[0]]:
            self._condition_met(s, succ[0], succ[1], t)
        if (
            self.progress is not None
            and r > self.reported
            and np.all(~np.isnan(self.result[:, r][[bool(self.member_of[x][r]) for x in range(self.n)]]))
        ):
            self.reported = r
            self.progress(f"round {r} complete at {t * 1e3:.1f} ms simulated")

    def _repeated_result(self, t, s, r, c):
        """A RESULT for a chunk applied already. It came again because some member sent this chunk to our
        aggregator after it completed (or the WAN copied it): a member may still be missing our
        contribution, so send it once more. Our resend makes the other members' aggregators send their
        RESULTs again too, so without a hold-off two done members would keep answering each other; the
        hold-off starts at one timeout and doubles, as the asking member's retries do."""
        self.rec.results_ignored += 1
        last, n_echo = self.echoed.get((s, r, c), (-math.inf, 0))
        if (
            self.faults is not None
            and not self._killed(s, r)
            and t - last >= self.timeout0[s][r] * (1 << n_echo)
            and self._holds_contribution(s, r, c)
        ):
            self.echoed[(s, r, c)] = (t, n_echo + 1)
            self.rec.resends_on_result += 1
            self._enqueue(s, r, c, t, True)

    # -- the end ----------------------------------------------------------------------------------------
    def _give_up(self, s, r, c):
        """The chunk ran out of retransmissions: name who is missing, from what can be read."""
        grp = self.member_of[s][r]
        names = self.schedule.sites
        missing = getattr(self.sites[s], "missing", None)
        held = missing(self.job, r, c) if missing is not None else None
        if held is None:
            # The aggregator's slot state is not readable (the RTL): the members that never sent the chunk.
            held = tuple(m for m in grp if np.isnan(self.send[m, r, c]))
            how = "never sent it"
        else:
            how = f"{names[s]}'s aggregator holds no contribution from {'them' if len(held) > 1 else 'it'}"
        waited = self.timeout0[s][r] * ((1 << (RETRIES + 1)) - 1)
        if held:
            who = ", ".join(f"{names[m]} (rank {m})" for m in held)
            msg = (
                f"round {r}: site{'s' if len(held) > 1 else ''} {who} missing from chunk {c} of group "
                f"{{{','.join(names[m] for m in grp)}}}: {how} after {waited:.3g} s ({RETRIES} "
                f"retransmissions by {names[s]}); stopping rather than summing without "
                f"{'them' if len(held) > 1 else 'it'}"
            )
        elif missing is not None:
            msg = (
                f"round {r}: {names[s]}'s RESULT for chunk {c} never reached its hosts in {waited:.3g} s "
                f"({RETRIES} retransmissions), although every member's contribution is in; stopping"
            )
        else:
            members = ",".join(names[m] for m in grp)
            msg = (
                f"round {r}: {names[s]} has no RESULT for chunk {c} after {waited:.3g} s ({RETRIES} "
                f"retransmissions) although every member of {{{members}}} sent it; their contributions "
                "or the RESULT were lost every time; stopping"
            )
        raise SiteTimeout(msg, site=s, round=r, chunk=c, missing=held)

    def raise_stalled(self):
        """Nothing is left to happen but a RESULT is missing: a killed site stopped it, or a bug did."""
        s, r, c = next(
            (s, r, c)
            for s in range(self.n)
            for r in range(self.rounds)
            if self.member_of[s][r]
            for c in range(self.n_chunks)
            if np.isnan(self.result[s, r, c])
        )
        if self.kill_site is None:
            raise RuntimeError(f"The co-simulation stalled: site {s} has no RESULT for round {r} chunk {c}.")
        names = self.schedule.sites
        raise SiteTimeout(
            f"round {self.kill_round}: site {names[self.kill_site]} (rank {self.kill_site}) stopped sending "
            f"and no other member of its groups is left to time out; {names[s]} has no RESULT "
            f"for round {r}",
            site=s,
            round=r,
            chunk=c,
            missing=(self.kill_site,),
        )

    def report(self):
        """The run as a :class:`WanRun`."""
        send, result = self.send, self.result
        stats = []
        for r in range(self.rounds):
            sr = send[:, r][~np.isnan(send[:, r])]
            rr = result[:, r][~np.isnan(result[:, r])]
            stats.append(
                RoundStats(
                    r, float(sr.min()) if sr.size else math.nan, float(rr.max()) if rr.size else math.nan
                )
            )
        finish = float(np.nanmax(result)) if np.isfinite(result).any() else math.nan
        final = [np.concatenate(self.current[s]) for s in range(self.n)] if self.with_data else None
        counters = [a.counters() for a in self.sites]
        return WanRun(stats, finish, send, result, self.ingress, counters, final, self.emitted, self.rec)
