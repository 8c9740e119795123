"""An independent classifier of aggregator input: for each frame, the drop code PROTOCOL.md's precedence
order gives, or 0 for a stored contribution, and whether it completes a chunk.

Written from ``docs/PROTOCOL.md`` alone, with :mod:`struct` and the page's tables retyped here on purpose:
it imports nothing from the project (not the spec constants, not the host validator, framing or golden
model), so that a misreading of the page in one of those cannot hide in both. The fuzz runs compare it with
the RTL frame for frame; a test checks that its code table names the same counters as the spec's ``Drop``.

API::

    c = Classifier(jobs={7: [[3, 0, 1], 0]}, slots=4, chunk_bytes=64, port=47000, bank_bits={7: 1})
    code, completes = c.frame(frame_bytes)      # or c.payload(udp_payload) for the payload entry point
    c.reemitted, c.evicted                      # whether that frame made the core send a RESULT again, and
                                                # whether it took its slot back from a newer live chunk
    c.tally                                     # {counter name: frames}, "accepted", "results" and
                                                # "results_reemitted" too

    # An in-line build (bypass port of 256 bytes) that roots chunks 1..6 of round 0 (an object with
    # ``order``, ``lo`` and ``hi`` as the entry, read by attribute only):
    c = Classifier(
        jobs={7: [Root(order=(3, 0, 1), lo=1, hi=6), 0]}, slots=4, chunk_bytes=64, bypass_bytes=256
    )
    c.frame(frame_bytes)                        # the code as before; then
    c.forwarded, c.overflow                     # it left on the bypass port / it was to, and was too long

The slot decision is PROTOCOL.md's, in the page's order, with the slot's shadow tag D (the last chunk it
completed): T = D is a ``duplicate`` that sends the stored RESULT again; T older than D is ``stale``; then
the live-slot rules, where a T older than the live chunk (and not older than D) evicts it and claims the
slot.

In-line (PROTOCOL.md, "In-line bypass"): a frame whose lowest code is ``not_ipv4``, ``bad_ip_header``,
``not_udp``, ``wrong_port`` or ``result_on_input``, or ``unexpected_src`` for a *foreign* CONTRIB (a
configured job's round whose entry is a root stripe, the chunk outside ``lo ..= hi``) is forwarded and
counted under ``bypassed`` (``bypass_overflow`` when longer than the bypass buffer), not under its code.
"""

import struct

__all__ = ["Classifier", "CODES", "frame_code", "payload_code"]

#: The drop table of PROTOCOL.md, code → counter name, in precedence order.
CODES = {
    1: "truncated",
    2: "not_ipv4",
    3: "bad_ip_header",
    4: "bad_ip_checksum",
    5: "not_udp",
    6: "wrong_port",
    7: "bad_udp_length",
    8: "bad_udp_checksum",
    9: "short_header",
    10: "bad_magic",
    11: "bad_version",
    12: "bad_kind",
    13: "bad_dtype",
    14: "bad_flags",
    15: "bad_reserved",
    16: "bad_count",
    17: "bad_length",
    18: "result_on_input",
    19: "bad_bitmap",
    20: "too_large",
    21: "unexpected_src",
    22: "stale",
    23: "ahead_of_window",
    24: "duplicate",
    25: "slot_mismatch",
}

_ETH, _IP, _UDP, _HDR = 14, 20, 8, 32
_ELEMENT_BYTES = {0: 4, 1: 2, 2: 2}  # fp32, fp16, bf16
_CONTRIB, _RESULT = 0, 1
#: The codes of frames that are not an in-line aggregator's work (unexpected_src only when foreign).
_NOT_OUR_WORK = {2, 3, 5, 6, 18}


