"""Discrete-event co-simulation of root aggregation (a schedule with a ``lean`` section) over the WAN.

What it models, per round of the schedule and per group (``docs/lean.md``):

* **senders**: member ``j`` of a group sends chunk ``first_chunk + i`` of stripe ``q`` at
  ``start_s + offsets_s[j] + i * interval_s`` (the schedule's keys), but not before its own RESULT for
  the same chunk of the previous round it took part in is in (the data it sends). Frames leave the site's
  access link back to back, first come first served among the ready chunks (``frame bytes / link rate``
  each), unicast to the stripe's root;
* **WAN**: a frame reaches the root after the one-way delay plus, when ``jitter_s`` is given, a uniform
  extra delay in ``[0, 2 * jitter_s)`` drawn per frame from a seeded generator (so frames may overtake);
* **root**: its aggregator (with data, an in-line aggregator at every site, below; a counter without)
  takes the ``G`` contributions, sums them in the group's listed order and sends ONE RESULT to the group's
  RESULT multicast address (:func:`wanreduce.spec.addressing.result_group_ip`) and one to its own site's
  hosts; every other member receives the group copy after the one-way delay (plus jitter) and one frame
  time on its access link. The root uses the
  gateware's slots: ``S`` slots (the memory's power of two for ``G_max`` members), round banks of
  ``bank_slots``; a contribution that finds its slot held by another live chunk is counted as a
  ``slot_conflict`` (the gateware's ``ahead_of_window``);
* **memory**: a chunk occupies a root slot from its first contribution to its last; the run reports
  each root's peak number of live slots and ``peak * (G + 1) * member buffer bytes`` (a slot's member
  buffers and its shadow RESULT, as :func:`wanreduce.host.pacing.aggregator_slots` counts it).

**In-line aggregators** (runs with data). Every site's aggregator sits between the WAN and its hosts
(PROTOCOL.md "In-line bypass"): it is configured with a :class:`~wanreduce.host.golden.RootEntry` for
each round in which the site roots a stripe (the group's order, the stripe, the group's RESULT address)
and its site's host group as destination; every frame for the site enters it: the contributions to its
stripes, the other roots' RESULTs (which it forwards to the hosts on its bypass port) and, with
``background``, frames that are not wanreduce at all (seeded sizes and times), which must come out of
the bypass port unchanged and in order. ``sites`` builds the aggregators from one configuration per site
(default: the golden model; :func:`wanreduce.sim.verify.cosim.inline_sites` gives Verilated cores).

The building blocks (message type, chunk count, RESULT parsing, frame layout) are those of
:mod:`wanreduce.host.wan`.
"""

import dataclasses
import heapq
import math

import numpy as np

from ..spec import addressing
from ..spec.core import bank_slot
from ..spec.errors import WanreduceError
from ..spec.protocol import FRAME_OVERHEAD, HEADER_BYTES, UDP_PORT, WIRE_OVERHEAD, DType
from .frames import dst_ip_of, parse_frame
from .golden import Destination, GoldenAggregator, RootEntry
from .pacing import aggregator_slots, member_buffer_bytes
from .protocol import bits_dtype, np_dtype
from .wan import ChunkSender, Msg, bank_layout, chunk_count, result_msg, round_links

__all__ = [
    "LeanRun",
    "SelfPacing",
    "simulate_lean",
    "offset_gap",
    "GoldenInlineSite",
    "golden_sites",
    "background_frame",
]


