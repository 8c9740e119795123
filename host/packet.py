"""Packing tensors into CONTRIB payloads and back, vectorised with numpy.

A tensor of E elements in chunks of ``chunk_elems`` becomes ``ceil(E / chunk_elems)`` UDP payloads, each the
32-byte header of PROTOCOL.md followed by its elements, little-endian. All full chunks share one length, so
they are built as one (n, L) uint8 block with no Python loop per chunk or element; the last, shorter chunk
(if any) is a second block.
"""

import numpy as np

from ..spec.errors import WanreduceError
from ..spec.protocol import FLAG_LAST, HEADER_BYTES, MAGIC, MAX_RANKS, VERSION, DType, Kind
from .protocol import HEADER_DTYPE, bits_dtype, np_dtype

__all__ = [
    "Payloads",
    "encode_headers",
    "decode_headers",
    "header_of",
    "contrib_headers",
    "pack_tensor",
    "unpack_payloads",
    "to_wire_bits",
    "MAX_COUNT",
]

MAX_COUNT = 0xFFFF


class Payloads:
    """UDP payloads as blocks of equal-length rows: ``blocks`` is a list of (n_i, L_i) uint8 arrays."""

    def __init__(self, blocks):
        self.blocks = [b for b in blocks if len(b)]

    def __len__(self):
        return sum(len(b) for b in self.blocks)

    def __iter__(self):
        for block in self.blocks:
            for row in block:
                yield row.tobytes()

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self.blocks)

    @classmethod
    def from_list(cls, payloads):
        """Group a list of ``bytes`` into blocks of runs with the same length, keeping their order."""
        blocks, run = [], []
        for p in payloads:
            if run and len(p) != len(run[0]):
                blocks.append(np.frombuffer(b"".join(run), np.uint8).reshape(len(run), -1))
                run = []
            run.append(bytes(p))
        if run:
            blocks.append(np.frombuffer(b"".join(run), np.uint8).reshape(len(run), -1))
        return cls(blocks)


def encode_headers(n, **fields):
    """An array of ``n`` headers; every field of PROTOCOL.md may be a scalar or an array of length n."""
    h = np.zeros(n, HEADER_DTYPE)
    h["magic"], h["version"] = MAGIC, VERSION
    for name, value in fields.items():
        h[name] = value
    return h


def header_of(payload):
    """The header of one UDP payload as a structured scalar (fields by name), or None when the payload
    is not a wanreduce packet of this version (too short, another magic or version)."""
    if len(payload) < HEADER_BYTES:
        return None
    h = decode_headers(np.frombuffer(bytes(payload[:HEADER_BYTES]), np.uint8))[0]
    return h if h["magic"] == MAGIC and h["version"] == VERSION else None


def decode_headers(block):
    """The headers of an (n, L >= 32) uint8 block, as a structured array (a copy, native field order)."""
    block = np.ascontiguousarray(np.atleast_2d(block)[:, :HEADER_BYTES])
    return block.view(HEADER_DTYPE)[:, 0].copy()


def to_wire_bits(tensor, dtype):
    """Round a float tensor to ``dtype`` (nearest even) and return its little-endian bit patterns.

    Raises WanreduceError when the tensor is not floating point or a finite value overflows the format,
    since either would send a number the user did not have.
    """
    dtype = DType(dtype)
    tensor = np.asarray(tensor)
    if tensor.dtype.kind != "f" and tensor.dtype != np_dtype(DType.BF16):
        raise WanreduceError(
            f"the tensor has dtype {tensor.dtype}, but only floating-point tensors can be "
            f"sent as {dtype.label}"
        )
    flat = tensor.reshape(-1)
    if flat.dtype == np_dtype(dtype):
        converted = flat
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            converted = flat.astype(np_dtype(dtype))
        overflow = np.isfinite(flat.astype(np.float64)) & ~np.isfinite(converted.astype(np.float64))
        if overflow.any():
            i = int(np.flatnonzero(overflow)[0])
            raise WanreduceError(
                f"element {i} ({float(flat[i])!r}) is too large for {dtype.label} and would become infinity"
            )
    return converted.view(bits_dtype(dtype).newbyteorder("=")).astype(bits_dtype(dtype), copy=False)


