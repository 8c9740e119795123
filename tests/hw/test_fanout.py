"""Fan-out: each RESULT payload framed once per destination exactly as ``host/frames.build_frame`` frames it
(DF, TTL 64, id 0, valid IPv4 checksum, UDP checksum 0), plus one copy to the RESULT's group address when
it has one (root aggregation), under random output back-pressure and back to back, at widths with
several, two and one beat per frame."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from tests.support.streamsim import run_stream
from wanreduce.host.frames import build_frame
from wanreduce.hw.fanout import Fanout
from wanreduce.spec.addressing import multicast_mac

DESTS = [
    ("02:00:00:00:00:01", "10.0.0.1", 5000),
    ("01:00:5e:57:53:02", "239.87.83.2", 47000),
    ("02:aa:bb:cc:dd:ee", "192.168.7.9", 65535),
]
MAC, IP, PORT = "02:57:52:01:00:05", "10.87.83.5", 47000


def _mac(text):
    return int(text.replace(":", ""), 16)


def _ip(text):
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


@pytest.mark.parametrize("width", [64, 512, 1024])
@pytest.mark.parametrize("ndest", [0, 1, 3])
@pytest.mark.parametrize("pressure", [(0.2, 0.4), (0.0, 0.0)])  # (input idle, output back-pressure)
def test_frames(width, ndest, pressure):
    rng = np.random.default_rng(width + ndest)
    B = width // 8
    sizes = rng.integers(34, 32 + 64 + 1, 6)
    payloads = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in sizes]
    # Every other RESULT also goes to a group (a root's stripe); the others to the entries only.
    groups = [None if k % 2 else f"239.{96 + k}.{k}.{200 + k}" for k in range(len(payloads))]
    beats = []
    for p, group in zip(payloads, groups, strict=True):
        n = -(-len(p) // B)
        for k in range(n):
            part = p[k * B : (k + 1) * B]
            beats.append(
                {
                    "data": int.from_bytes(part, "little"),
                    "bytes": len(part),
                    "last": int(k == n - 1),
                    "plen": len(p),
                    "mdest": _ip(group) if group else 0,
                }
            )
    dut = Fanout(width=width, dests=3, max_payload=96)

    async def setup(ctx):
        ctx.set(dut.mac, _mac(MAC))
        ctx.set(dut.ip, _ip(IP))
        ctx.set(dut.port, PORT)
        ctx.set(dut.ndest, ndest)
        for d, (mac, ip, port) in enumerate(DESTS):
            ctx.set(dut.dest_mac[d], _mac(mac))
            ctx.set(dut.dest_ip[d], _ip(ip))
            ctx.set(dut.dest_port[d], port)

    out = run_stream(dut, beats, setup=setup, idle=pressure[0], backpressure=pressure[1], seed=1)
    frames, cur = [], b""
    for beat in out:
        cur += int(beat.data).to_bytes(B, "little")[: int(beat.bytes)]
        if beat.last:
            frames.append(cur)
            cur = b""
    want = [
        build_frame(
            p,
            src_mac=MAC,
            dst_mac=mac,
            src_ip=IP,
            dst_ip=ip,
            sport=PORT,
            dport=port,
            udp_checksum=False,
            df=True,
            ttl=64,
        )
        for p, group in zip(payloads, groups, strict=True)
        for mac, ip, port in DESTS[:ndest] + ([(multicast_mac(group), group, PORT)] if group else [])
    ]
    assert frames == want and len(want) == len(payloads) * ndest + 3


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """The stated latency: three cycles of per-buffer precomputation after the payload's last beat is
    stored, then three more (buffer read, assembly, output FIFO), so the first beat of the first frame is
    offered six cycles after the clock edge that took the last payload beat."""
    dut = Fanout(width=width, dests=2, max_payload=96)
    B = width // 8
    seen = []

    async def tb(ctx):
        ctx.set(dut.ndest, 1)
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        n = -(-40 // B)
        for k in range(n):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": k, "bytes": B, "last": int(k == n - 1), "plen": 40, "mdest": 0})
            assert ctx.get(dut.i.ready)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for _ in range(12):
            seen.append(ctx.get(dut.o.valid))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen.index(1) == 6
