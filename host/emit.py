"""What one site sends during a schedule: its CONTRIB frames for every round, timed by the pacing model.

Rank ``R`` takes part in round ``r`` with the tensor it holds after round ``r - 1`` (its own gradients
before round 0), as :func:`wanreduce.host.reference.run_reference` computes it; a round in which ``R``
waits sends nothing. Each chunk goes out **once**, to the multicast address of ``R``'s group in that
round (:func:`wanreduce.spec.addressing.contrib_group_ip`): ``239.<88 + job mod 8>.<round mod P>.<group>``,
from ``R``'s host address ``10.87.82.<R>`` / ``02:57:52:00:00:<R>``, UDP port 47000 both ways. Frames are
returned in the order of their send times, which come from :mod:`wanreduce.host.pacing` (the self-clocked
window: a chunk leaves after the site's own RESULT of the same chunk in the previous round and of the
previous chunk in the same window slot, back to back at one frame time each).

A root-mode schedule (one with a ``lean`` section, ``docs/lean.md``) sends each chunk instead unicast to
the aggregator of its stripe's root (``10.87.83.<root>`` / ``02:57:52:01:00:<root>``), at the schedule's
send offsets and pacing interval (``start_s + offsets_s[R] + i * interval_s``), no earlier than R's own
RESULT of the same chunk in the previous round it took part in, back to back on its link: the send
times of the root-mode co-simulation (:func:`wanreduce.host.wan_lean.simulate_lean`, timing only).

The gradients file (GRADS.npz) holds one array per site, keyed by the site's name in the schedule
(``"AMS"``) or by ``"rank<R>"`` (``"rank0"``); every site needs exactly one, all of the same shape, in
float32, float16 or bfloat16 (ml_dtypes; numpy stores it as a 2-byte void type, read back as bfloat16).
"""

import math
import zipfile
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..spec import addressing
from ..spec.addressing import contrib_group_ip, host_ip, host_mac, multicast_mac
from ..spec.errors import WanreduceError
from ..spec.protocol import UDP_PORT, WIRE_OVERHEAD, DType
from .frames import build_frames
from .pacing import bank_slots_for, timeline
from .packet import MAX_COUNT, pack_tensor
from .protocol import np_dtype
from .reference import run_reference
from .topology import load_topology
from .wan_lean import simulate_lean

__all__ = [
    "load_grads",
    "topology_for",
    "chunk_elems_for",
    "bank_slots_of",
    "site_gbps_of",
    "frame_seconds",
    "Emission",
    "emit_site",
    "emit_sites",
]

# float64 is numpy's default: it is rounded to the wire dtype directly, as `pack` does (never through fp32).
_ACCEPTED = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _rank_key(key):
    if key.startswith("rank") and key[4:].isdigit() and (key[4:] == "0" or not key[4:].startswith("0")):
        return int(key[4:])
    return None


