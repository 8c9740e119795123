"""Host-model traffic for checking the aggregator core: what one site's FPGA sees from the WAN.

:func:`scenario` makes the CONTRIB packets of the members of this site's groups for several jobs, rounds
and chunks, merges the senders' streams at random (each sender in order, as WAN delays would interleave
them), and mixes in retransmitted duplicates, stale rounds, senders ahead of the window, and malformed
packets of every kind (header faults always; frame faults when ``frames=True``). With ``ordered=True`` the
groups are given as summation orders (rank lists, shuffled, so mostly not ascending); with ``bank_bits=b``
every job's rounds use round banks of ``2**b`` slots (the caller passes ``{job: b for job in jobs}`` to the
golden model and ``config_writes``). The element bits are random with a share of zeros, subnormals,
infinities and NaNs. Everything derives from one seeded ``numpy.random.Generator``.
"""

import numpy as np

from ...host import frames as fr
from ...host.golden import GoldenAggregator, expected_order
from ...host.packet import encode_headers
from ...host.protocol import HEADER_DTYPE, bits_dtype, np_dtype
from ...spec import addressing
from ...spec.protocol import FLAG_LAST, HEADER_BYTES, HEADER_LAYOUT, MAX_RANKS, UDP_PORT, VERSION, DType, Kind

__all__ = [
    "contrib",
    "random_elements",
    "golden_of",
    "scenario",
    "frame_of",
    "HEADER_FAULTS",
    "FRAME_FAULTS",
    "LATE_DROPS",
    "late_drop",
    "evict_drop_scenario",
]


def contrib(*, job, round, chunk, src, group, dtype, elems_bits, flags=0, **override):
    """One CONTRIB payload (bytes) with the given element bit patterns (a uint array of dtype's width)."""
    fields = dict(
        kind=int(Kind.CONTRIB),
        dtype=int(dtype),
        flags=flags,
        job=job,
        round=round,
        chunk=chunk,
        src=src,
        group=group,
        count=len(elems_bits),
        bitmap=1 << src if src < 64 else 0,
    )
    h = encode_headers(1, **{**fields, **override})
    return h.tobytes() + np.asarray(elems_bits, bits_dtype(dtype)).tobytes()


def random_elements(rng, dtype, count):
    """Random bit patterns: mostly ordinary numbers of similar size, some specials."""
    dtype = DType(dtype)
    vals = rng.standard_normal(count).astype(np.float32) * np.float32(4.0)
    bits = vals.astype(np_dtype(dtype)).view(bits_dtype(dtype)).copy()
    special = rng.random(count) < 0.08
    if special.any():
        width = 8 * dtype.size
        raw = rng.integers(0, 1 << width, special.sum(), dtype=np.uint64).astype(bits_dtype(dtype))
        bits[special] = raw
    return bits


HEADER_FAULTS = [
    "magic",
    "version",
    "kind",
    "dtype",
    "flags",
    "reserved",
    "count0",
    "length",
    "result",
    "bitmap",
    "src64",
    "too_large",
    "short",
    "unexpected",
]
FRAME_FAULTS = [
    "truncated",
    "not_ipv4",
    "ip_header",
    "fragment",
    "ip_checksum",
    "not_udp",
    "port",
    "udp_length",
    "udp_checksum",
    "padding",
    "no_udp_checksum",
    "tiny",
]


def _get(p, name, default=None):
    """Header field ``name`` of payload ``p`` (the layout of PROTOCOL.md), or ``default`` when ``p`` ends
    before the field does."""
    pos, size = HEADER_LAYOUT[name]
    return int.from_bytes(p[pos : pos + size], "big") if len(p) >= pos + size else default


def _set(p, name, value):
    """Set header field ``name`` of payload ``p`` (a bytearray) in place."""
    pos, size = HEADER_LAYOUT[name]
    p[pos : pos + size] = int(value).to_bytes(size, "big")


