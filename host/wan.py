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
among the ready chunks), reach each member's aggregator after the one-way delay, and a RESULT reaches the
site's hosts one frame time after the aggregator emits it. Because the WAN's delays are shortest paths
(the triangle inequality holds) and each member's own RESULT for a chunk implies every contribution to it
reached that member, a contribution never finds its slot held by another live chunk: no
``ahead_of_window`` drop can happen without faults (the proof is in ``docs/PROTOCOL.md``).

The aggregator of each site is pluggable: :class:`GoldenSite` (the golden model, here), the Verilated core
(:mod:`wanreduce.sim.cosim`), or :class:`CountingSite` (timing only, no data: the pacing model the emitter
uses). An aggregator takes ``feed(t, msgs)`` and returns ``[(t_out, msg), ...]`` for the RESULTs it emits to
its own site's hosts.
"""

import dataclasses
import heapq
import math

import numpy as np

from ..spec import addressing
from ..spec.protocol import HEADER_BYTES, UDP_PORT, WIRE_OVERHEAD, DType
from .frames import build_frame, parse_frame
from .golden import Destination, GoldenAggregator
from .packet import decode_headers, pack_tensor
from .protocol import bits_dtype, np_dtype

__all__ = ["Msg", "CountingSite", "GoldenSite", "WanRun", "RoundStats", "simulate", "bank_layout",
           "chunk_count"]


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


class CountingSite:
    """Timing only: a chunk's RESULT leaves the moment its last expected contribution arrives."""

    def __init__(self, schedule, rank):
        self.schedule, self.rank = schedule, rank
        self.seen = {}

    def feed(self, t, msgs):
        out = []
        for m in msgs:
            members = _members(self.schedule, self.rank, m.round)
            key = (m.round, m.chunk)
            got = self.seen.setdefault(key, set())
            got.add(m.src)
            if got == set(members):
                out.append((t, Msg(self.rank, m.round, m.chunk)))
        return out

    def counters(self):
        return {}


class GoldenSite:
    """The golden aggregator of one site, fed real frames, sending RESULTs to the site's host group."""

    def __init__(self, schedule, rank, *, slots, members, slot_bytes, bank_bits, job=0):
        jobs = {job: [_members(schedule, rank, r) for r in range(schedule.period)]}
        dest = Destination(addressing.host_mac(rank), addressing.site_group_ip(rank), UDP_PORT)
        self.agg = GoldenAggregator(rank=rank, jobs=jobs, slots=slots, members=members, slot_bytes=slot_bytes,
                                    destinations=[dest], bank_bits={job: bank_bits})

    def feed(self, t, msgs):
        out = []
        for m in msgs:
            for frame in self.agg.feed_frame(m.frame):
                out.append((t, result_msg(frame)))
        return out

    def counters(self):
        return dict(self.agg.counters)


def result_msg(frame):
    """A RESULT frame (from an aggregator) → :class:`Msg` with its payload."""
    payload, _, reason = parse_frame(frame, port=UDP_PORT)
    if reason is not None:
        raise RuntimeError(f"an aggregator emitted a frame that does not parse ({reason.counter})")
    h = decode_headers(np.frombuffer(payload[:HEADER_BYTES], np.uint8).reshape(1, -1))[0]
    return Msg(int(h["src"]), int(h["round"]), int(h["chunk"]), int(h["group"]), payload=payload)


def _members(schedule, rank, round_index):
    for grp in schedule.rounds[round_index % schedule.period]:
        if rank in grp:
            return tuple(grp)
    return ()


@dataclasses.dataclass
class RoundStats:
    round: int
    first_send_s: float
    last_result_s: float


@dataclasses.dataclass
class WanRun:
    """What a co-simulation did: times, traffic, drops and (with data) every site's final tensor."""

    rounds: list
    finish_s: float
    send: np.ndarray          # [site, round, chunk] send start (NaN: the site waits that round)
    result: np.ndarray        # [site, round, chunk] own RESULT in at the hosts (NaN: waits)
    ingress_bytes: list       # per site: frame bytes delivered to its aggregator
    counters: list            # per site: the aggregator's counters (empty for timing-only runs)
    values: list | None       # per site: the tensor after the last round (wire dtype), with data
    results_emitted: int


