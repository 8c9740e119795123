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
    "FIELDS",
    "IP_START",
    "UDP_START",
    "field",
    "set_field",
    "with_field",
    "ipv4_header",
    "pseudo_header",
    "refresh_ip_checksum",
]

IP_FLAG_DF = 0x4000
MAX_UDP_PAYLOAD = 0xFFFF - IPV4_HEADER_BYTES - UDP_HEADER_BYTES

#: Where the IPv4 header and the UDP header of a frame begin (IPv4 without options).
IP_START = ETH_HEADER_BYTES
UDP_START = ETH_HEADER_BYTES + IPV4_HEADER_BYTES

#: The headers below the wanreduce header, ``(start, length, ((name, bytes), ...))`` per layer in wire order.
_LAYERS = (
    (0, ETH_HEADER_BYTES, (("eth_dst", 6), ("eth_src", 6), ("ethertype", 2))),
    (
        IP_START,
        IPV4_HEADER_BYTES,
        (
            ("ip_vihl", 1),  # version (high nibble) and header length in words (low nibble)
            ("ip_tos", 1),
            ("ip_total_length", 2),
            ("ip_ident", 2),
            ("ip_flags_frag", 2),
            ("ip_ttl", 1),
            ("ip_proto", 1),
            ("ip_checksum", 2),
            ("ip_src", 4),
            ("ip_dst", 4),
        ),
    ),
    (
        UDP_START,
        UDP_HEADER_BYTES,
        (("udp_sport", 2), ("udp_dport", 2), ("udp_length", 2), ("udp_checksum", 2)),
    ),
)


def _fields():
    out = {}
    for start, length, names in _LAYERS:
        pos = start
        for name, size in names:
            out[name] = (pos, size)
            pos += size
        assert pos == start + length, f"the fields at byte {start} do not fill their {length} bytes"
    return out


#: ``{field: (byte offset in the frame, byte size)}`` of Ethernet II / IPv4 without options / UDP, big-endian.
FIELDS = _fields()
#: The fields read and written as bytes (addresses); every other one is an unsigned integer.
_ADDRESSES = {"eth_dst", "eth_src", "ip_src", "ip_dst"}


def _span(name):
    try:
        return FIELDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{name!r} is not a frame field; the fields are {', '.join(FIELDS)}.") from None


def field(frame, name):
    """Field ``name`` of :data:`FIELDS` in ``frame``, as it stands (unchecked): bytes for an address, else an
    unsigned integer. A frame too short to hold the field is refused (ValueError)."""
    pos, size = _span(name)
    if len(frame) < pos + size:
        raise ValueError(f"A frame of {len(frame)} bytes has no {name} (bytes {pos} to {pos + size - 1}).")
    raw = bytes(frame[pos : pos + size])
    return raw if name in _ADDRESSES else int.from_bytes(raw, "big")


def set_field(frame, name, value):
    """Write field ``name`` of ``frame`` (a bytearray) in place, without fixing any checksum; returns
    ``frame``. ``value`` is bytes for an address, else an integer that fits the field. As a slice
    assignment, on a frame that ends inside the field the bytes replace its tail."""
    pos, size = _span(name)
    if name in _ADDRESSES:
        raw = bytes(value)
        if len(raw) != size:
            raise ValueError(f"The field {name} holds {size} bytes, not {len(raw)}.")
    else:
        if not 0 <= int(value) < 1 << (8 * size):
            raise ValueError(f"The field {name} holds an unsigned {8 * size}-bit integer, not {value}.")
        raw = int(value).to_bytes(size, "big")
    frame[pos : pos + size] = raw
    return frame


def with_field(frame, name, value):
    """A copy of ``frame`` (bytes) with field ``name`` set to ``value`` (as :func:`set_field`)."""
    return bytes(set_field(bytearray(frame), name, value))


def ipv4_header(frame):
    """The IPv4 header of ``frame`` without options (bytes, unchecked)."""
    return bytes(frame[IP_START:UDP_START])


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


def pseudo_header(src_ip, dst_ip, udp_len):
    """The IPv4 pseudo-header the UDP checksum covers (RFC 768), with ``udp_len`` as given."""
    return src_ip + dst_ip + bytes([0, IPPROTO_UDP]) + int(udp_len).to_bytes(2, "big")


def refresh_ip_checksum(frame):
    """Recompute in place the checksum of the IPv4 header (without options) of ``frame`` (a bytearray),
    after a change to it; a frame too short to hold the header is left as it is. Returns ``frame``."""
    if len(frame) >= UDP_START:
        set_field(frame, "ip_checksum", 0)
        set_field(frame, "ip_checksum", ipv4_checksum(ipv4_header(frame)))
    return frame