def header_fault(rng, payload, kind, *, chunk_bytes, outsider):
    p = bytearray(payload)
    if kind == "magic":
        _set(p, "magic", _get(p, "magic") ^ 0x4000)
    elif kind == "version":
        _set(p, "version", VERSION + 1)
    elif kind == "kind":
        _set(p, "kind", 5)
    elif kind == "dtype":
        _set(p, "dtype", 3)
    elif kind == "flags":
        _set(p, "flags", _get(p, "flags") | 0x4)
    elif kind == "reserved":
        _set(p, "reserved", _get(p, "reserved") & 0xFF00 | 1)  # its low byte set to 1
    elif kind == "count0":
        _set(p, "count", 0)
    elif kind == "length":
        extra = b"\x11\x22"
        p = (
            p[: len(p) - len(extra)]
            if len(p) > HEADER_BYTES + len(extra) and rng.random() < 0.5
            else p + extra
        )
    elif kind == "result":
        _set(p, "kind", int(Kind.RESULT))
    elif kind == "bitmap":
        # One bit flipped in one byte of the bitmap (which always changes it).
        pos, size = HEADER_LAYOUT["bitmap"]
        p[pos + int(rng.integers(0, size))] ^= 1 << int(rng.integers(0, 8))
    elif kind == "src64":
        _set(p, "src", 64 + int(rng.integers(0, 100)))
    elif kind == "too_large":
        size = DType(_get(p, "dtype")).size
        count = chunk_bytes // size + 1 + int(rng.integers(0, 3))
        _set(p, "count", count)
        p = p[:HEADER_BYTES] + bytes(rng.integers(0, 256, count * size, dtype=np.uint8))
    elif kind == "short":
        p = p[: int(rng.integers(0, HEADER_BYTES))]
    elif kind == "unexpected":
        _set(p, "src", outsider)
        _set(p, "bitmap", 1 << outsider)
    return bytes(p)


_GROUP = addressing.contrib_group_ip(job=0, round=0, group=0, period=1)


def frame_of(payload, *, src, port=UDP_PORT, udp_checksum=True):
    """A CONTRIB frame as ``wanreduce pack`` makes them (PROTOCOL.md host-made frames)."""
    return fr.build_frame(
        payload,
        src_mac=addressing.host_mac(src % MAX_RANKS),
        dst_mac=addressing.multicast_mac(_GROUP),
        src_ip=addressing.host_ip(src % MAX_RANKS),
        dst_ip=_GROUP,
        sport=port,
        dport=port,
        udp_checksum=udp_checksum,
    )


def _shared_damage(f, kind):
    """The damage both fault makers do the same way, to ``f`` (a bytearray) in place: a fragment, a bad IPv4
    checksum, another protocol than UDP, another port. False for any other ``kind``."""
    if kind == "fragment":
        fr.set_field(f, "ip_flags_frag", fr.field(f, "ip_flags_frag") | 0x2000)  # more fragments
        fr.refresh_ip_checksum(f)
    elif kind == "ip_checksum":
        fr.set_field(f, "ip_checksum", fr.field(f, "ip_checksum") ^ 0x0100)
    elif kind == "not_udp":
        fr.set_field(f, "ip_proto", 6)
        fr.refresh_ip_checksum(f)
    elif kind == "port":
        fr.set_field(f, "udp_dport", UDP_PORT + 1)
    else:
        return False
    return True


def frame_fault(rng, frame, kind):
    f = bytearray(frame)
    if _shared_damage(f, kind):
        pass
    elif kind == "truncated":
        f = f[: int(rng.integers(0, len(f)))]
    elif kind == "not_ipv4":
        fr.set_field(f, "ethertype", 0x8100)
    elif kind == "ip_header":
        fr.set_field(f, "ip_vihl", 0x46 if rng.random() < 0.5 else 0x65)
        fr.refresh_ip_checksum(f)
    elif kind == "udp_length":
        fr.set_field(f, "udp_length", fr.field(f, "udp_length") - 2)
    elif kind == "udp_checksum":
        f[-1] ^= 0x01
    elif kind == "padding":
        f += bytes(rng.integers(0, 256, int(rng.integers(1, 80)), dtype=np.uint8))
    elif kind == "no_udp_checksum":
        fr.set_field(f, "udp_checksum", 0)
    elif kind == "tiny":
        f = f[: int(rng.integers(1, 20))]
    return bytes(f)


def golden_of(core, *, rank, jobs, **site):
    """The golden aggregator of a core built with ``core`` (a :class:`~wanreduce.spec.core.CoreConfig`, or
    a built core: its ``slots``, ``members`` and ``chunk_bytes``), serving the site ``rank`` with ``jobs``
    and the rest of ``site`` (addresses, destinations, round banks, as
    :class:`~wanreduce.host.golden.GoldenAggregator` takes them)."""
    return GoldenAggregator(
        rank=rank, jobs=jobs, slots=core.slots, members=core.members, slot_bytes=core.chunk_bytes, **site
    )


