"""Beat and descriptor layouts shared by the aggregator's pipeline stages.

Every stream in the core carries beats of ``width`` bits in which byte ``b`` of the beat is bits
``[8*b, 8*b + 8)``: the first byte on the wire is the least significant. Little-endian elements therefore
sit in their lanes as they are, and big-endian header fields are byte-swapped when they are read
(:func:`be_field`). The protocol's constants come from :mod:`wanreduce.spec.protocol`, never retyped.
"""

from amaranth.hdl import Cat, Const, Mux
from amaranth.lib import data, enum

from ..spec import protocol
from ..spec.core import WIDTHS, header_words, payload_words

__all__ = [
    "KindCode",
    "DTypeCode",
    "HEADER_FIELD_OFFSETS",
    "WireHeader",
    "be_field",
    "be_bytes",
    "Beat",
    "PayloadBeat",
    "Desc",
    "ParsedBeat",
    "ScheduledBeat",
    "Completion",
    "ResultWord",
    "DROP_BITS",
    "lowest_drop",
    "drop_mask",
    "payload_words",
    "header_words",
    "WIDTHS",
    "check_width",
    "element_bytes",
]


def check_width(width):
    """Refuse a beat width the datapath is not built for, with a full-sentence error."""
    if width not in WIDTHS:
        raise ValueError(f"The beat width must be one of {', '.join(map(str, WIDTHS))} bits, not {width}.")


def element_bytes(dtype_code):
    """Bytes per element of a 2-bit dtype code, as a mux over the spec's element sizes."""
    size = Const(0, 3)
    for d in protocol.DType:
        size = Mux(dtype_code == d.value, d.size, size)
    return size


class KindCode(enum.Enum, shape=8):
    """``kind`` codes of the header, from :class:`wanreduce.host.protocol.Kind`."""

    CONTRIB = protocol.Kind.CONTRIB.value
    RESULT = protocol.Kind.RESULT.value


class DTypeCode(enum.Enum, shape=2):
    """``dtype`` codes of the header (two bits suffice once the header parser has checked them)."""

    FP32 = protocol.DType.FP32.value
    FP16 = protocol.DType.FP16.value
    BF16 = protocol.DType.BF16.value


#: ``{field: (byte offset, byte size)}`` of the 32-byte header (the spec's table).
HEADER_FIELD_OFFSETS = protocol.HEADER_LAYOUT

#: The header as it sits in a beat: field ``f`` holds its wire bytes with the first at the low end, that
#: is byte-swapped with respect to the big-endian value (read values with :func:`be_field`).
WireHeader = data.StructLayout({name: 8 * size for name, (_, size) in HEADER_FIELD_OFFSETS.items()})


def be_bytes(value, offset, size):
    """The big-endian number in bytes ``[offset, offset + size)`` of a byte-ordered value."""
    return Cat(*[value[8 * (offset + size - 1 - k) : 8 * (offset + size - k)] for k in range(size)])


def be_field(header_bits, name):
    """Big-endian value of header field ``name`` from the 256 header bits (first wire byte lowest)."""
    offset, size = HEADER_FIELD_OFFSETS[name]
    return be_bytes(header_bits, offset, size)


def encode_be(value, size):
    """Bytes of ``value`` (an Amaranth value) in wire order, first byte lowest: the inverse of be_bytes."""
    return Cat(*[value[8 * (size - 1 - k) : 8 * (size - k)] for k in range(size)])


#: Bit ``d`` of a drop vector stands for ``protocol.Drop(d)``; bit 0 is unused.
DROP_BITS = 32
assert max(protocol.Drop) < DROP_BITS


def drop_mask(codes):
    """An integer mask with the bits of ``codes`` set."""
    mask = 0
    for c in codes:
        mask |= 1 << int(c)
    return mask


def lowest_drop(vector):
    """The lowest set bit of a drop vector as a 5-bit code (0 when none): the precedence rule."""
    code = Const(0, 5)
    for d in sorted(protocol.Drop, reverse=True):
        code = Mux(vector[int(d)], int(d), code)
    return code


def _nbytes_shape(width):
    return range(width // 8 + 1)


def Beat(width):
    """A stream beat: ``data``, ``bytes`` valid bytes (all of them except on the last beat), ``last``."""
    return data.StructLayout({"data": width, "bytes": _nbytes_shape(width), "last": 1})


def PayloadBeat(width):
    """A UDP-payload beat out of the frame parser: ``drops`` carries codes 1-8 on the last beat."""
    return data.StructLayout({**Beat(width).members, "drops": DROP_BITS})


#: What the slot table needs of a CONTRIB header.
Desc = data.StructLayout(
    {
        "job": 16,
        "round": 32,
        "chunk": 32,
        "src": 6,
        "group": 16,
        "count": 16,
        "dtype": 2,
        "flags": 1,
    }
)


def ParsedBeat(width):
    """A payload beat with the header parser's results: ``pw`` is the beat's index in the payload, ``hc``
    marks the beat that completes the header (or ends a shorter packet), ``desc`` is valid from ``hc`` on and
    ``drops`` accumulates every code decided so far (complete on the last beat)."""
    return data.StructLayout({**Beat(width).members, "pw": 16, "hc": 1, "drops": DROP_BITS, "desc": Desc})


def ScheduledBeat(width, members, slots):
    """A parsed beat with the schedule table's answer: the expected set, the sender's member index (its
    position in the summation order; ``members`` or more when it has none), the chunk's ``slot`` (its
    round bank's slot, a valid index into ``slots`` even when the job is unknown), ``foreign`` (a CONTRIB
    of a configured (job, round) whose chunk lies outside this site's root stripe: not this core's work)
    and ``mdest`` (the IPv4 group address the chunk's RESULT is also multicast to; 0 for none)."""
    return data.StructLayout(
        {
            **ParsedBeat(width).members,
            "expected": 64,
            "midx": range(max(members, 64) + 1),
            "slot": range(slots),
            "foreign": 1,
            "mdest": 32,
        }
    )


def Completion(slots):
    """A completed chunk for the reduce engine: where it is, how to sum it, what goes in the RESULT. With
    ``replay`` set only ``slot`` counts: send the slot's last RESULT again from the reduce engine's copy.
    ``mdest`` is the group address the RESULT is also multicast to (root aggregation; 0 for none). ``rot``
    is where the slot's members sit among its buffers (the slot table's eviction rule)."""
    return data.StructLayout(
        {
            "slot": range(slots),
            "g": range(65),
            "nwords": 16,
            "desc": Desc,
            "bitmap": 64,
            "replay": 1,
            "mdest": 32,
            "rot": 6,  # the slot's member rotation: member m is in buffer (m + rot) mod G_max of the slot
        }
    )


def ResultWord(width, slots):
    """One reduced beat in payload order, with its chunk's completion record."""
    return data.StructLayout({"data": width, "last": 1, "cd": Completion(slots)})
