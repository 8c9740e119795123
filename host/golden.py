"""The golden software aggregator: what one site's FPGA must do, packet by packet, in plain Python.

It follows ``docs/PROTOCOL.md`` literally: a reorder buffer of ``slots`` slots in round banks (slot =
``((round mod P) << bank_bits | chunk mod 2**bank_bits) mod S``), ``members`` buffers of ``slot_bytes``
bytes per slot, contributions stored as they arrive, and the sum taken in the group's summation order (the
order the schedule lists the group in) with one IEEE-754 rounding per addition in the packet's dtype (numpy
and ml_dtypes do the arithmetic). Each slot keeps a shadow of the last RESULT it completed: a CONTRIB for
that chunk is dropped as ``duplicate`` and makes the aggregator send the stored RESULT again
(``results_reemitted``), which is how a site whose RESULT was lost gets it back. A chunk older than a live
slot's chunk but newer than its shadow takes the slot back (``evictions``). Every drop is counted
under its :class:`~wanreduce.spec.protocol.Drop` name. The RTL is compared with this model byte for
byte, so it favours being obviously right over being fast.

Root aggregation and the in-line bypass (PROTOCOL.md "Root aggregation", "In-line bypass"): a round's entry
may be a :class:`RootEntry`, which adds this site's stripe (the chunks it aggregates; the others of that
round are foreign) and a group address every RESULT of the entry also goes to. With ``bypass_bytes`` the
aggregator forwards what is not its work (:func:`wanreduce.spec.protocol.forwarded`) unchanged into
:attr:`GoldenAggregator.forwarded`, or counts it under ``bypass_overflow`` when it is longer than that.
"""

import dataclasses

import numpy as np

from ..spec import addressing
from ..spec.core import bank_slot
from ..spec.protocol import HEADER_BYTES, MAX_RANKS, UDP_PORT, Drop, DType, Kind, forwarded
from ..spec.regmap import COUNTER_NAMES
from .frames import frame_between, parse_frame, parse_ip, parse_mac
from .protocol import bits_dtype, np_dtype
from .validate import check_payload

__all__ = [
    "GoldenAggregator",
    "Destination",
    "RootEntry",
    "reduce_in_order",
    "expected_order",
    "entry_stripe",
]