def load_grads(path, schedule):
    """GRADS.npz → one array per site of ``schedule``, in rank order (their own dtype, checked)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise WanreduceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WanreduceError(f"{path}: is a directory, not a .npz file") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise WanreduceError(f"{path}: not a readable .npz file ({str(exc).splitlines()[0]})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise WanreduceError(f"{path}: holds a single array; GRADS must be a .npz with one array per site")
    names = {name: i for i, name in enumerate(schedule.sites)}
    by_rank = {}
    with archive:
        for key in archive.files:
            rank = names.get(key, _rank_key(key))
            if rank is None or rank >= schedule.n:
                raise WanreduceError(
                    f"{path}: array {key!r} is neither a site of the schedule ({', '.join(schedule.sites)}) "
                    f"nor rank0..rank{schedule.n - 1}"
                )
            if rank in by_rank:
                raise WanreduceError(
                    f"{path}: site {schedule.sites[rank]} (rank {rank}) has two arrays, "
                    f"{by_rank[rank][0]!r} and {key!r}"
                )
            try:
                arr = archive[key]
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise WanreduceError(
                    f"{path}: array {key!r} cannot be read ({str(exc).splitlines()[0]})"
                ) from None
            by_rank[rank] = (key, arr)
    missing = [schedule.sites[r] for r in range(schedule.n) if r not in by_rank]
    if missing:
        raise WanreduceError(f"{path}: no gradients for {', '.join(missing)} (key by site name or rank<R>)")
    out = []
    shape = None
    for r in range(schedule.n):
        key, arr = by_rank[r]
        if arr.dtype == np.dtype("V2"):  # how numpy stores ml_dtypes.bfloat16
            arr = arr.view(ml_dtypes.bfloat16)
        if arr.dtype.newbyteorder("=") not in _ACCEPTED:
            raise WanreduceError(
                f"{path}: array {key!r} is {arr.dtype}; gradients must be float64, float32, float16 or "
                "bfloat16"
            )
        if arr.size == 0:
            raise WanreduceError(f"{path}: array {key!r} is empty")
        if shape is None:
            shape, first = arr.shape, key
        elif arr.shape != shape:
            raise WanreduceError(
                f"{path}: array {key!r} has shape {arr.shape}, but {first!r} has {shape}; "
                "every site's gradients must have the same shape"
            )
        out.append(arr.astype(arr.dtype.newbyteorder("="), copy=False))
    return out


def topology_for(name, sites):
    """The WAN ``name`` restricted to ``sites`` (the schedule's, in its order), or a one-line error."""
    full = load_topology(name)
    unknown = [s for s in sites if s not in full.sites]
    if unknown:
        raise WanreduceError(
            f"the schedule's sites {', '.join(unknown)} are not in topology {full.name} "
            f"({', '.join(full.sites)})"
        )
    if tuple(sites) == full.sites:
        return full
    if set(sites) == set(full.sites):
        raise WanreduceError(
            f"the schedule lists the sites of {full.name} in another order "
            f"({', '.join(sites)} against {', '.join(full.sites)}); ranks would not match"
        )
    return load_topology(name, sites=list(sites))


def chunk_elems_for(schedule, dtype, chunk_elems=None):
    """Elements per CONTRIB: ``chunk_elems`` if given, else the schedule's ``chunk_bytes`` / element size."""
    dtype = DType(dtype)
    if chunk_elems is None:
        chunk_bytes = schedule.params.get("chunk_bytes", 1024)
        if not isinstance(chunk_bytes, int) or isinstance(chunk_bytes, bool) or chunk_bytes < dtype.size:
            raise WanreduceError(
                f"the schedule's params.chunk_bytes {chunk_bytes!r} is not a byte count of "
                f"at least one {dtype.label} element"
            )
        chunk_elems = min(chunk_bytes // dtype.size, MAX_COUNT)
    if not 1 <= chunk_elems <= MAX_COUNT:
        raise WanreduceError(f"chunk size {chunk_elems} elements is outside 1..{MAX_COUNT}")
    return chunk_elems


def bank_slots_of(schedule, override=None):
    """Window slots per round bank: ``override``, else params ``bank_slots``, else from memory and chunk."""
    if override is not None:
        return override
    params = schedule.params
    if "bank_slots" in params:
        value = params["bank_slots"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise WanreduceError(f"the schedule's params.bank_slots {value!r} is not a positive whole number")
        return value
    if "memory_bytes" in params and "chunk_bytes" in params:
        for key in ("memory_bytes", "chunk_bytes"):
            value = params[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WanreduceError(f"the schedule's params.{key} {value!r} is not a positive whole number")
        members = max(len(g) for rnd in schedule.rounds for g in rnd)
        slots = bank_slots_for(
            memory_bytes=params["memory_bytes"],
            chunk_bytes=params["chunk_bytes"],
            members=members,
            period=schedule.period,
        )
        if slots < 1:
            raise WanreduceError(
                f"the aggregator memory ({params['memory_bytes']} bytes) holds no round "
                f"bank of {members}-member slots of {params['chunk_bytes']}-byte chunks for "
                f"a {schedule.period}-round period"
            )
        return slots
    raise WanreduceError(
        "the schedule's params give neither bank_slots nor memory_bytes and chunk_bytes; pass --bank-slots"
    )


def site_gbps_of(schedule, topology, rank, override=None):
    """A site's link rate in Gbit/s: ``override``, the topology's access rate, params ``site_gbps``, 100."""
    if override is not None:
        return float(override)
    cap = topology.site_cap_Bps[rank]
    if np.isfinite(cap):
        return float(cap) * 8 / 1e9
    value = schedule.params.get("site_gbps", 100.0)
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not (value > 0 and math.isfinite(value))
    ):
        raise WanreduceError(f"the schedule's params.site_gbps {value!r} is not a positive rate")
    return float(value)


def frame_seconds(chunk_elems, dtype, gbps):
    """Time one full chunk's frame occupies the link: payload + every header, FCS, preamble and gap."""
    return (chunk_elems * DType(dtype).size + WIRE_OVERHEAD) * 8 / (gbps * 1e9)


@dataclass(frozen=True)
class Emission:
    """Rank ``rank``'s frames in send order: ``times[i]`` (seconds from 0) is when ``frames[i]`` leaves."""

    rank: int
    times: np.ndarray
    frames: list
    rounds_sent: int
    n_chunks: int
    elements: int


def emit_site(
    schedule,
    grads,
    *,
    rank,
    dtype,
    one_way_s,
    gbps,
    bank_slots,
    job=0,
    rounds=None,
    chunk_elems=None,
    udp_checksum=True,
):
    """Rank ``rank``'s CONTRIB frames for ``rounds`` rounds (default one period), timed by the pacing model.

    ``grads`` is one array per site (see :func:`load_grads`); the values sent are rounded to ``dtype``.
    ``gbps`` is every site's link rate, or one rate per site (the other sites' links pace their frames,
    and so the RESULTs this site waits for).
    """
    if not isinstance(rank, int) or not 0 <= rank < schedule.n:
        raise WanreduceError(
            f"rank {rank} is outside 0..{schedule.n - 1} (the schedule has {schedule.n} sites)"
        )
    (em,) = emit_sites(
        schedule,
        grads,
        ranks=[rank],
        dtype=dtype,
        one_way_s=one_way_s,
        gbps=gbps,
        bank_slots=bank_slots,
        job=job,
        rounds=rounds,
        chunk_elems=chunk_elems,
        udp_checksum=udp_checksum,
    )
    return em


def emit_sites(
    schedule,
    grads,
    *,
    dtype,
    one_way_s,
    gbps,
    bank_slots,
    ranks=None,
    job=0,
    rounds=None,
    chunk_elems=None,
    udp_checksum=True,
    log=None,
):
    """:func:`emit_site` for several ranks (default: all) at the cost of one model run and one timeline.

    ``log``, if given, is told each step as it starts (one line of text): the pacing model, the reference
    sums, each rank's frames."""
    log = log or (lambda text: None)
    dtype = DType(dtype)
    ranks = list(range(schedule.n)) if ranks is None else list(ranks)
    for rank in ranks:
        if not isinstance(rank, int) or not 0 <= rank < schedule.n:
            raise WanreduceError(
                f"rank {rank} is outside 0..{schedule.n - 1} (the schedule has {schedule.n} sites)"
            )
    rounds = schedule.period if rounds is None else rounds
    if rounds < 1:
        raise WanreduceError(f"{rounds} rounds: emit at least one")
    if len(grads) != schedule.n:
        raise WanreduceError(
            f"the schedule has {schedule.n} sites but {len(grads)} gradient arrays were given"
        )
    chunk_elems = chunk_elems_for(schedule, dtype, chunk_elems)
    wire = np_dtype(dtype)
    for i, g in enumerate(grads):
        # the same overflow check the packer applies, for every site (their sums feed rank's later rounds)
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.asarray(g).astype(wire)
        bad = np.isfinite(np.asarray(g, np.float64)) & ~np.isfinite(cast.astype(np.float64))
        if bad.any():
            raise WanreduceError(
                f"site {schedule.sites[i]}'s gradient element "
                f"{int(np.flatnonzero(bad)[0])} is too large for {dtype.label} and would "
                "become infinity"
            )
    elements = int(np.asarray(grads[0]).size)
    n_chunks = -(-elements // chunk_elems)
    log(
        f"pacing model of {rounds} round{'s' if rounds != 1 else ''}, "
        f"{n_chunks} chunk{'s' if n_chunks != 1 else ''} each"
    )
    rates = np.broadcast_to(np.asarray(gbps, dtype=float), (schedule.n,))
    frame_s = np.array([frame_seconds(chunk_elems, dtype, r) for r in rates])
    if schedule.lean is None:
        plan = timeline(
            schedule, one_way_s, n_chunks=n_chunks, frame_s=frame_s, bank_slots=bank_slots, rounds=rounds
        )
    else:
        # The root-mode pacing: offsets and intervals from the schedule, links and data as in the co-sim.
        plan = simulate_lean(
            schedule,
            one_way_s=one_way_s,
            site_Bps=rates * 1e9 / 8,
            chunk_elems=chunk_elems,
            elements=elements,
            dtype=dtype,
            rounds=rounds,
        )
    # what a site holds before round r is what the reference holds after round r - 1
    before = [[np.asarray(g).astype(wire).reshape(-1) for g in grads]]
    if rounds > 1:
        log(f"reference sums of {rounds - 1} rounds")
        before += run_reference(schedule, grads, dtype=dtype, rounds=rounds - 1)

    def frames_of(rank):
        log(f"frames of rank {rank}")
        return _frames_of(
            schedule,
            before,
            plan,
            rank=rank,
            dtype=dtype,
            job=job,
            rounds=rounds,
            chunk_elems=chunk_elems,
            n_chunks=n_chunks,
            elements=elements,
            udp_checksum=udp_checksum,
        )

    return [frames_of(rank) for rank in ranks]


def _frames_of(
    schedule, before, plan, *, rank, dtype, job, rounds, chunk_elems, n_chunks, elements, udp_checksum
):
    times, frames, sent = [], [], 0
    for r in range(rounds):
        groups = schedule.rounds[r % schedule.period]
        gid = next((g for g, members in enumerate(groups) if rank in members), None)
        if gid is None:
            continue
        lean = schedule.lean
        if lean is not None and not lean["rounds"][r % schedule.period]["groups"][gid]["stripes"]:
            continue  # a group of one in root mode: nothing to aggregate, nothing sent
        send = np.asarray(plan.send[rank, r, :n_chunks], dtype=float)
        if np.isnan(send).any():
            raise WanreduceError(
                f"the pacing model gives rank {rank} no send time in round {r}, where it is in group {gid}"
            )
        if schedule.lean is None:
            dst_ip = contrib_group_ip(job=job, round=r, group=gid, period=schedule.period)
            # (first chunk, chunks, destination IP, destination MAC): the whole tensor to the group's address
            parts = [(0, n_chunks, dst_ip, multicast_mac(dst_ip))]
        else:
            stripes = schedule.lean["rounds"][r % schedule.period]["groups"][gid]["stripes"]
            parts = [
                (
                    st["first_chunk"],
                    st["chunks"],
                    addressing.aggregator_ip(st["root"]),
                    addressing.aggregator_mac(st["root"]),
                )
                for st in stripes
            ]
        for first, count, dst_ip, dst_mac in parts:
            piece = before[r][rank][first * chunk_elems : (first + count) * chunk_elems]
            payloads = pack_tensor(
                piece,
                dtype=dtype,
                rank=rank,
                job=job,
                round=r,
                group=gid,
                chunk_elems=chunk_elems,
                first_chunk=first,
                last=first + count == n_chunks,
            )
            row = first
            for block in payloads.blocks:
                framed = build_frames(
                    block,
                    src_mac=host_mac(rank),
                    dst_mac=dst_mac,
                    src_ip=host_ip(rank),
                    dst_ip=dst_ip,
                    sport=UDP_PORT,
                    dport=UDP_PORT,
                    udp_checksum=udp_checksum,
                )
                frames.extend(f.tobytes() for f in framed)
                times.extend(send[row : row + len(block)])
                row += len(block)
        sent += 1
    times = np.asarray(times, dtype=float)
    order = np.argsort(times, kind="stable")
    return Emission(
        rank=rank,
        times=times[order],
        frames=[frames[i] for i in order],
        rounds_sent=sent,
        n_chunks=n_chunks,
        elements=elements,
    )