def _csum(data):
    """The 16-bit one's-complement sum of ``data`` (zero-padded to even length), folded."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def frame_code(frame, *, port):
    """``(code, udp_payload)`` for codes 1-8 of an Ethernet frame: code 0 and the UDP payload if it passes
    them (bytes after the IPv4 total length are Ethernet padding), else the code and ``None``."""
    frame = bytes(frame)
    if len(frame) < _ETH + _IP + _UDP:
        return 1, None
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    ver_ihl, _tos, total, _ident, frag, _ttl, proto, _ck = struct.unpack_from("!BBHHHBBH", frame, _ETH)
    if ethertype == 0x0800 and total > len(frame) - _ETH:
        return 1, None
    if ethertype != 0x0800:
        return 2, None
    if ver_ihl >> 4 != 4 or ver_ihl & 0xF != 5 or frag & 0x2000 or frag & 0x1FFF or total < _IP + _UDP:
        return 3, None
    if _csum(frame[_ETH : _ETH + _IP]) != 0xFFFF:
        return 4, None
    if proto != 17:
        return 5, None
    _sport, dport, udp_len, udp_ck = struct.unpack_from("!HHHH", frame, _ETH + _IP)
    if dport != port:
        return 6, None
    if udp_len != total - _IP:
        return 7, None
    segment = frame[_ETH + _IP : _ETH + total]
    if udp_ck != 0:
        pseudo = frame[26:34] + struct.pack("!BBH", 0, 17, udp_len)
        if _csum(pseudo + segment) != 0xFFFF:
            return 8, None
    return 0, segment[_UDP:]


def payload_code(payload, *, chunk_bytes):
    """``(code, header)`` for codes 9-20 of a UDP payload: code 0 and the header fields as a dict if it
    passes them, else the code and ``None``."""
    payload = bytes(payload)
    if len(payload) < _HDR:
        return 9, None
    (magic, version, kind, dtype, flags, job, round_, chunk, src, group, count, reserved, bitmap) = (
        struct.unpack_from("!HBBBBHIIHHHHQ", payload)
    )
    if magic != 0x5752:
        return 10, None
    if version != 2:
        return 11, None
    if kind not in (_CONTRIB, _RESULT):
        return 12, None
    if dtype not in _ELEMENT_BYTES:
        return 13, None
    if flags & 0xFE:
        return 14, None
    if reserved != 0:
        return 15, None
    if count == 0:
        return 16, None
    if len(payload) != _HDR + count * _ELEMENT_BYTES[dtype]:
        return 17, None
    if kind == _RESULT:
        return 18, None
    if src >= 64 or bitmap != 1 << src:
        return 19, None
    if count * _ELEMENT_BYTES[dtype] > chunk_bytes:
        return 20, None
    return 0, {"job": job, "round": round_, "chunk": chunk, "src": src, "dtype": dtype, "count": count}


def _order(entry):
    """An expected entry, a bitmap (ascending rank order) or a sequence of ranks in summation order, as
    the tuple of ranks in summation order."""
    entry = getattr(entry, "order", entry)  # a root entry: its group in summation order
    if isinstance(entry, int):
        return tuple(r for r in range(64) if entry >> r & 1)
    return tuple(int(r) for r in entry)


class Classifier:
    """One aggregator's view: the expected sets and the slot states (codes 21-25) on top of the stateless
    checks. ``jobs`` maps a job id to the expected entries of one schedule period (round ``r`` uses entry
    ``r mod P``; a bitmap or a sequence of ranks; 0 means this site waits); ``bank_bits`` maps a job id to
    its bank bits ``b`` (default log2 S): the slot of a chunk is ``((round mod P) << b | chunk mod 2^b) mod
    S``. An entry with ``lo`` and ``hi`` attributes is a root entry: chunks outside ``lo ..= hi`` are
    another root's. ``bypass_bytes`` > 0 is an in-line build with forwarding on (the longest frame it
    forwards); 0 an end point."""

    def __init__(self, *, jobs, slots, chunk_bytes, port=47000, bank_bits=None, bypass_bytes=0):
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        self.jobs = {int(j): [sum(1 << r for r in _order(e)) for e in period] for j, period in jobs.items()}
        self.stripes = {
            int(j): [(e.lo, e.hi) if hasattr(e, "lo") else None for e in period] for j, period in jobs.items()
        }
        self.bypass_bytes = bypass_bytes
        full = slots.bit_length() - 1
        self.bank_bits = {j: full for j in self.jobs}
        self.bank_bits.update({int(j): int(b) for j, b in (bank_bits or {}).items()})
        self.chunk_bytes = chunk_bytes
        self.port = port
        # Per slot: None (empty) or [state "live"/"done", (job, round, chunk), bitmap, dtype, count], and
        # the shadow: the tag of the last chunk the slot completed.
        self.slots = [None] * slots
        self.shadow = [None] * slots
        self.reemitted = self.evicted = self.forwarded = self.overflow = False
        self.foreign = False
        self._size = 0
        self.tally = dict.fromkeys(CODES.values(), 0)
        self.tally.update(accepted=0, results=0, results_reemitted=0, evictions=0)
        self.tally.update(bypassed=0, bypass_overflow=0)

    def frame(self, frame):
        """Classify one Ethernet frame (and apply it to the slots): ``(code, completes)``."""
        self.reemitted = self.evicted = self.forwarded = self.overflow = self.foreign = False
        self._size = len(frame)
        code, payload = frame_code(frame, port=self.port)
        return self._count(code, False) if code else self._payload(payload)

    def payload(self, payload):
        """Classify one bare UDP payload (and apply it to the slots): ``(code, completes)``."""
        self.reemitted = self.evicted = self.forwarded = self.overflow = self.foreign = False
        self._size = 0
        return self._payload(payload)

    def _payload(self, payload):
        code, h = payload_code(payload, chunk_bytes=self.chunk_bytes)
        if code:
            return self._count(code, False)
        period = self.jobs.get(h["job"])
        expected = period[h["round"] % len(period)] if period else 0
        stripe = self.stripes[h["job"]][h["round"] % len(period)] if period else None
        if stripe is not None and not stripe[0] <= h["chunk"] <= stripe[1]:
            self.foreign = True
            return self._count(21, False)
        if not expected >> h["src"] & 1:
            return self._count(21, False)
        tag = (h["job"], h["round"], h["chunk"])
        b = self.bank_bits[h["job"]]
        index = ((h["round"] % len(period)) << b | h["chunk"] % (1 << b)) % len(self.slots)
        slot = self.slots[index]
        bit = 1 << h["src"]
        # PROTOCOL.md's slot decision, in its order, with the slot's shadow tag D.
        last = self.shadow[index]
        if tag == last:
            self.reemitted = True
            self.tally["results_reemitted"] += 1
            return self._count(24, False)
        if last is not None and tag[0] == last[0] and tag[1:] < last[1:]:
            return self._count(22, False)
        if slot is not None and slot[0] == "live":
            _, held, seen, dtype, count = slot
            if held == tag:
                if seen & bit:
                    return self._count(24, False)
                if (dtype, count) != (h["dtype"], h["count"]):
                    return self._count(25, False)
            elif not (tag[0] == held[0] and tag[1:] < held[1:]):
                return self._count(23, False)
            else:
                self.tally["evictions"] += 1
                self.evicted = True
                slot = self.slots[index] = None
        if slot is None or slot[0] == "done":
            slot = self.slots[index] = ["live", tag, 0, h["dtype"], h["count"]]
        slot[2] |= bit
        completes = slot[2] == expected
        if completes:
            slot[0] = "done"
            self.shadow[index] = tag
        return self._count(0, completes)

    def _count(self, code, completes):
        if self.bypass_bytes and self._size and (code in _NOT_OUR_WORK or code == 21 and self.foreign):
            self.overflow = self._size > self.bypass_bytes
            self.forwarded = not self.overflow
            self.tally["bypass_overflow" if self.overflow else "bypassed"] += 1
            return code, completes
        self.tally["accepted" if code == 0 else CODES[code]] += 1
        self.tally["results"] += completes
        return code, completes