@dataclasses.dataclass
class LeanRun:
    """What a root-mode co-simulation did."""

    finish_s: float
    send: np.ndarray  # [site, round, chunk] when the frame started on the access link (NaN: none)
    result: np.ndarray  # [site, round, chunk] RESULT in at the site's hosts (NaN: none)
    peak_slots: dict  # root site -> most slots live at once
    peak_slot_bytes: dict  # root site -> peak_slots * (G + 1) * member buffer bytes
    slot_conflicts: int  # contributions that found their slot held by another live chunk
    ingress_bytes: list  # per site: frame bytes delivered to its aggregator (contributions)
    results_emitted: int
    counters: dict  # site -> its in-line aggregator's counters (data runs)
    values: list | None  # per site: the tensor after the last round (wire dtype), with data
    chunks_simulated: int  # chunks per group and round actually run (all, unless stripe_limit)
    background_in: list = dataclasses.field(default_factory=list)  # per site: non-wanreduce frames sent in
    background_out: list = dataclasses.field(default_factory=list)  # per site: those out of its bypass port


class GoldenInlineSite:
    """A site's in-line aggregator as the golden model: ``feed(t, frames)`` returns
    ``[(t_out, port, frame), ...]`` with ``port`` "o" (RESULT frames) or "bypass" (forwarded frames)."""

    def __init__(self, config):
        self.agg = GoldenAggregator(**config)

    def feed(self, t, frames):
        out = []
        for f in frames:
            out += [(t, "o", r) for r in self.agg.feed_frame(f)]
            out += [(t, "bypass", b) for b in self.agg.forwarded]
            self.agg.forwarded.clear()
        return out

    def counters(self):
        return dict(self.agg.counters)


def root_entries(schedule, rank, *, job=0):
    """What the control port loads at site ``rank`` for a root-mode schedule, one entry per round of the
    period: in a round where it roots a stripe, a :class:`RootEntry` (the group's order, its stripe, the
    group's RESULT address); 0 (nothing expected) in the others. Raises :class:`WanreduceError` if the site
    roots two stripes of one group (the schedule entry holds one chunk range)."""
    if schedule.lean is None:
        raise WanreduceError("the schedule has no 'lean' section: it is a gather-mode schedule")
    period = schedule.period
    entries = []
    for r in range(period):
        entry = 0
        for gid, members in enumerate(schedule.rounds[r]):
            stripes = schedule.lean["rounds"][r]["groups"][gid]["stripes"]
            mine = [st for st in stripes if st["root"] == rank]
            if rank in members and mine:
                if len(mine) > 1:
                    raise WanreduceError(f"round {r}: site {rank} roots {len(mine)} stripes of one group")
                st = mine[0]
                group_ip = addressing.result_group_ip(job=job, round=r, group=gid, period=period)
                last = st["first_chunk"] + st["chunks"] - 1
                entry = RootEntry(tuple(members), st["first_chunk"], last, group_ip)
        entries.append(entry)
    return entries


def golden_sites(configs):
    """One :class:`GoldenInlineSite` per site configuration (:class:`GoldenAggregator` keywords)."""
    return [GoldenInlineSite(c) for c in configs]


def background_frame(rng, site, size):
    """A frame that is not wanreduce (IPv6 EtherType, random body) for ``site``'s hosts, ``size`` bytes."""
    head = bytes.fromhex(addressing.host_mac(site).replace(":", "")) + bytes.fromhex("02aabbccddee86dd")
    return head + bytes(rng.integers(0, 256, size - len(head), dtype=np.uint8))


@dataclasses.dataclass(frozen=True)
class SelfPacing:
    """Senders that pace themselves from what they observe instead of the plan's offsets and interval.

    Each member of a group sends the first ``window`` chunks of each stripe when the round starts, then
    chunk ``c + window`` when its own RESULT for chunk ``c`` is in (a window clocked by RESULT arrivals,
    which is all a host observes), each send delayed by a host-side jitter drawn from its own generator
    (``seed``): exponential with mean ``jitter_s``, a model apart from the WAN's uniform one and from the
    plan's margin. One round only (the root-mode plans have one)."""

    window: int
    jitter_s: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.window, int) and self.window >= 1):
            raise ValueError(
                f"The self-paced window must be a positive number of chunks, got {self.window!r}."
            )
        if not self.jitter_s >= 0:
            raise ValueError(f"The host jitter must be at least 0 s, got {self.jitter_s!r}.")


