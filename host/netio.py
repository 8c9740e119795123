"""UDP sockets for the aggregator daemon and the host transport, and a user-space WAN in front of them.

:func:`open_socket` makes the one socket each process uses: bound to the wanreduce port on the interface
whose IPv4 address it is given (loopback by default), multicast sent out of that interface and looped back
to other sockets of the same machine, and only the multicast groups this socket joined delivered to it
(``IP_MULTICAST_ALL`` off: Linux otherwise hands every socket on the port every group any socket joined).
Every failure (no such interface, port in use, a group that cannot be joined) is one
:class:`~wanreduce.spec.errors.WanreduceError` line.

:class:`WanEmulator` is the wide-area network between sites, applied where a datagram is received: each
datagram from site ``s`` waits the one-way delay from ``s`` to the receiving site, and seeded faults lose,
copy, reorder or corrupt it (the same fault model as :class:`wanreduce.host.wan.Faults`). Emulating on the
receiving side lets one multicast datagram take a different delay to each member, which is what a WAN does
and what a single loopback interface cannot.
"""

import array
import errno
import fcntl
import heapq
import itertools
import socket
import struct
import time

import numpy as np

from ..spec.errors import WanreduceError

__all__ = [
    "open_socket",
    "interface_name",
    "join",
    "WanEmulator",
    "drain",
    "drain_stamped",
    "enable_timestamps",
    "RECV_BYTES",
]

#: Largest datagram read: a jumbo frame's IPv4 payload with room to spare.
RECV_BYTES = 16384
# Linux socket options the socket module does not name.
_IP_MULTICAST_ALL = 49
_SIOCGIFADDR = 0x8915
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
#: Receive and send buffer asked for: a window of 256 8 KiB chunks from every member of a nine-site group
#: (18 MiB), with room. Where the process may not pass net.core.rmem_max / wmem_max, it gets those.
SOCKET_BUFFER = 32 << 20


def interface_name(address):
    """The name of the interface that holds IPv4 ``address`` (``"lo"`` for 127.0.0.1)."""
    try:
        packed = socket.inet_aton(address)
    except OSError:
        raise WanreduceError(f"--interface {address!r} is not an IPv4 address") from None
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                got = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, req)
            except OSError:
                continue  # no IPv4 address on that interface
            if got[20:24] == packed:
                return name
    finally:
        probe.close()
    raise WanreduceError(f"no interface of this machine has the address {address}")


def open_socket(*, interface="127.0.0.1", port, groups=(), buffer_bytes=SOCKET_BUFFER):
    """A non-blocking UDP socket on ``port`` of the interface with address ``interface``, joined to
    ``groups`` (IPv4 multicast addresses); its multicast leaves by that interface, TTL 1."""
    name = interface_name(interface)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, name.encode())
        sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        for opt, forced in ((socket.SO_RCVBUF, _SO_RCVBUFFORCE), (socket.SO_SNDBUF, _SO_SNDBUFFORCE)):
            try:  # past net.core.rmem_max/wmem_max where the process may (CAP_NET_ADMIN)
                sock.setsockopt(socket.SOL_SOCKET, forced, buffer_bytes)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise WanreduceError(
                    f"UDP port {port} is in use by a process that does not share it (SO_REUSEADDR)"
                ) from None
            raise WanreduceError(f"cannot bind UDP port {port} on {name}: {exc.strerror}") from None
        for group in groups:
            join(sock, group, interface)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def join(sock, group, interface):
    """Join multicast ``group`` on the interface with address ``interface``; one line if it cannot be."""
    try:
        mreq = socket.inet_aton(group) + socket.inet_aton(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    except OSError as exc:
        raise WanreduceError(
            f"cannot join multicast group {group} on {interface}: {exc.strerror or exc}"
        ) from None


def enable_timestamps(sock):
    """Have the kernel stamp every datagram the socket receives (read with :func:`drain_stamped`)."""
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)


