"""numpy views of the wire protocol: the header as a structured dtype and the element dtypes.

The protocol itself is :mod:`wanreduce.spec.protocol` (standard library only); this module adds only what
needs numpy and ml_dtypes, and the host model imports the protocol's constants from spec directly.
"""

import ml_dtypes
import numpy as np

from ..spec.protocol import HEADER_BYTES, HEADER_FIELDS, DType

__all__ = ["HEADER_DTYPE", "np_dtype", "bits_dtype"]

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
