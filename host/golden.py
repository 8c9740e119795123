"""The golden software aggregator: what one site's FPGA must do, packet by packet, in plain Python.

It follows ``docs/PROTOCOL.md`` literally: a direct-mapped reorder buffer of ``slots`` slots (slot = chunk
mod S), ``members`` buffers of ``slot_bytes`` bytes per slot, contributions stored as they arrive, and the
sum taken in ascending rank order with one IEEE-754 rounding per addition in the packet's dtype (numpy and
ml_dtypes do the arithmetic). Every drop is counted under its :class:`~.protocol.Drop` name. The RTL is
compared with this model byte for byte, so it favours being obviously right over being fast.
"""

import dataclasses

import numpy as np

from .frames import build_frame, parse_frame, parse_ip, parse_mac
from .protocol import HEADER_BYTES, MAX_RANKS, UDP_PORT, Drop, DType, Kind, bits_dtype, np_dtype
from .validate import check_payload

__all__ = ["GoldenAggregator", "Destination", "CANONICAL_NAN", "reduce_in_rank_order"]

# The one quiet NaN the adder lanes emit for any NaN result (sign 0, exponent all ones, top mantissa bit
# set, rest zero), so that RESULTs holding NaN are identical to the bit across sites and implementations.
CANONICAL_NAN = {DType.FP32: 0x7FC00000, DType.FP16: 0x7E00, DType.BF16: 0x7FC0}


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where one copy of every RESULT goes."""

    mac: object
    ip: object
    port: int = UDP_PORT


def reduce_in_rank_order(contributions, dtype):
    """Sum bit-pattern arrays (already in ascending rank order) in ``dtype``; returns bit patterns.

    One rounding per addition; the first term is taken as is; NaN results become :data:`CANONICAL_NAN`.
    """
    dtype = DType(dtype)
    acc = np.asarray(contributions[0], bits_dtype(dtype)).view(np_dtype(dtype)).copy()
    with np.errstate(all="ignore"):
        for c in contributions[1:]:
            acc = (acc + np.asarray(c, bits_dtype(dtype)).view(np_dtype(dtype))).astype(np_dtype(dtype))
    nan = np.isnan(acc.astype(np.float32))  # a NaN anywhere propagates to the end
    bits = acc.view(bits_dtype(dtype)).copy()
    bits[nan] = CANONICAL_NAN[dtype]
    return bits


class _Slot:
    __slots__ = ("state", "tag", "bitmap", "dtype", "count", "group", "flags", "buffers")

    def __init__(self):
        self.state = "empty"
        self.tag = None


def _older(a, b):
    """Tag ``a`` is older than tag ``b``: same job and (round, chunk) lexicographically smaller."""
    return a[0] == b[0] and (a[1], a[2]) < (b[1], b[2])


class GoldenAggregator:
    """One site's aggregator.

    ``jobs`` maps a job id to the expected bitmaps of one schedule period: round ``r`` of that job expects
    ``jobs[job][r % len(jobs[job])]`` (0 where this site waits). ``destinations`` receive one RESULT frame
    each, in order, from the frame entry point.
    """

    def __init__(self, *, rank, jobs, slots, members, slot_bytes, mac="02:57:52:00:00:00", ip="10.87.82.0",
                 port=UDP_PORT, destinations=()):
        if not 0 <= rank < MAX_RANKS:
            raise ValueError(f"The rank must be in 0..{MAX_RANKS - 1}, not {rank}.")
        if slots < 1 or members < 1 or slot_bytes < 1:
            raise ValueError("The slot count, members per slot and slot bytes must all be positive.")
        for job, period in jobs.items():
            if not period:
                raise ValueError(f"Job {job} has an empty schedule period.")
            for bitmap in period:
                if bin(bitmap).count("1") > members:
                    raise ValueError(f"Job {job} expects {bin(bitmap).count('1')} members in a round, more "
                                     f"than the {members} buffers a slot has.")
        self.rank = rank
        self.jobs = {int(j): [int(b) for b in p] for j, p in jobs.items()}
        self.slot_bytes = slot_bytes
        self.members = members
        self.mac, self.ip, self.port = parse_mac(mac), parse_ip(ip), port
        self.destinations = [Destination(parse_mac(d.mac), parse_ip(d.ip), d.port) for d in destinations]
        self.slots = [_Slot() for _ in range(slots)]
        self.counters = {d.counter: 0 for d in Drop}
        self.counters.update(results=0, frames_in=0)

    def expected(self, job, round_):
        period = self.jobs.get(job)
        return period[round_ % len(period)] if period else 0

    def _drop(self, reason):
        self.counters[reason.counter] += 1
        return []

    def feed_frame(self, frame):
        """One Ethernet frame in → the RESULT frames it completes (one per destination), maybe none."""
        self.counters["frames_in"] += 1
        payload, _, reason = parse_frame(frame, port=self.port)
        if reason is not None:
            return self._drop(reason)
        return [
            build_frame(result, src_mac=self.mac, dst_mac=d.mac, src_ip=self.ip, dst_ip=d.ip, sport=self.port,
                        dport=d.port, udp_checksum=False, df=True, ttl=64)
            for result in self._payload(payload)
            for d in self.destinations
        ]

    def feed_payload(self, payload):
        """One bare UDP payload in → the RESULT payloads it completes (zero or one)."""
        self.counters["frames_in"] += 1
        return self._payload(bytes(payload))

    def _payload(self, payload):
        h, reason = check_payload(payload, slot_bytes=self.slot_bytes)
        if reason is not None:
            return self._drop(reason)
        expected = self.expected(h.job, h.round)
        if not (expected >> h.src) & 1:
            return self._drop(Drop.UNEXPECTED_SRC)
        tag = (h.job, h.round, h.chunk)
        slot = self.slots[h.chunk % len(self.slots)]
        if slot.state == "live":
            if slot.tag != tag:
                return self._drop(Drop.STALE if _older(tag, slot.tag) else Drop.AHEAD_OF_WINDOW)
            if (slot.bitmap >> h.src) & 1:
                return self._drop(Drop.DUPLICATE)
            if (h.dtype, h.count) != (slot.dtype, slot.count):
                return self._drop(Drop.SLOT_MISMATCH)
        elif slot.state == "done" and (slot.tag == tag or _older(tag, slot.tag)):
            return self._drop(Drop.DUPLICATE if slot.tag == tag else Drop.STALE)
        if slot.state != "live":
            slot.state, slot.tag, slot.bitmap, slot.buffers = "live", tag, 0, {}
            slot.dtype, slot.count, slot.group, slot.flags = h.dtype, h.count, h.group, 0
        member = bin(expected & ((1 << h.src) - 1)).count("1")
        slot.buffers[member] = np.frombuffer(payload, bits_dtype(h.dtype), offset=HEADER_BYTES)
        slot.bitmap |= 1 << h.src
        slot.flags |= h.flags
        if slot.bitmap != expected:
            return []
        total = reduce_in_rank_order([slot.buffers[m] for m in sorted(slot.buffers)], h.dtype)
        result = h.replace(kind=Kind.RESULT, src=self.rank, group=slot.group, flags=slot.flags,
                           bitmap=slot.bitmap, reserved=0)
        slot.state, slot.buffers = "done", None
        self.counters["results"] += 1
        return [result.encode() + total.astype(bits_dtype(h.dtype)).tobytes()]