def drain_stamped(sock, limit=256):
    """Like :func:`drain`, as ``[(monotonic seconds the kernel queued it, datagram), ...]``.

    The stamp is taken when the datagram reached the socket's queue, not when this process got round to
    reading it, so a busy receiver does not reorder what the emulated WAN delays (on loopback the two are
    the sender's send time to within microseconds)."""
    out = []
    recvmsg = sock.recvmsg
    space = socket.CMSG_SPACE(16)
    try:
        for _ in range(limit):
            data, anc, _, _ = recvmsg(RECV_BYTES, space)
            out.append((data, anc))
    except BlockingIOError:
        pass
    if not out:
        return []
    offset = time.monotonic() - time.time()
    stamped = []
    for data, anc in out:
        t = None
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                t = sec + nsec * 1e-9 + offset
        stamped.append((time.monotonic() if t is None else t, data))
    return stamped


def drain(sock, limit=256):
    """Up to ``limit`` datagrams that are waiting on a non-blocking socket, without blocking."""
    out = []
    recv = sock.recv
    try:
        for _ in range(limit):
            out.append(recv(RECV_BYTES))
    except BlockingIOError:
        pass
    return out


class WanEmulator:
    """Delays and faults between sites, applied to what one site receives.

    ``delay_s[src]`` is the one-way delay from site ``src`` to this one (seconds). ``loss``, ``dup`` and
    ``corrupt`` are probabilities per datagram; ``reorder`` adds to each copy an extra delay uniform in
    ``[0, rtt)`` of its pair (``rtt_s[src]``, default twice the one-way delay), so copies overtake each other.
    A duplicate arrives up to one round trip after the first copy. All draws come from one
    ``numpy.random.default_rng(seed)``, in arrival order. Latency: the pair's delay; no back-pressure (the
    queue is unbounded, as a WAN link's propagation is).
    """

    def __init__(self, delay_s, *, rtt_s=None, loss=0.0, dup=0.0, reorder=False, corrupt=0.0, seed=0):
        for name, p in (("loss", loss), ("dup", dup), ("corrupt", corrupt)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"The {name} probability must be in [0, 1), not {p}.")
        self.delay = np.asarray(delay_s, float)
        self.rtt = 2 * self.delay if rtt_s is None else np.asarray(rtt_s, float)
        self.loss, self.dup, self.reorder, self.corrupt = loss, dup, bool(reorder), corrupt
        self.faulty = bool(loss or dup or reorder or corrupt)
        self.rng = np.random.default_rng(seed)
        self.queue = []
        self._seq = itertools.count()
        self.stats = {"lost": 0, "duplicated": 0, "corrupted": 0}

    def admit(self, now, src, data):
        """A datagram from site ``src`` received at ``now`` (monotonic seconds)."""
        if not 0 <= src < len(self.delay):
            heapq.heappush(self.queue, (now, next(self._seq), data, False))
            return
        delay = float(self.delay[src])
        if not self.faulty:
            heapq.heappush(self.queue, (now + delay, next(self._seq), data, False))
            return
        rng, rtt = self.rng, float(self.rtt[src])
        copies = 1
        if rng.random() < self.dup:
            copies = 2
            self.stats["duplicated"] += 1
        for k in range(copies):
            if self.loss and rng.random() < self.loss:
                self.stats["lost"] += 1
                continue
            extra = rng.uniform(0.0, rtt) if self.reorder and rtt > 0 else 0.0
            if k:
                extra += rng.uniform(0.0, rtt) if rtt > 0 else 0.0
            corrupt = bool(self.corrupt and rng.random() < self.corrupt)
            if corrupt:
                self.stats["corrupted"] += 1
            heapq.heappush(self.queue, (now + delay + extra, next(self._seq), data, corrupt))

    def due(self, now):
        """``[(datagram, corrupted), ...]`` whose time has come, in delivery order."""
        out = []
        q = self.queue
        while q and q[0][0] <= now:
            _, _, data, corrupt = heapq.heappop(q)
            out.append((data, corrupt))
        return out

    def next_due(self):
        """When the next datagram is due (monotonic seconds), or None."""
        return self.queue[0][0] if self.queue else None


def flip_bit(data, rng):
    """``data`` with one uniformly drawn bit flipped (a corrupted copy on the wire)."""
    buf = array.array("B", data)
    bit = int(rng.integers(len(buf) * 8))
    buf[bit // 8] ^= 1 << (bit % 8)
    return buf.tobytes()
