"""Batched UDP system calls: many datagrams per ``recvmmsg``/``sendmmsg`` call, into and out of numpy rows.

Python's socket module reads and writes one datagram per call, and at 8 KiB a datagram the call itself
costs as much as the work on it. :class:`Receiver` reads up to ``batch`` datagrams per ``recvmmsg(2)``
straight into the rows of a preallocated ``(batch, row_bytes)`` uint8 array and returns how many arrived
and their lengths; :class:`Sender` hands ``sendmmsg(2)`` a list of byte ranges of numpy arrays, all to
one destination. Both call libc through ctypes; the message headers are ctypes arrays viewed as numpy
structured arrays, so a batch's addresses and lengths are filled with one vectorised assignment each.
Where libc has no such calls (not Linux), both fall back to one ``recv_into``/``sendto`` per datagram with
the same results (:data:`HAVE_MMSG` says which is used). Where the native loop builds
(:mod:`wanreduce.host.fastio`), the receiver reads with it and UDP GRO instead (a GSO run of datagrams
is one buffer from sender to receiver), and ``send_parts`` cuts its GSO runs in C: the same datagrams,
rows, lengths and order.

Back-pressure: both are non-blocking; a receive returns what is queued (possibly nothing), a send returns
how many of the datagrams the socket's buffer took (the caller keeps the rest).
"""

import ctypes
import ctypes.util
import errno
import os
import socket

import numpy as np

from . import fastio

__all__ = ["Receiver", "Sender", "HAVE_MMSG"]

_MSG_DONTWAIT = 0x40
_MSG_TRUNC = 0x20  # on receive: report a datagram's real length even when the row holds only its start
_UDP_SEGMENT = 103  # Linux 4.18: the socket cuts a long send into datagrams of this size (UDP GSO)
#: A UDP send carries at most this many bytes, and GSO cuts it into at most this many datagrams.
_UDP_MAX_BYTES, _GSO_MAX_SEGS = 65507, 64


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.c_void_p),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint32)]


class _SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_ushort),
        ("port", ctypes.c_uint16),
        ("addr", ctypes.c_uint8 * 4),
        ("zero", ctypes.c_uint8 * 8),
    ]


def _libc():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        recv, send = lib.recvmmsg, lib.sendmmsg
    except (OSError, AttributeError):
        return None
    recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    send.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    recv.restype = send.restype = ctypes.c_int
    return recv, send


_CALLS = _libc()
#: Whether ``recvmmsg``/``sendmmsg`` are used (else one system call per datagram).
HAVE_MMSG = _CALLS is not None


def _mmsg(call, sock, msgs, count, flags, *rest):
    """``recvmmsg`` or ``sendmmsg`` (``call``) of ``count`` messages of ``msgs`` on ``sock``: how many it
    moved, 0 where the socket would block or a signal came first (the caller tries again later)."""
    got = call(sock.fileno(), ctypes.addressof(msgs), count, flags, *rest)
    if got < 0:
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
            return 0
        raise OSError(err, os.strerror(err))
    return got


def _np_dtype(struct, base=0):
    """A numpy structured dtype with the ctypes structure's own field offsets (nested ones flattened)."""
    names, formats, offsets = [], [], []
    for name, kind in struct._fields_:
        pos = base + getattr(struct, name).offset
        if issubclass(kind, ctypes.Structure):
            inner = _np_dtype(kind, pos)
            names += inner.names
            formats += [inner.fields[f][0] for f in inner.names]
            offsets += [inner.fields[f][1] for f in inner.names]
        else:
            names.append(name)
            formats.append(np.dtype(kind))
            offsets.append(pos)
    size = ctypes.sizeof(struct)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def _headers(n, parts=1):
    """``n`` message headers and ``parts`` iovecs per message (message ``i`` gathers iovecs
    ``i * parts`` onwards), as ctypes arrays and numpy views."""
    msgs = (_Mmsghdr * n)()
    iovs = (_Iovec * (n * parts))()
    m = np.frombuffer(msgs, _np_dtype(_Mmsghdr))
    v = np.frombuffer(iovs, _np_dtype(_Iovec))
    m["iov"] = ctypes.addressof(iovs) + np.arange(n, dtype=np.uint64) * (parts * ctypes.sizeof(_Iovec))
    m["iovlen"] = parts
    return msgs, m, iovs, v


