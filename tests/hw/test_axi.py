"""The AXI4-Stream / AXI4-Lite top (``wanreduce.hw.axi``) on Verilator with cocotbext-axi.

One W = 64 frame-entry build (a small core: 4 slots of 64 bytes, a 128-byte bypass port), its AXI4-Lite
port on a clock of its own
(13 ns against the core's 10 ns), so every register access crosses the asynchronous FIFOs. The cocotb tests
live in this file:

- ``axi_frames_match_golden`` (idle gaps on/off × back-pressure on/off): a host-model workload as
  AXI4-Stream frames from ``AxiStreamSource`` with random idle cycles, collected by ``AxiStreamSink`` with
  random back-pressure; mixed in are frames of every length modulo the beat (every last-beat ``tkeep``),
  frames with ``tuser`` set on one beat, frames with a hole in ``tkeep`` and frames longer than the receive
  FIFO. Output frames must equal the golden aggregator's (fed only the frames that should pass) byte for
  byte, with the ``tkeep`` of their length, and so must the frames out of ``m_axis_bypass`` (the
  frames that are not the core's work, unchanged; those longer than 128 bytes are lost and counted);
  the core's counters must equal the golden model's and the wrapper's the number of frames of each kind.
- ``axi_registers``: ID and build parameters read over AXI4-Lite, read-back of written registers, a
  partial-strobe write refused with SLVERR and changing nothing, the wrapper's counters cleared.
"""

import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer, with_timeout

from tests.support import tb_core
from tests.support.quiet import unused_ok
from wanreduce.sim.verify.cocotb_build import PORTS_ONLY
from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl

CONFIG = tb_core.CORE.replace(bypass_bytes=128)
FIFO_BEATS = 32


def _top():
    """The top and its cache key: the Verilog is converted once and kept in the build cache."""
    from wanreduce.hw.axi import AXIAggregator
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.sim.verilator.agg_driver import build_key

    options = dict(ctl_domain="axil", fifo_beats=FIFO_BEATS)
    with unused_ok():
        core = AggregatorCore(CONFIG)
        return AXIAggregator(core=core, **options), build_key(CONFIG, options, kind="AXIAggregator")


def test_axi_top():
    top, key = _top()
    params = {**CONFIG.as_dict(), "seed": 11, "n_packets": 160}
    runner.run(top, top="axi_agg", module=__name__, params=params, key=key, build_args=PORTS_ONLY)


# ---- cocotb side ----------------------------------------------------------------------------------------

MAC, IP = "02:57:52:01:00:07", "10.87.83.7"


