"""The numpy model of a sync schedule: what every site holds after each round, without any packets.

Written independently of the packet path (no framing, no slots, no golden aggregator), it is the reference
the co-simulation, ``wanreduce verify`` and the training sync are checked against bit for bit.

Per round, per group: the members' tensors are summed in the group's listed order (the schedule file's
order *is* the summation order), one IEEE-754 rounding per addition in the wire dtype; a NaN anywhere in a
sum becomes the dtype's canonical quiet NaN; then every member divides by the group size in the wire dtype.
A site in no group keeps its tensor.
"""

import numpy as np

from ..spec.protocol import DType
from .protocol import bits_dtype, np_dtype

__all__ = ["ordered_sum", "run_reference"]


def ordered_sum(tensors, dtype):
    """Sum wire-dtype arrays left to right with one rounding per addition; NaN → the canonical NaN."""
    dtype = DType(dtype)
    vt = np_dtype(dtype)
    acc = np.asarray(tensors[0], vt).copy()
    with np.errstate(all="ignore"):
        for t in tensors[1:]:
            acc = (acc + np.asarray(t, vt)).astype(vt)
    bits = acc.view(bits_dtype(dtype)).copy()
    bits[np.isnan(acc.astype(np.float32))] = dtype.canonical_nan
    return bits.view(vt)


def run_reference(schedule, grads, *, dtype=DType.FP32, rounds=None):
    """Values after each round: ``out[r][site]`` is site's tensor (wire dtype) after round ``r``.

    ``grads`` is one array per site (any float dtype, cast to the wire dtype first); ``rounds`` defaults to
    one period.
    """
    dtype = DType(dtype)
    vt = np_dtype(dtype)
    if len(grads) != schedule.n:
        raise ValueError(f"The schedule has {schedule.n} sites but {len(grads)} tensors were given.")
    values = [np.asarray(g).astype(vt).reshape(-1) for g in grads]
    rounds = schedule.period if rounds is None else rounds
    out = []
    for r in range(rounds):
        new = list(values)
        for group in schedule.rounds[r % schedule.period]:
            total = ordered_sum([values[m] for m in group], dtype)
            with np.errstate(all="ignore"):
                avg = (total / vt.type(len(group))).astype(vt)
            for m in group:
                new[m] = avg
        values = new
        out.append(values)
    return out
