"""Captures in time: the order a site's aggregator sees frames in, real UDP sending and receiving, and
RESULTs collected back into tensors.

* Timestamps. Captures keep each frame's time through :func:`wanreduce.host.pcap.read_pcap_timed` and
  :func:`wanreduce.host.pcap.write_pcap_timed` (nanosecond resolution: the pacing model spaces 1 KiB frames
  about 85 ns apart at 100 Gbit/s, closer than the microseconds of :func:`wanreduce.host.pcap.write_pcap`).
* Arrival order. A frame sent by rank ``s`` at time ``t`` reaches rank ``R``'s aggregator at
  ``t + one_way_s[s, R]`` (``s`` is the header's ``src``); :func:`arrival_order` sorts by that, ties in
  input order.
* UDP. :func:`~wanreduce.host.frames.udp_datagram` takes a frame's UDP payload without judging its checksums;
  :func:`send_datagrams` sends each frame's UDP payload (the wanreduce header and elements) as one
  datagram with a plain socket, at its time (scaled by ``speed``) or back to back, and measures how late
  each one left; :class:`Receiver` collects datagrams on a port in a thread, bounded in count and time.
* RESULTs. :func:`collect_results` groups a capture's RESULT payloads by (aggregator site, job, round)
  and assembles each into one tensor; :func:`capture_results` does so for a pcap file.
"""

import math
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from ..spec.errors import WanreduceError
from ..spec.protocol import FLAG_LAST, HEADER_BYTES, VERSION, DType, Kind
from .frames import build_frame, dport_of, parse_frame, udp_datagram
from .packet import Payloads, decode_headers, header_of, unpack_payloads
from .pcap import read_pcap_timed
from .protocol import bits_dtype, np_dtype
from .reference import ordered_sum, run_reference

__all__ = [
    "result_payloads",
    "udp_datagram",
    "udp_payloads",
    "sources",
    "arrival_order",
    "parse_udp_url",
    "ReplayStats",
    "send_datagrams",
    "Receiver",
    "datagram_frames",
    "ResultSet",
    "collect_results",
    "capture_results",
    "check_results",
]


def udp_payloads(frames, *, source="capture"):
    """The UDP payload of every frame; a frame that breaks the framing rules (drop codes 1-8) is an error."""
    out = []
    for i, frame in enumerate(frames):
        payload, _, reason = parse_frame(frame, port=dport_of(frame))
        if reason is not None:
            raise WanreduceError(
                f"{source}: frame {i} is not a well-formed IPv4/UDP frame ({reason.name.lower()})"
            )
        out.append(payload)
    return out


def sources(payloads, *, source="capture"):
    """The header ``src`` of every payload (the sending site for a CONTRIB, the aggregator's for a RESULT)."""
    out = np.empty(len(payloads), dtype=np.int64)
    for i, p in enumerate(payloads):
        h = header_of(p)
        if h is None:
            raise WanreduceError(f"{source}: frame {i} is not a wanreduce v{VERSION} packet")
        out[i] = int(h["src"])
    return out


def arrival_order(times, srcs, one_way_s, rank):
    """``(arrival times, order)`` at rank ``rank``: send time plus the one-way delay from each frame's source.

    ``order`` is a stable argsort, so frames arriving at the same instant keep their input order.
    """
    one_way_s = np.asarray(one_way_s, dtype=float)
    n = one_way_s.shape[0]
    if not 0 <= rank < n:
        raise WanreduceError(f"rank {rank} is outside 0..{n - 1} (the WAN has {n} sites)")
    srcs = np.asarray(srcs, dtype=np.int64)
    if len(srcs) and (srcs.min() < 0 or srcs.max() >= n):
        bad = int(srcs[(srcs < 0) | (srcs >= n)][0])
        raise WanreduceError(f"a frame comes from rank {bad}, outside the WAN's 0..{n - 1}")
    arrival = np.asarray(times, dtype=float) + one_way_s[srcs, rank]
    order = np.argsort(arrival, kind="stable")
    return arrival[order], order


