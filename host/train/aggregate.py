"""Group averages of the sites' tensors through the wanreduce aggregator, round by round of a schedule.

What one sync does at the sites of a group: every member casts its tensor to the wire dtype and sends it
as CONTRIB packets (:func:`wanreduce.host.packet.pack_tensor`); the aggregator adds the members'
contributions in the schedule's summation order, one IEEE-754 rounding per addition in the wire dtype; each
member divides the RESULT by the group size in that dtype, as the hosts do (:mod:`wanreduce.host.cosim`).

Two engines compute the same bits:

* ``"packets"``: the real path, packets through an aggregator model (:func:`golden_aggregator` by default,
  or any callable with its signature, such as the Verilated core in the tests);
* ``"fast"``: the same additions as one numpy expression per round, for the thousands of syncs of a
  training run. ``tests/host/test_train.py`` holds the two equal bit for bit.

The summation order of a group comes from :func:`summation_order` and nowhere else: the order the schedule
lists the group in (docs/PROTOCOL.md, summation order), which on an exact grid makes every site end a
period with identical bits.
"""

import numpy as np

from ...spec.errors import WanreduceError
from ...spec.protocol import DType
from ..golden import GoldenAggregator
from ..packet import pack_tensor, unpack_payloads
from ..protocol import bits_dtype, np_dtype

__all__ = [
    "wire_dtype",
    "summation_order",
    "expected_entry",
    "golden_aggregator",
    "group_sum_packets",
    "group_sum_fast",
    "divide",
    "run_rounds",
    "ENGINES",
]

ENGINES = ("fast", "packets")


def wire_dtype(dtype):
    """A :class:`DType` from itself or its name (``fp32``, ``fp16``, ``bf16``)."""
    if isinstance(dtype, str):
        try:
            return DType[dtype.upper()]
        except KeyError:
            raise WanreduceError(f"unknown wire dtype {dtype!r}; choose fp32, fp16 or bf16") from None
    return DType(dtype)


def summation_order(group):
    """The ranks of ``group`` in the order the aggregator adds their contributions: as the schedule lists
    them (the schedule optimizer lists each group in the order that keeps the sites' bits identical)."""
    return tuple(int(m) for m in group)


def expected_entry(order):
    """What an aggregator's job table expects for a round whose group sums in ``order``: the ranks in
    summation order (a bitmap would mean ascending rank order)."""
    return tuple(order)


def golden_aggregator(payloads, *, rank, jobs, slots, members, slot_bytes):
    """Feed ``payloads`` to the golden aggregator of site ``rank``; the RESULT payloads it emits."""
    agg = GoldenAggregator(rank=rank, jobs=jobs, slots=slots, members=members, slot_bytes=slot_bytes)
    out = []
    for p in payloads:
        out += agg.feed_payload(p)
    dropped = {k: v for k, v in agg.counters.items() if k not in ("results", "frames_in") and v}
    if dropped:
        raise RuntimeError(f"The aggregator dropped contributions of a clean sync: {dropped}.")
    return out


def group_sum_packets(values, order, dtype, *, chunk_elems, round_=0, group_id=0, aggregator=None, seed=0):
    """The sum of ``values[m]`` (wire-dtype arrays) over ``order``, through packets and an aggregator.

    The members' packets arrive interleaved in a seeded random order, as the WAN would deliver them; the
    aggregator sits at the first member of ``order`` and holds one slot per chunk. Returns the RESULT
    tensor in the wire dtype.
    """
    dtype = wire_dtype(dtype)
    aggregator = aggregator or golden_aggregator
    streams = []
    for m in order:
        p = pack_tensor(values[m], dtype=dtype, rank=m, round=round_, group=group_id, chunk_elems=chunk_elems)
        streams.append([row.tobytes() for b in p.blocks for row in b])
    n_chunks = len(streams[0])
    rng = np.random.default_rng(seed)
    # Any interleaving that keeps each sender's own order: pick the next sender at random.
    left = [list(reversed(s)) for s in streams]
    packets = []
    while any(left):
        live = [i for i, s in enumerate(left) if s]
        packets.append(left[live[int(rng.integers(len(live)))]].pop())
    slots = 1 << (n_chunks - 1).bit_length()  # a power of two, one slot per chunk at least
    results = aggregator(
        packets,
        rank=order[0],
        jobs={0: [expected_entry(order)]},
        slots=slots,
        members=len(order),
        slot_bytes=chunk_elems * dtype.size,
    )
    if len(results) != n_chunks:
        raise RuntimeError(f"The aggregator completed {len(results)} of {n_chunks} chunks.")
    total, _ = unpack_payloads(results, dtype=dtype)
    return total


def group_sum_fast(rows, dtype):
    """Sums of several groups of equal size at once: ``rows`` is (members, groups, elements) in the wire
    dtype, members in summation order. The additions, rounding and NaN rule of
    :func:`wanreduce.host.golden.reduce_in_order`, vectorised across groups."""
    dtype = wire_dtype(dtype)
    dt = np_dtype(dtype)
    acc = np.array(rows[0], dtype=dt, copy=True)
    with np.errstate(all="ignore"):
        for r in rows[1:]:
            acc = (acc + r).astype(dt)
    nan = np.isnan(acc.astype(np.float32))
    if nan.any():
        bits = acc.view(bits_dtype(dtype))
        bits[nan] = dtype.canonical_nan
    return acc


def divide(total, size, dtype):
    """The group average from its sum, in the wire dtype, exactly as the hosts compute it."""
    dt = np_dtype(dtype)
    with np.errstate(all="ignore"):
        return (total / dt.type(size)).astype(dt)


def run_rounds(values, rounds, dtype, *, engine="fast", chunk_elems=256, aggregator=None, first_round=0):
    """Apply ``rounds`` (each a list of groups of ranks) to ``values``, an (n, L) array in the wire dtype.

    In each round every group's members end with the group average; sites in no group (or alone in one)
    keep their value. Returns a new array.
    """
    if engine not in ENGINES:
        raise ValueError(f"The engine must be one of {', '.join(ENGINES)}, not {engine!r}.")
    dtype = wire_dtype(dtype)
    x = np.array(values, dtype=np_dtype(dtype), copy=True)
    for r, groups in enumerate(rounds):
        orders = [summation_order(g) for g in groups if len(g) > 1]
        new = x.copy()
        if engine == "packets":
            for gid, order in enumerate(orders):
                total = group_sum_packets(
                    x,
                    order,
                    dtype,
                    chunk_elems=chunk_elems,
                    round_=first_round + r,
                    group_id=gid,
                    aggregator=aggregator,
                    seed=first_round + r,
                )
                new[list(order)] = divide(total, len(order), dtype)
        else:
            by_size = {}
            for order in orders:
                by_size.setdefault(len(order), []).append(order)
            for size, same in by_size.items():
                idx = np.array(same, dtype=np.int64)  # (groups, size)
                total = group_sum_fast(x[idx.T], dtype)  # (groups, L)
                avg = divide(total, size, dtype)
                for k in range(size):
                    new[idx[:, k]] = avg
        x = new
    return x