class AxiTB:
    def __init__(self, dut, *, idle=0.0, backpressure=0.0, seed=0):
        from cocotbext.axi import (
            AxiLiteBus,
            AxiLiteMaster,
            AxiStreamBus,
            AxiStreamSink,
            AxiStreamSource,
        )

        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        cocotb.start_soon(Clock(dut.axil_clk, 13, unit="ns").start())
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_"), dut.clk, dut.rst)
        self.bypass = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_bypass_"), dut.clk, dut.rst)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil_"), dut.axil_clk, dut.axil_rst)
        rng = random.Random(seed)
        if idle:
            self.source.set_pause_generator(iter(lambda: rng.random() < idle, None))
        if backpressure:
            self.sink.set_pause_generator(iter(lambda: rng.random() < backpressure, None))
            self.bypass.set_pause_generator(iter(lambda: rng.random() < backpressure, None))

    async def reset(self):
        d = self.dut
        d.rst.value = 1
        d.axil_rst.value = 1
        await ClockCycles(d.clk, 6)
        d.rst.value = 0
        d.axil_rst.value = 0
        await ClockCycles(d.clk, 6)

    async def write(self, addr, value):
        resp = await self.axil.write(4 * addr, int(value).to_bytes(4, "little"))
        assert int(resp.resp) == 0, f"write of {value:#x} to register {addr:#x} answered {resp.resp}"

    async def read(self, addr):
        resp = await self.axil.read(4 * addr, 4)
        assert int(resp.resp) == 0, f"read of register {addr:#x} answered {resp.resp}"
        return int.from_bytes(resp.data, "little")

    async def wrap(self, name, k=0):
        from wanreduce.hw.axi import WRAP_BASE, WRAP_REGS

        return await self.read(WRAP_BASE // 4 + WRAP_REGS[name] + k)


def _garbage_frames(rng, width):
    """Frames of every length modulo the beat (60 bytes and up), which the core drops: every last-beat
    ``tkeep`` reaches the wrapper."""
    nb = width // 8
    return [bytes(rng.integers(0, 256, 60 + k, dtype=np.uint8)) for k in range(nb)]


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.3], backpressure=[0.0, 0.5])
async def axi_frames_match_golden(dut, idle, backpressure):
    from cocotbext.axi import AxiStreamFrame

    from tests.support.tb_core import DESTS
    from wanreduce.host import control
    from wanreduce.sim.verify import traffic

    p = runner.params()
    core = tb_core.config_of(p)
    width, nb = core.width, core.width // 8
    seed = p["seed"] * 4 + int(idle > 0) * 2 + int(backpressure > 0)
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    jobs, packets = traffic.scenario(rng, core, rank=rank, n_packets=p["n_packets"], frames=True)
    # What goes on the wire: (bytes, kind, tuser per byte or None, tkeep per byte or None).
    wire = [(f, "good", None, None) for f in packets]
    for f in _garbage_frames(rng, width):
        wire.insert(int(rng.integers(0, len(wire) + 1)), (f, "good", None, None))
    for n in (core.bypass_bytes + 1, core.bypass_bytes + 60):  # to forward, but too long for it
        f = bytes(12) + b"\x86\xdd" + bytes(rng.integers(0, 256, n - 14, dtype=np.uint8))
        wire.insert(int(rng.integers(0, len(wire) + 1)), (f, "good", None, None))
    for _ in range(6):  # tuser on one beat of a copy of a real frame: it must not count
        f = packets[int(rng.integers(0, len(packets)))]
        beat = int(rng.integers(0, -(-len(f) // nb)))
        user = [int(beat * nb <= i < (beat + 1) * nb) for i in range(len(f))]
        wire.insert(int(rng.integers(0, len(wire) + 1)), (f, "user", user, None))
    for _ in range(4):  # a hole in tkeep on a beat before the last
        f = packets[int(rng.integers(0, len(packets)))]
        if len(f) <= nb:
            continue
        keep = [1] * len(f)
        keep[int(rng.integers(0, len(f) - nb))] = 0
        wire.insert(int(rng.integers(0, len(wire) + 1)), (f, "keep", None, keep))
    for n in (FIFO_BEATS * nb + 1, FIFO_BEATS * nb + 3 * nb):  # longer than the FIFO
        f = bytes(rng.integers(0, 256, n, dtype=np.uint8))
        wire.insert(int(rng.integers(0, len(wire) + 1)), (f, "oversize", None, None))

    site = dict(rank=rank, jobs=jobs, mac=MAC, ip=IP, destinations=DESTS)
    golden = traffic.golden_of(core, bypass_bytes=core.bypass_bytes, **site)
    expected = []
    for f, kind, _, _ in wire:
        if kind == "good":
            expected += golden.feed_frame(f)

    tb = AxiTB(dut, idle=idle, backpressure=backpressure, seed=seed)
    await tb.reset()
    for addr, value in control.config_writes(core=core, **site):
        await tb.write(addr, value)

    async def send():
        for f, _, user, keep in wire:
            frame = AxiStreamFrame(f, tuser=user if user is not None else 0, tkeep=keep)
            await tb.source.send(frame)
        await tb.source.wait()

    await with_timeout(send(), 40 * sum(len(f) for f, *_ in wire) + 200_000, "ns")

    async def receive(sink, count, what):
        frames = []
        for n in range(count):
            frame = await with_timeout(sink.recv(compact=False), 200_000, "ns")
            keep = list(frame.tkeep)
            length = sum(keep)
            assert keep == [1] * length + [0] * (len(keep) - length) and len(keep) - length < nb, (
                f"{what} frame {n}: tkeep is not all ones up to its last byte and zero after it, in the "
                f"last beat only: {keep}"
            )
            assert not any(frame.tuser), f"{what} frame {n} has tuser set"
            frames.append(bytes(frame.tdata[:length]))
        return frames

    got = await receive(tb.sink, len(expected), "output")
    passed = await receive(tb.bypass, len(golden.forwarded), "bypass")
    await Timer(20_000, "ns")
    assert tb.sink.empty(), "the core sent more frames than the golden model"
    assert tb.bypass.empty(), "the core forwarded more frames than the golden model"
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"output frame {n} differs from the golden model:\n{a.hex()}\n{b.hex()}"
    for n, (a, b) in enumerate(zip(passed, golden.forwarded, strict=True)):
        assert a == b, f"bypass frame {n} differs from the frame that came in:\n{a.hex()}\n{b.hex()}"
    assert golden.counters["bypassed"] > 5 and golden.counters["bypass_overflow"] > 0

    counters = control.decode_counters([await tb.read(a) for a in control.counter_reads()])
    assert counters == golden.counters, "counters differ from the golden model: " + str(
        {k: (v, golden.counters[k]) for k, v in counters.items() if v != golden.counters[k]}
    )
    kinds = [k for _, k, *_ in wire]
    for reg, kind in (
        ("RX_FRAMES", "good"),
        ("RX_USER", "user"),
        ("RX_KEEP", "keep"),
        ("RX_OVERSIZE", "oversize"),
    ):
        assert await tb.wrap(reg) == kinds.count(kind), f"{reg} is not the number of {kind} frames"
    assert await tb.wrap("TX_FRAMES") == len(expected)
    assert golden.counters["results"] > 0, "the workload completed no chunk; it tests too little"
    from wanreduce.hw.axi import WRAP_BASE, WRAP_REGS

    await tb.write(WRAP_BASE // 4 + WRAP_REGS["CLEAR"], 1)
    for reg in ("RX_FRAMES", "RX_USER", "TX_FRAMES"):
        assert await tb.wrap(reg) == 0, f"CLEAR left {reg} non-zero"
    dut._log.info(f"{len(wire)} frames in, {len(got)} out")


@cocotb.test()
async def axi_registers(dut):
    from wanreduce.hw.axi import AXI_ID_VALUE, WRAP_BASE
    from wanreduce.spec import regmap

    p = runner.params()
    tb = AxiTB(dut)
    await tb.reset()
    assert await tb.read(regmap.REG_ID) == regmap.ID_VALUE
    for reg, value in (
        (regmap.REG_WIDTH, p["width"]),
        (regmap.REG_SLOTS, p["slots"]),
        (regmap.REG_MEMBERS, p["members"]),
        (regmap.REG_SLOT_BYTES, p["chunk_bytes"]),
    ):
        assert await tb.read(reg) == value, f"register {reg:#x}"
    assert await tb.wrap("AXI_ID") == AXI_ID_VALUE
    assert await tb.wrap("FIFO_BEATS") == FIFO_BEATS
    rng = random.Random(5)
    values = {
        regmap.REG_RANK: rng.randrange(64),
        regmap.REG_PORT: rng.randrange(1 << 16),
        regmap.REG_MAC_HI: rng.randrange(1 << 16),
        regmap.REG_MAC_LO: rng.randrange(1 << 32),
        regmap.REG_IP: rng.randrange(1 << 32),
        regmap.REG_NDEST: 2,
    }
    for reg, value in values.items():
        await tb.write(reg, value)
    for reg, value in values.items():
        assert await tb.read(reg) == value, f"register {reg:#x} does not read back what was written"
    # A write of two bytes: refused, nothing changes.
    resp = await tb.axil.write(4 * regmap.REG_IP, b"\x11\x22")
    assert int(resp.resp) == 2, f"a partial-strobe write answered {resp.resp}, not SLVERR"
    assert await tb.read(regmap.REG_IP) == values[regmap.REG_IP]
    # An unused wrapper register reads 0, and a write to it changes nothing.
    await tb.write(WRAP_BASE // 4 + 12, 0xFFFF_FFFF)
    assert await tb.read(WRAP_BASE // 4 + 12) == 0
    assert await tb.wrap("AXI_ID") == AXI_ID_VALUE