def parse_udp_url(text):
    """``udp://HOST:PORT`` → ``(host, port)``."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        port = None
        parts = None
    if (
        parts is None
        or parts.scheme != "udp"
        or not parts.hostname
        or port is None
        or port == 0
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise WanreduceError(f"--to {text!r} is not udp://HOST:PORT with a port in 1..65535")
    return parts.hostname, port


@dataclass(frozen=True)
class ReplayStats:
    """What :func:`send_datagrams` did: lateness is how long after its due time each datagram left (NaN when
    they were sent back to back)."""

    packets: int
    bytes: int
    seconds: float
    late_mean_s: float
    late_p99_s: float
    late_max_s: float

    @property
    def packets_per_s(self):
        return self.packets / self.seconds if self.seconds > 0 else math.inf

    def summary(self):
        text = (
            f"{self.packets} packets, {self.bytes} bytes in {self.seconds:.3f} s "
            f"({self.packets_per_s:,.0f} packets/s)"
        )
        if math.isnan(self.late_mean_s):
            return text + "; back to back, no due times"
        return (
            text + f"; lateness mean {self.late_mean_s * 1e6:.0f} us, "
            f"p99 {self.late_p99_s * 1e6:.0f} us, max {self.late_max_s * 1e6:.0f} us"
        )


def send_datagrams(payloads, times, address, *, speed=1.0, clock=time.perf_counter, sleep=time.sleep):
    """Send each payload as one UDP datagram to ``address`` ``(host, port)``.

    ``times`` are due times in seconds (shifted so the first is 0, divided by ``speed``); ``speed=None``
    sends back to back (every due time is 0). The sender sleeps until each due time, never spins, so a
    datagram leaves at or after it; lateness is measured against the due time.
    """
    if speed is not None and not (speed > 0 and math.isfinite(speed)):
        raise WanreduceError(f"--speed {speed} must be a positive number")
    n = len(payloads)
    due = np.zeros(n)
    if n and speed is not None:
        t = np.asarray(times, dtype=float)
        due = (t - t.min()) / speed
    try:
        infos = socket.getaddrinfo(address[0], address[1], socket.AF_INET, socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        if ":" in address[0]:
            raise WanreduceError(f"{address[0]} is an IPv6 address; replay sends IPv4 only") from None
        raise WanreduceError(f"cannot resolve {address[0]}: {exc.strerror}") from None
    late = np.zeros(n)
    sent_bytes = 0
    target = infos[0][4]
    # not connected: an ICMP "port unreachable" from a receiver that is not listening yet must not end the
    # replay (a connected socket reports it on the next send)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        start = clock()
        for i, p in enumerate(payloads):
            wait = due[i] - (clock() - start)
            if wait > 0:
                sleep(wait)
            now = clock() - start
            try:
                sock.sendto(p, target)
            except OSError as exc:
                raise WanreduceError(
                    f"sending datagram {i} ({len(p)} bytes) to {address[0]}:{address[1]} "
                    f"failed: {exc.strerror or exc}"
                ) from None
            late[i] = max(0.0, now - due[i])
            sent_bytes += len(p)
        elapsed = clock() - start
    if speed is None or not n:  # back to back: nothing is due at any particular time
        lateness = (math.nan, math.nan, math.nan)
    else:
        lateness = (float(late.mean()), float(np.percentile(late, 99)), float(late.max()))
    return ReplayStats(n, sent_bytes, elapsed, *lateness)


class Receiver:
    """Collect UDP datagrams on ``host:port`` (port 0: an ephemeral one, see :attr:`port`) in a thread.

    Stops after ``count`` datagrams or ``timeout`` seconds, whichever comes first. ``datagrams`` holds
    ``(seconds since start, bytes, (sender host, sender port))`` in arrival order. Use as a context manager
    or call :meth:`start` and :meth:`join`.
    """

    def __init__(self, host="127.0.0.1", port=0, *, count, timeout, bufsize=1 << 16):
        if count < 1 or not timeout > 0:
            raise ValueError("A receiver needs a positive datagram count and timeout.")
        self.count, self.timeout = count, timeout
        self.datagrams = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # a deep receive buffer, so a burst sent back to back is not dropped by the kernel
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
        self._sock.bind((host, port))
        self.port = self._sock.getsockname()[1]
        self._bufsize = bufsize
        self._thread = threading.Thread(target=self._run, name="wanreduce-receiver", daemon=True)

    def _run(self):
        start = time.perf_counter()
        deadline = start + self.timeout
        try:
            while len(self.datagrams) < self.count:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._sock.settimeout(left)
                try:
                    data, sender = self._sock.recvfrom(self._bufsize)
                except TimeoutError:
                    break
                self.datagrams.append((time.perf_counter() - start, data, sender))
        finally:
            self._sock.close()

    def start(self):
        self._thread.start()
        return self

    def join(self):
        self._thread.join(self.timeout + 5)
        return self.datagrams

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.join()


@dataclass(frozen=True)
class ResultSet:
    """One aggregator site's RESULTs of one (job, round), assembled: ``values`` is the sum, wire dtype."""

    site: int
    dtype: DType
    job: int
    round: int
    group: int
    bitmap: int
    values: np.ndarray
    chunks: int