def contrib_headers(total, *, dtype, rank, job=0, round=0, group=0, chunk_elems, first_chunk=0, last=True):
    """The CONTRIB headers of a tensor of ``total`` elements cut into chunks of ``chunk_elems``, chunk
    ``first_chunk`` onwards: an ``(n, HEADER_BYTES)`` uint8 array, one row per chunk (the last one shorter
    when ``chunk_elems`` does not divide ``total``). ``last`` sets the LAST flag on the final chunk.
    Raises WanreduceError when a field does not fit its header field."""
    dtype = DType(dtype)
    if not 0 <= rank < MAX_RANKS:
        raise WanreduceError(f"rank {rank} is outside 0..{MAX_RANKS - 1}")
    if not 1 <= chunk_elems <= MAX_COUNT:
        raise WanreduceError(f"chunk size {chunk_elems} elements is outside 1..{MAX_COUNT} (the count field)")
    for name, value, top in (("job", job, 0xFFFF), ("round", round, 0xFFFFFFFF), ("group", group, 0xFFFF)):
        if not 0 <= value <= top:
            raise WanreduceError(f"{name} {value} does not fit its header field (0..{top})")
    if total == 0:
        raise WanreduceError("the tensor is empty; there is nothing to send")
    n = -(-total // chunk_elems)
    if first_chunk + n - 1 > 0xFFFFFFFF:
        raise WanreduceError(f"{n} chunks do not fit the 32-bit chunk field")
    count = np.full(n, chunk_elems, np.int64)
    count[-1] = total - (n - 1) * chunk_elems
    h = encode_headers(
        n,
        kind=Kind.CONTRIB,
        dtype=dtype,
        job=job,
        round=round,
        chunk=np.arange(first_chunk, first_chunk + n, dtype=np.uint64),
        src=rank,
        group=group,
        count=count,
        bitmap=np.uint64(1) << np.uint64(rank),
    )
    if last:
        h["flags"][-1] = FLAG_LAST
    return h.view(np.uint8).reshape(n, HEADER_BYTES)


def pack_tensor(tensor, *, dtype, rank, job=0, round=0, group=0, chunk_elems, first_chunk=0, last=True):
    """A whole tensor → CONTRIB payloads (:class:`Payloads`), chunk ``first_chunk`` onwards.

    ``last`` sets the LAST flag on the final chunk (PROTOCOL.md: last chunk of this round's tensor).
    """
    dtype = DType(dtype)
    if not 0 <= rank < MAX_RANKS:
        raise WanreduceError(f"rank {rank} is outside 0..{MAX_RANKS - 1}")
    bits = to_wire_bits(tensor, dtype)
    heads = contrib_headers(
        bits.size,
        dtype=dtype,
        rank=rank,
        job=job,
        round=round,
        group=group,
        chunk_elems=chunk_elems,
        first_chunk=first_chunk,
        last=last,
    )
    n_full, tail = divmod(bits.size, chunk_elems)
    raw = bits.view(np.uint8)
    size = dtype.size

    def block(start, count, elems):
        out = np.empty((count, HEADER_BYTES + elems * size), np.uint8)
        out[:, :HEADER_BYTES] = heads[start : start + count]
        out[:, HEADER_BYTES:] = raw[
            start * chunk_elems * size : (start * chunk_elems + count * elems) * size
        ].reshape(count, elems * size)
        return out

    blocks = [block(0, n_full, chunk_elems)] if n_full else []
    if tail:
        blocks.append(block(n_full, 1, tail))
    return Payloads(blocks)


def unpack_payloads(payloads, *, dtype=None):
    """CONTRIB or RESULT payloads of one tensor, in any order → (tensor in wire dtype, headers).

    The payloads must agree on dtype, job, round and (for one sender) src, and their chunks must cover
    ``first..last`` once each, every chunk but the highest holding the same count. Raises WanreduceError
    naming the first inconsistency otherwise.
    """
    if not isinstance(payloads, Payloads):
        payloads = Payloads.from_list(list(payloads))
    if not len(payloads):
        raise WanreduceError("no payloads to unpack")
    headers = np.concatenate([decode_headers(b) for b in payloads.blocks])
    for b in payloads.blocks:
        if b.shape[1] < HEADER_BYTES:
            raise WanreduceError(f"a payload of {b.shape[1]} bytes is shorter than the 32-byte header")
    if np.any(headers["magic"] != MAGIC) or np.any(headers["version"] != VERSION):
        raise WanreduceError("a payload has a wrong magic or version; not a wanreduce packet of this version")
    codes = np.unique(headers["dtype"])
    if len(codes) != 1 or int(codes[0]) not in DType._value2member_map_:
        raise WanreduceError(f"payloads mix or use unknown dtypes {sorted(int(c) for c in codes)}")
    wire = DType(int(codes[0]))
    if dtype is not None and DType(dtype) != wire:
        raise WanreduceError(f"payloads carry {wire.label}, not {DType(dtype).label}")
    for field in ("job", "round", "kind"):
        if len(np.unique(headers[field])) != 1:
            raise WanreduceError(f"payloads belong to different {field}s; unpack one tensor at a time")
    chunks = headers["chunk"].astype(np.int64)
    order = np.argsort(chunks, kind="stable")
    chunks_sorted = chunks[order]
    if np.any(np.diff(chunks_sorted) != 1):
        dup = np.diff(chunks_sorted) == 0
        what = "repeats a chunk" if dup.any() else "misses a chunk"
        raise WanreduceError(f"the payloads' chunk indices are not contiguous: the set {what}")
    counts = headers["count"].astype(np.int64)
    lengths = np.concatenate([np.full(len(b), b.shape[1]) for b in payloads.blocks])
    if np.any(lengths != HEADER_BYTES + counts * wire.size):
        raise WanreduceError("a payload's length disagrees with its count field")
    per = counts[order]
    if len(per) > 1 and np.any(per[:-1] != per[0]):
        raise WanreduceError("chunks other than the last one hold different element counts")
    elems = int(per.sum())
    out = np.empty(elems * wire.size, np.uint8)
    base = int(chunks_sorted[0])
    stride = int(per[0]) * wire.size
    n_full = out.size // stride
    full_view = out[: n_full * stride].reshape(n_full, stride)
    row = 0
    for b in payloads.blocks:
        idx = chunks[row : row + len(b)] - base
        row += len(b)
        if b.shape[1] - HEADER_BYTES == stride:
            full_view[idx] = b[:, HEADER_BYTES:]  # one scatter for the whole block
        else:  # the one shorter, highest chunk
            out[int(idx[0]) * stride :] = b[0, HEADER_BYTES:]
    values = out.view(bits_dtype(wire)).view(np_dtype(wire))
    return values, headers
