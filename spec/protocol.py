"""The wanreduce wire protocol as code: constants, header layout, kinds, dtypes and drop codes.

Standard library only, so that every layer (the gateware included) can import it. ``docs/PROTOCOL.md`` is
the prose contract; this module is that page's tables. numpy views of it (the header as a structured dtype,
element dtypes) are one layer up, in :mod:`wanreduce.host.protocol`.
"""

import enum

__all__ = [
    "VERSION",
    "MAGIC",
    "UDP_PORT",
    "HEADER_BYTES",
    "MAX_RANKS",
    "FLAG_LAST",
    "FLAGS_VALID",
    "Kind",
    "DType",
    "Drop",
    "HEADER_FIELDS",
    "HEADER_LAYOUT",
    "ETH_HEADER_BYTES",
    "IPV4_HEADER_BYTES",
    "UDP_HEADER_BYTES",
    "FRAME_OVERHEAD",
    "ETHERTYPE_IPV4",
    "IPPROTO_UDP",
    "ETH_FCS_BYTES",
    "ETH_PREAMBLE_BYTES",
    "ETH_IFG_BYTES",
    "PACKET_OVERHEAD",
    "WIRE_OVERHEAD",
    "JUMBO_MTU",
    "MAX_CHUNK_BYTES",
    "MAX_GROUPS",
    "BYPASS_CODES",
    "forwarded",
]

VERSION = 2
MAGIC = 0x5752  # "WR"
UDP_PORT = 47000
HEADER_BYTES = 32
MAX_RANKS = 64  # the bitmap is 64 bits; larger deployments aggregate hierarchically
#: Group ids a round may use: one octet of the multicast address (see addressing); 64 ranks make at
#: most 64 groups anyway.
MAX_GROUPS = 256
FLAG_LAST = 0x01
FLAGS_VALID = FLAG_LAST

ETH_HEADER_BYTES = 14
IPV4_HEADER_BYTES = 20  # IHL 5; frames with IPv4 options are dropped (bad_ip_header), see PROTOCOL.md
UDP_HEADER_BYTES = 8
#: Ethernet + IPv4 + UDP headers in front of the UDP payload.
FRAME_OVERHEAD = ETH_HEADER_BYTES + IPV4_HEADER_BYTES + UDP_HEADER_BYTES
ETH_FCS_BYTES = 4
ETH_PREAMBLE_BYTES = 8  # preamble and start-of-frame delimiter
ETH_IFG_BYTES = 12  # minimum inter-frame gap
#: Bytes the aggregator's datapath sees per chunk besides its elements (no preamble, gap or FCS): 74.
PACKET_OVERHEAD = FRAME_OVERHEAD + HEADER_BYTES
#: Bytes a chunk costs on an Ethernet link besides its elements: 98.
WIRE_OVERHEAD = PACKET_OVERHEAD + ETH_FCS_BYTES + ETH_PREAMBLE_BYTES + ETH_IFG_BYTES
#: IPv4 MTU of a jumbo frame; the largest chunk is what is left of it after the IPv4, UDP and wanreduce
#: headers: 8940 bytes.
JUMBO_MTU = 9000
MAX_CHUNK_BYTES = JUMBO_MTU - IPV4_HEADER_BYTES - UDP_HEADER_BYTES - HEADER_BYTES
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17


class Kind(enum.IntEnum):
    CONTRIB = 0
    RESULT = 1


class DType(enum.IntEnum):
    """Element types, IEEE-754 binary32 and binary16 and bfloat16, little-endian on the wire."""

    FP32 = 0
    FP16 = 1
    BF16 = 2

    @property
    def size(self):
        """Bytes per element on the wire."""
        return _DTYPE_BITS[self] // 8

    @property
    def width(self):
        """Bits per element."""
        return _DTYPE_BITS[self]

    @property
    def exp_bits(self):
        return _DTYPE_EXP[self]

    @property
    def man_bits(self):
        return self.width - 1 - self.exp_bits

    @property
    def canonical_nan(self):
        """The one quiet NaN every RESULT carries for any NaN: sign 0, exponent all ones, top fraction bit."""
        return (((1 << self.exp_bits) - 1) << self.man_bits) | (1 << (self.man_bits - 1))

    @property
    def label(self):
        return self.name.lower()

    @classmethod
    def from_label(cls, label):
        try:
            return cls[str(label).upper()]
        except KeyError:
            from .errors import WanreduceError

            raise WanreduceError(f"unknown dtype {label!r}; expected one of fp32, fp16, bf16") from None


_DTYPE_BITS = {DType.FP32: 32, DType.FP16: 16, DType.BF16: 16}
_DTYPE_EXP = {DType.FP32: 8, DType.FP16: 5, DType.BF16: 8}

#: The 32-byte header, big-endian on the wire: ``(name, bytes)`` in wire order.
HEADER_FIELDS = (
    ("magic", 2),
    ("version", 1),
    ("kind", 1),
    ("dtype", 1),
    ("flags", 1),
    ("job", 2),
    ("round", 4),
    ("chunk", 4),
    ("src", 2),
    ("group", 2),
    ("count", 2),
    ("reserved", 2),
    ("bitmap", 8),
)


