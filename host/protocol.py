"""numpy views of the wire protocol: the header as a structured dtype and the element dtypes.

The protocol itself is :mod:`wanreduce.spec.protocol` (standard library only); this module re-exports it
for the host model and adds what needs numpy and ml_dtypes.
"""

import ml_dtypes
import numpy as np

from ..spec.protocol import (  # re-exported: the host model reads the protocol through this one module
    ETH_FCS_BYTES,
    ETH_HEADER_BYTES,
    ETH_IFG_BYTES,
    ETH_PREAMBLE_BYTES,
    ETHERTYPE_IPV4,
    FLAG_LAST,
    FLAGS_VALID,
    FRAME_OVERHEAD,
    HEADER_BYTES,
    HEADER_FIELDS,
    HEADER_LAYOUT,
    IPPROTO_UDP,
    IPV4_HEADER_BYTES,
    JUMBO_MTU,
    MAGIC,
    MAX_CHUNK_BYTES,
    MAX_GROUPS,
    MAX_RANKS,
    PACKET_OVERHEAD,
    UDP_HEADER_BYTES,
    UDP_PORT,
    VERSION,
    WIRE_OVERHEAD,
    Drop,
    DType,
    Kind,
)

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
    "HEADER_DTYPE",
    "np_dtype",
    "bits_dtype",
]

#: The header as a numpy structured dtype (big-endian), to read or write a whole array of headers at once.
HEADER_DTYPE = np.dtype([(name, ">u1" if size == 1 else f">u{size}") for name, size in HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == HEADER_BYTES

_VALUES = {
    DType.FP32: np.dtype(np.float32),
    DType.FP16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
}


def np_dtype(dtype):
    """The numpy value dtype of a protocol dtype: binary32, binary16, or ml_dtypes' bfloat16."""
    return _VALUES[DType(dtype)]


def bits_dtype(dtype):
    """The little-endian unsigned integer dtype of the same width, as the elements sit on the wire."""
    return np.dtype(f"<u{DType(dtype).size}")
