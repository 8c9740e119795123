"""ECP5 I/O cells of the RGMII interface: DDR input and output registers and the input/output delay line.

``primitive="ecp5"`` instantiates the vendor cells (``IDDRX1F``, ``ODDRX1F``, ``DELAYG``), which Yosys knows
only as black boxes; ``primitive="model"`` builds behavioural equivalents from ordinary registers so that
Verilator runs the same design. That keyword is the only difference between the two builds.

Behaviour (both builds):

* :class:`DDRInput`: ``q0`` is ``d`` as sampled on a rising edge of the domain's clock, ``q1`` as sampled
  on the falling edge that follows; the pair appears together one rising edge later (latency 1 cycle).
* :class:`DDROutput`: ``d0`` and ``d1`` are taken on a rising edge; the pad carries ``d0`` while the clock
  is high and ``d1`` while it is low in the cycle after that (latency 1 cycle).
* :class:`Delay`: the pad signal delayed by ``taps`` steps of the ECP5 delay line (about 25 ps each,
  Lattice TN1265); the model passes it through, since Verilator sees no time inside a cycle: the testbench
  supplies the phase the delay would create.
"""

from amaranth.hdl import ClockDomain, ClockSignal, Instance, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PRIMITIVES", "DDRInput", "DDROutput", "Delay", "check_primitive"]

#: The two builds of the I/O cells.
PRIMITIVES = ("ecp5", "model")


def check_primitive(primitive):
    """Refuse an I/O cell build other than :data:`PRIMITIVES` with a full-sentence error."""
    if primitive not in PRIMITIVES:
        raise ValueError(f"The I/O cells must be one of {', '.join(PRIMITIVES)}, not {primitive!r}.")


def _check_width(width):
    if width < 1:
        raise ValueError(f"An I/O cell group needs at least one bit, not {width}.")


class DDRInput(wiring.Component):
    """``width`` DDR input registers clocked by ``domain``: ``d`` (from the pad) in, ``q0``/``q1`` out."""

    def __init__(self, *, width, domain="sync", primitive="ecp5"):
        _check_width(width)
        check_primitive(primitive)
        self.width, self.domain, self.primitive = width, domain, primitive
        super().__init__({"d": In(width), "q0": Out(width), "q1": Out(width)})

    def elaborate(self, platform):
        m = Module()
        if self.primitive == "ecp5":
            for k in range(self.width):
                m.submodules[f"iddr{k}"] = Instance(
                    "IDDRX1F",
                    i_D=self.d[k],
                    i_SCLK=ClockSignal(self.domain),
                    i_RST=0,
                    o_Q0=self.q0[k],
                    o_Q1=self.q1[k],
                )
            return m
        # The falling-edge sample is taken in a local domain on the inverted edge of the same clock.
        m.domains.ddr_neg = ClockDomain("ddr_neg", clk_edge="neg", local=True, reset_less=True)
        m.d.comb += ClockSignal("ddr_neg").eq(ClockSignal(self.domain))
        rise, fall = Signal(self.width), Signal(self.width)
        m.d[self.domain] += rise.eq(self.d)
        m.d.ddr_neg += fall.eq(self.d)
        m.d[self.domain] += [self.q0.eq(rise), self.q1.eq(fall)]
        return m


class DDROutput(wiring.Component):
    """``width`` DDR output registers clocked by ``domain``: ``d0``/``d1`` in, ``q`` (to the pad) out."""

    def __init__(self, *, width, domain="sync", primitive="ecp5"):
        _check_width(width)
        check_primitive(primitive)
        self.width, self.domain, self.primitive = width, domain, primitive
        super().__init__({"d0": In(width), "d1": In(width), "q": Out(width)})

    def elaborate(self, platform):
        m = Module()
        if self.primitive == "ecp5":
            for k in range(self.width):
                m.submodules[f"oddr{k}"] = Instance(
                    "ODDRX1F",
                    i_D0=self.d0[k],
                    i_D1=self.d1[k],
                    i_SCLK=ClockSignal(self.domain),
                    i_RST=0,
                    o_Q=self.q[k],
                )
            return m
        r0, r1 = Signal(self.width), Signal(self.width)
        m.d[self.domain] += [r0.eq(self.d0), r1.eq(self.d1)]
        # The pad follows the clock's level: r0 in the high half-cycle, r1 in the low one.
        m.d.comb += self.q.eq(Mux(ClockSignal(self.domain), r0, r1))
        return m


class Delay(wiring.Component):
    """``width`` ECP5 delay lines of ``taps`` fixed steps (0..127): ``a`` in, ``z`` out. No clock."""

    def __init__(self, *, width, taps, primitive="ecp5"):
        _check_width(width)
        check_primitive(primitive)
        if not 0 <= taps <= 127:
            raise ValueError(f"The ECP5 delay line has 0 to 127 taps, not {taps}.")
        self.width, self.taps, self.primitive = width, taps, primitive
        super().__init__({"a": In(width), "z": Out(width)})

    def elaborate(self, platform):
        m = Module()
        if self.primitive == "model" or self.taps == 0:
            m.d.comb += self.z.eq(self.a)
            return m
        for k in range(self.width):
            m.submodules[f"delay{k}"] = Instance(
                "DELAYG", p_DEL_MODE="USER_DEFINED", p_DEL_VALUE=self.taps, i_A=self.a[k], o_Z=self.z[k]
            )
        return m
