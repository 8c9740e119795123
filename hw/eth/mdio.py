"""MDIO management (IEEE 802.3 clause 22): register reads and writes on the PHY, its reset, its link state.

:class:`MdioMaster` shifts one management frame at a time: 32 preamble ones, start ``01``, the opcode
(``01`` write, ``10`` read), the PHY and register addresses, the turnaround and 16 data bits. MDIO
changes while MDC is low and is taken on MDC's rising edge by the PHY; read data are taken by the master
at the end of MDC's high half, where clause 22's 300 ns clock-to-data of the PHY has passed for any MDC
of 1.6 MHz or less. :class:`PhyManager` holds the PHY in reset after power-up, then reads the basic
status register over and over and reports its link bit.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream import alike

__all__ = ["MdioMaster", "PhyManager", "BMSR", "BMSR_LINK", "MDIO_OUTPUTS", "mdio_pins"]

#: Basic mode status register and its link-status bit (clause 22.2.4.2).
BMSR, BMSR_LINK = 1, 2
_PREAMBLE, _FRAME = 32, 32


def mdio_pins(*, o_init=0, i_init=0):
    """The management pins as component members: ``mdc`` and the MDIO pin's buffer (``mdio_o``, ``mdio_oe``,
    ``mdio_i``), with the output's and the input's values before anything drives them."""
    return {"mdc": Out(1), "mdio_o": Out(1, init=o_init), "mdio_oe": Out(1), "mdio_i": In(1, init=i_init)}


#: The outputs among :func:`mdio_pins`, which a wrapper passes up from the block it wraps.
MDIO_OUTPUTS = ("mdc", "mdio_o", "mdio_oe")


class MdioMaster(wiring.Component):
    """Clause 22 management frames with MDC at the domain's clock over ``2 * divisor``.

    Ports: ``start`` (a cycle: begin a frame with ``write``, ``phy``, ``reg``, ``wdata``), ``busy``,
    ``rdata`` (a read's data, valid once ``busy`` falls), ``mdc``, ``mdio_o``/``mdio_oe``/``mdio_i`` (the
    pin's buffer). Latency: 65 MDC periods per frame (the last one idle). ``start`` while ``busy`` is ignored.
    """

    def __init__(self, *, divisor):
        if divisor < 2:
            raise ValueError(
                f"The MDC divisor must be at least 2 clock cycles per half period, not {divisor}."
            )
        self.divisor = divisor
        super().__init__(
            {
                "start": In(1),
                "write": In(1),
                "phy": In(5),
                "reg": In(5),
                "wdata": In(16),
                "rdata": Out(16),
                "busy": Out(1),
                # The pin idles high (pulled up), so the buffer's output starts there too.
                **mdio_pins(o_init=1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bits = _PREAMBLE + _FRAME
        shreg = Signal(bits)
        reading = Signal()
        index = Signal(range(bits + 1))  # bits sent so far in this frame
        timer = Signal(range(self.divisor))
        high = Signal()  # MDC's half
        m.d.comb += [self.mdc.eq(high), self.mdio_o.eq(shreg[-1])]
        with m.If(~self.busy):
            m.d.sync += [high.eq(0), self.mdio_oe.eq(0)]
            with m.If(self.start):
                # Fields go out most significant bit first: start 01, opcode 01 (write) or 10 (read),
                # turnaround 10 (write; on a read the PHY drives it).
                op = Cat(self.write, ~self.write)
                ta = Cat(Const(0, 1), self.write)
                frame = Cat(self.wdata, ta, self.reg, self.phy, op, Const(0b01, 2))
                m.d.sync += [
                    shreg.eq(Cat(frame, Const((1 << _PREAMBLE) - 1, _PREAMBLE))),
                    reading.eq(~self.write),
                    index.eq(0),
                    timer.eq(self.divisor - 1),
                    self.busy.eq(1),
                    self.mdio_oe.eq(1),
                ]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Elif(~high):
            m.d.sync += [high.eq(1), timer.eq(self.divisor - 1)]
        with m.Else():
            # End of the high half: take a read bit, then move to the next bit with MDC falling.
            m.d.sync += [high.eq(0), timer.eq(self.divisor - 1), shreg.eq(shreg << 1), index.eq(index + 1)]
            with m.If(reading & (index >= bits - 16) & (index < bits)):
                m.d.sync += self.rdata.eq(Cat(self.mdio_i, self.rdata[:15]))
            with m.If(reading & (index == _PREAMBLE + 13)):
                m.d.sync += self.mdio_oe.eq(0)  # the turnaround and the data belong to the PHY
            with m.If(index == bits - 1):
                # One idle period follows, MDIO released, so that a PHY's last data bit has ended before
                # the next frame drives the line.
                m.d.sync += self.mdio_oe.eq(0)
            with m.If(index == bits):
                m.d.sync += self.busy.eq(0)
        return m


class PhyManager(wiring.Component):
    """PHY reset and link state over :class:`MdioMaster`.

    After reset ``phy_rst_n`` stays low for ``reset_cycles``, then the PHY gets ``settle_cycles`` to wake
    up; from then on the basic status register of PHY address ``phy`` is read every ``poll_cycles`` and
    ``link`` follows its link bit (latched low by the PHY until read, so a drop between polls shows at the
    next one). ``reads`` counts completed polls. The MDIO pins are :class:`MdioMaster`'s.
    """

    def __init__(self, *, divisor, reset_cycles, settle_cycles, poll_cycles, phy=0):
        for name, value in (("reset", reset_cycles), ("settle", settle_cycles), ("poll", poll_cycles)):
            if value < 1:
                raise ValueError(f"The PHY manager's {name} time must be at least one cycle, not {value}.")
        self.divisor, self.phy = divisor, phy
        self.reset_cycles, self.settle_cycles, self.poll_cycles = reset_cycles, settle_cycles, poll_cycles
        super().__init__(
            {
                "phy_rst_n": Out(1),
                "link": Out(1),
                "reads": Out(16),
                **mdio_pins(),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.mdio = mdio = MdioMaster(divisor=self.divisor)
        m.d.comb += [
            *alike(self, mdio, MDIO_OUTPUTS),
            mdio.mdio_i.eq(self.mdio_i),
            mdio.phy.eq(self.phy),
            mdio.reg.eq(BMSR),
            mdio.write.eq(0),
        ]
        timer = Signal(range(max(self.reset_cycles, self.settle_cycles, self.poll_cycles) + 1))
        with m.FSM():
            with m.State("RESET"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(timer == self.reset_cycles - 1):
                    m.d.sync += [timer.eq(0), self.phy_rst_n.eq(1)]
                    m.next = "SETTLE"
            with m.State("SETTLE"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(timer == self.settle_cycles - 1):
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += mdio.start.eq(1)
                m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(~mdio.busy & ~mdio.start):
                    m.d.sync += [
                        self.link.eq(mdio.rdata[BMSR_LINK]),
                        self.reads.eq(self.reads + 1),
                        timer.eq(0),
                    ]
                    m.next = "POLL"
            with m.State("POLL"):
                m.d.sync += timer.eq(timer + 1)
                with m.If(timer == self.poll_cycles - 1):
                    m.next = "READ"
        return m
