import struct

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.support.wire import decode_frame
from wanreduce.host.frames import build_frame, build_frames, parse_frame
from wanreduce.spec.protocol import Drop

ADDR = dict(
    src_mac="02:00:00:00:00:01",
    dst_mac="01:00:5e:57:52:00",
    src_ip="10.1.2.3",
    dst_ip="239.87.82.0",
    sport=47000,
    dport=47000,
)


def frame(payload=b"x" * 40, **kw):
    return bytearray(build_frame(payload, **(ADDR | kw)))


@pytest.mark.parametrize("length", [1, 2, 33, 64, 1031])
def test_scapy_agrees_on_both_checksums(length):
    payload = bytes(np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8))
    f = bytes(frame(payload))
    e = Ether(f)
    ip_sum, udp_sum = e[IP].chksum, e[UDP].chksum
    del e[IP].chksum, e[UDP].chksum
    rebuilt = Ether(bytes(e))  # scapy recomputes both from scratch
    assert (rebuilt[IP].chksum, rebuilt[UDP].chksum) == (ip_sum, udp_sum)
    assert decode_frame(f) == (0x0800, 17, 47000, payload)


def test_block_build_equals_one_by_one():
    rows = np.random.default_rng(1).integers(0, 256, (5, 100), dtype=np.uint8)
    block = build_frames(rows, **ADDR)
    for i in range(5):
        assert block[i].tobytes() == build_frame(rows[i].tobytes(), **ADDR)


def test_good_frame_and_padding():
    f = frame(b"abc" * 20)
    payload, info, reason = parse_frame(bytes(f) + b"\0" * 7, port=47000)  # Ethernet padding is ignored
    assert reason is None and payload == b"abc" * 20 and info.dport == 47000


def test_zero_udp_checksum_means_not_computed():
    f = frame(udp_checksum=False)
    assert f[40:42] == b"\0\0"
    assert parse_frame(bytes(f), port=47000)[2] is None


def _fix_ip_sum(f):
    f[24:26] = b"\0\0"
    words = struct.unpack(">10H", bytes(f[14:34]))
    s = sum(words)
    s = (s & 0xFFFF) + (s >> 16)
    f[24:26] = struct.pack(">H", ~s & 0xFFFF)
    return f


def _mutate(kind):
    f = frame()
    if kind == "truncated":
        return f[:-1]
    if kind == "runt":
        return f[:41]
    if kind == "vlan":
        return f[:12] + b"\x81\x00\x00\x01" + f[12:]
    if kind == "ihl":
        f[14] = 0x46
        return _fix_ip_sum(f)
    if kind == "fragment":
        f[20] = 0x20  # MF
        return _fix_ip_sum(f)
    if kind == "ip_sum":
        f[24] ^= 1
        return f
    if kind == "tcp":
        f[23] = 6
        return _fix_ip_sum(f)
    if kind == "port":
        f[36:38] = struct.pack(">H", 47001)
        return f
    if kind == "udp_len":
        f[38:40] = struct.pack(">H", 47)
        return f
    if kind == "udp_sum":
        f[-1] ^= 0x10
        return f
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("truncated", Drop.TRUNCATED),
        ("runt", Drop.TRUNCATED),
        ("vlan", Drop.NOT_IPV4),
        ("ihl", Drop.BAD_IP_HEADER),
        ("fragment", Drop.BAD_IP_HEADER),
        ("ip_sum", Drop.BAD_IP_CHECKSUM),
        ("tcp", Drop.NOT_UDP),
        ("port", Drop.WRONG_PORT),
        ("udp_len", Drop.BAD_UDP_LENGTH),
        ("udp_sum", Drop.BAD_UDP_CHECKSUM),
    ],
)
def test_each_framing_drop(kind, reason):
    assert parse_frame(bytes(_mutate(kind)), port=47000) == (None, None, reason)