def result_payloads(frames):
    """The UDP payloads of the frames that carry one (anything else in a capture: ARP, TCP, ICMP, ... is
    not for us), and how many frames carried none."""
    payloads = [udp_datagram(f) for f in frames]
    return [p for p in payloads if p is not None], sum(p is None for p in payloads)


def collect_results(payloads, *, source="capture"):
    """RESULT payloads → ``(sets, ignored)``: a :class:`ResultSet` per (site, job, round), and how many
    payloads were not RESULTs (other wanreduce packets, or not wanreduce packets at all).

    A RESULT repeated with the same bytes (one frame per destination) counts once; the same chunk with
    different bytes, chunks that disagree on group or bitmap, or a missing chunk (a gap, or no chunk with
    the LAST flag at the end) is an error naming the chunks.
    """
    keyed = {}
    ignored = 0
    for p in payloads:
        h = header_of(p)
        if h is None or h["kind"] != Kind.RESULT:
            ignored += 1
            continue
        site, job, rnd, chunk = int(h["src"]), int(h["job"]), int(h["round"]), int(h["chunk"])
        chunks = keyed.setdefault((site, job, rnd), {})
        if chunk in chunks and chunks[chunk] != bytes(p):
            raise WanreduceError(
                f"{source}: site {site} sent two different RESULTs for job {job} round {rnd} chunk {chunk}"
            )
        chunks[chunk] = bytes(p)
    sets = []
    for (site, job, rnd), chunks in sorted(keyed.items()):
        ordered = [chunks[c] for c in sorted(chunks)]
        headers = decode_headers(np.stack([np.frombuffer(p[:HEADER_BYTES], np.uint8) for p in ordered]))
        where = f"{source}: site {site}'s RESULTs of job {job} round {rnd}"
        if len(set(headers["group"].tolist())) != 1 or len(set(headers["bitmap"].tolist())) != 1:
            raise WanreduceError(f"{where} disagree on the group or the contributors")
        last = max(chunks)
        missing = sorted(set(range(last + 1)) - set(chunks))
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            raise WanreduceError(f"{where} lack chunk{'s' if len(missing) > 1 else ''} {shown} (lost?)")
        if not int(headers["flags"][-1]) & FLAG_LAST:
            raise WanreduceError(
                f"{where} end at chunk {last} without the LAST flag: chunk {last + 1} onward is missing "
                "(lost?)"
            )
        try:
            values, headers = unpack_payloads(Payloads.from_list(ordered))
        except WanreduceError as exc:
            raise WanreduceError(f"{where}: {exc}") from None
        sets.append(
            ResultSet(
                site=site,
                dtype=DType(int(headers["dtype"][0])),
                job=job,
                round=rnd,
                group=int(headers["group"][0]),
                bitmap=int(headers["bitmap"][0]),
                values=values,
                chunks=len(ordered),
            )
        )
    return sets, ignored


