"""Fuzz aimed at slot-state transitions: every drop code crossed with every state a frame's slot can be in.

A frame's slot, as the classifier holds it when the frame arrives, is in one of :data:`STATES` relative to
the frame's tag: ``free`` (no live chunk: empty, or done with an older chunk, so the frame claims it),
``live`` (live with this tag, no shadow yet), ``live_shadow`` (live with this tag, and a shadow RESULT of an
earlier chunk), ``evict`` (live with a newer chunk, the tag newer than the shadow: a valid frame would evict)
and ``stale`` (older than the slot's shadow). :class:`Targeter` picks the least-hit (state, code) pair that
the slots allow now, makes a contribution whose tag puts its slot in that state, and then makes it fail
with that code: one of the header codes (9-21), a frame code (1-8, frame entry), a repeated rank
(``duplicate``), a different dtype or count (``slot_mismatch``), or none. :data:`PAIRS` lists the pairs
that can happen; the pair a frame really hit is (its state, the classifier's code for it).

A root build (root stripes, in-line) adds the pseudo-code :data:`FOREIGN`: a valid CONTRIB of another
root's chunk whose slot is free, would be evicted by it or holds a newer shadow; the core must forward it
and leave the slot as it was.
"""

import collections
import struct

from ...spec.protocol import HEADER_BYTES
from .traffic import late_drop

__all__ = ["STATES", "FOREIGN", "pairs_for", "Targeter"]

STATES = ("free", "live", "live_shadow", "evict", "stale")
#: Not a drop code: the pair code of a foreign CONTRIB (``unexpected_src``, forwarded by an in-line build).
FOREIGN = 100

# The frame codes by the mutation of sim.verify.traffic.late_drop that makes them.
_FRAME = {
    1: "truncated",
    2: "not_ipv4",
    3: "fragment",
    4: "ip_checksum",
    5: "not_udp",
    6: "port",
    7: "udp_length",
    8: "udp_checksum",
}
_HDR_FMT = "!HBBBBHIIHHHHQ"
_FIELDS = ("magic", "version", "kind", "dtype", "flags", "job", "round", "chunk", "src", "group", "count")
_FIELDS += ("reserved", "bitmap")
_SIZE = {0: 4, 1: 2, 2: 2}
# The header codes made by setting one field to a value the core refuses.
_FIELD_SET = {
    12: ("kind", 2),
    13: ("dtype", 3),
    14: ("flags", 0x80),
    15: ("reserved", 1),
    16: ("count", 0),
    18: ("kind", 1),
    19: ("bitmap", 0),
}


def pairs_for(entry, *, foreign=False):
    """The (state, code) pairs a frame can hit at ``entry`` ("frame" or "payload"); with ``foreign`` (a
    site with root stripes) also the :data:`FOREIGN` pairs (a tag never stored here is never live)."""
    codes = [c for c in range(1, 22) if entry == "frame" or c > 8]
    pairs = {(s, c) for s in STATES for c in codes}
    pairs |= {("free", 0), ("live", 0), ("live_shadow", 0), ("evict", 0), ("stale", 22)}
    pairs |= {(s, c) for s in ("live", "live_shadow") for c in (24, 25)}
    if foreign:
        pairs |= {(s, FOREIGN) for s in ("free", "evict", "stale")}
    return frozenset(pairs)


def _older(a, b):
    """Tag a before tag b (same job; round, then chunk)."""
    return a[0] == b[0] and a[1:] < b[1:]