class Receiver:
    """Reads up to ``batch`` datagrams of at most ``row_bytes`` bytes per call into :attr:`rows`.

    ``recv(sock)`` → how many datagrams arrived (0: none was queued); their lengths are
    ``lengths[:n]`` and their bytes ``rows[i, :lengths[i]]``, valid until the next call. A datagram longer
    than a row keeps only its first ``row_bytes`` bytes, but ``lengths`` has its real length (Linux's
    ``MSG_TRUNC``), so header rules on the length judge it as they would the whole datagram.

    ``native`` (default: when :func:`wanreduce.host.fastio.library` builds) reads with the native loop and
    UDP GRO, which it turns on for the socket at its first read (nothing else may read that socket then);
    ``segment`` is the datagram size expected, so that runs of them land in their rows without a copy.
    The rows, lengths and order are the same either way. ``head_bytes``: :attr:`heads` holds each row's
    first ``head_bytes`` bytes again, packed, for checks of a whole batch of headers.
    """

    def __init__(self, *, batch=256, row_bytes=16384, mmsg=None, native=None, segment=None, head_bytes=0):
        if batch < 1 or row_bytes < 1:
            raise ValueError("The batch and the row size must be positive.")
        self.batch, self.row_bytes = int(batch), int(row_bytes)
        self.rows = np.zeros((self.batch, self.row_bytes), np.uint8)
        self.rows.fill(0)  # its pages now, not in the first calls
        self.lengths = np.zeros(self.batch, np.int64)
        self.head_bytes = min(int(head_bytes), self.row_bytes)
        self.heads = np.zeros((self.batch, self.head_bytes), np.uint8)
        self.mmsg = HAVE_MMSG if mmsg is None else bool(mmsg) and HAVE_MMSG
        self.segment = min(int(segment or self.row_bytes), self.row_bytes)
        # Addresses for the native calls, taken once (numpy's ``.ctypes`` costs microseconds a call).
        self._addrs = (self.rows.ctypes.data, self.lengths.ctypes.data, self.heads.ctypes.data)
        self._lib = fastio.library() if native is None or native else None
        if native and self._lib is None and os.environ.get(fastio.ENV) != "0":
            raise ValueError("The native receive loop was asked for but cannot be built here.")
        self._native = None  # its state, made at the first read
        self._gro_fd = None
        self._views = [memoryview(row) for row in self.rows]
        if self.mmsg:
            self._msgs, self._m, self._iovs, v = _headers(self.batch)
            v["base"] = self.rows.ctypes.data + np.arange(self.batch, dtype=np.uint64) * self.row_bytes
            v["len"] = self.row_bytes

    @property
    def native(self):
        """Whether reads go through the native loop."""
        return self._lib is not None

    def __del__(self):
        lib, state = getattr(self, "_lib", None), getattr(self, "_native", None)
        if lib is not None and state:
            lib.udpio_free(state)

    def attach(self, sock):
        """Make ``sock`` the socket this receiver reads (turning UDP GRO on for the native loop), before
        the first datagram comes: until then a sender's GSO runs are cut apart for this socket, at the
        sender's cost. :meth:`recv` attaches a socket it has not read before itself."""
        if self._lib is None:
            return
        fd = sock.fileno()
        if fd == self._gro_fd:
            return
        if self._native:  # what it parked came from another socket
            self._lib.udpio_free(self._native)
        self._native = self._lib.udpio_new()
        if not self._native or self._lib.udpio_gro(fd) < 0:
            self._lib = None  # no GRO on this kernel: recvmmsg reads as many a call
            return
        self._gro_fd = fd

    def recv(self, sock, limit=None):
        limit = self.batch if limit is None else min(limit, self.batch)
        if self._lib is not None:
            fd = sock.fileno()
            if fd != self._gro_fd:
                self.attach(sock)
                if self._lib is None:
                    return self.recv(sock, limit)
            rows, lengths, heads = self._addrs
            got = self._lib.udpio_recv(
                self._native,
                fd,
                rows,
                self.row_bytes,
                limit,
                lengths,
                self.segment,
                heads if self.head_bytes else None,
                self.head_bytes,
            )
            if got < 0:
                raise OSError(-got, os.strerror(-got))
            return got
        n = self._recv_python(sock, limit)
        if self.head_bytes and n:
            self.heads[:n] = self.rows[:n, : self.head_bytes]
        return n

    def _recv_python(self, sock, limit):
        if not self.mmsg:
            n = 0
            try:
                while n < limit:
                    self.lengths[n] = sock.recv_into(self._views[n], 0, _MSG_TRUNC)
                    n += 1
            except BlockingIOError:
                pass
            return n
        flags = _MSG_DONTWAIT | _MSG_TRUNC
        got = _mmsg(_CALLS[0], sock, self._msgs, limit, flags, None)
        self.lengths[:got] = self._m["len"][:got]
        return got


