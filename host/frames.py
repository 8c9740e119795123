"""Ethernet II / IPv4 / UDP framing for wanreduce packets (host side).

The same rules the RTL frame parser applies (see ``docs/PROTOCOL.md``, drop codes 1-8), written plainly so
the golden aggregator and ``wanreduce inspect`` can tell exactly which rule a frame breaks. Building is
vectorised: :func:`build_frames` wraps a whole block of equal-length payloads at once.
"""

import ipaddress

import numpy as np

from ..spec.errors import WanreduceError
from ..spec.protocol import (
    ETH_HEADER_BYTES,
    ETHERTYPE_IPV4,
    FRAME_OVERHEAD,
    IPPROTO_UDP,
    IPV4_HEADER_BYTES,
    UDP_HEADER_BYTES,
    Drop,
)

__all__ = [
    "parse_mac",
    "format_mac",
    "parse_ip",
    "format_ip",
    "ones_complement_sum",
    "ipv4_checksum",
    "udp_checksum",
    "build_frame",
    "frame_between",
    "build_frames",
    "parse_frame",
    "udp_datagram",
    "dport_of",
    "dst_ip_of",
    "FrameInfo",
]

IP_FLAG_DF = 0x4000
MAX_UDP_PAYLOAD = 0xFFFF - IPV4_HEADER_BYTES - UDP_HEADER_BYTES


def parse_mac(mac):
    """``"02:00:..."`` or 6 bytes → 6 bytes."""
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise WanreduceError(f"a MAC address has 6 bytes, not {len(mac)}")
        return bytes(mac)
    parts = str(mac).replace("-", ":").split(":")
    try:
        if len(parts) != 6 or any(len(p) != 2 for p in parts):
            raise ValueError
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise WanreduceError(f"{mac!r} is not a MAC address like 02:57:52:00:00:01") from None


def format_mac(mac):
    return ":".join(f"{b:02x}" for b in bytes(mac))


def parse_ip(ip):
    """Dotted quad, int or 4 bytes → 4 bytes."""
    if isinstance(ip, (bytes, bytearray)):
        if len(ip) != 4:
            raise WanreduceError(f"an IPv4 address has 4 bytes, not {len(ip)}")
        return bytes(ip)
    try:
        return ipaddress.IPv4Address(ip).packed
    except (ipaddress.AddressValueError, ValueError):
        raise WanreduceError(f"{ip!r} is not an IPv4 address") from None


def format_ip(ip):
    return str(ipaddress.IPv4Address(bytes(ip)))


def ones_complement_sum(data):
    """16-bit one's-complement sum of big-endian words, over the last axis of a uint8 array.

    Accepts ``bytes`` or an (n, L) array; L may be odd (a zero byte is appended, as RFC 768 says).
    """
    a = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    a = np.atleast_2d(a)
    if a.shape[-1] % 2:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.uint8)], axis=-1)
    words = a.view(">u2").astype(np.uint64)
    return _fold(words.sum(axis=-1)).astype(np.uint32)


def _fold(s):
    """One's-complement fold of 64-bit sums down to 16 bits (end-around carry until none is left)."""
    s = np.asarray(s, np.uint64)
    while np.any(s >> 16):
        s = (s & 0xFFFF) + (s >> 16)
    return s


def ipv4_checksum(header):
    """The checksum to put in an IPv4 header whose checksum field is zero."""
    return int(~ones_complement_sum(header)[0] & 0xFFFF)


def _pseudo(src_ip, dst_ip, udp_len):
    return src_ip + dst_ip + bytes([0, IPPROTO_UDP]) + int(udp_len).to_bytes(2, "big")


def udp_checksum(src_ip, dst_ip, udp_segment):
    """RFC 768 checksum over pseudo-header + UDP header (checksum field zero) + payload; 0 maps to 0xFFFF."""
    s = ones_complement_sum(_pseudo(src_ip, dst_ip, len(udp_segment)) + bytes(udp_segment))[0]
    c = int(~s & 0xFFFF)
    return c or 0xFFFF