class Targeter:
    """Targeted inputs for a :class:`~wanreduce.sim.verify.fuzz.FrameGen` (its scenario, random sources,
    classifier and framing). :meth:`next` returns ``(bytes, state, intended code)`` or None when no slot
    offers a candidate; :attr:`hits` counts the pairs really hit (the caller records them)."""

    def __init__(self, gen):
        self.gen = gen
        self.s = gen.s
        self.job = next(iter(self.s.jobs))
        self.hits = collections.Counter()
        self.pairs = pairs_for(gen.entry, foreign=self.s.has_stripes)

    def _candidates(self):
        """state → [(slot index, tag)] for tags near the slots' live and shadow tags (this site's chunks),
        and the same for another root's chunks."""
        s, cl, job = self.s, self.gen.classifier, self.job
        period = len(s.jobs[job])
        step = 1 << s.bank(job)
        out, foreign = collections.defaultdict(list), collections.defaultdict(list)
        cursor = self.gen.cursor[job][0]
        # A chunk's slot depends on its round mod P and its chunk mod the bank only: per (round mod P, slot)
        # the offsets within a bank-aligned block of chunks that land there.
        offsets = {
            (p, index): [off for off in range(step) if s.slot(job, p, off) == index]
            for p in range(period)
            for index in range(s.slots)
        }
        for index in range(s.slots):
            slot, shadow = cl.slots[index], cl.shadow[index]
            anchors = [t for t in (slot[1] if slot else None, shadow) if t is not None and t[0] == job]
            anchors.append((job, cursor, 0))
            seen, others = set(), set()
            for _, r0, c0 in anchors:
                for dr in (-period, -1, 0, 1, period):
                    r = r0 + dr
                    if not 0 <= r <= 0xFFFFFFFF or not s.expected(job, r):
                        continue
                    base = c0 - c0 % step
                    offs = offsets[r % period, index]
                    for k in range(-2, 3):
                        for off in offs:
                            c = base + k * step + off
                            # Another root's chunk is forwarded whatever its slot holds.
                            if 0 <= c <= 0xFFFFFFFF:
                                (seen if s.owns(job, r, c) else others).add((r, c))
            for r, c in seen:
                tag = (job, r, c)
                state = self._state(slot, shadow, tag)
                if state:
                    out[state].append((index, tag))
            for r, c in others:
                state = self._state(slot, shadow, (job, r, c))
                if state:
                    foreign[state].append((index, (job, r, c)))
        return out, foreign

    @staticmethod
    def _state(slot, shadow, tag):
        if tag == shadow:
            return None  # a re-emit: its own path, covered by the replays of the fuzz
        if shadow is not None and _older(tag, shadow):
            return "stale"
        if slot is not None and slot[0] == "live":
            if slot[1] == tag:
                return "live_shadow" if shadow is not None else "live"
            return "evict" if _older(tag, slot[1]) else None  # newer: ahead of the window
        if slot is not None and slot[0] == "done" and _older(tag, slot[1]):
            return None
        return "free"

    def next(self):
        cands, foreign = self._candidates()
        options = [p for p in self.pairs if (foreign if p[1] == FOREIGN else cands).get(p[0])]
        if not options:
            return None
        py = self.gen.py
        # A live chunk without a shadow exists only before its slot's first completion after reset: while
        # one does, it is the target. Otherwise the least-hit pair.
        # An eviction there keeps it so and starts a chunk that can take stores again.
        if any(p[0] == "live" for p in options):
            options = [p for p in options if p[0] == "live" or p == ("evict", 0)]
        # A store that would complete the live chunk ends the state: not aimed at while one rank is missing.
        live = {st: [c for c in cands[st] if self._missing(*c) > 1] for st in ("live", "live_shadow")}
        options = [p for p in options if p[1] != 0 or p[0] not in live or live[p[0]]]
        least = min(self.hits[p] for p in options)
        state, code = py.choice(sorted(p for p in options if self.hits[p] == least))
        if code == FOREIGN:
            index, tag = py.choice(foreign[state])
            return self._make(index, tag, state, 0), state, code
        index, tag = py.choice(live[state] if code == 0 and state in live else cands[state])
        return self._make(index, tag, state, code), state, code

    def _missing(self, index, tag):
        slot = self.gen.classifier.slots[index]
        expected = self.s.expected(*tag[:2])
        return bin(expected & ~slot[2]).count("1")

    def _make(self, index, tag, state, code):
        gen, s, py = self.gen, self.s, self.gen.py
        job, round_, chunk = tag
        expected = s.expected(job, round_)
        ranks = [r for r in range(64) if expected >> r & 1]
        slot = gen.classifier.slots[index]
        seen = slot[2] if slot is not None and slot[0] == "live" and slot[1] == tag else 0
        shape = (slot[3], slot[4]) if seen else None
        fresh = [r for r in ranks if not seen >> r & 1]
        src = py.choice(fresh or ranks)
        if code == 24:
            src = py.choice([r for r in ranks if seen >> r & 1] or ranks)
        if code == 25 and shape is not None:
            dtype, count = shape
            shape = (dtype, count - 1 if count > 1 else count + 1)
        if code == 21:
            src = py.choice([r for r in range(64) if not expected >> r & 1] or [63])
        payload = gen.contrib(job, round_, chunk, src, shape=shape)
        payload = self._header_code(payload, code)
        if code in _FRAME:
            return late_drop(payload, _FRAME[code], src=src, frames=True)
        if code == 17:
            return late_drop(
                payload, py.choice(["count_long", "count_short"]), src=src, frames=gen.entry == "frame"
            )
        return gen.wrap(payload, src=src, udp_checksum=True)

    def _header_code(self, p, code):
        f = dict(zip(_FIELDS, struct.unpack_from(_HDR_FMT, p), strict=True))
        body = p[HEADER_BYTES:]
        if code == 9:
            return p[: self.gen.py.randrange(HEADER_BYTES)]
        if code == 10:
            f["magic"] ^= 1
        elif code == 11:
            f["version"] += 1
        elif code in _FIELD_SET:
            field, value = _FIELD_SET[code]
            f[field] = value
        elif code == 20:
            size = _SIZE[f["dtype"]]
            f["count"] = self.s.chunk_bytes // size + 1
            body = bytes(size * f["count"])
        else:
            return p
        return struct.pack(_HDR_FMT, *(f[k] for k in _FIELDS)) + body
