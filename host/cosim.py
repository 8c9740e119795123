"""Co-simulation of every site's aggregator under a sync schedule, over the WAN's delays.

Each round, every member of every group multicasts its current tensor as CONTRIB frames; the frames reach
each member's aggregator in the order the WAN delivers them (sender start + serialisation at the sending
rate + one-way delay), so every member sees its own interleaving. Each aggregator turns complete chunks
into RESULTs; a site's new value is its group's RESULT divided by the group size, as the hosts do.

The aggregator is pluggable (``factory``): the golden model today, the Verilated core for one or all sites
in the end-to-end issue, with nothing else changing.
"""

import dataclasses

import numpy as np

from ..spec.schedfile import expected_bitmap
from .frames import build_frames, parse_frame
from .golden import Destination, GoldenAggregator
from .packet import pack_tensor, unpack_payloads
from .protocol import UDP_PORT, DType, bits_dtype, np_dtype

__all__ = ["RoundReport", "CosimReport", "site_addresses", "golden_factory", "run_schedule"]


@dataclasses.dataclass
class RoundReport:
    round: int
    groups: list          # list of sorted rank lists
    identical: list       # per group: every member's RESULT bits equal
    results: int          # RESULT payloads emitted in the round, all sites
    drops: dict           # counter -> count, all sites, nonzero only
    finish_s: float       # when the last CONTRIB of the round reached its last member


@dataclasses.dataclass
class CosimReport:
    rounds: list
    values: list          # per site, the tensor after the last round (wire dtype)
    exact: np.ndarray     # float64 average of the initial tensors
    scale: np.ndarray     # float64 average of their absolute values: the natural unit of summation error


def site_addresses(rank):
    """(MAC, IPv4) of site ``rank``'s hosts, and (MAC, IPv4) of its aggregator, in the simulation."""
    return (f"02:57:52:00:00:{rank:02x}", f"10.87.82.{rank}"), (f"02:57:52:00:01:{rank:02x}",
                                                              f"10.87.83.{rank}")


def golden_factory(*, rank, jobs, slots, members, slot_bytes):
    """The golden aggregator of site ``rank``, sending its RESULTs to the site's hosts."""
    (host_mac, host_ip), (mac, ip) = site_addresses(rank)
    return GoldenAggregator(rank=rank, jobs=jobs, slots=slots, members=members, slot_bytes=slot_bytes,
                            mac=mac, ip=ip, destinations=[Destination(host_mac, host_ip, UDP_PORT)])


def run_schedule(schedule, tensors, *, one_way_s, dtype=DType.FP32, chunk_elems=256, rate_Bps=12.5e9,
                 periods=1, factory=golden_factory, seed=0):
    """Run ``periods`` periods of ``schedule`` over ``tensors`` (one float array per site); a report.

    ``one_way_s[i, j]`` is the one-way delay from site i to site j. Every site's reorder buffer has one slot
    per chunk of the tensor, so no contribution is dropped for the window; the drops the report shows are
    therefore the protocol's other rules, and should be none.
    """
    dtype = DType(dtype)
    n = schedule.n
    if len(tensors) != n:
        raise ValueError(f"The schedule has {n} sites but {len(tensors)} tensors were given.")
    values = [np.asarray(t).astype(np_dtype(dtype)).reshape(-1) for t in tensors]
    exact = np.mean([v.astype(np.float64) for v in values], axis=0)
    scale = np.mean([np.abs(v.astype(np.float64)) for v in values], axis=0)
    n_chunks = -(-values[0].size // chunk_elems)
    gmax = max(len(g) for rnd in schedule.rounds for g in rnd)
    aggs = [factory(rank=s, jobs={0: [expected_bitmap(schedule, s, r) for r in range(schedule.period)]},
                    slots=n_chunks, members=gmax, slot_bytes=chunk_elems * dtype.size) for s in range(n)]
    rng = np.random.default_rng(seed)
    chunk_time = (chunk_elems * dtype.size + 32 + 42) / rate_Bps
    reports = []
    for r in range(schedule.period * periods):
        groups = [list(g) for g in schedule.rounds[r % schedule.period]]
        before = [dict(a.counters) for a in aggs]
        # Each sender's frames, built once: the same multicast copy reaches every member.
        frames = {}
        for g_id, g in enumerate(groups):
            for s in g:
                (mac, ip), _ = site_addresses(s)
                payloads = pack_tensor(values[s], dtype=dtype, rank=s, round=r, group=g_id,
                                       chunk_elems=chunk_elems)
                group_mac, group_ip = f"01:00:5e:57:52:{g_id:02x}", f"239.87.82.{g_id}"
                frames[s] = [row.tobytes() for b in payloads.blocks for row in build_frames(
                    b, src_mac=mac, dst_mac=group_mac, src_ip=ip, dst_ip=group_ip, sport=UDP_PORT,
                    dport=UDP_PORT)]
        sums, finish = {}, 0.0
        for g in groups:
            for m in g:
                # Arrival time of chunk k from sender j at m; a small seeded jitter breaks exact ties the
                # way queueing does, so members with equal delays still see different orders.
                events = [(k * chunk_time + one_way_s[j][m] + rng.uniform(0, chunk_time / 4), j, k)
                          for j in g for k in range(n_chunks)]
                events.sort()
                finish = max(finish, events[-1][0])
                out = []
                for _, j, k in events:
                    out += aggs[m].feed_frame(frames[j][k])
                if len(out) != n_chunks:
                    sums[m] = None  # a chunk never completed; the group is reported as not identical
                    continue
                sums[m], _ = unpack_payloads([parse_frame(f, port=UDP_PORT)[0] for f in out], dtype=dtype)
        identical = []
        for g in groups:
            bits = [sums[m].view(bits_dtype(dtype)) if sums[m] is not None else None for m in g]
            identical.append(all(b is not None and np.array_equal(b, bits[0]) for b in bits))
            for m in g:
                if sums[m] is not None:
                    with np.errstate(all="ignore"):
                        values[m] = (sums[m] / np_dtype(dtype).type(len(g))).astype(np_dtype(dtype))
        drops = {}
        for a, b in zip(aggs, before, strict=True):
            for k, v in a.counters.items():
                if k not in ("results", "frames_in") and v != b[k]:
                    drops[k] = drops.get(k, 0) + v - b[k]
        results = sum(a.counters["results"] - b["results"] for a, b in zip(aggs, before, strict=True))
        reports.append(RoundReport(r, groups, identical, results, drops, finish))
    return CosimReport(reports, values, exact, scale)

