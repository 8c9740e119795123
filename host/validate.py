"""Drop rules that can be decided from one packet alone (PROTOCOL.md codes 9-20).

Codes 1-8 (framing) are in :mod:`.frames`; codes 21-25 need the schedule and the slot state and are in
:mod:`.golden`. Each check returns the lowest code that applies, as the RTL's header parser does.
"""

from ..spec.protocol import FLAGS_VALID, HEADER_BYTES, MAGIC, MAX_RANKS, VERSION, Drop, DType, Kind
from .protocol import HEADER_DTYPE

__all__ = ["Header", "parse_header", "check_payload"]


class Header:
    """A decoded header: one attribute per field of PROTOCOL.md."""

    __slots__ = tuple(HEADER_DTYPE.names)

    def __init__(self, **fields):
        for k in self.__slots__:
            setattr(self, k, fields[k])

    def replace(self, **changes):
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        return Header(**fields)

    def encode(self):
        return b"".join(
            int(getattr(self, name)).to_bytes(HEADER_DTYPE.fields[name][0].itemsize, "big")
            for name in HEADER_DTYPE.names
        )

    def __repr__(self):
        return "Header(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


def parse_header(payload):
    """The header of a UDP payload of at least 32 bytes, fields as Python ints."""
    fields, pos = {}, 0
    for name in HEADER_DTYPE.names:
        size = HEADER_DTYPE.fields[name][0].itemsize
        fields[name] = int.from_bytes(payload[pos : pos + size], "big")
        pos += size
    return Header(**fields)


def check_payload(payload, *, slot_bytes=None, contrib_input=True):
    """``(header, None)`` if the payload passes codes 9-20, else ``(header_or_None, reason)``.

    ``slot_bytes`` is the per-member buffer C (code 20 ``too_large`` is skipped when it is None, as in
    ``wanreduce inspect``). ``contrib_input`` applies code 18 (a RESULT where contributions come in).
    """
    if len(payload) < HEADER_BYTES:
        return None, Drop.SHORT_HEADER
    h = parse_header(payload)
    if h.magic != MAGIC:
        return h, Drop.BAD_MAGIC
    if h.version != VERSION:
        return h, Drop.BAD_VERSION
    if h.kind not in (Kind.CONTRIB, Kind.RESULT):
        return h, Drop.BAD_KIND
    if h.dtype not in DType._value2member_map_:
        return h, Drop.BAD_DTYPE
    if h.flags & ~FLAGS_VALID:
        return h, Drop.BAD_FLAGS
    if h.reserved:
        return h, Drop.BAD_RESERVED
    if h.count == 0:
        return h, Drop.BAD_COUNT
    size = DType(h.dtype).size
    if len(payload) != HEADER_BYTES + h.count * size:
        return h, Drop.BAD_LENGTH
    if contrib_input and h.kind == Kind.RESULT:
        return h, Drop.RESULT_ON_INPUT
    if h.kind == Kind.CONTRIB and (h.src >= MAX_RANKS or h.bitmap != 1 << h.src):
        return h, Drop.BAD_BITMAP
    if slot_bytes is not None and h.count * size > slot_bytes:
        return h, Drop.TOO_LARGE
    return h, None
