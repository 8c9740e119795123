"""FAddLanes under cocotb: a testbench with reset, idle and back-pressure generators checks that every
beat comes out once, in order, with its user bits, exact sums, and the documented latency."""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from wanreduce.hw.fadd import FAddLanes, FloatFormat
from wanreduce.sim.verify import fadd_check as fc
from wanreduce.sim.verify.cocotb_build import PORTS_ONLY
from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl

# (format, beat width): a narrow fp16 build and a wide fp32 one.
CONFIGS = {"w64": (FloatFormat.FP16, 64), "w512": (FloatFormat.FP32, 512)}
USER_WIDTH = 9


class LanesTB:
    """Drives ``i`` and reads ``o`` of an FAddLanes; every cycle draws from the idle and back-pressure
    generators (seeded), and a scoreboard keeps what was accepted and what came out, with cycle stamps."""

    def __init__(self, dut, *, fmt, width, idle, backpressure, seed):
        self.dut = dut
        self.fmt, self.width = fmt, width
        self.lanes = width // fmt.width
        rng = random.Random(seed)
        self.idle = (lambda: rng.random() < idle) if idle else (lambda: False)
        self.stall = (lambda: rng.random() < backpressure) if backpressure else (lambda: False)
        self.sent, self.got = [], []

    async def reset(self):
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        self.dut.i__valid.value = 0
        self.dut.o__ready.value = 0
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def _pack(self, a, b, user):
        w = self.width
        ia, ib = int.from_bytes(a.tobytes(), "little"), int.from_bytes(b.tobytes(), "little")
        return ia | ib << w | user << 2 * w

    async def run(self, a, b, users, max_cycles=20_000):
        beats = [self._pack(a[k], b[k], users[k]) for k in range(len(users))]
        k, presenting, cycle = 0, False, 0
        while len(self.got) < len(beats):
            if not presenting and k < len(beats) and not self.idle():
                self.dut.i__payload.value = beats[k]
                presenting = True
            self.dut.i__valid.value = int(presenting)
            self.dut.o__ready.value = int(not self.stall())
            await ReadOnly()
            if self.dut.o__valid.value and self.dut.o__ready.value:
                self.got.append((cycle, self.dut.o__payload.value.to_unsigned()))
            accepted = presenting and bool(self.dut.i__ready.value)
            await RisingEdge(self.dut.clk)
            if accepted:
                self.sent.append(cycle)
                presenting = False
                k += 1
            cycle += 1
            assert cycle < max_cycles, f"stuck: {len(self.sent)} beats in, {len(self.got)} out"
        # Nothing more may come out after the last expected beat.
        self.dut.o__ready.value = 1
        for _ in range(3 * int(os.environ.get("LANES_LATENCY", "8")) + 4):
            await ReadOnly()
            assert not self.dut.o__valid.value, "an extra beat came out"
            await RisingEdge(self.dut.clk)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def lanes_stream(dut):
    p = runner.params()
    fmt, width = FloatFormat.from_name(p["fmt"]), p["width"]
    tb = LanesTB(dut, fmt=fmt, width=width, idle=p["idle"], backpressure=p["bp"], seed=p["seed"])
    rng = np.random.default_rng(p["seed"])
    n_beats = p["beats"]
    a, b = fc.random_pairs(fmt, n_beats * tb.lanes, rng)
    a, b = a.reshape(n_beats, tb.lanes), b.reshape(n_beats, tb.lanes)
    users = [int(u) for u in rng.integers(0, 1 << USER_WIDTH, n_beats)]
    await tb.reset()
    await tb.run(a, b, users)

    dt = fc.bits_dtype(fmt)
    mask = (1 << width) - 1
    sums = np.array([np.frombuffer((v & mask).to_bytes(width // 8, "little"), dtype=dt) for _, v in tb.got])
    assert [v >> width for _, v in tb.got] == users, "user bits lost, reordered or duplicated"
    want = fc.reference_add(fmt, a.reshape(-1), b.reshape(-1))
    bad = fc.compare(fmt, sums.reshape(-1), want)
    assert not bad.any(), f"{int(bad.sum())} lane sums differ from the reference"
    out_cycles = [c for c, _ in tb.got]
    if p["idle"] == 0 and p["bp"] == 0:
        # Full throughput and exactly the documented latency.
        assert tb.sent == list(range(tb.sent[0], tb.sent[0] + n_beats))
        assert out_cycles == [c + p["latency"] for c in tb.sent]
    else:
        assert all(o >= s + p["latency"] for o, s in zip(out_cycles, tb.sent, strict=True))


_builds = {}


def _build(config):
    if config not in _builds:
        fmt, width = CONFIGS[config]
        lanes = FAddLanes(fmt=fmt, width=width, user_width=USER_WIDTH)
        # Keyed by what makes the design, so its Verilog is converted once and kept in the build cache.
        key = ("FAddLanes", fmt.name, width, USER_WIDTH)
        build = runner.build(lanes, top=f"fadd_lanes_tb_{config}", key=key, build_args=PORTS_ONLY)
        _builds[config] = (build, lanes.latency)
    return _builds[config]


# Every generator combination on the narrow build; the wide one (slow to convert and compile) gets the
# two extremes.
GENERATORS = [("full", 0.0, 0.0), ("idle", 0.4, 0.0), ("backpressure", 0.0, 0.5), ("both", 0.3, 0.3)]
CASES = [
    pytest.param(c, i, b, id=f"{name}-{c}")
    for c in CONFIGS
    for name, i, b in GENERATORS
    if c == "w64" or name in ("full", "both")
]


@pytest.mark.parametrize("config,idle,bp", CASES)
def test_lanes_stream(config, idle, bp):
    build, latency = _build(config)
    fmt, width = CONFIGS[config]
    runner.run(
        build,
        top=build.top,
        module=__name__,
        testcase="lanes_stream",
        params={
            "fmt": fmt.name,
            "width": width,
            "idle": idle,
            "bp": bp,
            "seed": 11,
            "beats": 150,
            "latency": latency,
        },
        extra_env={"LANES_LATENCY": str(latency)},
    )
