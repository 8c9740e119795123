"""BlockFIFO against a Python queue: order, no loss, the stated latency, full rate, credit accounting."""

import gc
import random

import pytest
from amaranth.sim import Simulator

from tests.support.quiet import unused_ok
from wanreduce.hw.fifo import BlockFIFO


@pytest.mark.parametrize("width,depth", [(8, 4), (37, 32)])
@pytest.mark.parametrize("writes,ready", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.5), (0.5, 0.3)])
def test_against_queue(width, depth, writes, ready):
    rng = random.Random(width * 1000 + depth + int(writes * 10) + int(ready * 100))
    dut = BlockFIFO(width=width, depth=depth)
    n = 300
    words = [rng.getrandbits(width) for _ in range(n)]
    got, wrote_at, out_at = [], [], []
    peak = [0]

    async def tb(ctx):
        credit, sent = depth, 0
        for cycle in range(20 * n):
            if len(got) == n:
                break
            rdy = rng.random() < ready
            ctx.set(dut.o.ready, rdy)
            w = sent < n and credit > 0 and rng.random() < writes
            ctx.set(dut.w_en, w)
            if w:
                ctx.set(dut.w_data, words[sent])
            if ctx.get(dut.o.valid) and rdy:
                got.append(ctx.get(dut.o.payload))
                out_at.append(cycle)
            if ctx.get(dut.r_en):
                credit += 1
            if w:
                sent += 1
                credit -= 1
                wrote_at.append(cycle)
            peak[0] = max(peak[0], depth - credit)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert got == words
    if writes == 1.0 and ready == 1.0:  # one word a cycle, each out 3 cycles after its write
        assert wrote_at == list(range(n))
        assert [o - w for o, w in zip(out_at, wrote_at, strict=True)] == [3] * n
    if ready < 1.0 and writes == 1.0:  # the credit was used up at times: the writer had to wait
        assert peak[0] == depth


def test_output_holds_while_stalled():
    dut = BlockFIFO(width=16, depth=4)

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        for v in (0x1111, 0x2222, 0x3333):
            ctx.set(dut.w_en, 1)
            ctx.set(dut.w_data, v)
            await ctx.tick()
        ctx.set(dut.w_en, 0)
        for _ in range(6):
            await ctx.tick()
            assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 0x1111
        seen = []
        ctx.set(dut.o.ready, 1)
        for _ in range(6):
            if ctx.get(dut.o.valid):
                seen.append(ctx.get(dut.o.payload))
            await ctx.tick()
        assert seen == [0x1111, 0x2222, 0x3333]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize(
    "kw,msg", [({"width": 0, "depth": 4}, "one bit"), ({"width": 8, "depth": 6}, "power of two")]
)
def test_parameters_refused(kw, msg):
    with unused_ok():
        with pytest.raises(ValueError, match=msg) as exc:
            BlockFIFO(**kw)
        del exc
        gc.collect()


def test_memory_marked_for_block_ram():
    # The point of the FIFO is its memory in block RAM: the synthesis tools read this attribute (Yosys
    # ``memory_libmap``, Vivado, Quartus alike).
    from amaranth.back import verilog

    text = verilog.convert(BlockFIFO(width=40, depth=32))
    assert '(* ram_style = "block" *)' in text