def capture_results(path):
    """The RESULTs of the pcap file ``path`` → ``(sets, ignored)`` as :func:`collect_results` gives them,
    ``ignored`` counting the frames that are not RESULTs; a capture with no RESULT is an error."""
    _, frames = read_pcap_timed(path)
    payloads, not_udp = result_payloads(frames)
    sets, ignored = collect_results(payloads, source=path)
    ignored += not_udp
    if not sets:
        raise WanreduceError(f"{path}: holds no RESULT frames ({ignored} other frames)")
    return sets, ignored


def datagram_frames(datagrams, *, port):
    """Received ``(time, bytes, (host, sport))`` datagrams → ``(times, frames)`` for a capture pcap.

    Loopback has no Ethernet; the frames get zero MACs, the datagram's real source and the receiving
    ``port``, and a computed UDP checksum, so the capture reads like one made on a NIC.
    """
    times, frames = [], []
    for t, data, (host, sport) in datagrams:
        times.append(t)
        frames.append(
            build_frame(
                data, src_mac=bytes(6), dst_mac=bytes(6), src_ip=host, dst_ip=host, sport=sport, dport=port
            )
        )
    return np.asarray(times, dtype=float), frames


def check_results(schedule, grads, sets, *, limit=20):
    """Check :class:`ResultSet` s against the numpy model of ``schedule`` run on ``grads`` (one per site).

    A RESULT of site s in round r must be the sum, in the order the schedule lists s's group, of what the
    members held after round r - 1 (:mod:`wanreduce.host.reference`), in the RESULTs' dtype, and carry that
    group's id and bitmap. Returns ``(tensors checked, problems)``, each problem one line, at most
    ``limit`` element mismatches listed per tensor.
    """
    dtypes = {s.dtype for s in sets}
    if len(dtypes) != 1:
        raise WanreduceError("the RESULTs use more than one dtype; verify one run at a time")
    (dtype,) = dtypes
    last = max(s.round for s in sets)
    before = [[np.asarray(g).astype(np_dtype(dtype)).reshape(-1) for g in grads]]
    if last > 0:
        before += run_reference(schedule, grads, dtype=dtype, rounds=last)
    bits = bits_dtype(dtype)
    problems = []
    for s in sets:
        where = f"site {s.site} job {s.job} round {s.round}"
        if s.site >= schedule.n:
            problems.append(f"{where}: the schedule has no site {s.site}")
            continue
        where = f"site {schedule.sites[s.site]} (rank {s.site}) job {s.job} round {s.round}"
        groups = schedule.rounds[s.round % schedule.period]
        gid = next((g for g, members in enumerate(groups) if s.site in members), None)
        if gid is None:
            problems.append(f"{where}: a RESULT, but the site waits in this round")
            continue
        members = groups[gid]
        want_bitmap = sum(1 << m for m in members)
        if s.group != gid or s.bitmap != want_bitmap:
            problems.append(
                f"{where}: group {s.group} bitmap {s.bitmap:#x}, the schedule says group {gid} "
                f"bitmap {want_bitmap:#x}"
            )
            continue
        want = ordered_sum([before[s.round][m] for m in members], dtype).view(bits)
        got = s.values.view(bits)
        if got.size != want.size:
            problems.append(f"{where}: {got.size} elements, the gradients have {want.size}")
            continue
        bad = np.flatnonzero(got != want)
        width = 2 * dtype.size
        for i in bad[:limit]:
            problems.append(
                f"{where} element {i}: got {int(got[i]):#0{width + 2}x}, want {int(want[i]):#0{width + 2}x}"
            )
        if len(bad) > limit:
            problems.append(f"{where}: {len(bad) - limit} more elements differ")
    # a round missing between the first and last one a site reported, where it was in a group, is lost
    for site in sorted({s.site for s in sets if s.site < schedule.n}):
        for job in sorted({s.job for s in sets if s.site == site}):
            seen = {s.round for s in sets if s.site == site and s.job == job}
            for r in range(min(seen), max(seen)):
                if r not in seen and any(site in grp for grp in schedule.rounds[r % schedule.period]):
                    problems.append(
                        f"site {schedule.sites[site]} (rank {site}) job {job} round {r}: "
                        "no RESULTs, though the site is in a group"
                    )
    return len(sets), problems