def build_frames(
    payloads, *, src_mac, dst_mac, src_ip, dst_ip, sport, dport, udp_checksum=True, df=False, ttl=64, ident=0
):
    """Wrap an (n, L) uint8 array of equal-length UDP payloads into an (n, 42 + L) array of frames."""
    payloads = np.atleast_2d(np.asarray(payloads, np.uint8))
    n, length = payloads.shape
    if length > MAX_UDP_PAYLOAD:
        raise WanreduceError(
            f"a UDP payload of {length} bytes does not fit in one IPv4 datagram (at most {MAX_UDP_PAYLOAD})"
        )
    src_mac, dst_mac = parse_mac(src_mac), parse_mac(dst_mac)
    src_ip, dst_ip = parse_ip(src_ip), parse_ip(dst_ip)
    udp_len = UDP_HEADER_BYTES + length
    ip = bytearray(IPV4_HEADER_BYTES)
    ip[0] = 0x45
    ip[2:4] = (IPV4_HEADER_BYTES + udp_len).to_bytes(2, "big")
    ip[4:6] = int(ident).to_bytes(2, "big")
    ip[6:8] = (IP_FLAG_DF if df else 0).to_bytes(2, "big")
    ip[8] = ttl
    ip[9] = IPPROTO_UDP
    ip[12:16] = src_ip
    ip[16:20] = dst_ip
    ip[10:12] = ipv4_checksum(bytes(ip)).to_bytes(2, "big")
    udp = bytearray(UDP_HEADER_BYTES)
    udp[0:2] = int(sport).to_bytes(2, "big")
    udp[2:4] = int(dport).to_bytes(2, "big")
    udp[4:6] = udp_len.to_bytes(2, "big")
    head = dst_mac + src_mac + ETHERTYPE_IPV4.to_bytes(2, "big") + bytes(ip) + bytes(udp)
    out = np.empty((n, FRAME_OVERHEAD + length), np.uint8)
    out[:, :FRAME_OVERHEAD] = np.frombuffer(head, np.uint8)
    out[:, FRAME_OVERHEAD:] = payloads
    if udp_checksum:
        # One pass over every payload at once: fixed part of the sum + each row's payload sum.
        fixed = int(ones_complement_sum(_pseudo(src_ip, dst_ip, udp_len) + bytes(udp))[0])
        s = _fold(ones_complement_sum(payloads).astype(np.uint64) + fixed)
        c = (~s & 0xFFFF).astype(np.uint16)
        c[c == 0] = 0xFFFF
        out[:, 40] = c >> 8
        out[:, 41] = c & 0xFF
    return out


def build_frame(payload, **kwargs):
    """One frame (bytes) around one UDP payload; keyword arguments as :func:`build_frames`."""
    return build_frames(np.frombuffer(bytes(payload), np.uint8)[None, :], **kwargs)[0].tobytes()


def frame_between(payload, src, dst, **options):
    """One frame (bytes) around one UDP payload from end point ``src`` to end point ``dst``, each with a
    ``mac``, an ``ip`` and a ``port``; ``options`` as :func:`build_frames`."""
    macs, ips = dict(src_mac=src.mac, dst_mac=dst.mac), dict(src_ip=src.ip, dst_ip=dst.ip)
    return build_frame(payload, **macs, **ips, sport=src.port, dport=dst.port, **options)


def udp_datagram(frame):
    """The UDP payload of an Ethernet II / IPv4 / UDP frame, or None when it carries none.

    Checksums are not checked and IPv4 options are skipped: this is what a replay sends, whatever damage
    the capture holds on purpose (the aggregator's own checks are :func:`parse_frame`).
    """
    if len(frame) < FRAME_OVERHEAD or int.from_bytes(frame[12:14], "big") != ETHERTYPE_IPV4:
        return None
    ip = frame[ETH_HEADER_BYTES:]
    if ip[0] >> 4 != 4:
        return None
    ihl = (ip[0] & 0x0F) * 4
    total = int.from_bytes(ip[2:4], "big")
    if (
        ihl < IPV4_HEADER_BYTES
        or ip[9] != IPPROTO_UDP
        or int.from_bytes(ip[6:8], "big") & 0x3FFF
        or total > len(ip)
        or total < ihl + UDP_HEADER_BYTES
    ):
        return None
    udp = ip[ihl:]
    length = int.from_bytes(udp[4:6], "big")
    if length < UDP_HEADER_BYTES or ihl + length > total:
        return None
    return bytes(udp[UDP_HEADER_BYTES:length])