def udp_checksum(src_ip, dst_ip, udp_segment):
    """RFC 768 checksum over pseudo-header + UDP header (checksum field zero) + payload; 0 maps to 0xFFFF."""
    s = ones_complement_sum(pseudo_header(src_ip, dst_ip, len(udp_segment)) + bytes(udp_segment))[0]
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
    head = bytearray(FRAME_OVERHEAD)
    for name, value in (
        ("eth_dst", dst_mac),
        ("eth_src", src_mac),
        ("ethertype", ETHERTYPE_IPV4),
        ("ip_vihl", 0x45),
        ("ip_total_length", IPV4_HEADER_BYTES + udp_len),
        ("ip_ident", ident),
        ("ip_flags_frag", IP_FLAG_DF if df else 0),
        ("ip_ttl", ttl),
        ("ip_proto", IPPROTO_UDP),
        ("ip_src", src_ip),
        ("ip_dst", dst_ip),
        ("udp_sport", sport),
        ("udp_dport", dport),
        ("udp_length", udp_len),
    ):
        set_field(head, name, value)
    refresh_ip_checksum(head)
    out = np.empty((n, FRAME_OVERHEAD + length), np.uint8)
    out[:, :FRAME_OVERHEAD] = np.frombuffer(bytes(head), np.uint8)
    out[:, FRAME_OVERHEAD:] = payloads
    if udp_checksum:
        # One pass over every payload at once: fixed part of the sum + each row's payload sum.
        fixed = int(ones_complement_sum(pseudo_header(src_ip, dst_ip, udp_len) + bytes(head[UDP_START:]))[0])
        s = _fold(ones_complement_sum(payloads).astype(np.uint64) + fixed)
        c = (~s & 0xFFFF).astype(np.uint16)
        c[c == 0] = 0xFFFF
        pos, _ = FIELDS["udp_checksum"]
        out[:, pos] = c >> 8
        out[:, pos + 1] = c & 0xFF
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
    if len(frame) < FRAME_OVERHEAD or field(frame, "ethertype") != ETHERTYPE_IPV4:
        return None
    vihl = field(frame, "ip_vihl")
    if vihl >> 4 != 4:
        return None
    ihl = (vihl & 0x0F) * 4
    total = field(frame, "ip_total_length")
    if (
        ihl < IPV4_HEADER_BYTES
        or field(frame, "ip_proto") != IPPROTO_UDP
        or field(frame, "ip_flags_frag") & 0x3FFF
        or total > len(frame) - IP_START
        or total < ihl + UDP_HEADER_BYTES
    ):
        return None
    # With options the UDP header sits ihl bytes into the IPv4 packet, not at UDP_START.
    udp = IP_START + ihl
    length_at = udp + FIELDS["udp_length"][0] - UDP_START
    length = int.from_bytes(frame[length_at : length_at + FIELDS["udp_length"][1]], "big")
    if length < UDP_HEADER_BYTES or ihl + length > total:
        return None
    return bytes(frame[udp + UDP_HEADER_BYTES : udp + length])


def dport_of(frame):
    """The UDP destination port of a frame read as Ethernet II / IPv4 without options / UDP, unchecked;
    0 for a frame too short to hold one."""
    return field(frame, "udp_dport") if len(frame) >= FRAME_OVERHEAD else 0


def dst_ip_of(frame):
    """The IPv4 destination address (4 bytes) of a frame read as Ethernet II / IPv4, unchecked (what
    there is of it in a shorter frame)."""
    pos, size = FIELDS["ip_dst"]
    return bytes(frame[pos : pos + size])


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
    ethertype = field(frame, "ethertype")
    total = field(frame, "ip_total_length")
    if ethertype == ETHERTYPE_IPV4 and total > n - ETH_HEADER_BYTES:
        return None, None, Drop.TRUNCATED
    if ethertype != ETHERTYPE_IPV4:
        return None, None, Drop.NOT_IPV4
    frag = field(frame, "ip_flags_frag")
    if field(frame, "ip_vihl") != 0x45 or (frag & 0x3FFF) or total < IPV4_HEADER_BYTES + UDP_HEADER_BYTES:
        return None, None, Drop.BAD_IP_HEADER
    if ones_complement_sum(ipv4_header(frame))[0] != 0xFFFF:
        return None, None, Drop.BAD_IP_CHECKSUM
    if field(frame, "ip_proto") != IPPROTO_UDP:
        return None, None, Drop.NOT_UDP
    dport = field(frame, "udp_dport")
    if dport != port:
        return None, None, Drop.WRONG_PORT
    udp_len = field(frame, "udp_length")
    if udp_len != total - IPV4_HEADER_BYTES:
        return None, None, Drop.BAD_UDP_LENGTH
    src_ip, dst_ip = field(frame, "ip_src"), field(frame, "ip_dst")
    segment = frame[UDP_START : ETH_HEADER_BYTES + total]
    if field(frame, "udp_checksum"):
        s = ones_complement_sum(pseudo_header(src_ip, dst_ip, udp_len) + segment)[0]
        if s != 0xFFFF:
            return None, None, Drop.BAD_UDP_CHECKSUM
    info = FrameInfo(
        field(frame, "eth_src"), field(frame, "eth_dst"), src_ip, dst_ip, field(frame, "udp_sport"), dport
    )
    return segment[UDP_HEADER_BYTES:], info, None