def _layout():
    out, pos = {}, 0
    for name, size in HEADER_FIELDS:
        out[name] = (pos, size)
        pos += size
    assert pos == HEADER_BYTES
    return out


#: ``{field: (byte offset, byte size)}`` of the header.
HEADER_LAYOUT = _layout()


class Drop(enum.IntEnum):
    """Why a frame or packet was dropped, in the order the checks are applied.

    When several rules apply, the lowest code wins, in the host validator, the golden aggregator and the
    RTL alike, so their counters agree exactly. The name is the counter's name everywhere. ``rule`` is the
    numbered drop rule of PROTOCOL.md (0 for the Ethernet/IPv4/UDP framing checks of the frame parser).
    """

    # Framing (frame parser, before the wanreduce header is looked at).
    TRUNCATED = 1  # frame shorter than its Ethernet/IPv4/UDP headers or than IPv4 total length
    NOT_IPV4 = 2  # EtherType is not 0x0800 (VLAN tags included)
    BAD_IP_HEADER = 3  # version != 4, IHL != 5, a fragment, or total length too small
    BAD_IP_CHECKSUM = 4
    NOT_UDP = 5
    WRONG_PORT = 6  # UDP destination port is not the aggregator's
    BAD_UDP_LENGTH = 7  # UDP length disagrees with the IPv4 total length
    BAD_UDP_CHECKSUM = 8  # nonzero and wrong (zero means "not computed" and is accepted)
    # Header (rules 1, 2, 3, 7 and the size limit of rule 2).
    SHORT_HEADER = 9  # UDP payload shorter than the 32-byte header
    BAD_MAGIC = 10
    BAD_VERSION = 11
    BAD_KIND = 12
    BAD_DTYPE = 13
    BAD_FLAGS = 14
    BAD_RESERVED = 15
    BAD_COUNT = 16  # count == 0
    BAD_LENGTH = 17  # UDP payload length != 32 + count * size(dtype)
    RESULT_ON_INPUT = 18
    BAD_BITMAP = 19  # CONTRIB bitmap != 1 << src (src >= 64 included)
    TOO_LARGE = 20  # count * size(dtype) > the slot's per-member buffer
    # Schedule (rule 4).
    UNEXPECTED_SRC = 21  # src not in the expected set of this site's group for (job, round)
    # Reorder buffer (rules 6, 5, 1).
    STALE = 22  # older than the chunk the slot holds or last completed
    AHEAD_OF_WINDOW = 23  # the slot is held by another live chunk
    DUPLICATE = 24  # this rank already contributed to this chunk
    SLOT_MISMATCH = 25  # dtype or count differs from the slot's first contribution

    @property
    def counter(self):
        return self.name.lower()

    @property
    def rule(self):
        return _RULE[self]


_RULE = {
    **{d: 0 for d in (Drop.NOT_IPV4, Drop.BAD_IP_HEADER, Drop.NOT_UDP, Drop.WRONG_PORT)},
    **{
        d: 2
        for d in (
            Drop.TRUNCATED,
            Drop.SHORT_HEADER,
            Drop.BAD_IP_CHECKSUM,
            Drop.BAD_UDP_LENGTH,
            Drop.BAD_UDP_CHECKSUM,
            Drop.BAD_LENGTH,
            Drop.BAD_COUNT,
            Drop.TOO_LARGE,
        )
    },
    **{
        d: 1
        for d in (
            Drop.BAD_MAGIC,
            Drop.BAD_VERSION,
            Drop.BAD_KIND,
            Drop.BAD_DTYPE,
            Drop.BAD_FLAGS,
            Drop.BAD_RESERVED,
            Drop.SLOT_MISMATCH,
        )
    },
    Drop.RESULT_ON_INPUT: 7,
    Drop.BAD_BITMAP: 3,
    Drop.UNEXPECTED_SRC: 4,
    Drop.STALE: 6,
    Drop.AHEAD_OF_WINDOW: 6,
    Drop.DUPLICATE: 5,
}


#: In-line forwarding (PROTOCOL.md "In-line bypass"): a frame whose deciding (lowest) code is one of these
#: is not wanreduce work for this aggregator, so an aggregator with a bypass port forwards it unchanged
#: to the site's hosts instead of dropping it: not IPv4, IPv4 the parser does not take apart (options or a
#: fragment), another IP protocol, another UDP port, and RESULTs (another root's, on their way to the
#: hosts). A frame with a corrupt IPv4 header or checksum, or a malformed wanreduce header, is dropped.
BYPASS_CODES = frozenset(
    {Drop.NOT_IPV4, Drop.BAD_IP_HEADER, Drop.NOT_UDP, Drop.WRONG_PORT, Drop.RESULT_ON_INPUT}
)


def forwarded(code, foreign):
    """Whether a frame whose lowest drop code is ``code`` (0: none) goes to the bypass port: a code of
    :data:`BYPASS_CODES`, or ``unexpected_src`` for a CONTRIB that is ``foreign`` (its chunk is outside this
    site's root stripe of a configured round: another root's work)."""
    return code in BYPASS_CODES or (code == Drop.UNEXPECTED_SRC and bool(foreign))
