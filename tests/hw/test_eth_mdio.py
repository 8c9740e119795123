"""MDIO master and PHY manager in Amaranth's simulator against a clause 22 PHY model written here: the
model decodes the MDC/MDIO waveform bit by bit (sampling on MDC's rising edge) and answers reads."""

import random

import pytest
from amaranth.sim import Simulator

from wanreduce.hw.eth.mdio import BMSR, BMSR_LINK, MdioMaster, PhyManager


class PhyModel:
    """Clause 22 PHY: 32 registers at address ``addr``; a read drives the turnaround's second bit (0) and
    the data, each for one MDC period from a rising edge."""

    def __init__(self, addr, regs):
        self.addr, self.regs = addr, dict(regs)
        self.bits, self.ones = [], 0
        self.drive = None  # bits to put out, one per MDC rising edge, the PHY's answer
        self.writes, self.reads = [], []

    def rising(self, bit):
        """The value taken on an MDC rising edge; returns the bit the PHY drives after it (or None)."""
        if self.drive:
            return self.drive.pop(0)
        if not self.bits:
            if bit:
                self.ones += 1
                return None
            if self.ones < 32:
                self.ones = 0
                return None
        self.bits.append(bit)
        if len(self.bits) == 14:
            st, op = self.bits[0:2], self.bits[2:4]
            phy = int("".join(map(str, self.bits[4:9])), 2)
            reg = int("".join(map(str, self.bits[9:14])), 2)
            assert st == [0, 1], st
            if op == [1, 0] and phy == self.addr:
                value = self.regs.get(reg, 0)
                self.reads.append(reg)
                # Turnaround: released for a bit, then the PHY's 0; then the data, most significant first.
                self.drive = [None, 0] + [value >> (15 - k) & 1 for k in range(16)] + [None]
                self.bits, self.ones = [], 0
                return None
        if len(self.bits) == 32:
            op = self.bits[2:4]
            phy = int("".join(map(str, self.bits[4:9])), 2)
            reg = int("".join(map(str, self.bits[9:14])), 2)
            ta = self.bits[14:16]
            data = int("".join(map(str, self.bits[16:32])), 2)
            assert op == [0, 1] and ta == [1, 0], (op, ta)
            if phy == self.addr:
                self.writes.append((reg, data))
                self.regs[reg] = data
            self.bits, self.ones = [], 0
        return None


def _run(dut, phy, body, cycles):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    state = {"mdc": 0, "out": None}

    async def pins(ctx):
        while True:
            await ctx.tick()
            mdc = ctx.get(dut.mdc)
            line = ctx.get(dut.mdio_o) if ctx.get(dut.mdio_oe) else 1  # pulled up
            if state["out"] is not None:
                assert not ctx.get(dut.mdio_oe), "master and PHY drive MDIO together"
                line = state["out"]
            if mdc and not state["mdc"]:
                state["out"] = phy.rising(line)
            state["mdc"] = mdc
            ctx.set(dut.mdio_i, line if state["out"] is None else state["out"])

    sim.add_testbench(pins, background=True)
    sim.add_testbench(body)
    sim.run_until(cycles * 1e-8)


def test_mdio_reads_and_writes():
    rng = random.Random(5)
    regs = {r: rng.getrandbits(16) for r in range(32)}
    phy = PhyModel(3, regs)
    dut = MdioMaster(divisor=3)
    done = []

    async def body(ctx):
        for reg, value in ((0, 0x1140), (4, 0x01E1), (31, 0xA5C3)):
            ctx.set(dut.phy, 3), ctx.set(dut.reg, reg), ctx.set(dut.wdata, value), ctx.set(dut.write, 1)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(~dut.busy)
        for reg in (1, 2, 4, 17):
            ctx.set(dut.phy, 3), ctx.set(dut.reg, reg), ctx.set(dut.write, 0), ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(~dut.busy)
            done.append((reg, ctx.get(dut.rdata)))

    _run(dut, phy, body, 12000)
    assert phy.writes == [(0, 0x1140), (4, 0x01E1), (31, 0xA5C3)]
    assert phy.reads == [1, 2, 4, 17]
    assert done == [(r, phy.regs[r]) for r in (1, 2, 4, 17)]


@pytest.mark.parametrize("link", [0, 1])
def test_phy_manager_reset_and_link(link):
    phy = PhyModel(0, {BMSR: 0x7949 | (link << BMSR_LINK)})
    dut = PhyManager(divisor=2, reset_cycles=50, settle_cycles=20, poll_cycles=100)
    seen = {}

    async def body(ctx):
        for _ in range(49):
            assert not ctx.get(dut.phy_rst_n)
            await ctx.tick()
        await ctx.tick()
        assert ctx.get(dut.phy_rst_n)
        await ctx.tick().until(dut.reads == 2)
        seen["link"] = ctx.get(dut.link)
        phy.regs[BMSR] ^= 1 << BMSR_LINK  # the link changes: the next poll shows it
        await ctx.tick().until(dut.reads == 4)
        seen["after"] = ctx.get(dut.link)

    _run(dut, phy, body, 4000)
    assert seen == {"link": link, "after": 1 - link}
    assert phy.reads and set(phy.reads) == {BMSR}
