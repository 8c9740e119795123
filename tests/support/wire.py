"""An independent reading of PROTOCOL.md (version 2) for the tests: plain ``struct``, no wanreduce."""

import struct

# magic version kind dtype flags job round chunk src group count reserved bitmap
HEADER = struct.Struct(">HBBBBHIIHHHHQ")
NAMES = (
    "magic",
    "version",
    "kind",
    "dtype",
    "flags",
    "job",
    "round",
    "chunk",
    "src",
    "group",
    "count",
    "reserved",
    "bitmap",
)
ELEMENT = {0: ("<f", 4), 1: ("<e", 2), 2: ("<H", 2)}  # bf16 has no struct code: read its bits


def decode_payload(payload):
    """(header dict, list of elements) of a UDP payload, per PROTOCOL.md alone."""
    h = dict(zip(NAMES, HEADER.unpack_from(payload, 0), strict=True))
    fmt, size = ELEMENT[h["dtype"]]
    assert len(payload) == 32 + h["count"] * size, "length must be exactly 32 + count * size"
    elems = [struct.unpack_from(fmt, payload, 32 + i * size)[0] for i in range(h["count"])]
    return h, elems


def decode_frame(frame):
    """(ethertype, ip proto, udp dport, udp payload) of an Ethernet II / IPv4 / UDP frame."""
    ethertype = struct.unpack_from(">H", frame, 12)[0]
    ihl = (frame[14] & 0xF) * 4
    total = struct.unpack_from(">H", frame, 16)[0]
    proto = frame[23]
    udp = 14 + ihl
    dport, length = struct.unpack_from(">HH", frame, udp + 2)
    return ethertype, proto, dport, frame[udp + 8 : 14 + total]