def _too_long(segment):
    return f"A datagram is longer than the {segment}-byte segment this sender cuts."


class Sender:
    """Sends byte ranges of numpy arrays as datagrams to one ``(address, port)``, up to ``batch`` a call."""

    def __init__(self, dest, *, batch=256, mmsg=None, segment=None, native=None):
        self.dest = (str(dest[0]), int(dest[1]))
        self.batch = int(batch)
        self.mmsg = HAVE_MMSG if mmsg is None else bool(mmsg) and HAVE_MMSG
        # send_parts through the native loop (its runs cut in C rather than with numpy): same datagrams.
        self._lib = fastio.library() if (native is None or native) and self.mmsg else None
        self._gather = None  # the two-part message headers of send_parts, made on its first use
        #: send_parts' datagrams of exactly ``segment`` bytes go up to ``per_send`` in one send (UDP GSO:
        #: the kernel cuts them apart, a system call's and a route's work per send, not per datagram).
        self.segment = int(segment) if segment and self.mmsg else None
        self.per_send = min(_GSO_MAX_SEGS, _UDP_MAX_BYTES // self.segment) if self.segment else 1
        if self.per_send < 2:
            self.segment, self.per_send = None, 1
        self._gso_socks = set()
        self._runs = None  # the message headers of GSO sends, ``2 * per_send`` iovecs each
        self._heads = self._scratch = None  # the native sends' cached addresses and scratch columns
        if self.mmsg:
            self._addr = _SockaddrIn(socket.AF_INET, socket.htons(self.dest[1]))
            self._addr_at = ctypes.addressof(self._addr)
            self._addr.addr[:] = socket.inet_aton(self.dest[0])
        self._single = None  # the one-part message headers of send, made on its first use

    def _named(self, parts):
        msgs, m, iovs, v = _headers(self.batch, parts)
        m["name"] = ctypes.addressof(self._addr)
        m["namelen"] = ctypes.sizeof(_SockaddrIn)
        return msgs, m, iovs, v

    def send_parts(self, sock, heads, head_starts, head_len, addrs, lengths):
        """Datagram ``i`` is ``head_len`` bytes of the C-contiguous array ``heads`` from byte
        ``head_starts[i]`` followed by ``lengths[i]`` bytes at memory address ``addrs[i]`` (a payload left
        where it is, in an array the caller keeps alive): no datagram is assembled in a buffer first.
        Returns how many were sent (fewer when the socket's buffer is full)."""
        head_starts = np.ascontiguousarray(head_starts, np.int64)
        addrs = np.ascontiguousarray(addrs, np.uint64)
        lengths = np.ascontiguousarray(lengths, np.int64)
        total = len(head_starts)
        if not self.mmsg:
            flat = heads.reshape(-1).view(np.uint8)
            for i in range(total):
                s = int(head_starts[i])
                data = flat[s : s + head_len].tobytes() + ctypes.string_at(int(addrs[i]), int(lengths[i]))
                try:
                    sock.sendto(data, self.dest)
                except BlockingIOError:
                    return i
            return total
        gso = self.segment is not None and self._gso_on(sock)
        if self._lib is not None:
            return self._send_native(sock, heads, head_starts, head_len, addrs, lengths, gso)
        if gso:
            return self._send_gso(sock, heads, head_starts, head_len, addrs, lengths)
        if self._gather is None:
            self._gather = self._named(2)
        msgs, _, _, v = self._gather
        pairs = v.reshape(self.batch, 2)
        base = heads.ctypes.data
        done = 0
        while done < total:
            k = min(self.batch, total - done)
            pairs["base"][:k, 0] = base + head_starts[done : done + k]
            pairs["len"][:k, 0] = head_len
            pairs["base"][:k, 1] = addrs[done : done + k]
            pairs["len"][:k, 1] = lengths[done : done + k]
            got = _mmsg(_CALLS[1], sock, msgs, k, _MSG_DONTWAIT)
            done += got
            if got < k:
                return done
        return done

    def _send_native(self, sock, heads, head_starts, head_len, addrs, lengths, gso):
        """send_parts by ``udpio_send``, the arrays' addresses taken once (``.ctypes`` costs microseconds):
        the datagrams' columns are copied into scratch rows of this sender's, a part at a time."""
        if self._heads is None or self._heads[0] is not heads:
            self._heads = (heads, heads.ctypes.data)
        if self._scratch is None:
            self._scratch = np.zeros((3, self.batch * _GSO_MAX_SEGS), np.int64)
            self._scratch_at = [self._scratch.ctypes.data + i * self._scratch.strides[0] for i in range(3)]
        cols, (starts_at, addrs_at, lengths_at) = self._scratch, self._scratch_at
        cap = cols.shape[1]
        total, done = len(head_starts), 0
        while done < total:
            k = min(cap, total - done)
            cols[0, :k] = head_starts[done : done + k]
            cols[1, :k] = addrs[done : done + k].view(np.int64)
            cols[2, :k] = lengths[done : done + k]
            got = self._lib.udpio_send(
                sock.fileno(),
                self._addr_at,
                self._heads[1],
                starts_at,
                head_len,
                addrs_at,
                lengths_at,
                k,
                self.segment if gso else 0,
                self.per_send if gso else 1,
            )
            if got == fastio.TOO_LONG:
                raise ValueError(_too_long(self.segment))
            if got < 0:
                raise OSError(-got, os.strerror(-got))
            done += got
            if got < k:
                break
        return done

    def send(self, sock, base, starts, lengths):
        """Datagram ``i`` is ``lengths[i]`` bytes of the C-contiguous array ``base`` from byte ``starts[i]``;
        returns how many were sent (fewer when the socket's buffer is full)."""
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        total = len(starts)
        if not self.mmsg:
            flat = memoryview(base.reshape(-1).view(np.uint8))
            for i, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
                try:
                    sock.sendto(flat[s : s + n], self.dest)
                except BlockingIOError:
                    return i
            return total
        addr = base.ctypes.data
        done = 0
        while done < total:
            k = min(self.batch, total - done)
            if self._single is None:
                self._single = self._named(1)
            msgs, _, _, v = self._single
            v["base"][:k] = addr + starts[done : done + k]
            v["len"][:k] = lengths[done : done + k]
            got = _mmsg(_CALLS[1], sock, msgs, k, _MSG_DONTWAIT)
            done += got
            if got < k:
                return done
        return done

    def _gso_on(self, sock):
        """Set the socket's GSO segment size once; False (and no GSO from then on) where Linux has none."""
        key = sock.fileno()
        if key not in self._gso_socks:
            try:
                sock.setsockopt(socket.IPPROTO_UDP, _UDP_SEGMENT, self.segment)
            except OSError:
                self.segment, self.per_send = None, 1
                return False
            self._gso_socks.add(key)
        return True

    def _send_gso(self, sock, heads, head_starts, head_len, addrs, lengths):
        """send_parts with runs of whole-segment datagrams (the last of a run may be shorter) as one send."""
        total, per = len(head_starts), self.per_send
        if total == 0:
            return 0
        size = head_len + lengths
        if (size > self.segment).any():
            raise ValueError(_too_long(self.segment))
        if self._runs is None:
            self._runs = self._named(2 * per)
        msgs, m, _, v = self._runs
        # A send ends at a datagram shorter than a segment (GSO's rule: only the last may be) and after
        # ``per`` datagrams.
        idx = np.arange(total)
        starts = np.zeros(total, bool)
        starts[0] = True
        starts[1:] = size[:-1] != self.segment
        first = np.flatnonzero(starts)
        pos = idx - first[np.cumsum(starts) - 1]
        starts |= pos % per == 0
        run = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)
        pos = idx - first[run]
        ends = np.append(first[1:], total)
        base = heads.ctypes.data
        sent = 0  # sends done
        while sent < len(first):
            k = min(self.batch, len(first) - sent)
            lo, hi = int(first[sent]), int(ends[sent + k - 1])
            slot = (run[lo:hi] - sent) * (2 * per) + 2 * pos[lo:hi]
            v["base"][slot] = base + head_starts[lo:hi]
            v["len"][slot] = head_len
            v["base"][slot + 1] = addrs[lo:hi]
            v["len"][slot + 1] = lengths[lo:hi]
            m["iovlen"][:k] = 2 * (ends[sent : sent + k] - first[sent : sent + k])
            got = _mmsg(_CALLS[1], sock, msgs, k, _MSG_DONTWAIT)
            sent += got
            if got < k:
                break
        return int(first[sent]) if sent < len(first) else total
