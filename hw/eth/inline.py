"""The aggregator in line between a site's WAN link and its LAN, on a board with two RGMII ports.

::

    WAN ─► EthMac (wan) ─► core.i ─┬─ core.o (RESULTs) ─┐
                                   └─ core.bypass ──────┴─► FrameMerge ─► EthMac (lan) ─► LAN
    WAN ◄─ EthMac (wan) ◄──────────────────────────────────────────────── EthMac (lan) ◄─ LAN

Frames from the WAN that are the core's work are aggregated and their RESULTs go to the LAN; everything
else from the WAN (other traffic, other roots' RESULTs) passes to the LAN through the core's bypass port;
the LAN's traffic goes out of the WAN port unchanged. :class:`EthInlineBoard` has the pins as ports (the
Verilator top with ``primitive="model"``); :class:`VersaInlineTop` puts it on the ECP5 Versa kit. The
UART, the board registers (WAN port at ``regmap.BOARD_BASE``, LAN port ``regmap.BOARD_PORT_STRIDE``
after it) and the clocks are :mod:`.board`'s.
"""

from amaranth.hdl import Const, Elaboratable, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import ethernet, regmap
from ..board import BOARD_CORE, UARTBridge
from ..core import AggregatorCore
from .board import (
    RGMII_MHZ,
    EthBoardTop,
    block_resets,
    board_clocks,
    board_registers,
    phy_manager,
    port_registers,
    take_board_keywords,
)
from .mac import EthMac, RgmiiSignature
from .merge import FrameMerge

__all__ = ["EthInlineBoard", "VersaInlineTop", "INLINE_BYPASS_BYTES", "INLINE_CORE"]

