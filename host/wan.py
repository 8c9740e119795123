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
from ..spec.schedfile import group_of
from .frames import build_frame, parse_frame
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
        jobs = {job: [_members(schedule, rank, r) for r in range(schedule.period)]}
        dest = Destination(addressing.host_mac(rank), addressing.site_group_ip(rank), UDP_PORT)
        self.agg = GoldenAggregator(
            rank=rank,
            jobs=jobs,
            slots=slots,
            members=members,
            slot_bytes=slot_bytes,
            destinations=[dest],
            bank_bits={job: bank_bits},
        )

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
    dtype = DType(dtype)
    n, period = schedule.n, schedule.period
    rounds = period if rounds is None else int(rounds)
    n_chunks = chunk_count(elements, chunk_elems)
    if bank_slots < 1:
        raise ValueError("Every round bank needs at least one slot.")
    D = np.asarray(one_way_s, float)
    site_Bps = np.broadcast_to(np.asarray(site_Bps, float), (n,))
    frame_s = (chunk_elems * dtype.size + WIRE_OVERHEAD) / site_Bps
    sites = sites if sites is not None else [CountingSite(schedule, s) for s in range(n)]
    with_data = tensors is not None
    if faults is not None and not with_data:
        raise ValueError("Fault injection needs a run with data (tensors and frame-level aggregators).")
    rng = np.random.default_rng(faults.seed) if faults is not None else None
    links = Backbone(backbone) if backbone is not None and backbone.links_limited else None
    if links is not None and not np.allclose(backbone.one_way_s, D):
        raise ValueError("The backbone's one-way delays must be the ones the WAN is given.")
    kill_site, kill_round = faults.kill if faults is not None and faults.kill is not None else (None, None)
    vt = np_dtype(dtype)
    if with_data:
        values = [np.asarray(t).astype(vt).reshape(-1).copy() for t in tensors]
        if any(v.size != elements for v in values):
            raise ValueError(f"Every tensor must hold {elements} elements.")
        current = [
            [v[c * chunk_elems : (c + 1) * chunk_elems].copy() for c in range(n_chunks)] for v in values
        ]
    member_of = [[_members(schedule, s, r) for r in range(rounds)] for s in range(n)]
    group_id = [
        [
            next((g for g, grp in enumerate(schedule.rounds[r % period]) if s in grp), None)
            for r in range(rounds)
        ]
        for s in range(n)
    ]
    # First retransmission timeout of each (site, round): a round trip across the group's widest pair plus
    # a few frame times; doubled on every retry.
    timeout0 = [
        [
            TIMEOUT_DELAYS * max((D[j, k] for j in g for k in g), default=0.0) + TIMEOUT_FRAMES * frame_s[s]
            for g in member_of[s]
        ]
        for s in range(n)
    ]
    # Previous round each site took part in, for the data dependency.
    prev_round = [[None] * rounds for _ in range(n)]
    for s in range(n):
        last = None
        for r in range(rounds):
            if member_of[s][r]:
                prev_round[s][r] = last
                last = r

    send = np.full((n, rounds, n_chunks), np.nan)
    result = np.full((n, rounds, n_chunks), np.nan)
    waiting = {}  # (site, round, chunk) -> unmet conditions
    ready = [[] for _ in range(n)]  # per site: heap of (ready time, round, chunk, resend)
    link_busy = [False] * n
    events = []
    seq = 0
    ingress = [0] * n
    emitted = 0
    rec = Recovery()
    sent_frames = {}  # (site, round, chunk) -> the CONTRIB frame, resent byte for byte
    echoed = {}  # (site, round, chunk) -> (when a repeated RESULT last caused a resend, how many did)
    outstanding = sum(n_chunks for s in range(n) for r in range(rounds) if member_of[s][r])

    def push(t, kind, *data):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, data))
        seq += 1

    def window_pred(r, c):
        if c >= bank_slots:
            return r, c - bank_slots
        if r - period < 0:
            return None
        lane_last = c + ((n_chunks - 1 - c) // bank_slots) * bank_slots
        return r - period, lane_last

    def condition_met(s, r, c, t):
        key = (s, r, c)
        left = waiting.get(key)
        if left is None:
            return
        left -= 1
        if left:
            waiting[key] = left
            return
        del waiting[key]
        heapq.heappush(ready[s], (t, r, c, False))
        if not link_busy[s]:
            start_send(s, t)

    def resend(s, r, c, t):
        heapq.heappush(ready[s], (t, r, c, True))
        if not link_busy[s]:
            start_send(s, t)

    def start_send(s, t):
        while ready[s]:
            _, r, c, again = heapq.heappop(ready[s])
            if s == kill_site and r >= kill_round:
                continue  # the dead site sends nothing of this round on
            break
        else:
            link_busy[s] = False
            return
        link_busy[s] = True
        grp = member_of[s][r]
        gid = group_id[s][r]
        if again:
            frame = sent_frames[(s, r, c)]
        else:
            send[s, r, c] = t
            frame = None
            if with_data:
                frame = contrib_frame(
                    current[s][c],
                    dtype=dtype,
                    rank=s,
                    job=job,
                    round_index=r,
                    group=gid,
                    chunk=c,
                    chunk_elems=chunk_elems,
                    last=c == n_chunks - 1,
                    period=period,
                )
            if faults is not None:
                sent_frames[(s, r, c)] = frame
        arrive = t + frame_s[s]
        msg = Msg(s, r, c, gid, frame=frame)
        if links is None:
            arrivals = [(m, arrive + D[s, m]) for m in grp]
        else:
            hops, arrivals = links.send(s, arrive, grp)
            for t_hop, e, dests in hops:
                push(t_hop, "hop", s, e, dests, msg)
        for m, t_m in arrivals:
            arrived(s, m, t_m, msg)
        if faults is not None and not again:
            push(arrive + timeout0[s][r], "timer", s, r, c, 0)
        push(arrive, "link_free", s)

    def arrived(s, m, t, msg):
        if faults is None:
            push(t, "deliver", m, msg)
        else:
            deliver_with_faults(t - D[s, m], s, m, msg)

    def deliver_with_faults(t, s, m, msg):
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
                delay += frame_s[s] + (rng.uniform(0.0, rtt) if rtt > 0 else 0.0)
            frame = msg.frame
            if faults.corrupt and rng.random() < faults.corrupt:
                rec.corrupted += 1
                bit = int(rng.integers(len(frame) * 8))
                frame = bytearray(frame)
                frame[bit // 8] ^= 1 << (bit % 8)
                frame = bytes(frame)
            push(t + delay, "deliver", m, dataclasses.replace(msg, frame=frame))

    def give_up(s, r, c, t):
        """The chunk ran out of retransmissions: name who is missing, from what can be read."""
        grp = member_of[s][r]
        names = schedule.sites
        missing = getattr(sites[s], "missing", None)
        held = missing(job, r, c) if missing is not None else None
        if held is None:
            # The aggregator's slot state is not readable (the RTL): the members that never sent the chunk.
            held = tuple(m for m in grp if np.isnan(send[m, r, c]))
            how = "never sent it"
        else:
            how = f"{names[s]}'s aggregator holds no contribution from {'them' if len(held) > 1 else 'it'}"
        waited = timeout0[s][r] * ((1 << (RETRIES + 1)) - 1)
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

    # Initial conditions: data and window, each counted once per chunk of every round a site takes part in.
    for s in range(n):
        for r in range(rounds):
            if not member_of[s][r]:
                continue
            for c in range(n_chunks):
                need = (prev_round[s][r] is not None) + (window_pred(r, c) is not None)
                if need:
                    waiting[(s, r, c)] = need
                else:
                    heapq.heappush(ready[s], (0.0, r, c, False))
    for s in range(n):
        if ready[s]:
            start_send(s, 0.0)

    # Which (site, round, chunk) each RESULT unlocks.
    next_round = [[None] * rounds for _ in range(n)]
    for s in range(n):
        for r in range(rounds):
            if prev_round[s][r] is not None:
                next_round[s][prev_round[s][r]] = r

    def window_succ(r, c):
        if c + bank_slots < n_chunks:
            return r, c + bank_slots
        if r + period < rounds:
            return r + period, c % bank_slots
        return None

    def holds_contribution(s, r, c):
        """The hosts keep a chunk's CONTRIB until their RESULT for the slot's next chunk is in: then every
        member has its RESULT for this one (the window rule), so nobody can need it again."""
        succ = window_succ(r, c)
        return succ is None or not member_of[s][succ[0]] or np.isnan(result[s, succ[0], succ[1]])

    polling = set()

    def emit(m, t, outs):
        """Send a site's RESULTs to its hosts; keep polling an aggregator that works on in time."""
        nonlocal emitted
        for t_out, res in outs:
            emitted += 1
            copies = 1
            if faults is not None:
                if rng.random() < faults.dup:
                    copies, rec.results_duplicated = 2, rec.results_duplicated + 1
            for k in range(copies):
                if faults is not None and faults.loss and rng.random() < faults.loss:
                    rec.results_lost += 1
                    continue
                push(max(t_out, t) + frame_s[m] * (1 + k), "result", m, res)
        later = getattr(sites[m], "next_poll", None)
        when = later(t) if later is not None else None
        if when is not None and (m, when) not in polling:
            polling.add((m, when))
            push(when, "poll", m)

    reported = -1
    while events and outstanding:
        t, _, kind, data = heapq.heappop(events)
        if kind == "link_free":
            start_send(data[0], t)
        elif kind == "hop":
            s, e, dests, msg = data
            nbytes = len(msg.frame) if msg.frame is not None else chunk_elems * dtype.size + WIRE_OVERHEAD
            hops, arrivals = links.cross(t, s, e, dests, nbytes)
            for t_hop, e2, ds in hops:
                push(t_hop, "hop", s, e2, ds, msg)
            for m, t_m in arrivals:
                arrived(s, m, t_m, msg)
        elif kind == "timer":
            s, r, c, k = data
            if not np.isnan(result[s, r, c]) or (s == kill_site and r >= kill_round):
                continue
            if k >= RETRIES:
                give_up(s, r, c, t)
            rec.retransmits += 1
            resend(s, r, c, t)
            push(t + timeout0[s][r] * (2 << k), "timer", s, r, c, k + 1)
        elif kind == "deliver":
            m, msg = data
            if msg.frame is not None:
                ingress[m] += len(msg.frame)
            else:
                ingress[m] += chunk_elems * dtype.size + WIRE_OVERHEAD
            emit(m, t, sites[m].feed(t, [msg]))
        elif kind == "poll":
            emit(data[0], t, sites[data[0]].poll(t))
        elif kind == "result":
            s, res = data
            r, c = res.round, res.chunk
            if not (0 <= r < rounds and 0 <= c < n_chunks):
                continue  # not ours to apply (the aggregator's counters say why)
            if not np.isnan(result[s, r, c]):
                rec.results_ignored += 1
                # Applied already. The RESULT came again because some member sent this chunk to our
                # aggregator after it completed (or the WAN copied it): a member may still be missing our
                # contribution, so send it once more. Our resend makes the other members' aggregators send
                # their RESULTs again too, so without a hold-off two done members would keep answering each
                # other; the hold-off starts at one timeout and doubles, as the asking member's retries do.
                last, n_echo = echoed.get((s, r, c), (-math.inf, 0))
                if (
                    faults is not None
                    and not (s == kill_site and r >= kill_round)
                    and t - last >= timeout0[s][r] * (1 << n_echo)
                    and holds_contribution(s, r, c)
                ):
                    echoed[(s, r, c)] = (t, n_echo + 1)
                    rec.resends_on_result += 1
                    resend(s, r, c, t)
                continue
            result[s, r, c] = t
            outstanding -= 1
            if with_data:
                g = len(member_of[s][r])
                elems = np.frombuffer(res.payload, bits_dtype(dtype), offset=HEADER_BYTES).view(vt)
                with np.errstate(all="ignore"):
                    current[s][c] = (elems / vt.type(g)).astype(vt)
            nr = next_round[s][r]
            if nr is not None:
                condition_met(s, nr, c, t)
            succ = window_succ(r, c)
            if succ is not None and member_of[s][succ[0]]:
                condition_met(s, succ[0], succ[1], t)
            if (
                progress is not None
                and r > reported
                and np.all(~np.isnan(result[:, r][[bool(member_of[x][r]) for x in range(n)]]))
            ):
                reported = r
                progress(f"round {r} complete at {t * 1e3:.1f} ms simulated")

    if outstanding:
        s, r, c = next(
            (s, r, c)
            for s in range(n)
            for r in range(rounds)
            if member_of[s][r]
            for c in range(n_chunks)
            if np.isnan(result[s, r, c])
        )
        if kill_site is None:
            raise RuntimeError(f"The co-simulation stalled: site {s} has no RESULT for round {r} chunk {c}.")
        names = schedule.sites
        raise SiteTimeout(
            f"round {kill_round}: site {names[kill_site]} (rank {kill_site}) stopped sending "
            f"and no other member of its groups is left to time out; {names[s]} has no RESULT "
            f"for round {r}",
            site=s,
            round=r,
            chunk=c,
            missing=(kill_site,),
        )

    stats = []
    for r in range(rounds):
        sr = send[:, r][~np.isnan(send[:, r])]
        rr = result[:, r][~np.isnan(result[:, r])]
        stats.append(
            RoundStats(r, float(sr.min()) if sr.size else math.nan, float(rr.max()) if rr.size else math.nan)
        )
    finish = float(np.nanmax(result)) if np.isfinite(result).any() else math.nan
    final = None
    if with_data:
        final = [np.concatenate(current[s]) for s in range(n)]
    return WanRun(stats, finish, send, result, ingress, [a.counters() for a in sites], final, emitted, rec)


def contrib_frame(elems, *, dtype, rank, job, round_index, group, chunk, chunk_elems, last, period):
    """One CONTRIB frame of chunk ``chunk``, from site ``rank``'s hosts to its group's multicast address."""
    ip = addressing.contrib_group_ip(job=job, round=round_index, group=group, period=period)
    header = dict(dtype=dtype, rank=rank, job=job, round_index=round_index, group=group, last=last)
    return chunk_frame(
        elems, chunk=chunk, chunk_elems=chunk_elems, dst_mac=addressing.multicast_mac(ip), dst_ip=ip, **header
    )


def chunk_frame(elems, *, dtype, rank, job, round_index, group, chunk, chunk_elems, last, dst_mac, dst_ip):
    """One CONTRIB frame of chunk ``chunk`` from site ``rank``'s hosts to ``dst_mac``/``dst_ip``."""
    payloads = pack_tensor(
        elems,
        dtype=dtype,
        rank=rank,
        job=job,
        round=round_index,
        group=group,
        chunk_elems=chunk_elems,
        first_chunk=chunk,
        last=last,
    )
    return build_frame(
        next(iter(payloads)),
        src_mac=addressing.host_mac(rank),
        dst_mac=dst_mac,
        src_ip=addressing.host_ip(rank),
        dst_ip=dst_ip,
        sport=UDP_PORT,
        dport=UDP_PORT,
    )
