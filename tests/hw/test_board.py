"""The ECPIX-5 board top's UART bridge (``wanreduce.hw.board``) in Amaranth's simulator, and its PLL choice.

The testbench is the host: it sends the UART protocol's commands bit by bit on ``rx`` and decodes ``tx``
with its own 8N1 model (written here, independently of the gateware's UART), while a model of the core's
control port answers reads and records writes, and the stream sides take and offer beats.
"""

import pytest
from amaranth.sim import Simulator

from wanreduce.hw.board import UARTBridge, pll_params

DIV = 8  # clock cycles per UART bit
W = 64


async def _ticks(ctx, n):
    # Tick by tick rather than ``tick().repeat(n)``: a background testbench may be stopped mid-wait.
    for _ in range(n):
        await ctx.tick()


def _run(commands, *, out_beats=(), ready_after=3):
    """Send ``commands`` (bytes); return (answer bytes, control writes, control reads, input beats)."""
    dut = UARTBridge(width=W, divisor=DIV)
    answer, writes, reads, beats = bytearray(), [], [], []
    regs = {0x10: 0x2A, 0x1234: 0xDEADBEEF}
    expected_answers = []

    async def host(ctx):
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(4 * DIV)
        for cmd, n_answer in commands:
            for byte in cmd:
                for bit in [0, *[(byte >> k) & 1 for k in range(8)], 1]:
                    ctx.set(dut.rx, bit)
                    await ctx.tick().repeat(DIV)
            expected_answers.append(n_answer)
            # wait for the answer bytes before the next command
            target = sum(expected_answers)
            for _ in range(200 * DIV * 11):
                if len(answer) >= target:
                    break
                await ctx.tick()
            await ctx.tick().repeat(2 * DIV)

    async def uart_out(ctx):
        # An 8N1 receiver: find the start bit's falling edge, sample mid-bit.
        while True:
            if ctx.get(dut.tx) == 0:
                await _ticks(ctx, DIV // 2)
                assert ctx.get(dut.tx) == 0, "a glitch, not a start bit"
                bits = []
                for _ in range(9):
                    await _ticks(ctx, DIV)
                    bits.append(ctx.get(dut.tx))
                assert bits[8] == 1, "missing stop bit"
                answer.append(sum(b << k for k, b in enumerate(bits[:8])))
            await ctx.tick()

    async def control(ctx):
        # The core's control port: a write takes effect at the edge, a read answers two cycles after re. In
        # the cycle between, rdata is the complement of the answer, so a bridge that samples early fails.
        while True:
            pending = None
            if ctx.get(dut.ctl.we):
                writes.append((ctx.get(dut.ctl.addr), ctx.get(dut.ctl.wdata)))
            if ctx.get(dut.ctl.re):
                reads.append(ctx.get(dut.ctl.addr))
                pending = ctx.get(dut.ctl.addr)
            await ctx.tick()
            if pending is not None:
                ctx.set(dut.ctl.rdata, ~regs.get(pending, 0) & 0xFFFF_FFFF)
                assert not ctx.get(dut.ctl.re), "a read while one is in flight"
                assert not ctx.get(dut.ctl.we), "a write while a read is in flight"
                await ctx.tick()
                ctx.set(dut.ctl.rdata, regs.get(pending, 0))

    async def core_in(ctx):
        # The core's input: ready only after a beat has waited ``ready_after`` cycles.
        wait = 0
        while True:
            ready = int(wait >= ready_after)
            ctx.set(dut.o.ready, ready)
            if ctx.get(dut.o.valid):
                if ready:
                    p = ctx.get(dut.o.payload)
                    beats.append((p.data, p.bytes, p.last))
                    wait = 0
                else:
                    wait += 1
            await ctx.tick()

    async def core_out(ctx):
        for data, nbytes, last in out_beats:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": data, "bytes": nbytes, "last": last})
            while not ctx.get(dut.i.ready):
                await ctx.tick()
            await ctx.tick()
        ctx.set(dut.i.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    for bench in (uart_out, control, core_in, core_out):
        sim.add_testbench(bench, background=True)
    sim.run()
    return bytes(answer), writes, reads, beats


def test_register_write_and_read():
    answer, writes, reads, _ = _run([(b"W\x00\x10\x00\x00\x00\x05", 1), (b"R\x12\x34", 4), (b"R\x00\x10", 4)])
    assert writes == [(0x10, 5)]
    assert reads == [0x1234, 0x10]
    assert answer == b"\x06" + bytes.fromhex("deadbeef") + bytes.fromhex("0000002a")


def test_beats_in_and_out_and_refusals():
    data = bytes(range(0x40, 0x45))
    answer, _, _, beats = _run(
        [
            (b"I" + bytes([0x80 | len(data)]) + data, 1),  # a last beat of 5 bytes
            (b"I\x08" + bytes(range(8)), 1),  # a full beat, not last
            (b"O", 1 + 3),
            (b"O", 1),  # one output beat waiting, then none
            (b"I\x09" + bytes(9), 1),
            (b"?", 1),
        ],  # 9 bytes > W/8: refused; unknown command
        out_beats=[(0x332211, 3, 1)],
    )
    full = int.from_bytes(bytes(range(8)), "little")
    assert beats == [(int.from_bytes(data, "little"), 5, 1), (full, 8, 0)]
    # The refused 'I' is answered at its header; its 9 data bytes then read as (unknown) commands.
    assert answer[:6] == b"\x06\x06" + bytes([0x83, 0x11, 0x22, 0x33])
    assert answer[6] == 0xFF
    assert answer[7] == 0x15


@pytest.mark.parametrize("fout", [125, 100, 150])
def test_pll_reaches_the_frequency_within_its_limits(fout):
    clki, fb, op, achieved = pll_params(100, fout)
    assert abs(achieved - fout) < 0.01 * fout
    assert 3.125 <= 100 / clki <= 400 and 400 <= achieved * op <= 800
    assert achieved == pytest.approx(100 / clki * fb)


def test_pll_refuses_an_impossible_frequency():
    with pytest.raises(ValueError, match="cannot make"):
        pll_params(100, 900)