#: The longest frame the bypass port forwards: a standard frame without its FCS, in whole 8-byte beats.
INLINE_BYPASS_BYTES = -(-(ethernet.MAX_FRAME_BYTES - ethernet.ETH_FCS_BYTES) // 8) * 8
#: The in-line tops' core: the board's (:data:`~wanreduce.hw.board.BOARD_CORE`) with a bypass port.
INLINE_CORE = BOARD_CORE.replace(bypass_bytes=INLINE_BYPASS_BYTES)


def _mdio_ports():
    return {
        "mdc": Out(1),
        "mdio_o": Out(1),
        "mdio_oe": Out(1),
        "mdio_i": In(1, init=1),
        "phy_rst_n": Out(1),
        "link": Out(1),
    }


class EthInlineBoard(wiring.Component):
    """Core with a bypass port between two MACs, with both PHYs' pins, MDIO and reset as ports
    (``wan_*``, ``lan_*``). Keywords as :class:`~wanreduce.hw.eth.board.EthBoard`'s; ``core`` must have a
    bypass port (default :data:`INLINE_CORE`). Latency and back-pressure:
    the MACs' and the core's; a frame waits in the LAN MAC's transmit buffer while another is sent."""

    def __init__(self, *, core=None, **board):
        take_board_keywords(self, **board)
        self.config = INLINE_CORE if core is None else core
        if not self.config.bypass_bytes:
            raise ValueError("An in-line board's core needs a bypass port: give it bypass_bytes above 0.")
        ports = {"wan": Out(RgmiiSignature()), "lan": Out(RgmiiSignature())}
        for side in ("wan", "lan"):
            ports.update({f"{side}_{k}": v for k, v in _mdio_ports().items()})
        ports.update({"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        core = AggregatorCore(self.config)
        W = core.width
        blocks = block_resets(
            m,
            {
                "core": core,
                "wan_mac": EthMac(width=W, primitive=self.primitive),
                "lan_mac": EthMac(width=W, primitive=self.primitive),
            },
        )
        m.submodules.core, m.submodules.wan_mac, m.submodules.lan_mac = core, wan, lan = blocks.values()
        m.submodules.to_lan = merge = FrameMerge(width=W, n=2)
        m.submodules.bridge = bridge = UARTBridge(width=W, divisor=self.uart_divisor)
        wiring.connect(m, wiring.flipped(self.wan), wan.rgmii)
        wiring.connect(m, wiring.flipped(self.lan), lan.rgmii)
        wiring.connect(m, wan.o, core.i)
        wiring.connect(m, core.o, merge.i0)
        wiring.connect(m, core.bypass, merge.i1)
        wiring.connect(m, merge.o, lan.i)
        wiring.connect(m, lan.o, wan.i)
        m.d.comb += [
            bridge.rx.eq(self.uart_rx),
            self.uart_tx.eq(bridge.tx),
            bridge.o.ready.eq(1),
            bridge.i.valid.eq(0),
        ]
        values = []
        for side, mac in (("wan", wan), ("lan", lan)):
            m.submodules[f"{side}_phy"] = phy = phy_manager(self)
            m.d.comb += [
                getattr(self, f"{side}_mdc").eq(phy.mdc),
                getattr(self, f"{side}_mdio_o").eq(phy.mdio_o),
                getattr(self, f"{side}_mdio_oe").eq(phy.mdio_oe),
                phy.mdio_i.eq(getattr(self, f"{side}_mdio_i")),
                getattr(self, f"{side}_phy_rst_n").eq(phy.phy_rst_n),
                getattr(self, f"{side}_link").eq(phy.link),
            ]
            regs = port_registers(mac, phy)
            values += regs + [Const(0, 32)] * (regmap.BOARD_PORT_STRIDE - len(regs))
        board_registers(m, bridge.ctl, core.ctl, values[: regmap.BOARD_PORT_STRIDE + len(regmap.BOARD_NAMES)])
        return m


class VersaInlineTop(Elaboratable):
    """:class:`EthInlineBoard` on the ECP5 Versa kit: PHY 0 is the WAN port, PHY 1 the LAN port; the PLL
    and resets as :class:`~wanreduce.hw.eth.board.EthBoardTop`'s (the kit's oscillator is 100 MHz too),
    except the core's clock: the in-line core, with its bypass port, did not meet 100 MHz on this smaller,
    slower part (docs/board.md), so it runs at the same VCO divided by 7 (71.4 MHz), still 4.6 times the
    line's gigabit on its 64-bit bus. LEDs 0..2: PLL unlocked, WAN link, LAN link."""

    PLL = {**EthBoardTop.PLL, "clkos2_div": 7}
    CORE_MHZ = RGMII_MHZ * PLL["clkop_div"] / PLL["clkos2_div"]

    def __init__(self, *, core=None, baud=115200):
        self.config, self.baud = INLINE_CORE if core is None else core, baud

    pll = classmethod(EthBoardTop.pll.__func__)
    core_cycles = classmethod(EthBoardTop.core_cycles.__func__)

    def elaborate(self, platform):
        m = Module()
        lock = board_clocks(m, platform, self.pll)
        m.submodules.board = board = EthInlineBoard(
            primitive="ecp5", core=self.config, **self.core_cycles(baud=self.baud)
        )
        for side, k in (("wan", 0), ("lan", 1)):
            eth = platform.request("eth_rgmii", k)
            pins = getattr(board, side)
            # amaranth-boards names the control pins tx_ctl/rx_ctl on the first PHY, tx_ctrl/rx_ctrl on
            # the second.
            tx_ctl = getattr(eth, "tx_ctl", None) or eth.tx_ctrl
            rx_ctl = getattr(eth, "rx_ctl", None) or eth.rx_ctrl
            m.d.comb += [
                pins.rx_clk.eq(eth.rx_clk.i),
                pins.rx_ctl.eq(rx_ctl.i),
                pins.rxd.eq(eth.rx_data.i),
                eth.tx_clk.o.eq(pins.tx_clk),
                tx_ctl.o.eq(pins.tx_ctl),
                eth.tx_data.o.eq(pins.txd),
                eth.mdc.o.eq(getattr(board, f"{side}_mdc")),
                eth.mdio.o.eq(getattr(board, f"{side}_mdio_o")),
                eth.mdio.oe.eq(getattr(board, f"{side}_mdio_oe")),
                getattr(board, f"{side}_mdio_i").eq(eth.mdio.i),
                eth.rst.o.eq(~getattr(board, f"{side}_phy_rst_n")),
            ]
        uart = platform.request("uart", 0)
        m.d.comb += [board.uart_rx.eq(uart.rx.i), uart.tx.o.eq(board.uart_tx)]
        leds = [platform.request("led", k) for k in range(3)]
        m.d.comb += [leds[0].o.eq(~lock), leds[1].o.eq(board.wan_link), leds[2].o.eq(board.lan_link)]
        return m
