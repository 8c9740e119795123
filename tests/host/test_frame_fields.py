"""The named Ethernet II / IPv4 / UDP fields of host.frames, checked against frames scapy builds and against
the offsets of RFC 791 and RFC 768 written out by hand."""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from wanreduce.host.frames import (
    FIELDS,
    build_frame,
    field,
    parse_frame,
    refresh_ip_checksum,
    set_field,
    with_field,
)

#: (offset, size) of each field, from the RFCs' diagrams, not from the code under test.
RFC = {
    "eth_dst": (0, 6),
    "eth_src": (6, 6),
    "ethertype": (12, 2),
    "ip_vihl": (14, 1),
    "ip_tos": (15, 1),
    "ip_total_length": (16, 2),
    "ip_ident": (18, 2),
    "ip_flags_frag": (20, 2),
    "ip_ttl": (22, 1),
    "ip_proto": (23, 1),
    "ip_checksum": (24, 2),
    "ip_src": (26, 4),
    "ip_dst": (30, 4),
    "udp_sport": (34, 2),
    "udp_dport": (36, 2),
    "udp_length": (38, 2),
    "udp_checksum": (40, 2),
}


def _scapy_frame():
    """A frame whose every field holds a different value, built by scapy alone."""
    e = Ether(dst="01:00:5e:01:02:03", src="02:aa:bb:cc:dd:ee", type=0x0800) / IP(
        tos=0xB8, id=0x1234, flags="DF", ttl=31, proto=17, src="10.9.8.7", dst="239.1.2.3"
    )
    e = e / UDP(sport=40001, dport=40002) / (b"payload!" * 3)
    return bytes(e), Ether(bytes(e))


def test_offsets_are_those_of_the_rfcs():
    assert FIELDS == RFC


def test_each_field_reads_what_scapy_wrote():
    raw, e = _scapy_frame()
    ip, udp = e[IP], e[UDP]
    want = {
        "eth_dst": bytes.fromhex("01005e010203"),
        "eth_src": bytes.fromhex("02aabbccddee"),
        "ethertype": 0x0800,
        "ip_vihl": (ip.version << 4) | ip.ihl,
        "ip_tos": 0xB8,
        "ip_total_length": ip.len,
        "ip_ident": 0x1234,
        "ip_flags_frag": 0x4000,  # DF
        "ip_ttl": 31,
        "ip_proto": 17,
        "ip_checksum": ip.chksum,
        "ip_src": bytes([10, 9, 8, 7]),
        "ip_dst": bytes([239, 1, 2, 3]),
        "udp_sport": 40001,
        "udp_dport": 40002,
        "udp_length": udp.len,
        "udp_checksum": udp.chksum,
    }
    assert set(want) == set(FIELDS)
    for name, value in want.items():
        assert field(raw, name) == value, name


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_set_then_read_round_trip(name):
    raw, _ = _scapy_frame()
    pos, size = FIELDS[name]
    value = bytes(range(0xA0, 0xA0 + size)) if isinstance(field(raw, name), bytes) else (1 << (8 * size)) - 2
    f = bytearray(raw)
    assert set_field(f, name, value) is f
    assert field(f, name) == value
    # Only the field's own bytes changed.
    assert f[:pos] == raw[:pos] and f[pos + size :] == raw[pos + size :] and len(f) == len(raw)
    copy = with_field(raw, name, value)
    assert isinstance(copy, bytes) and copy == bytes(f)


_ADDR = dict(
    src_mac="02:00:00:00:00:01",
    dst_mac="02:00:00:00:00:02",
    src_ip="10.1.2.3",
    dst_ip="10.1.2.4",
    sport=47000,
    dport=47000,
)


def test_a_patch_and_a_fresh_checksum_give_a_valid_frame():
    f = bytearray(build_frame(b"x" * 40, **_ADDR))
    set_field(f, "ip_ttl", 3)
    assert parse_frame(bytes(f), port=47000)[2] is not None  # the IPv4 checksum no longer matches
    refresh_ip_checksum(f)
    payload, info, reason = parse_frame(bytes(f), port=47000)
    assert reason is None and payload == b"x" * 40
    assert Ether(bytes(f))[IP].ttl == 3


def test_a_bad_field_name_is_refused_with_a_sentence():
    raw, _ = _scapy_frame()
    for call in (lambda: field(raw, "ip_len"), lambda: with_field(raw, "udp_port", 1)):
        with pytest.raises(
            ValueError, match=r"'(ip_len|udp_port)' is not a frame field; the fields are eth_dst"
        ):
            call()


def test_bad_values_and_short_frames_are_refused():
    raw, _ = _scapy_frame()
    with pytest.raises(ValueError, match="unsigned 16-bit integer, not 65536"):
        with_field(raw, "udp_dport", 1 << 16)
    with pytest.raises(ValueError, match="unsigned 8-bit integer, not -1"):
        with_field(raw, "ip_ttl", -1)
    with pytest.raises(ValueError, match="holds 4 bytes, not 6"):
        with_field(raw, "ip_src", b"\0" * 6)
    with pytest.raises(ValueError, match="A frame of 40 bytes has no udp_checksum"):
        field(raw[:40], "udp_checksum")
