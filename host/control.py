"""Driver for the aggregator core's control port: configuration writes, counter reads.

The control port is a plain word-addressed register interface (``ctl__addr`` 16 bits, ``ctl__wdata`` and
``ctl__rdata`` 32 bits, ``ctl__we``, ``ctl__re``; read data is valid the cycle after ``re``). The map is
documented in ``docs/control.md`` and defined once in :mod:`wanreduce.spec.regmap`, which the gateware
imports too (re-exported here for callers of the driver). This module turns a configuration (rank,
schedule, destinations) into the list of ``(address, data)`` writes that load it, and a list of counter
reads back into a dict keyed by the drop counter names plus ``frames_in`` and ``results``, exactly as the
golden aggregator's ``counters``.
"""

from ..spec.errors import WanreduceError
from ..spec.protocol import MAX_RANKS, UDP_PORT
from ..spec.regmap import (  # re-exported: the driver's callers name registers through it
    COUNTER_BASE,
    COUNTER_NAMES,
    DEST_BASE,
    DEST_STRIDE,
    ID_VALUE,
    JOB_BASE,
    JOB_STRIDE,
    PERF_BASE,
    PERF_NAMES,
    REG_CLEAR,
    REG_DESTS,
    REG_ENTRY,
    REG_ID,
    REG_IP,
    REG_JOBS,
    REG_MAC_HI,
    REG_MAC_LO,
    REG_MEMBERS,
    REG_NDEST,
    REG_PORT,
    REG_RANK,
    REG_ROUNDS,
    REG_SLOT_BYTES,
    REG_SLOTS,
    REG_WIDTH,
    SCHED_BASE,
)
from .frames import parse_ip, parse_mac

__all__ = [
    "ID_VALUE",
    "REG_ID",
    "REG_WIDTH",
    "REG_SLOTS",
    "REG_MEMBERS",
    "REG_SLOT_BYTES",
    "REG_DESTS",
    "REG_JOBS",
    "REG_ROUNDS",
    "REG_ENTRY",
    "REG_RANK",
    "REG_PORT",
    "REG_MAC_HI",
    "REG_MAC_LO",
    "REG_IP",
    "REG_NDEST",
    "REG_CLEAR",
    "JOB_BASE",
    "JOB_STRIDE",
    "DEST_BASE",
    "DEST_STRIDE",
    "COUNTER_BASE",
    "COUNTER_NAMES",
    "PERF_BASE",
    "PERF_NAMES",
    "SCHED_BASE",
    "config_writes", "counter_reads", "decode_counters", "perf_reads", "decode_perf"]


def _mac_words(mac):
    b = parse_mac(mac)
    return int.from_bytes(b[:2], "big"), int.from_bytes(b[2:], "big")


def config_writes(*, rank, jobs, destinations=(), mac="02:57:52:00:00:00", ip="10.87.82.0", port=UDP_PORT,
                  max_jobs, rounds, members, max_dests):
    """The ``(address, data)`` writes that configure a core built with the given capacities.

    ``jobs`` maps a job id to the expected bitmaps of one period (as the golden aggregator takes them);
    ``destinations`` is a sequence of objects with ``mac``, ``ip`` and ``port`` (e.g.
    :class:`wanreduce.host.golden.Destination`). Raises :class:`WanreduceError` for anything the core
    cannot hold: too many jobs or destinations, a period longer than the table, or an expected set larger
    than the ``members`` buffers of a slot.
    """
    if not 0 <= int(rank) < MAX_RANKS:
        raise WanreduceError(f"the rank must be in 0..{MAX_RANKS - 1}, not {rank}")
    if not 0 < int(port) < 1 << 16:
        raise WanreduceError(f"the UDP port must be in 1..65535, not {port}")
    if len(jobs) > max_jobs:
        raise WanreduceError(f"the core holds schedules for {max_jobs} jobs, not {len(jobs)}")
    destinations = list(destinations)
    if len(destinations) > max_dests:
        raise WanreduceError(f"the core sends to at most {max_dests} destinations, not {len(destinations)}")
    writes = [(REG_RANK, int(rank)), (REG_PORT, int(port))]
    hi, lo = _mac_words(mac)
    writes += [(REG_MAC_HI, hi), (REG_MAC_LO, lo), (REG_IP, int.from_bytes(parse_ip(ip), "big"))]
    writes.append((REG_NDEST, len(destinations)))
    for d, dest in enumerate(destinations):
        hi, lo = _mac_words(dest.mac)
        dport = int(dest.port)
        if not 0 < dport < 1 << 16:
            raise WanreduceError(f"destination {d} has UDP port {dport}, outside 1..65535")
        base = DEST_BASE + DEST_STRIDE * d
        writes += [(base, hi), (base + 1, lo), (base + 2, int.from_bytes(parse_ip(dest.ip), "big")),
                   (base + 3, dport)]
    for j, (job, period) in enumerate(sorted(jobs.items())):
        job, period = int(job), [int(b) for b in period]
        if not 0 <= job < 1 << 16:
            raise WanreduceError(f"job id {job} does not fit in the header's 16 bits")
        if not 1 <= len(period) <= rounds:
            raise WanreduceError(f"job {job} has a schedule period of {len(period)} rounds; the table holds "
                                 f"1 to {rounds}")
        for r, bitmap in enumerate(period):
            if not 0 <= bitmap < 1 << 64:
                raise WanreduceError(f"job {job} round {r}: the expected set is not a 64-bit bitmap")
            if bin(bitmap).count("1") > members:
                raise WanreduceError(f"job {job} round {r} expects {bin(bitmap).count('1')} members, more "
                                     f"than the {members} buffers of a slot")
            addr = SCHED_BASE + 2 * (j * rounds + r)
            writes += [(addr, bitmap & 0xFFFFFFFF), (addr + 1, bitmap >> 32)]
        writes += [(JOB_BASE + JOB_STRIDE * j, job), (JOB_BASE + JOB_STRIDE * j + 1, len(period))]
    for j in range(len(jobs), max_jobs):
        writes.append((JOB_BASE + JOB_STRIDE * j + 1, 0))
    return writes


def counter_reads():
    """The addresses to read for :func:`decode_counters`, in order."""
    return [COUNTER_BASE + n for n in range(len(COUNTER_NAMES))]


def decode_counters(values):
    """Counter read values (in :func:`counter_reads` order) → ``{name: count}``."""
    values = list(values)
    if len(values) != len(COUNTER_NAMES):
        raise ValueError(f"Expected {len(COUNTER_NAMES)} counter values, got {len(values)}.")
    return {name: int(v) for name, v in zip(COUNTER_NAMES, values, strict=True)}


def perf_reads():
    """The addresses to read for :func:`decode_perf`, in order."""
    return [PERF_BASE + n for n in range(len(PERF_NAMES))]


def decode_perf(values):
    """Performance counter values (in :func:`perf_reads` order) → ``{name: value}``."""
    return {name: int(v) for name, v in zip(PERF_NAMES, values, strict=True)}