def scenario(
    rng,
    core,
    *,
    rank,
    n_packets=300,
    frames=False,
    faults=0.15,
    n_ranks=8,
    rounds=(3, 6),
    ordered=False,
    bank_bits=None,
):
    """A mixed workload for the site of ``rank`` on a core built with ``core`` (its slots, members and
    chunk bytes, as :func:`golden_of` reads them).

    Each job runs ``rounds[0]`` to ``rounds[1] - 1`` rounds. Returns ``(jobs, packets)``: the expected-set
    table to load (job → one period of bitmaps, or of summation orders when ``ordered``) and at most
    ``n_packets`` packets in arrival order (payloads, or frames when ``frames`` is True). With
    ``bank_bits`` (an int, for every job) a period is at most ``slots >> bank_bits`` rounds, so that its
    banks fit the slots.
    """
    slots, members, chunk_bytes = core.slots, core.members, core.chunk_bytes
    if bank_bits is not None and not 0 <= bank_bits <= (slots - 1).bit_length():
        raise ValueError(f"Round banks of 2**{bank_bits} slots do not fit {slots} slots.")
    others = [r for r in range(n_ranks) if r != rank]
    jobs = {}
    for job in rng.choice(1000, size=2, replace=False).tolist():
        period = []
        length = int(rng.integers(1, 4))
        if bank_bits is not None:
            length = min(length, slots >> bank_bits)
        for _ in range(length):
            if rng.random() < 0.15:
                period.append(0)
                continue
            g = int(rng.integers(1, members + 1))
            ranks = [rank] + rng.choice(others, size=g - 1, replace=False).tolist()
            if ordered:
                period.append([int(r) for r in rng.permutation(ranks)])
            else:
                period.append(sum(1 << r for r in ranks))
        jobs[job] = period
    outsider = max(set(range(n_ranks + 2)) - {rank})

    # Each sender's stream, in order: rounds, then chunks.
    streams = {}
    for job, period in jobs.items():
        for round_ in range(int(rng.integers(*rounds))):
            expected, _ = expected_order(period[round_ % len(period)])
            if not expected:
                continue
            dtype = DType(int(rng.integers(0, 3)))
            nchunks = int(rng.integers(1, slots + 3))
            group = int(rng.integers(0, 4))
            for chunk in range(nchunks):
                count = int(rng.integers(1, chunk_bytes // dtype.size + 1))
                for src in range(64):
                    if expected >> src & 1:
                        p = contrib(
                            job=job,
                            round=round_,
                            chunk=chunk,
                            src=src,
                            group=group,
                            dtype=dtype,
                            elems_bits=random_elements(rng, dtype, count),
                            flags=FLAG_LAST if chunk == nchunks - 1 and rng.random() < 0.7 else 0,
                        )
                        streams.setdefault((job, src), []).append((round_ * 64 + chunk, p))
    # Merge the senders' streams in WAN order, with the extras mixed in. A shadow golden aggregator plays
    # the senders' only feedback: a contribution it refused as ahead of the window is retransmitted a little
    # later, as a sender whose chunk never completed would after its timeout.
    shadow = golden_of(
        core, rank=rank, jobs=jobs, bank_bits=None if bank_bits is None else dict.fromkeys(jobs, bank_bits)
    )
    # Arrival time: the chunk's place in the job's sequence plus a WAN jitter of a couple of chunks, and now
    # and then a sender far ahead.
    timed = []
    for stream in streams.values():
        for t, p in stream:
            late = rng.normal(0, 1.5) - (slots + 2 if rng.random() < 0.05 else 0)
            timed.append((t + late, len(timed), p))
    timed.sort()
    queue = [p for *_, p in timed]
    retry = []
    packets = []

    def emit(p):
        packets.append(p)
        before = shadow.counters["ahead_of_window"]
        shadow.feed_payload(p)
        return shadow.counters["ahead_of_window"] > before

    while (queue or retry) and len(packets) < n_packets:
        # Retransmissions back off exponentially and share the link with new packets, so a blocked slot
        # cannot starve the contributions that would unblock it.
        due = [r for r in retry if r[0] <= len(packets)]
        attempt = 0
        if (due and rng.random() < 0.3) or not queue:
            item = min(due or retry, key=lambda r: r[0])
            retry.remove(item)
            _, p, attempt = item
        else:
            p = queue.pop(0)
        if emit(p) and attempt < 8:
            retry.append((len(packets) + int(rng.integers(2, 6)) * 2**attempt, p, attempt + 1))
        if rng.random() < 0.08:  # a retransmission of something already seen (duplicate or stale)
            emit(packets[int(rng.integers(0, len(packets)))])
        if rng.random() < faults:
            kind = HEADER_FAULTS[int(rng.integers(0, len(HEADER_FAULTS)))]
            emit(header_fault(rng, p, kind, chunk_bytes=chunk_bytes, outsider=outsider))
    packets = packets[:n_packets]
    if not frames:
        return jobs, packets
    out = []
    for p in packets:
        src = _get(p, "src", 0)
        f = frame_of(p, src=src, udp_checksum=rng.random() < 0.7)
        out.append(f)
        if rng.random() < faults:  # a damaged copy, so that no contribution is lost for good
            out.append(frame_fault(rng, f, FRAME_FAULTS[int(rng.integers(0, len(FRAME_FAULTS)))]))
    return jobs, out[:n_packets]


#: Ways a CONTRIB with a valid header can fail a rule the slot table learns only at the packet's end, after
#: it has decided on the header (the frame parser's codes 1-8 and ``bad_length`` ride on the last beat), by
#: entry point, each with the code it must be dropped under.
LATE_DROPS = {
    "frame": {
        "truncated": 1,
        "not_ipv4": 2,
        "fragment": 3,
        "ip_checksum": 4,
        "not_udp": 5,
        "port": 6,
        "udp_length": 7,
        "udp_checksum": 8,
        "count_long": 17,
        "count_short": 17,
    },
    "payload": {"count_long": 17, "count_short": 17},
}


#: The bytes the ``truncated`` late drop cuts off a frame: one fp16 element, part of a wider one.
_CUT = 2


def late_drop(payload, kind, *, src, frames):
    """``payload`` (a valid CONTRIB) as a packet that fails the late rule ``kind`` of :data:`LATE_DROPS`: a
    frame when ``frames``, else the bare payload. Deterministic, so that a failure names one packet."""
    if kind in ("count_long", "count_short"):
        h = np.frombuffer(payload[:HEADER_BYTES], HEADER_DTYPE)[0]
        size = DType(int(h["dtype"])).size
        body = payload[HEADER_BYTES:]
        # One element more than ``count`` says, or one fewer: the UDP length is consistent, the count is not.
        body = body + body[:size] if kind == "count_long" else body[:-size]
        payload = payload[:HEADER_BYTES] + body
        return frame_of(payload, src=src) if frames else payload
    if not frames:
        raise ValueError(
            f"The late drop {kind!r} needs a frame; bare payloads have only count_long and count_short."
        )
    f = bytearray(frame_of(payload, src=src))
    if _shared_damage(f, kind):
        pass
    elif kind == "truncated":
        f = f[: len(f) - _CUT]  # shorter than the IPv4 total length: the last element is cut
    elif kind == "not_ipv4":
        fr.set_field(f, "ethertype", 0x86DD)
    elif kind == "udp_length":
        fr.set_field(f, "udp_length", fr.field(f, "udp_length") - 4)
    elif kind == "udp_checksum":
        c = fr.field(f, "udp_checksum") ^ 0x0101  # never 0, which would mean "not computed"
        fr.set_field(f, "udp_checksum", c or 0x0101)
    else:
        raise ValueError(f"Unknown late drop {kind!r}; the kinds are {sorted(LATE_DROPS['frame'])}.")
    return bytes(f)


def evict_drop_scenario(kind, *, frames, slots=2, job=0):
    """A dropped CONTRIB that would evict a live chunk, and the chunk it must leave intact.

    Three sites, one round, the group summed in the order [1, 2, 0]; the site of rank 2, a core of
    ``slots`` slots (chunk c in slot c mod S; with S = 2 chunks 1, 3, 5, 7 below are 1, 1 + S, 1 + 2S,
    1 + 3S). Chunk 1 completes (the slot's shadow), rank 1 contributes [1, 1] to chunk 5 (the slot is live
    with it), rank 1 sends chunk 3 with [1000, 1000] (older than 5, newer than the shadow: it would evict
    5) in a packet that fails the late rule ``kind`` (:data:`LATE_DROPS`; None: a valid packet, a real
    eviction), and ranks 2 and 0 contribute [2, 2] and [4, 4] to chunk 5. A late drop must leave chunk 5's
    RESULT at [7, 7]. Then ranks 2 and 0 send chunk 3 (which completes it after a real eviction) and every
    rank chunk 7, so that the slot's buffers are used again after the packet.

    Returns ``(jobs, packets, rank)``; the core needs 3 members and 8 chunk bytes (fp32 pairs).
    """
    order = (1, 2, 0)
    rank = 2

    def pay(k, src, value):
        chunk = 1 + (k // 2) * slots  # the scenario's chunk k (1, 3, 5, 7), in slot 1
        bits = np.full(2, value, np.float32).view(np.uint32)
        return contrib(job=job, round=0, chunk=chunk, src=src, group=0, dtype=DType.FP32, elems_bits=bits)

    def pkt(chunk, src, value):
        p = pay(chunk, src, value)
        return frame_of(p, src=src) if frames else p

    packets = [pkt(1, r, 10.0 * (r + 1)) for r in order]
    packets.append(pkt(5, 1, 1.0))
    bad = pay(3, 1, 1000.0)
    packets.append(
        (frame_of(bad, src=1) if frames else bad)
        if kind is None
        else late_drop(bad, kind, src=1, frames=frames)
    )
    packets += [pkt(5, 2, 2.0), pkt(5, 0, 4.0)]
    # Chunk 3 from the other two (it completes after a real eviction, and is stale after a drop), then a
    # chunk that claims the slot anew in both cases.
    packets += [pkt(3, r, 100.0 * (r + 1)) for r in (2, 0)]
    packets += [pkt(7, r, 0.5 * (r + 1)) for r in order]
    return {job: [order]}, packets, rank
