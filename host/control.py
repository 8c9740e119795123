"""Driver for the aggregator core's control port: configuration writes, counter reads.

The control port is a plain word-addressed register interface (``ctl__addr`` 16 bits, ``ctl__wdata`` and
``ctl__rdata`` 32 bits, ``ctl__we``, ``ctl__re``; read data is valid two cycles after ``re``). The map is
documented in ``docs/control.md`` and defined once in :mod:`wanreduce.spec.regmap`, which the gateware
imports too. This module turns a configuration (rank,
schedule, destinations) into the list of ``(address, data)`` writes that load it, and a list of counter
reads back into a dict keyed by the drop counter names plus ``frames_in`` and ``results``, exactly as the
golden aggregator's ``counters``.
"""

from collections.abc import Mapping

from ..spec import addressing
from ..spec import regmap as rm
from ..spec.errors import WanreduceError
from ..spec.protocol import MAX_RANKS, UDP_PORT
from .frames import parse_ip, parse_mac
from .golden import entry_stripe, expected_order

__all__ = [
    "config_writes",
    "core_capacities",
    "counter_reads",
    "decode_counters",
    "perf_reads",
    "decode_perf",
    "board_reads",
    "decode_board",
    "job_register",
]

#: Word 1 of a job entry: its schedule period in rounds (the map in wanreduce.spec.regmap names only the
#: bank word's offset, JOB_BANK_OFFSET).
_JOB_PERIOD = 1


def _mac_words(mac):
    b = parse_mac(mac)
    return int.from_bytes(b[:2], "big"), int.from_bytes(b[2:], "big")


def core_capacities(core):
    """``(jobs, rounds, members, dests, slots)`` of a core: a :class:`wanreduce.spec.core.CoreConfig`, a
    built core (the same attributes), or a mapping of its build keywords."""
    get = core.__getitem__ if isinstance(core, Mapping) else lambda name: getattr(core, name)
    return tuple(get(name) for name in ("jobs", "rounds", "members", "dests", "slots"))