def simulate(schedule, *, one_way_s, site_Bps, chunk_elems, elements, dtype=DType.FP32, bank_slots,
             sites=None, tensors=None, rounds=None, job=0, progress=None):
    """Run ``rounds`` rounds (default: one period) of ``schedule``; returns a :class:`WanRun`.

    ``site_Bps`` is each site's access-link rate in bytes/s on the wire; ``sites`` the aggregators (one per
    site, see the module docstring; default :class:`CountingSite`); ``tensors`` one array per site for a run
    with data (required unless every site is a CountingSite).
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
    vt = np_dtype(dtype)
    if with_data:
        values = [np.asarray(t).astype(vt).reshape(-1).copy() for t in tensors]
        if any(v.size != elements for v in values):
            raise ValueError(f"Every tensor must hold {elements} elements.")
        current = [[v[c * chunk_elems:(c + 1) * chunk_elems].copy() for c in range(n_chunks)] for v in values]
    member_of = [[_members(schedule, s, r) for r in range(rounds)] for s in range(n)]
    group_id = [[next((g for g, grp in enumerate(schedule.rounds[r % period]) if s in grp), None)
                 for r in range(rounds)] for s in range(n)]
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
    waiting = {}   # (site, round, chunk) -> unmet conditions
    ready = [[] for _ in range(n)]        # per site: heap of (ready time, round, chunk)
    link_busy = [False] * n
    events = []
    seq = 0
    ingress = [0] * n
    emitted = 0

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
        heapq.heappush(ready[s], (t, r, c))
        if not link_busy[s]:
            start_send(s, t)

    def start_send(s, t):
        if not ready[s]:
            link_busy[s] = False
            return
        _, r, c = heapq.heappop(ready[s])
        link_busy[s] = True
        send[s, r, c] = t
        grp = member_of[s][r]
        gid = group_id[s][r]
        frame = None
        if with_data:
            frame = contrib_frame(current[s][c], dtype=dtype, rank=s, job=job, round_index=r, group=gid,
                                  chunk=c, chunk_elems=chunk_elems, last=c == n_chunks - 1, period=period)
        arrive = t + frame_s[s]
        for m in grp:
            push(arrive + D[s, m], "deliver", m, Msg(s, r, c, gid, frame=frame))
        push(arrive, "link_free", s)

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
                    heapq.heappush(ready[s], (0.0, r, c))
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

    reported = -1
    while events:
        t, _, kind, data = heapq.heappop(events)
        if kind == "link_free":
            start_send(data[0], t)
        elif kind == "deliver":
            m, msg = data
            if msg.frame is not None:
                ingress[m] += len(msg.frame)
            else:
                ingress[m] += chunk_elems * dtype.size + WIRE_OVERHEAD
            for t_out, res in sites[m].feed(t, [msg]):
                emitted += 1
                push(t_out + frame_s[m], "result", m, res)
        elif kind == "result":
            s, res = data
            r, c = res.round, res.chunk
            if not (0 <= r < rounds and 0 <= c < n_chunks) or not np.isnan(result[s, r, c]):
                continue  # not ours to apply (the aggregator's counters say why)
            result[s, r, c] = t
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
            if progress is not None and r > reported and np.all(~np.isnan(result[:, r][
                    [bool(member_of[x][r]) for x in range(n)]])):
                reported = r
                progress(f"round {r} complete at {t * 1e3:.1f} ms simulated")

    stats = []
    for r in range(rounds):
        sr = send[:, r][~np.isnan(send[:, r])]
        rr = result[:, r][~np.isnan(result[:, r])]
        stats.append(RoundStats(r, float(sr.min()) if sr.size else math.nan,
                                float(rr.max()) if rr.size else math.nan))
    finish = float(np.nanmax(result)) if np.isfinite(result).any() else math.nan
    final = None
    if with_data:
        final = [np.concatenate(current[s]) for s in range(n)]
    return WanRun(stats, finish, send, result, ingress, [a.counters() for a in sites], final, emitted)


def contrib_frame(elems, *, dtype, rank, job, round_index, group, chunk, chunk_elems, last, period):
    """One CONTRIB frame of chunk ``chunk``, from site ``rank``'s hosts to its group's multicast address."""
    payloads = pack_tensor(elems, dtype=dtype, rank=rank, job=job, round=round_index, group=group,
                           chunk_elems=chunk_elems, first_chunk=chunk, last=last)
    ip = addressing.contrib_group_ip(job=job, round=round_index, group=group, period=period)
    return build_frame(next(iter(payloads)), src_mac=addressing.host_mac(rank),
                       dst_mac=addressing.multicast_mac(ip), src_ip=addressing.host_ip(rank), dst_ip=ip,
                       sport=UDP_PORT, dport=UDP_PORT)
