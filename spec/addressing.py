"""The addressing plan: which MAC and IPv4 address every site's hosts, aggregator and groups use.

One definition for the packer, the emitter, the co-simulation, the control driver and the tests. Every
address here is a default that a deployment may override (``wanreduce pack --src-ip`` and the like); the
plan only has to be the same everywhere inside one run.

* Site ``r``'s hosts (the GPUs' NICs): unicast ``10.87.82.<r>``, MAC ``02:57:52:00:00:<r>`` (locally
  administered; ``57:52`` is "WR").
* Site ``r``'s aggregator (the FPGA): unicast ``10.87.83.<r>``, MAC ``02:57:52:01:00:<r>``; the RESULTs
  it makes go to the site's hosts, by default to the site's host group ``239.87.83.<r>``.
* CONTRIB multicast of group ``g`` in round ``r`` of job ``j`` in a schedule of period ``P``:
  ``239.<88 + (j mod 8)>.<r mod P>.<g>``, so that groups of different rounds (which overlap in time when
  the rounds are pipelined) and of different jobs never share a tree. RESULT multicast for
  root aggregation (a root sends one RESULT to the whole group): ``239.<96 + (j mod 8)>.<r mod P>.<g>``.
* A multicast IPv4 address maps to its MAC as RFC 1112 says: ``01:00:5e`` and the low 23 bits.

Group ids are 0..255 (one octet) and periods at most 256 rounds; larger values are refused
(:class:`WanreduceError`), never wrapped.
"""

from .errors import WanreduceError
from .protocol import MAX_RANKS

__all__ = [
    "host_mac",
    "host_ip",
    "aggregator_mac",
    "aggregator_ip",
    "site_group_ip",
    "contrib_group_ip",
    "result_group_ip",
    "multicast_mac",
    "MAX_PERIOD",
]

#: Rounds in a period that the multicast plan (and the control port's round table) can tell apart.
MAX_PERIOD = 256
_CONTRIB_BASE = 88
_RESULT_BASE = 96
_JOB_SLOTS = 8


def _rank(rank):
    if not isinstance(rank, int) or not 0 <= rank < MAX_RANKS:
        raise WanreduceError(f"rank {rank!r} is outside 0..{MAX_RANKS - 1}")
    return rank


def host_mac(rank):
    return f"02:57:52:00:00:{_rank(rank):02x}"


def host_ip(rank):
    return f"10.87.82.{_rank(rank)}"


def aggregator_mac(rank):
    return f"02:57:52:01:00:{_rank(rank):02x}"


def aggregator_ip(rank):
    return f"10.87.83.{_rank(rank)}"


def site_group_ip(rank):
    """The multicast group of site ``rank``'s hosts, where its aggregator sends RESULTs by default."""
    return f"239.87.83.{_rank(rank)}"


def _group_ip(base, job, round_index, group, period):
    if not isinstance(period, int) or not 1 <= period <= MAX_PERIOD:
        raise WanreduceError(f"a schedule period of {period!r} rounds is outside 1..{MAX_PERIOD}")
    if not isinstance(group, int) or not 0 <= group < 256:
        raise WanreduceError(f"group id {group!r} is outside 0..255 (one octet of the multicast address)")
    if not isinstance(job, int) or not 0 <= job < 1 << 16:
        raise WanreduceError(f"job id {job!r} does not fit the header's 16 bits")
    if not isinstance(round_index, int) or round_index < 0:
        raise WanreduceError(f"round {round_index!r} is not a round number")
    return f"239.{base + job % _JOB_SLOTS}.{round_index % period}.{group}"


def contrib_group_ip(*, job, round, group, period):
    """Where the members of group ``group`` of ``round`` multicast their CONTRIBs."""
    return _group_ip(_CONTRIB_BASE, job, round, group, period)


def result_group_ip(*, job, round, group, period):
    """Where a root aggregator multicasts the group's RESULTs (root aggregation)."""
    return _group_ip(_RESULT_BASE, job, round, group, period)


def multicast_mac(ip):
    """RFC 1112: ``01:00:5e`` followed by the low 23 bits of the multicast IPv4 address."""
    try:
        octets = [int(x) for x in str(ip).split(".")]
        if len(octets) != 4 or not all(0 <= o < 256 for o in octets):
            raise ValueError
    except ValueError:
        raise WanreduceError(f"{ip!r} is not an IPv4 address") from None
    if not 224 <= octets[0] < 240:
        raise WanreduceError(f"{ip} is not a multicast address (224.0.0.0/4)")
    return f"01:00:5e:{octets[1] & 0x7F:02x}:{octets[2]:02x}:{octets[3]:02x}"
