"""The in-line core (bypass port, root stripes, RESULT group address) on the RTL against the golden model.

A Verilated W=64 core with a bypass port is configured as a root of some rounds (random stripes and group
addresses, plain entries elsewhere) and fed a site's mixed traffic: CONTRIBs inside and outside its
stripes, retransmissions, RESULTs of other roots, malformed frames of every kind, traffic that is not
wanreduce at all (other EtherTypes, TCP, other UDP ports, IPv4 options and fragments) and frames longer
than the bypass buffer. The RESULT frames (destination entries, then the group), the forwarded frames
(byte for byte, in order) and every counter must equal the golden model's; with forwarding turned off
the same frames are dropped under their codes instead.
"""

import numpy as np
import pytest

from tests.support.cores import INLINE_CORE
from tests.support.quiet import unused_ok
from wanreduce.host import control
from wanreduce.host import frames as fr
from wanreduce.host.golden import Destination, RootEntry, expected_order
from wanreduce.sim.verify import traffic

#: A W = 64 core with a bypass port: 8 slots of 4 member buffers of 256 bytes, frames of up to 1536 bytes
#: (the in-line build other tests share).
CORE = INLINE_CORE
S, BYPASS = CORE.slots, CORE.bypass_bytes
MAC, IP = "02:57:52:01:00:03", "10.87.83.3"
DESTS = [Destination("02:57:52:00:00:03", "239.87.83.3", 47000)]


@pytest.fixture(scope="module")
def rtl():
    from wanreduce.sim.verify.cosim import RtlCores

    with unused_ok():
        return RtlCores(CORE, count=2)


def _other_traffic(rng, n):
    """Frames an in-line device must pass through: none of them is wanreduce work."""
    out = []
    for k in range(n):
        size = int(rng.integers(0, 1400))
        body = bytes(rng.integers(0, 256, size, dtype=np.uint8))
        kind = k % 5
        if kind == 0:  # ARP-sized and larger frames of other EtherTypes
            out.append(bytes.fromhex("02575200000302aabbccddee0806") + body[:46].ljust(46, b"\0"))
        elif kind == 1:  # a jumbo-ish frame of another EtherType: longer than the buffer, or just fits
            length = BYPASS + 8 if k % 2 else BYPASS
            out.append(bytes.fromhex("02575200000302aabbccddee86dd") + bytes(length - 14))
        elif kind == 2:  # UDP to another port (DNS-like)
            out.append(
                fr.build_frame(
                    body[:200],
                    src_mac="02:aa:bb:cc:dd:ee",
                    dst_mac="02:57:52:00:00:03",
                    src_ip="192.0.2.1",
                    dst_ip="10.87.82.3",
                    sport=53,
                    dport=5353,
                    udp_checksum=True,
                )
            )
        else:  # TCP (protocol 6): an IPv4 frame with the protocol byte changed and the checksum fixed
            f = bytearray(
                fr.build_frame(
                    body,
                    src_mac="02:aa:bb:cc:dd:ee",
                    dst_mac="02:57:52:00:00:03",
                    src_ip="192.0.2.7",
                    dst_ip="10.87.82.3",
                    sport=443,
                    dport=40000,
                    udp_checksum=False,
                )
            )
            f[23] = 6
            f[24:26] = b"\0\0"
            total = sum(int.from_bytes(f[14 + i : 16 + i], "big") for i in range(0, 20, 2))
            while total >> 16:
                total = (total & 0xFFFF) + (total >> 16)
            f[24:26] = (~total & 0xFFFF).to_bytes(2, "big")
            out.append(bytes(f))
    return out


def _site(rng, rank):
    jobs, frames = traffic.scenario(
        rng, CORE, rank=rank, n_packets=700, frames=True, faults=0.3, ordered=True, rounds=(4, 8),
    )  # fmt: skip
    # Root entries on most rounds: a stripe of the chunks (the rest are another root's) and a group.
    rooted = {}
    for job, period in jobs.items():
        rooted[job] = []
        for k, entry in enumerate(period):
            if expected_order(entry)[0] and rng.random() < 0.7:
                lo = int(rng.integers(0, 4))
                hi = lo + int(rng.integers(0, S))
                group = f"239.{96 + job % 8}.{k}.{int(rng.integers(0, 256))}"
                rooted[job].append(RootEntry(tuple(entry), lo, hi, group))
            else:
                rooted[job].append(entry)
    # Mix the other traffic in at random places.
    others = _other_traffic(rng, 60)
    mixed = list(frames)
    for f in others:
        mixed.insert(int(rng.integers(0, len(mixed) + 1)), f)
    return rooted, mixed


@pytest.mark.parametrize("forward", [True, False])
def test_inline_core_matches_golden(rtl, forward):
    rng = np.random.default_rng(17 + forward)
    rank = 3
    jobs, frames = _site(rng, rank)
    site = dict(rank=rank, jobs=jobs, mac=MAC, ip=IP, destinations=DESTS)
    golden = traffic.golden_of(CORE, bypass_bytes=BYPASS, bypass=forward, **site)
    want = []
    for f in frames:
        want += golden.feed_frame(f)
    core = int(forward)
    rtl.configure(
        core,
        control.config_writes(core=CORE, bypass=forward, **site),
    )
    got = [f for _, f in rtl.feed(core, 0, frames)]
    passed = [f for _, f in rtl.take_bypass(core)]
    counters = rtl.counters(core)
    assert counters == golden.counters
    assert got == want
    assert passed == golden.forwarded
    if forward:
        # Every kind of forwarding happened: foreign CONTRIBs, RESULTs, other traffic, and overflow.
        assert golden.counters["bypassed"] > 80 and golden.counters["bypass_overflow"] > 3
        assert golden.counters["results"] > 10
        assert any(f[12:14] == b"\x86\xdd" for f in passed)
        groups = [f for f in got if f[0] == 0x01 and f[30] == 239 and f[31] >= 96]
        assert groups, "no RESULT went to a group address"
    else:
        assert golden.counters["bypassed"] == 0 and not passed
        assert golden.counters["not_ipv4"] > 10 and golden.counters["unexpected_src"] > 10