class _Jitter:
    """Uniform extra delays in [0, 2J), drawn in blocks from one seeded generator."""

    def __init__(self, jitter_s, seed):
        self.span = 2.0 * float(jitter_s)
        self.rng = np.random.default_rng(seed)
        self.block, self.pos = np.empty(0), 0

    def __call__(self):
        if self.span == 0.0:
            return 0.0
        if self.pos >= len(self.block):
            self.block, self.pos = self.rng.random(1 << 16) * self.span, 0
        v = self.block[self.pos]
        self.pos += 1
        return float(v)


def _round_start(schedule, r):
    lean, period = schedule.lean, schedule.period
    start = lean["rounds"][r % period]["start_s"]
    if r < period:
        return start
    per = schedule.metrics.get("period_s")
    if not isinstance(per, (int, float)) or not math.isfinite(per) or per <= 0:
        raise WanreduceError("running more than one period of a root-mode schedule needs metrics.period_s")
    return (r // period) * per + start


def simulate_lean(
    schedule,
    *,
    one_way_s,
    site_Bps,
    chunk_elems,
    elements,
    dtype=DType.FP32,
    memory_bytes=None,
    tensors=None,
    jitter_s=0.0,
    seed=0,
    rounds=None,
    job=0,
    stripe_limit=None,
    width=512,
    sites=None,
    background=0,
    pacing=None,
):
    """Run ``rounds`` rounds (default: one period) of a root-mode ``schedule``; returns a :class:`LeanRun`.

    ``pacing`` (a :class:`SelfPacing`) replaces the plan's send offsets and interval by senders clocked
    by their own RESULT arrivals.

    With data, ``sites(configs)`` builds the in-line aggregators (default :func:`golden_sites`) and
    ``background`` non-wanreduce frames per site are mixed into each site's input.

    ``site_Bps`` is each site's access-link rate in bytes/s on the wire; ``memory_bytes`` the aggregator
    memory (default: the schedule's ``params.memory_bytes``) that sets the root's slots; ``tensors`` one
    array per site for a run with data (golden roots), else the run is timing-only. ``stripe_limit``
    runs only the first chunks of every stripe (timing-only; for figures that a steady state gives).
    """
    if schedule.lean is None:
        raise WanreduceError(
            "the schedule has no 'lean' section: it is a gather-mode schedule "
            "(use wanreduce.host.wan.simulate)"
        )
    sim = _LeanSim(
        schedule,
        rounds=schedule.period if rounds is None else int(rounds),
        dtype=DType(dtype),
        chunk_elems=chunk_elems,
        elements=elements,
        memory_bytes=schedule.params.get("memory_bytes") if memory_bytes is None else memory_bytes,
        with_data=tensors is not None,
        stripe_limit=stripe_limit,
        width=width,
        one_way_s=one_way_s,
        site_Bps=site_Bps,
        jitter=_Jitter(jitter_s, seed),
        job=job,
    )
    if tensors is not None:
        sim.load_inline_sites(tensors, sites or golden_sites)
    if pacing is not None and sim.rounds != 1:
        raise ValueError("Self-paced senders are modelled for one round.")
    sim.schedule_sends(pacing)
    if tensors is not None and background:
        sim.schedule_background(int(background), seed)
    sim.run_events()
    return sim.report()


def _stripe_plan(schedule, rounds, n_chunks, chunk_elems):
    """Per round of the run, per group: ``(members, stripes)``; refuses a plan made for another tensor."""
    period = schedule.period
    plan = []
    for r in range(rounds):
        lr = schedule.lean["rounds"][r % period]
        grp = []
        for members, lg in zip(schedule.rounds[r % period], lr["groups"], strict=True):
            total = sum(st["chunks"] for st in lg["stripes"])
            if lg["stripes"] and total != n_chunks:
                planned = schedule.params.get("tensor_bytes")
                raise WanreduceError(
                    f"this root-mode schedule was planned for {total} chunks per site"
                    + (f" ({planned} bytes)" if planned else "")
                    + f", but the tensor has {n_chunks} chunks of {chunk_elems} elements; rerun "
                    "`wanreduce schedule --tensor-bytes` with the tensor's size, or `--mode gather`"
                )
            grp.append((tuple(members), lg["stripes"]))
        plan.append(grp)
    return plan


# Events are flat tuples (time, sequence, kind, a, b, c, d); the sequence number breaks ties in the
# order the events were made, so a run is the same whatever the heap's layout.
_READY, _LINK_FREE, _DELIVER, _RESULT, _INBOUND = 0, 1, 2, 3, 4


class _LeanSim(ChunkSender):
    """The state of one :func:`simulate_lean` run: the plan, the senders' queues and links, the roots'
    slots, and the event queue that moves frames between them."""

    def __init__(
        self,
        schedule,
        *,
        rounds,
        dtype,
        chunk_elems,
        elements,
        memory_bytes,
        with_data,
        stripe_limit,
        width,
        one_way_s,
        site_Bps,
        jitter,
        job,
    ):
        if not isinstance(memory_bytes, int) or memory_bytes < 1:
            raise WanreduceError(f"the aggregator memory {memory_bytes!r} is not a positive byte count")
        if with_data and stripe_limit is not None:
            raise ValueError("A run with data simulates every chunk; stripe_limit is for timing-only runs.")
        self.schedule, self.rounds, self.dtype, self.job = schedule, rounds, dtype, job
        self.n, self.period = schedule.n, schedule.period
        self.chunk_elems, self.elements = chunk_elems, elements
        self.n_chunks = chunk_count(elements, chunk_elems)
        self.chunk_bytes = chunk_bytes = chunk_elems * dtype.size
        self.stripe_limit, self.width, self.with_data = stripe_limit, width, with_data
        self.gmax = gmax = max(len(g) for rnd in schedule.rounds for g in rnd)
        self.slots = aggregator_slots(memory_bytes, chunk_bytes=chunk_bytes, members=gmax, width=width)
        self.bits, bank = bank_layout(self.slots, self.period)
        if bank < 1:
            raise WanreduceError(
                f"{memory_bytes} bytes of aggregator memory hold no round bank of {gmax}-member "
                f"slots of {chunk_bytes}-byte chunks"
            )
        self.mbb = member_buffer_bytes(chunk_bytes, width)
        self.D = np.asarray(one_way_s, float)
        self.frame_bytes = chunk_bytes + WIRE_OVERHEAD
        self.frame_s = self.frame_bytes / np.broadcast_to(np.asarray(site_Bps, float), (self.n,))
        self.jitter = jitter
        self.vt = np_dtype(dtype)
        self.plan = _stripe_plan(schedule, rounds, self.n_chunks, chunk_elems)
        self._index_membership()
        n = self.n
        self.aggs = self.current = self.host_group = None
        self.send = np.full((n, rounds, self.n_chunks), np.nan)
        self.result = np.full((n, rounds, self.n_chunks), np.nan)
        self.sched = {}  # (site, round, chunk) -> planned send time, released by the previous round's RESULT
        self.events, self.seq = [], 0
        self.bg_in = [[] for _ in range(n)]
        self.bg_out = [[] for _ in range(n)]
        self.ready = [[] for _ in range(n)]
        self.link_busy = [False] * n
        self.ingress = [0] * n
        self.seen = {}  # (root, round, chunk) -> contributors so far
        self.live = [dict() for _ in range(n)]  # per root: slot -> (round, chunk)
        self.peak = {}
        self.conflicts = 0
        self.emitted = 0
        self.pacing = self.host_rng = None
        self.stripe_end = {}  # (round, group, chunk) -> one past the stripe's last chunk (self-paced runs)

    def _limit(self, stripe):
        """How many of the stripe's chunks the run sends."""
        return (
            stripe["chunks"] if self.stripe_limit is None else min(stripe["chunks"], int(self.stripe_limit))
        )

    def _index_membership(self):
        """Who is in which group each round, the root of every chunk, and each site's previous and next
        round, so that a RESULT can release the same chunk of the site's next round."""
        n, rounds = self.n, self.rounds
        self.member_of = [[None] * rounds for _ in range(n)]  # (gid, members) of site s in round r
        self.root_of = [dict() for _ in range(rounds)]  # per round: (gid, chunk) -> root
        for r, grp in enumerate(self.plan):
            for gid, (members, stripes) in enumerate(grp):
                if not stripes:
                    continue  # a group of one sends nothing and keeps its value: it waits this round
                for m in members:
                    self.member_of[m][r] = (gid, members)
                for st in stripes:
                    for c in range(st["first_chunk"], st["first_chunk"] + self._limit(st)):
                        self.root_of[r][(gid, c)] = st["root"]
        self.prev_round, self.next_round = round_links(self.member_of)

    def load_inline_sites(self, tensors, build):
        """Each site's starting chunks and its in-line aggregator, configured for the stripes it roots."""
        n, job, chunk_elems = self.n, self.job, self.chunk_elems
        values = [np.asarray(t).astype(self.vt).reshape(-1).copy() for t in tensors]
        if len(values) != n or any(v.size != self.elements for v in values):
            raise ValueError(f"Give {n} tensors of {self.elements} elements each.")
        self.current = [
            [v[c * chunk_elems : (c + 1) * chunk_elems].copy() for c in range(self.n_chunks)] for v in values
        ]
        beat = self.width // 8
        # The bypass buffer holds any standard frame and any RESULT of this tensor's chunks.
        bypass_bytes = -(-max(1518, FRAME_OVERHEAD + HEADER_BYTES + self.chunk_bytes) // beat) * beat
        configs = [
            dict(
                rank=q,
                jobs={job: root_entries(self.schedule, q, job=job)},
                slots=self.slots,
                members=self.gmax,
                slot_bytes=self.chunk_bytes,
                bank_bits={job: self.bits},
                destinations=[Destination(addressing.host_mac(q), addressing.site_group_ip(q), UDP_PORT)],
                bypass_bytes=bypass_bytes,
            )
            for q in range(n)
        ]
        self.aggs = build(configs)
        self.host_group = [bytes(int(x) for x in addressing.site_group_ip(q).split(".")) for q in range(n)]

    def _push(self, t, kind, a, b=None, c=None, d=None):
        heapq.heappush(self.events, (t, self.seq, kind, a, b, c, d))
        self.seq += 1

    def _host_delay(self):
        return float(self.host_rng.exponential(self.pacing.jitter_s)) if self.pacing.jitter_s > 0 else 0.0

    def schedule_sends(self, pacing):
        """The first sends of every round: at the plan's offsets and interval (a site's later rounds wait
        for its RESULT of the same chunk), or, self-paced, the first window of each stripe at once."""
        self.pacing = pacing
        self.host_rng = np.random.default_rng(pacing.seed) if pacing is not None else None
        for r, grp in enumerate(self.plan):
            start = _round_start(self.schedule, r)
            for gid, (members, stripes) in enumerate(grp):
                for st in stripes:
                    lim, first = self._limit(st), st["first_chunk"]
                    if pacing is not None:
                        for c in range(first, first + lim):
                            self.stripe_end[(r, gid, c)] = first + lim
                        for s in members:
                            for c in range(first, first + min(lim, pacing.window)):
                                self._push(start + self._host_delay(), _READY, s, r, c)
                        continue
                    step = st["interval_s"]
                    for k, s in enumerate(members):
                        t0 = start + st["offsets_s"][k]
                        for i in range(lim):
                            if self.prev_round[s][r] is None:
                                self._push(t0 + i * step, _READY, s, r, first + i)
                            else:
                                self.sched[(s, r, first + i)] = t0 + i * step

    def schedule_background(self, count, seed):
        """Other traffic for each site, spread over the run's first round (seeded)."""
        brng = np.random.default_rng(seed + 1)
        span = max(_round_start(self.schedule, 0) + 1e-3, float(np.max(self.D)) * 2)
        for s in range(self.n):
            times = np.sort(brng.random(count)) * span
            for t_bg in times:
                f = background_frame(brng, s, int(brng.integers(60, 1519)))
                self.bg_in[s].append(f)
                self._push(float(t_bg), _INBOUND, s, f)

    def run_events(self):
        """Pop events in time order until none is left."""
        pop, events = heapq.heappop, self.events
        while events:
            t, _, kind, a, b, c, d = pop(events)
            if kind == _READY:
                heapq.heappush(self.ready[a], (t, b, c))
                if not self.link_busy[a]:
                    self._start_send(a, t)
            elif kind == _LINK_FREE:
                self._start_send(a, t)
            elif kind == _INBOUND:
                self._route(a, self.aggs[a].feed(t, [b]))
            elif kind == _DELIVER:
                self._deliver(t, a, b, c, d)
            else:
                self._result_in(t, a, b)

    def _start_send(self, s, t):
        """Site ``s``'s access link is free at ``t``: send its earliest ready chunk to the chunk's root."""
        if not self.ready[s]:
            self.link_busy[s] = False
            return
        _, r, c = heapq.heappop(self.ready[s])
        self.link_busy[s] = True
        self.send[s, r, c] = t
        gid = self.member_of[s][r][0]
        q = self.root_of[r][(gid, c)]
        frame = self.chunk_frame(s, r, c, gid, root=q)
        done = t + self.frame_s[s]
        self._push(done + self.D[s, q] + self.jitter(), _DELIVER, q, s, (r, c, gid), frame)
        self._push(done, _LINK_FREE, s)

    def _slot(self, r, c):
        return bank_slot(r, c, period=self.period, bank_bits=self.bits, slots=self.slots)

    def _free(self, q, r, c):
        """The root's slot for chunk ``c`` of round ``r`` is released (its RESULT is out)."""
        self.emitted += 1
        slot = self._slot(r, c)
        if self.live[q].get(slot) == (r, c):
            del self.live[q][slot]

    def _deliver(self, t, q, src, key, frame):
        """A contribution reaches root ``q``: take a slot on the chunk's first one, and without data send
        the RESULT when the group's last is in (with data the aggregator decides)."""
        r, c, gid = key
        members = self.member_of[src][r][1]
        self.ingress[q] += len(frame) if frame is not None else self.frame_bytes
        got = self.seen.get((q, r, c))
        if got is None:
            got = self.seen[(q, r, c)] = set()
            slot = self._slot(r, c)
            if slot in self.live[q]:
                self.conflicts += 1
            self.live[q][slot] = (r, c)
            if len(self.live[q]) > self.peak.get(q, 0):
                self.peak[q] = len(self.live[q])
        got.add(src)
        if self.with_data:
            self._route(q, self.aggs[q].feed(t, [frame]))
        elif len(got) == len(members):
            self._free(q, r, c)
            del self.seen[(q, r, c)]
            out = Msg(q, r, c, gid)
            for m in members:
                self._push(t + self.D[q, m] + self.jitter() + self.frame_s[m], _RESULT, m, out)

    def _route(self, q, outs):
        """Where the frames out of site ``q``'s in-line aggregator go."""
        for t_out, port, f in outs:
            if port == "o":
                msg = result_msg(f)
                members = self.plan[msg.round][msg.group][0]
                if dst_ip_of(f) == self.host_group[q]:  # the copy for q's own hosts
                    self._free(q, msg.round, msg.chunk)
                    self.seen.pop((q, msg.round, msg.chunk), None)
                    self._push(t_out + self.frame_s[q], _RESULT, q, msg)
                else:  # the group copy: over the WAN to the other members' aggregators
                    for m in members:
                        if m != q:
                            self._push(t_out + self.D[q, m] + self.jitter(), _INBOUND, m, f)
            elif parse_frame(f, port=UDP_PORT)[2] is None:  # another root's RESULT, forwarded
                self._push(t_out + self.frame_s[q], _RESULT, q, result_msg(f))
            else:
                self.bg_out[q].append(f)

    def _result_in(self, t, m, res):
        """A RESULT reaches site ``m``'s hosts: record it, take its value, and release what waited on it
        (the next self-paced chunk, or the same chunk of the site's next round)."""
        r, c = res.round, res.chunk
        if not np.isnan(self.result[m, r, c]):
            return
        self.result[m, r, c] = t
        if self.with_data:
            vt = self.vt
            g = len(self.member_of[m][r][1])
            elems = np.frombuffer(res.payload, bits_dtype(self.dtype), offset=HEADER_BYTES).view(vt)
            with np.errstate(all="ignore"):
                self.current[m][c] = (elems / vt.type(g)).astype(vt)
        if self.pacing is not None and self.member_of[m][r] is not None:
            nxt = c + self.pacing.window
            if nxt < self.stripe_end.get((r, self.member_of[m][r][0], c), 0):
                self._push(t + self._host_delay(), _READY, m, r, nxt)
        nr = self.next_round[m][r]
        if nr is not None and (m, nr, c) in self.sched:
            self._push(max(t, self.sched.pop((m, nr, c))), _READY, m, nr, c)

    def report(self):
        """The run as a :class:`LeanRun`."""
        sizes = {}
        for grp in self.plan:
            for members, stripes in grp:
                for st in stripes:
                    sizes[st["root"]] = max(sizes.get(st["root"], 0), len(members))
        result = self.result
        finish = float(np.nanmax(result)) if np.isfinite(result).any() else math.nan
        simulated = (
            self.n_chunks if self.stripe_limit is None else sum(self._limit(st) for st in self.plan[0][0][1])
        )
        with_data = self.with_data
        return LeanRun(
            finish_s=finish,
            send=self.send,
            result=result,
            peak_slots=dict(self.peak),
            peak_slot_bytes={q: p * (sizes.get(q, self.gmax) + 1) * self.mbb for q, p in self.peak.items()},
            slot_conflicts=self.conflicts,
            ingress_bytes=self.ingress,
            results_emitted=self.emitted,
            counters={q: a.counters() for q, a in enumerate(self.aggs)} if with_data else {},
            values=[np.concatenate(self.current[s]) for s in range(self.n)] if with_data else None,
            chunks_simulated=simulated,
            background_in=self.bg_in,
            background_out=self.bg_out,
        )


def offset_gap(schedule, run, *, skip=0, round_index=0):
    """How far the plan's send offsets are from what a run's senders did, per stripe.

    For each stripe and member: the median over its chunks (after the first ``skip``) of the member's send
    time minus the earliest member's for the same chunk, against the plan's offset minus the earliest
    offset. Returns ``[(root, member, plan_s, observed_s), ...]``; for a run that kept the plan the two
    agree up to the link's queueing and jitter."""
    out = []
    lr = schedule.lean["rounds"][round_index % schedule.period]
    for members, lg in zip(schedule.rounds[round_index % schedule.period], lr["groups"], strict=True):
        for st in lg["stripes"]:
            chunks = range(st["first_chunk"] + skip, st["first_chunk"] + st["chunks"])
            sends = run.send[np.ix_(list(members), [round_index], list(chunks))][:, 0, :]
            keep = ~np.isnan(sends).any(axis=0)
            if not keep.any():
                continue
            rel = sends[:, keep] - sends[:, keep].min(axis=0)
            base = min(st["offsets_s"])
            for k, m in enumerate(members):
                out.append((st["root"], m, st["offsets_s"][k] - base, float(np.median(rel[k]))))
    return out