def dport_of(frame):
    """The UDP destination port of a frame read as Ethernet II / IPv4 without options / UDP, unchecked;
    0 for a frame too short to hold one."""
    if len(frame) < FRAME_OVERHEAD:
        return 0
    udp = ETH_HEADER_BYTES + IPV4_HEADER_BYTES
    return int.from_bytes(frame[udp + 2 : udp + 4], "big")


def dst_ip_of(frame):
    """The IPv4 destination address (4 bytes) of a frame read as Ethernet II / IPv4, unchecked."""
    return bytes(frame[ETH_HEADER_BYTES + 16 : ETH_HEADER_BYTES + IPV4_HEADER_BYTES])


class FrameInfo:
    """What :func:`parse_frame` read from the layers below the wanreduce header."""

    __slots__ = ("src_mac", "dst_mac", "src_ip", "dst_ip", "sport", "dport")

    def __init__(self, src_mac, dst_mac, src_ip, dst_ip, sport, dport):
        self.src_mac, self.dst_mac, self.src_ip, self.dst_ip = src_mac, dst_mac, src_ip, dst_ip
        self.sport, self.dport = sport, dport


def parse_frame(frame, *, port):
    """Check a frame against drop codes 1-8 of PROTOCOL.md.

    Returns ``(payload, info, None)`` for a frame that passes, or ``(None, None, reason)``. When several rules
    apply, the lowest code wins. Bytes after the IPv4 total length (Ethernet padding) are ignored.
    """
    frame = bytes(frame)
    n = len(frame)
    if n < FRAME_OVERHEAD:
        return None, None, Drop.TRUNCATED
    ethertype = int.from_bytes(frame[12:14], "big")
    ip = frame[ETH_HEADER_BYTES : ETH_HEADER_BYTES + IPV4_HEADER_BYTES]
    total = int.from_bytes(ip[2:4], "big")
    if ethertype == ETHERTYPE_IPV4 and total > n - ETH_HEADER_BYTES:
        return None, None, Drop.TRUNCATED
    if ethertype != ETHERTYPE_IPV4:
        return None, None, Drop.NOT_IPV4
    frag = int.from_bytes(ip[6:8], "big")
    if ip[0] != 0x45 or (frag & 0x3FFF) or total < IPV4_HEADER_BYTES + UDP_HEADER_BYTES:
        return None, None, Drop.BAD_IP_HEADER
    if ones_complement_sum(ip)[0] != 0xFFFF:
        return None, None, Drop.BAD_IP_CHECKSUM
    if ip[9] != IPPROTO_UDP:
        return None, None, Drop.NOT_UDP
    udp = frame[ETH_HEADER_BYTES + IPV4_HEADER_BYTES : FRAME_OVERHEAD]
    dport = int.from_bytes(udp[2:4], "big")
    if dport != port:
        return None, None, Drop.WRONG_PORT
    udp_len = int.from_bytes(udp[4:6], "big")
    if udp_len != total - IPV4_HEADER_BYTES:
        return None, None, Drop.BAD_UDP_LENGTH
    segment = frame[ETH_HEADER_BYTES + IPV4_HEADER_BYTES : ETH_HEADER_BYTES + total]
    if int.from_bytes(udp[6:8], "big"):
        s = ones_complement_sum(_pseudo(ip[12:16], ip[16:20], udp_len) + segment)[0]
        if s != 0xFFFF:
            return None, None, Drop.BAD_UDP_CHECKSUM
    info = FrameInfo(frame[6:12], frame[0:6], ip[12:16], ip[16:20], int.from_bytes(udp[0:2], "big"), dport)
    return segment[UDP_HEADER_BYTES:], info, None
