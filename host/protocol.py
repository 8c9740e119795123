"""The wanreduce wire protocol, version 1: the one definition.

Everything that makes or reads packets (the packer, the scapy layer, the validator, the golden aggregator,
the gateware's header parser and its drop counters, the testbenches) takes its constants from here. The
prose contract is ``docs/PROTOCOL.md``; this module is that page as code.
"""

import enum

import ml_dtypes
import numpy as np

__all__ = [
    "VERSION", "MAGIC", "UDP_PORT", "HEADER_BYTES", "MAX_RANKS", "FLAG_LAST", "FLAGS_VALID",
    "Kind", "DType", "Drop", "HEADER_DTYPE", "HEADER_FIELDS",
    "ETH_HEADER_BYTES", "IPV4_HEADER_BYTES", "UDP_HEADER_BYTES", "FRAME_OVERHEAD", "ETHERTYPE_IPV4",
    "IPPROTO_UDP", "frame_drops", "header_drops", "slot_drops",
]

VERSION = 1
MAGIC = 0x5752  # "WR"
UDP_PORT = 47000
HEADER_BYTES = 32
MAX_RANKS = 64  # the bitmap is 64 bits; larger deployments aggregate hierarchically
FLAG_LAST = 0x01
FLAGS_VALID = FLAG_LAST

ETH_HEADER_BYTES = 14
IPV4_HEADER_BYTES = 20  # IHL 5; frames with IPv4 options are dropped (bad_ip_header), see PROTOCOL.md
UDP_HEADER_BYTES = 8
FRAME_OVERHEAD = ETH_HEADER_BYTES + IPV4_HEADER_BYTES + UDP_HEADER_BYTES
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17


class Kind(enum.IntEnum):
    CONTRIB = 0
    RESULT = 1


class DType(enum.IntEnum):
    """Element types. ``size`` is bytes per element on the wire (little-endian)."""

    FP32 = 0
    FP16 = 1
    BF16 = 2

    @property
    def size(self):
        return 4 if self is DType.FP32 else 2

    @property
    def numpy(self):
        """The numpy value dtype: IEEE binary32, binary16, or ml_dtypes' bfloat16."""
        return {DType.FP32: np.dtype(np.float32), DType.FP16: np.dtype(np.float16),
                DType.BF16: np.dtype(ml_dtypes.bfloat16)}[self]

    @property
    def bits(self):
        """The unsigned integer dtype of the same width, little-endian as on the wire."""
        return np.dtype("<u4") if self is DType.FP32 else np.dtype("<u2")

    @property
    def label(self):
        return self.name.lower()

    @classmethod
    def from_label(cls, label):
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(f"unknown dtype {label!r}; expected one of fp32, fp16, bf16") from None


# Big-endian on the wire; numpy reads and writes a whole array of headers at once with this.
HEADER_FIELDS = [
    ("magic", ">u2"),
    ("version", "u1"),
    ("kind", "u1"),
    ("dtype", "u1"),
    ("flags", "u1"),
    ("job", ">u2"),
    ("round", ">u4"),
    ("chunk", ">u4"),
    ("src", ">u2"),
    ("group", ">u2"),
    ("count", ">u2"),
    ("reserved", ">u2"),
    ("bitmap", ">u8"),
]
HEADER_DTYPE = np.dtype(HEADER_FIELDS)
assert HEADER_DTYPE.itemsize == HEADER_BYTES


class Drop(enum.IntEnum):
    """Why a frame or packet was dropped, in the order the checks are applied.

    When several rules apply, the lowest code wins, in the host validator, the golden aggregator and the
    RTL alike, so their counters agree exactly. The name is the counter's name everywhere. ``rule`` is the
    numbered drop rule of PROTOCOL.md (0 for the Ethernet/IPv4/UDP framing checks of the frame parser).
    """

    # Framing (frame parser, before the wanreduce header is looked at).
    TRUNCATED = 1          # frame shorter than its Ethernet/IPv4/UDP headers or than IPv4 total length
    NOT_IPV4 = 2           # EtherType is not 0x0800 (VLAN tags included)
    BAD_IP_HEADER = 3      # version != 4, IHL != 5, a fragment, or total length too small
    BAD_IP_CHECKSUM = 4
    NOT_UDP = 5
    WRONG_PORT = 6         # UDP destination port is not the aggregator's
    BAD_UDP_LENGTH = 7     # UDP length disagrees with the IPv4 total length
    BAD_UDP_CHECKSUM = 8   # nonzero and wrong (zero means "not computed" and is accepted)
    # Header (rules 1, 2, 3, 7 and the size limit of rule 2).
    SHORT_HEADER = 9       # UDP payload shorter than the 32-byte header
    BAD_MAGIC = 10
    BAD_VERSION = 11
    BAD_KIND = 12
    BAD_DTYPE = 13
    BAD_FLAGS = 14
    BAD_RESERVED = 15
    BAD_COUNT = 16         # count == 0
    BAD_LENGTH = 17        # UDP payload length != 32 + count * size(dtype)
    RESULT_ON_INPUT = 18
    BAD_BITMAP = 19        # CONTRIB bitmap != 1 << src (src >= 64 included)
    TOO_LARGE = 20         # count * size(dtype) > the slot's per-member buffer
    # Schedule (rule 4).
    UNEXPECTED_SRC = 21    # src not in the expected set of this site's group for (job, round)
    # Reorder buffer (rules 6, 5, 1).
    STALE = 22             # older than the chunk the slot holds or last completed
    AHEAD_OF_WINDOW = 23   # the slot is held by another live chunk
    DUPLICATE = 24         # this rank already contributed to this chunk
    SLOT_MISMATCH = 25     # dtype or count differs from the slot's first contribution

    @property
    def counter(self):
        return self.name.lower()

    @property
    def rule(self):
        return _RULE[self]


_RULE = {
    **{d: 0 for d in (Drop.NOT_IPV4, Drop.BAD_IP_HEADER, Drop.NOT_UDP, Drop.WRONG_PORT)},
    **{d: 2 for d in (Drop.TRUNCATED, Drop.SHORT_HEADER, Drop.BAD_IP_CHECKSUM, Drop.BAD_UDP_LENGTH,
                      Drop.BAD_UDP_CHECKSUM, Drop.BAD_LENGTH, Drop.BAD_COUNT, Drop.TOO_LARGE)},
    **{d: 1 for d in (Drop.BAD_MAGIC, Drop.BAD_VERSION, Drop.BAD_KIND, Drop.BAD_DTYPE, Drop.BAD_FLAGS,
                      Drop.BAD_RESERVED, Drop.SLOT_MISMATCH)},
    Drop.RESULT_ON_INPUT: 7,
    Drop.BAD_BITMAP: 3,
    Drop.UNEXPECTED_SRC: 4,
    Drop.STALE: 6,
    Drop.AHEAD_OF_WINDOW: 6,
    Drop.DUPLICATE: 5,
}


def frame_drops():
    """The reasons the Ethernet/IPv4/UDP frame parser decides."""
    return [d for d in Drop if d <= Drop.BAD_UDP_CHECKSUM]


def header_drops():
    """The reasons decided from one packet alone (header parser)."""
    return [d for d in Drop if Drop.SHORT_HEADER <= d <= Drop.TOO_LARGE]


def slot_drops():
    """The reasons that need the schedule table or the slot state."""
    return [d for d in Drop if d >= Drop.UNEXPECTED_SRC]