#: The whole chunk space: a root stripe that leaves nothing foreign (gather mode).
ALL_CHUNKS = (0, (1 << 32) - 1)


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where one copy of every RESULT goes."""

    mac: object
    ip: object
    port: int = UDP_PORT


@dataclasses.dataclass(frozen=True)
class RootEntry:
    """A round's entry at a root: the group's summation ``order``, the chunks ``lo ..= hi`` of this site's
    stripe (the round's other chunks are another root's) and ``mdest``, the IPv4 multicast group every
    RESULT of the round is also sent to (None: only the destination entries)."""

    order: tuple
    lo: int = 0
    hi: int = (1 << 32) - 1
    mdest: str | None = None


def entry_stripe(entry):
    """``(lo, hi, mdest)`` of an expected entry: the whole chunk space and no group for a plain entry."""
    if isinstance(entry, RootEntry):
        if not 0 <= entry.lo <= entry.hi < 1 << 32:
            raise ValueError(f"The stripe {entry.lo}..{entry.hi} is not a chunk range within 32 bits.")
        return entry.lo, entry.hi, entry.mdest
    return (*ALL_CHUNKS, None)


def expected_order(entry):
    """An expected entry (a bitmap: ascending rank order; a sequence of ranks in summation order; or a
    :class:`RootEntry`) as ``(bitmap, order)``; raises ValueError for a rank outside 0..63 or a rank listed
    twice."""
    if isinstance(entry, RootEntry):
        entry = entry.order
    if isinstance(entry, int):
        if not 0 <= entry < 1 << MAX_RANKS:
            raise ValueError(f"The expected set {entry:#x} is not a {MAX_RANKS}-bit bitmap.")
        return entry, tuple(r for r in range(MAX_RANKS) if entry >> r & 1)
    order = tuple(int(r) for r in entry)
    if any(not 0 <= r < MAX_RANKS for r in order) or len(set(order)) != len(order):
        raise ValueError(f"The summation order {order} must list distinct ranks in 0..{MAX_RANKS - 1}.")
    return sum(1 << r for r in order), order


def reduce_in_order(contributions, dtype):
    """Sum bit-pattern arrays (already in summation order) in ``dtype``; returns bit patterns.

    One rounding per addition; the first term is taken as is; NaN results become the dtype's canonical NaN.
    """
    dtype = DType(dtype)
    acc = np.asarray(contributions[0], bits_dtype(dtype)).view(np_dtype(dtype)).copy()
    with np.errstate(all="ignore"):
        for c in contributions[1:]:
            acc = (acc + np.asarray(c, bits_dtype(dtype)).view(np_dtype(dtype))).astype(np_dtype(dtype))
    nan = np.isnan(acc.astype(np.float32))  # a NaN anywhere propagates to the end
    bits = acc.view(bits_dtype(dtype)).copy()
    bits[nan] = dtype.canonical_nan
    return bits


class _Slot:
    __slots__ = (
        "state",
        "tag",
        "bitmap",
        "dtype",
        "count",
        "group",
        "flags",
        "buffers",
        "last_tag",
        "last_result",
        "last_mdest",
    )

    def __init__(self):
        self.state = "empty"
        self.tag = None
        # The shadow: the tag and RESULT payload of the last chunk this slot completed, kept until the next
        # completion overwrites them (one copy suffices, docs/PROTOCOL.md "Loss, duplicates and the shadow").
        self.last_tag = None
        self.last_result = None
        self.last_mdest = None


def _older(a, b):
    """Tag ``a`` is older than tag ``b``: same job and (round, chunk) lexicographically smaller."""
    return a[0] == b[0] and (a[1], a[2]) < (b[1], b[2])


class GoldenAggregator:
    """One site's aggregator.

    ``jobs`` maps a job id to the expected entries of one schedule period: round ``r`` of that job expects
    ``jobs[job][r % len(jobs[job])]``, a bitmap (summed in ascending rank order; 0 where this site waits)
    or a sequence of ranks in summation order. ``bank_bits`` maps a job id to log2 of the slots of one
    round bank (default: log2 S, which makes the slot ``chunk mod S`` whatever the round). ``destinations``
    receive one RESULT frame each, in order, from the frame entry point, then the entry's group address
    if it has one. ``bypass_bytes`` > 0 models the in-line bypass port (frames up to that length are
    forwarded; ``bypass`` False is ``REG_BYPASS`` written 0).
    """

    def __init__(
        self,
        *,
        rank,
        jobs,
        slots,
        members,
        slot_bytes,
        mac=None,
        ip=None,
        port=UDP_PORT,
        destinations=(),
        bank_bits=None,
        bypass_bytes=0,
        bypass=True,
    ):
        if not 0 <= rank < MAX_RANKS:
            raise ValueError(f"The rank must be in 0..{MAX_RANKS - 1}, not {rank}.")
        if slots < 1 or slots & (slots - 1) or members < 1 or slot_bytes < 1:
            raise ValueError(
                "The slot count must be a power of two, and the members per slot and slot bytes positive."
            )
        self.jobs = {}
        for job, period in jobs.items():
            if not period:
                raise ValueError(f"Job {job} has an empty schedule period.")
            entries = [(*expected_order(e), *entry_stripe(e)) for e in period]
            for _bitmap, order, *_ in entries:
                if len(order) > members:
                    raise ValueError(
                        f"Job {job} expects {len(order)} members in a round, more than the "
                        f"{members} buffers a slot has."
                    )
            self.jobs[int(job)] = entries
        full = slots.bit_length() - 1
        self.bank_bits = {j: full for j in self.jobs}
        for job, bits in (bank_bits or {}).items():
            if not 0 <= bits <= full:
                raise ValueError(f"Job {job}: a bank of 2**{bits} slots does not fit {slots} slots.")
            self.bank_bits[int(job)] = int(bits)
        self.rank = rank
        self.slot_bytes = slot_bytes
        self.members = members
        mac = addressing.aggregator_mac(rank) if mac is None else mac
        ip = addressing.aggregator_ip(rank) if ip is None else ip
        self.mac, self.ip, self.port = parse_mac(mac), parse_ip(ip), port
        self.destinations = [Destination(parse_mac(d.mac), parse_ip(d.ip), d.port) for d in destinations]
        self.slots = [_Slot() for _ in range(slots)]
        self.counters = {name: 0 for name in COUNTER_NAMES}
        self.bypass_bytes = int(bypass_bytes)
        self.bypass = bool(bypass) and self.bypass_bytes > 0
        #: Frames sent out of the bypass port, in order (the caller may take and clear them).
        self.forwarded = []

    def expected(self, job, round_):
        """``(bitmap, summation order)`` this site expects for ``(job, round_)``; ``(0, ())`` if none."""
        period = self.jobs.get(job)
        return period[round_ % len(period)][:2] if period else (0, ())

    def stripe(self, job, round_):
        """``(lo, hi, mdest)`` of ``(job, round_)``'s entry, or None for an unconfigured job."""
        period = self.jobs.get(job)
        return period[round_ % len(period)][2:] if period else None

    def slot_index(self, job, round_, chunk):
        """The slot of a chunk: its round's bank, then the chunk within the bank (PROTOCOL.md)."""
        period = self.jobs.get(job)
        bits = self.bank_bits.get(job, len(self.slots).bit_length() - 1)
        return bank_slot(
            round_, chunk, period=len(period) if period else 1, bank_bits=bits, slots=len(self.slots)
        )

    def _drop(self, reason, frame=None, foreign=False):
        if self.bypass and frame is not None and forwarded(reason, foreign):
            if len(frame) > self.bypass_bytes:
                self.counters["bypass_overflow"] += 1
            else:
                self.counters["bypassed"] += 1
                self.forwarded.append(bytes(frame))
        else:
            self.counters[reason.counter] += 1
        return []

    def feed_frame(self, frame):
        """One Ethernet frame in → the RESULT frames it completes or re-emits (one per destination, then
        one to the entry's group address), maybe none; a frame forwarded goes to :attr:`forwarded`."""
        self.counters["frames_in"] += 1
        frame = bytes(frame)
        payload, _, reason = parse_frame(frame, port=self.port)
        if reason is not None:
            return self._drop(reason, frame)
        out = []
        for result, mdest in self._payload(payload, frame):
            dests = list(self.destinations)
            if mdest is not None:
                dests.append(
                    Destination(parse_mac(addressing.multicast_mac(mdest)), parse_ip(mdest), self.port)
                )
            out += [frame_between(result, self, d, udp_checksum=False, df=True, ttl=64) for d in dests]
        return out

    def feed_payload(self, payload):
        """One bare UDP payload in → the RESULT payloads it completes or re-emits (zero or one)."""
        self.counters["frames_in"] += 1
        return [result for result, _ in self._payload(bytes(payload))]

    def _payload(self, payload, frame=None):
        """→ ``[(RESULT payload, group address or None), ...]``."""
        h, reason = check_payload(payload, slot_bytes=self.slot_bytes)
        if reason is not None:
            return self._drop(reason, frame)
        expected, order = self.expected(h.job, h.round)
        stripe = self.stripe(h.job, h.round)
        if stripe is not None and not stripe[0] <= h.chunk <= stripe[1]:
            # Another root's chunk of a round this site takes part in: not this aggregator's work.
            return self._drop(Drop.UNEXPECTED_SRC, frame, foreign=True)
        if not (expected >> h.src) & 1:
            return self._drop(Drop.UNEXPECTED_SRC, frame)
        tag = (h.job, h.round, h.chunk)
        slot = self.slots[self.slot_index(h.job, h.round, h.chunk)]
        if tag == slot.last_tag:
            # Completed here already (the slot is done, or live with a newer chunk): a retransmission or a
            # copy. Never counted again; its sender may have lost the RESULT, so send the shadow again.
            self.counters[Drop.DUPLICATE.counter] += 1
            self.counters["results_reemitted"] += 1
            return [(slot.last_result, slot.last_mdest)]
        if slot.state == "live" and slot.tag != tag:
            if not _older(tag, slot.tag):
                return self._drop(Drop.AHEAD_OF_WINDOW)
            if slot.last_tag is not None and _older(tag, slot.last_tag):
                return self._drop(Drop.STALE)
            # An older chunk that never completed here finds its slot taken by the next one: every copy of
            # it that reached this aggregator was lost or overtaken. The newer chunk cannot complete anywhere
            # before this site sends it, which waits for the older chunk's RESULT here, so its senders still
            # retransmit it: give the slot back to the older chunk and discard the newer one's buffers.
            self.counters["evictions"] += 1
            slot.state = "empty"
        if slot.state == "live":
            if (slot.bitmap >> h.src) & 1:
                return self._drop(Drop.DUPLICATE)
            if (h.dtype, h.count) != (slot.dtype, slot.count):
                return self._drop(Drop.SLOT_MISMATCH)
        elif slot.state == "done" and _older(tag, slot.tag):
            return self._drop(Drop.STALE)
        if slot.state != "live":
            slot.state, slot.tag, slot.bitmap, slot.buffers = "live", tag, 0, {}
            slot.dtype, slot.count, slot.group, slot.flags = h.dtype, h.count, h.group, 0
        member = order.index(h.src)
        slot.buffers[member] = np.frombuffer(payload, bits_dtype(h.dtype), offset=HEADER_BYTES)
        slot.bitmap |= 1 << h.src
        slot.flags |= h.flags
        if slot.bitmap != expected:
            return []
        total = reduce_in_order([slot.buffers[m] for m in sorted(slot.buffers)], h.dtype)
        result = h.replace(
            kind=Kind.RESULT,
            src=self.rank,
            group=slot.group,
            flags=slot.flags,
            bitmap=slot.bitmap,
            reserved=0,
        )
        payload_out = result.encode() + total.astype(bits_dtype(h.dtype)).tobytes()
        slot.state, slot.buffers = "done", None
        slot.last_tag, slot.last_result, slot.last_mdest = tag, payload_out, stripe[2]
        self.counters["results"] += 1
        return [(payload_out, stripe[2])]

    def missing(self, job, round_, chunk):
        """Ranks whose contribution to ``(job, round_, chunk)`` this aggregator has not stored: the expected
        set less the slot's bitmap while the chunk is live there, nothing once it completed, everything
        before it claimed its slot. What the dead-site diagnosis reads (a deployment has no such register)."""
        expected, order = self.expected(job, round_)
        tag = (job, round_, chunk)
        slot = self.slots[self.slot_index(job, round_, chunk)]
        if slot.last_tag == tag or (slot.state == "done" and slot.tag == tag):
            return ()
        seen = slot.bitmap if slot.state == "live" and slot.tag == tag else 0
        return tuple(r for r in order if not seen >> r & 1)