def config_writes(
    *,
    rank,
    jobs,
    destinations=(),
    mac=None,
    ip=None,
    port=UDP_PORT,
    core=None,
    max_jobs=None,
    rounds=None,
    members=None,
    max_dests=None,
    slots=None,
    bank_bits=None,
    bypass=None,
):
    """The ``(address, data)`` writes that configure a core built with the given capacities: ``core`` (a
    :class:`wanreduce.spec.core.CoreConfig`, a built core, or a mapping of its build keywords) gives them
    all; without it, ``max_jobs``, ``rounds``, ``members`` and ``max_dests`` (and ``slots``, for round
    banks) say them one by one.

    ``jobs`` maps a job id to the expected entries of one period, as the golden aggregator takes them (a
    bitmap, summed in ascending rank order, or a sequence of ranks in summation order); ``bank_bits`` maps
    a job id to log2 of its round bank's slots (needs ``slots``, the core's S; default log2 S: slot = chunk
    mod S). An entry may be a :class:`wanreduce.host.golden.RootEntry` (root aggregation: this site's
    stripe and the group address its RESULTs also go to); every entry is written with its stripe (the
    whole chunk space for a plain entry). ``bypass`` (None: leave ``REG_BYPASS`` as it is) turns the
    bypass port's forwarding on or off. ``destinations`` is a sequence of objects with ``mac``, ``ip`` and
    ``port`` (e.g.
    :class:`wanreduce.host.golden.Destination`). Raises :class:`WanreduceError` for anything the core
    cannot hold: too many jobs or destinations, a period longer than the table, an expected set larger
    than the ``members`` buffers of a slot, or banks that do not fit the slots.
    """
    if core is not None:
        if any(v is not None for v in (max_jobs, rounds, members, max_dests, slots)):
            raise ValueError("Give the core or its capacities one by one, not both.")
        max_jobs, rounds, members, max_dests, slots = core_capacities(core)
    elif None in (max_jobs, rounds, members, max_dests):
        raise ValueError("Give the core, or its max_jobs, rounds, members and max_dests.")
    if not 0 <= int(rank) < MAX_RANKS:
        raise WanreduceError(f"the rank must be in 0..{MAX_RANKS - 1}, not {rank}")
    if not 0 < int(port) < 1 << 16:
        raise WanreduceError(f"the UDP port must be in 1..65535, not {port}")
    if len(jobs) > max_jobs:
        raise WanreduceError(f"the core holds schedules for {max_jobs} jobs, not {len(jobs)}")
    destinations = list(destinations)
    if len(destinations) > max_dests:
        raise WanreduceError(f"the core sends to at most {max_dests} destinations, not {len(destinations)}")
    mac = addressing.aggregator_mac(int(rank)) if mac is None else mac
    ip = addressing.aggregator_ip(int(rank)) if ip is None else ip
    writes = [(rm.REG_RANK, int(rank)), (rm.REG_PORT, int(port))]
    hi, lo = _mac_words(mac)
    writes += [(rm.REG_MAC_HI, hi), (rm.REG_MAC_LO, lo), (rm.REG_IP, int.from_bytes(parse_ip(ip), "big"))]
    writes.append((rm.REG_NDEST, len(destinations)))
    for d, dest in enumerate(destinations):
        hi, lo = _mac_words(dest.mac)
        dport = int(dest.port)
        if not 0 < dport < 1 << 16:
            raise WanreduceError(f"destination {d} has UDP port {dport}, outside 1..65535")
        base = rm.DEST_BASE + rm.DEST_STRIDE * d
        writes += [
            (base, hi),
            (base + 1, lo),
            (base + 2, int.from_bytes(parse_ip(dest.ip), "big")),
            (base + 3, dport),
        ]
    bank_bits = dict(bank_bits or {})
    for j, (job, period) in enumerate(sorted(jobs.items())):
        job = int(job)
        if not 0 <= job < 1 << 16:
            raise WanreduceError(f"job id {job} does not fit in the header's 16 bits")
        if not 1 <= len(period) <= rounds:
            raise WanreduceError(
                f"job {job} has a schedule period of {len(period)} rounds; the table holds 1 to {rounds}"
            )
        for r, entry in enumerate(period):
            try:
                bitmap, order = expected_order(entry)
                lo, hi, mdest = entry_stripe(entry)
                mdest_word = 0
                if mdest is not None:
                    addressing.multicast_mac(mdest)  # refuses anything but a multicast group
                    mdest_word = int.from_bytes(parse_ip(mdest), "big")
            except ValueError as exc:
                raise WanreduceError(f"job {job} round {r}: {exc}") from None
            if len(order) > members:
                raise WanreduceError(
                    f"job {job} round {r} expects {len(order)} members, more than the "
                    f"{members} buffers of a slot"
                )
            # The order goes into the shadow words first; the high bitmap word stores entry and order.
            # Every word a slot's order can use is written, so no rank of an earlier entry lingers.
            words = -(-max(int(members), len(order)) // rm.ORDER_PER_WORD)
            padded = list(order) + [rm.ORDER_NONE] * (words * rm.ORDER_PER_WORD - len(order))
            for w in range(len(padded) // rm.ORDER_PER_WORD):
                word = 0
                for k in range(rm.ORDER_PER_WORD):
                    word |= padded[w * rm.ORDER_PER_WORD + k] << (8 * k)
                writes.append((rm.ORDER_BASE + w, word))
            writes += [(rm.REG_ROOT_LO, lo), (rm.REG_ROOT_HI, hi), (rm.REG_MDEST, mdest_word)]
            addr = rm.SCHED_BASE + 2 * (j * rounds + r)
            writes += [(addr, bitmap & 0xFFFFFFFF), (addr + 1, bitmap >> 32)]
        if job in bank_bits:
            if slots is None:
                raise WanreduceError("round banks need the core's slot count")
            bits = int(bank_bits[job])
            if not 0 <= bits or (len(period) << bits) > slots:
                raise WanreduceError(
                    f"job {job}: {len(period)} round banks of 2**{bits} slots do not fit "
                    f"the core's {slots} slots"
                )
            writes.append((job_register(j, rm.JOB_BANK_OFFSET), bits))
        elif slots is not None:
            writes.append((job_register(j, rm.JOB_BANK_OFFSET), slots.bit_length() - 1))
        writes += [(job_register(j), job), (job_register(j, _JOB_PERIOD), len(period))]
    for j in range(len(jobs), max_jobs):
        writes.append((job_register(j, _JOB_PERIOD), 0))
    if bypass is not None:
        writes.append((rm.REG_BYPASS, int(bool(bypass))))
    return writes


def job_register(j, offset=0):
    """The address of word ``offset`` of job entry ``j`` (0: the job id; then its period and its bank)."""
    return rm.JOB_BASE + rm.JOB_STRIDE * j + offset


def counter_reads():
    """The addresses to read for :func:`decode_counters`, in order."""
    return [rm.COUNTER_BASE + n for n in range(len(rm.COUNTER_NAMES))]


def decode_counters(values):
    """Counter read values (in :func:`counter_reads` order) → ``{name: count}``."""
    values = list(values)
    if len(values) != len(rm.COUNTER_NAMES):
        raise ValueError(f"Expected {len(rm.COUNTER_NAMES)} counter values, got {len(values)}.")
    return {name: int(v) for name, v in zip(rm.COUNTER_NAMES, values, strict=True)}


def perf_reads():
    """The addresses to read for :func:`decode_perf`, in order."""
    return [rm.PERF_BASE + n for n in range(len(rm.PERF_NAMES))]


def decode_perf(values):
    """Performance counter values (in :func:`perf_reads` order) → ``{name: value}``."""
    return {name: int(v) for name, v in zip(rm.PERF_NAMES, values, strict=True)}


def board_reads():
    """The addresses to read for :func:`decode_board`, in order: the board registers of a board build."""
    return [rm.BOARD_BASE + n for n in range(len(rm.BOARD_NAMES))]


def decode_board(values):
    """Board register values (in :func:`board_reads` order) → ``{name: value}``."""
    return {name: int(v) for name, v in zip(rm.BOARD_NAMES, values, strict=True)}
