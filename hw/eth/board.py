"""The aggregator on an ECP5 board's gigabit Ethernet port, its control port on the UART.

::

    RGMII PHY ─► EthMac ─► o ─► AggregatorCore.i     (frames from the switch; bad ones dropped)
    RGMII PHY ◄─ EthMac ◄─ i ◄─ AggregatorCore.o     (RESULT frames, to the hosts' group)
    uart ─► UARTBridge ─► ctl ─► core registers, or the board registers (regmap.BOARD_BASE)
    MDIO, PHY reset ◄─ PhyManager                     (reset after power-up, link polled)

:class:`EthBoard` is the design with the board's pins as its ports: the same component is the Verilator
top (``primitive="model"``, the testbench supplies the clocks) and the inside of :class:`EthBoardTop`,
which adds the ECP5 PLL and the board's pins (``primitive="ecp5"``). The UART protocol is
:mod:`wanreduce.hw.board`'s; its beat commands are not connected here (``'I'`` beats are taken and
discarded, ``'O'`` finds no beat): the data path is the Ethernet port.

Domains: ``sync`` (the core's clock, :data:`ETH_BOARD_MHZ`), ``eth_tx`` and ``eth_tx90`` (the 125 MHz
transmit clock and the same a quarter period later), ``eth_rx`` (the PHY's receive clock, made inside the
MAC). The core and each MAC's core-clock side run in local domains on ``sync``'s clock with a registered
copy of its reset each (:func:`block_resets`): one reset net from the synchroniser to every flip-flop of
the core and the MACs spans the die and was the placed design's critical path.
"""

from amaranth.hdl import (
    Array,
    ClockDomain,
    ClockSignal,
    DomainRenamer,
    Elaboratable,
    Instance,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from ...spec import regmap
from ..board import BOARD_CORE, EHXPLLL_FILTER, EHXPLLL_HELD, EHXPLLL_MODES, UARTBridge
from ..core import AggregatorCore
from ..stream import alike
from .mac import RX_COUNTERS, TX_COUNTERS, EthMac, RgmiiSignature
from .mdio import MDIO_OUTPUTS, PhyManager, mdio_pins

__all__ = [
    "EthBoard",
    "EthBoardTop",
    "ETH_BOARD_MHZ",
    "ETH_CORE",
    "RGMII_MHZ",
    "block_resets",
    "board_clocks",
    "board_registers",
    "phy_manager",
    "port_registers",
    "take_board_keywords",
]

#: The Ethernet tops' core clock, a PLL output of its own: the core at this size meets the RGMII clock's
#: 125 MHz on the ECP5 at some placement seeds only (docs/vendor.md); 100 MHz, a division of the same VCO,
#: leaves it margin while its 64-bit bus still carries 6.4 times the line's gigabit.
ETH_BOARD_MHZ = 100
#: The ECPIX-5 Ethernet top's core: the UART board's (:data:`~wanreduce.hw.board.BOARD_CORE`) with 16 slots
#: of 1 KiB member buffers, so that the wire's usual 1 KiB chunk fits. Placed with every clock domain
#: meeting its constraint (docs/board.md says what limits a larger one).
ETH_CORE = BOARD_CORE.replace(slots=16, chunk_bytes=1024)
#: The RGMII clocks of gigabit Ethernet (receive from the PHY, transmit from the PLL).
RGMII_MHZ = 125
#: Core cycles per bit of the board's UART at 115200 baud.
UART_DIVISOR = round(ETH_BOARD_MHZ * 1e6 / 115200)


def port_registers(mac, phy):
    """One port's board registers, in :data:`~wanreduce.spec.regmap.BOARD_NAMES` order."""
    values = [getattr(mac, name) for name in (*RX_COUNTERS, *TX_COUNTERS)] + [phy.link, phy.reads]
    assert len(values) == len(regmap.BOARD_NAMES)
    return values


def board_registers(m, ctl, core_ctl, values):
    """Pass the control port ``ctl`` on to the core's ``core_ctl``, except reads of ``BOARD_BASE + k``
    (``k`` < ``len(values)``), answered with ``values[k]`` at the core's read latency (data two cycles
    after ``re``, held until the next read)."""
    n = len(values)
    board = Signal()
    index = Signal(range(n))
    value = Signal(32)
    offset = ctl.addr - regmap.BOARD_BASE
    m.d.comb += [
        core_ctl.addr.eq(ctl.addr),
        core_ctl.wdata.eq(ctl.wdata),
        core_ctl.we.eq(ctl.we),
        core_ctl.re.eq(ctl.re),
        ctl.rdata.eq(Mux(board, value, core_ctl.rdata)),
    ]
    with m.If(ctl.re):
        m.d.sync += [board.eq((ctl.addr >= regmap.BOARD_BASE) & (offset < n)), index.eq(offset)]
    m.d.sync += value.eq(Array(values)[index])


def block_resets(m, blocks, domain="sync"):
    """Give each of ``blocks`` (``{name: elaboratable}``) a local clock domain ``name`` on ``domain``'s
    clock, reset from a registered copy of ``domain``'s reset, and return the blocks renamed into them.

    The copies are the taps of one chain of registers (the ``k``-th block's reset is ``domain``'s delayed
    ``k + 1`` cycles): each register drives one block and the next register, so the placer can put it
    beside its block, and no two copies are the same function that synthesis would merge back into one
    net. The blocks leave reset within ``len(blocks)`` cycles of each other; no stream between them
    carries a beat that early (a frame takes hundreds of cycles to arrive)."""
    prev = ResetSignal(domain)
    renamed = {}
    for name, block in blocks.items():
        # Held in reset from configuration (init 1) until the chain's first real value arrives.
        rst = Signal(init=1, reset_less=True, name=f"{name}_rst")
        m.d[domain] += rst.eq(prev)
        m.domains += ClockDomain(name, local=True)
        m.d.comb += [ClockSignal(name).eq(ClockSignal(domain)), ResetSignal(name).eq(rst)]
        renamed[name] = DomainRenamer({"sync": name})(block)
        prev = rst
    return renamed


def take_board_keywords(
    board,
    *,
    primitive="ecp5",
    uart_divisor=UART_DIVISOR,
    mdc_divisor=50,
    phy_reset_cycles=ETH_BOARD_MHZ * 10_000,
    phy_settle_cycles=ETH_BOARD_MHZ * 50_000,
    poll_cycles=ETH_BOARD_MHZ * 100_000,
):
    """Keep on ``board`` the keywords every Ethernet board takes besides ``core`` (:class:`EthBoard`'s):
    its MACs' DDR cells, its UART's and its PHY managers' timing."""
    board.primitive = primitive
    board.uart_divisor, board.mdc_divisor = uart_divisor, mdc_divisor
    board.phy_cycles = (phy_reset_cycles, phy_settle_cycles, poll_cycles)


def phy_manager(board, phy=0):
    """A PHY manager with ``board``'s timing (:func:`take_board_keywords`) for the PHY at MDIO address
    ``phy``."""
    reset_cycles, settle_cycles, poll_cycles = board.phy_cycles
    return PhyManager(
        divisor=board.mdc_divisor,
        reset_cycles=reset_cycles,
        settle_cycles=settle_cycles,
        poll_cycles=poll_cycles,
        phy=phy,
    )


class EthBoard(wiring.Component):
    """Core, MAC, UART bridge and PHY manager, with the board's pins as ports.

    Keywords: ``primitive`` (the MAC's DDR cells: "ecp5" or "model"), ``core`` (the core's
    :class:`~wanreduce.spec.core.CoreConfig`, default :data:`~wanreduce.hw.board.BOARD_CORE`),
    ``uart_divisor`` (core cycles per UART bit), ``mdc_divisor`` (core cycles per MDC half period),
    ``phy_reset_cycles``, ``phy_settle_cycles``, ``poll_cycles`` (the link poll's period), ``phy`` (the
    PHY's MDIO address).
    Latency and back-pressure are the MAC's and the core's: a frame reaches the core once it is all in
    and checked; the core's back-pressure fills the MAC's receive buffer, then frames are dropped and
    counted (``rx_overflow``).
    """

    def __init__(self, *, core=None, phy=0, **board):
        take_board_keywords(self, **board)
        self.config = core or BOARD_CORE
        self.phy = phy
        super().__init__(
            {
                "rgmii": Out(RgmiiSignature()),
                **mdio_pins(i_init=1),
                "phy_rst_n": Out(1),
                "uart_rx": In(1, init=1),
                "uart_tx": Out(1, init=1),
                "link": Out(1),
                "rx_activity": Out(1),
                "tx_activity": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        core = AggregatorCore(self.config)
        blocks = block_resets(m, {"core": core, "mac": EthMac(width=core.width, primitive=self.primitive)})
        m.submodules.core, m.submodules.mac = core, mac = blocks["core"], blocks["mac"]
        m.submodules.bridge = bridge = UARTBridge(width=core.width, divisor=self.uart_divisor)
        m.submodules.phy = phy = phy_manager(self, self.phy)
        wiring.connect(m, wiring.flipped(self.rgmii), mac.rgmii)
        wiring.connect(m, mac.o, core.i)
        wiring.connect(m, core.o, mac.i)
        m.d.comb += [
            bridge.rx.eq(self.uart_rx),
            self.uart_tx.eq(bridge.tx),
            bridge.o.ready.eq(1),  # 'I' beats: taken and discarded
            bridge.i.valid.eq(0),  # 'O': no beat
            *alike(self, phy, MDIO_OUTPUTS),
            phy.mdio_i.eq(self.mdio_i),
            self.phy_rst_n.eq(phy.phy_rst_n),
            self.link.eq(phy.link),
            self.rx_activity.eq(mac.o.valid & mac.o.ready),
            self.tx_activity.eq(mac.i.valid & mac.i.ready),
        ]

        # Control port: the core's registers, and the board registers.
        board_registers(m, bridge.ctl, core.ctl, port_registers(mac, phy))
        return m


def board_clocks(m, platform, pll):
    """The Ethernet tops' clocks on a board with a 100 MHz oscillator (``clk100``) and a reset button
    (``rst``): ``pll(m, clk100)`` adds the PLL and returns ``(CLKOP, CLKOS, CLKOS2, LOCK)``; the domains
    ``eth_tx`` (CLKOP), ``eth_tx90`` (CLKOS) and ``sync`` (CLKOS2, the core) get them, each reset by its
    own synchroniser while the button is pressed or the PLL is unlocked. Returns LOCK."""
    clk100 = platform.request("clk100", 0).i
    button = platform.request("rst", 0).i
    clkop, clkos, clkos2, lock = pll(m, clk100)
    for name, clk in (("sync", clkos2), ("eth_tx", clkop), ("eth_tx90", clkos)):
        m.domains += ClockDomain(name)
        m.d.comb += ClockSignal(name).eq(clk)
        m.submodules[f"reset_{name}"] = ResetSynchronizer(button | ~lock, domain=name)
    return lock


class EthBoardTop(Elaboratable):
    """:class:`EthBoard` on an ECPIX-5: the PLL (from the 100 MHz oscillator: 125 MHz, the same at 90°,
    and the core's :data:`ETH_BOARD_MHZ`), resets, the RGMII, MDIO, PHY reset, UART and LED pins. ``core``:
    the core's :class:`~wanreduce.spec.core.CoreConfig`, default :data:`ETH_CORE`."""

    #: EHXPLLL settings: 100 MHz in, VCO 500 MHz; CLKOP 125 MHz (fed back), CLKOS 125 MHz one VCO period
    #: (2 ns, 90°) later, CLKOS2 100 MHz for the core.
    PLL = {
        "clki_div": 4,
        "clkfb_div": 5,
        "clkop_div": 4,
        "clkos_div": 4,
        "clkos_cphase": 4,
        "clkos_fphase": 0,
        "clkos2_div": 5,
    }
    assert 100 * PLL["clkfb_div"] // PLL["clki_div"] == RGMII_MHZ
    assert 400 <= RGMII_MHZ * PLL["clkop_div"] <= 800  # the ECP5 VCO's range
    assert RGMII_MHZ * PLL["clkop_div"] // PLL["clkos2_div"] == ETH_BOARD_MHZ
    #: The core's clock, CLKOS2 (MHz).
    CORE_MHZ = ETH_BOARD_MHZ

    def __init__(self, *, core=None, baud=115200):
        self.config, self.baud = ETH_CORE if core is None else core, baud

    @classmethod
    def core_cycles(cls, *, baud):
        """The keywords of the board's parts that count core cycles: the UART's bit and the PHY's reset,
        settle and poll times (100 us, 500 us and 1 ms of this top's core clock)."""
        return {
            "uart_divisor": round(cls.CORE_MHZ * 1e6 / baud),
            "phy_reset_cycles": round(cls.CORE_MHZ * 10_000),
            "phy_settle_cycles": round(cls.CORE_MHZ * 50_000),
            "poll_cycles": round(cls.CORE_MHZ * 100_000),
        }

    @classmethod
    def pll(cls, m, clk100):
        """Add the EHXPLLL to ``m``; return its ``(CLKOP, CLKOS, CLKOS2, LOCK)``."""
        p = cls.PLL
        clkop, clkos, clkos2, lock = Signal(), Signal(), Signal(), Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            **EHXPLLL_MODES,
            p_CLKOP_ENABLE="ENABLED",
            p_CLKOS_ENABLE="ENABLED",
            p_CLKOS2_ENABLE="ENABLED",
            p_CLKOP_DIV=p["clkop_div"],
            p_CLKOP_CPHASE=p["clkop_div"] - 1,
            p_CLKOP_FPHASE=0,
            p_CLKOS_DIV=p["clkos_div"],
            p_CLKOS_CPHASE=p["clkos_cphase"],
            p_CLKOS_FPHASE=p["clkos_fphase"],
            p_CLKOS2_DIV=p["clkos2_div"],
            p_CLKOS2_CPHASE=p["clkos2_div"] - 1,
            p_CLKOS2_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            p_CLKFB_DIV=p["clkfb_div"],
            p_CLKI_DIV=p["clki_div"],
            i_CLKI=clk100,
            i_CLKFB=clkop,
            o_CLKOP=clkop,
            o_CLKOS=clkos,
            o_CLKOS2=clkos2,
            o_LOCK=lock,
            **EHXPLLL_HELD,
            a_FREQUENCY_PIN_CLKI="100",
            a_FREQUENCY_PIN_CLKOP=str(RGMII_MHZ),
            a_FREQUENCY_PIN_CLKOS=str(RGMII_MHZ),
            a_FREQUENCY_PIN_CLKOS2=f"{cls.CORE_MHZ:.6g}",
            **EHXPLLL_FILTER,
        )
        return clkop, clkos, clkos2, lock

    def elaborate(self, platform):
        m = Module()
        lock = board_clocks(m, platform, self.pll)
        cycles = self.core_cycles(baud=self.baud)
        m.submodules.board = board = EthBoard(primitive="ecp5", core=self.config, **cycles)
        eth = platform.request("eth_rgmii", 0)
        uart = platform.request("uart", 0)
        m.d.comb += [
            board.rgmii.rx_clk.eq(eth.rx_clk.i),
            board.rgmii.rx_ctl.eq(eth.rx_ctrl.i),
            board.rgmii.rxd.eq(eth.rx_data.i),
            eth.tx_clk.o.eq(board.rgmii.tx_clk),
            eth.tx_ctrl.o.eq(board.rgmii.tx_ctl),
            eth.tx_data.o.eq(board.rgmii.txd),
            eth.mdc.o.eq(board.mdc),
            eth.mdio.o.eq(board.mdio_o),
            eth.mdio.oe.eq(board.mdio_oe),
            board.mdio_i.eq(eth.mdio.i),
            eth.rst.o.eq(~board.phy_rst_n),  # the pin is active low (PinsN): .o is "in reset"
            board.uart_rx.eq(uart.rx.i),
            uart.tx.o.eq(board.uart_tx),
        ]
        leds = [platform.request("rgb_led", k) for k in range(4)]
        stretch = ETH_BOARD_MHZ * 50_000  # activity shown for about 50 ms
        for led, ev in ((leds[1].b, board.rx_activity), (leds[2].b, board.tx_activity)):
            t = Signal(range(stretch + 1))
            m.d.sync += t.eq(Mux(ev, stretch, Mux(t == 0, 0, t - 1)))
            m.d.comb += led.o.eq(t != 0)
        m.d.comb += [leds[0].g.o.eq(board.link), leds[3].r.o.eq(~lock)]
        return m


#: Name of the Ethernet tops' build products.
ETH_BUILD_NAME = "wanreduce_eth"

#: The Ethernet tops by board: (amaranth-boards module, platform class, top's module, top's class, ports).
ETH_BOARDS = {
    "ecpix5_85": ("ecpix5", "ECPIX585Platform", "board", "EthBoardTop", 1),
    "ecpix5_45": ("ecpix5", "ECPIX545Platform", "board", "EthBoardTop", 1),
    "versa_ecp5": ("versa_ecp5", "VersaECP5Platform", "inline", "VersaInlineTop", 2),
}


def check_eth_board(board):
    """Refuse a board without an Ethernet top with a full-sentence error."""
    if board not in ETH_BOARDS:
        raise ValueError(f"The Ethernet board must be one of {', '.join(ETH_BOARDS)}, not {board!r}.")


def build_eth(board="ecpix5_85", *, build_dir, seed=1, name=ETH_BUILD_NAME, core=None):
    """Build ``board``'s Ethernet top (:data:`ETH_BOARDS`) to a bitstream in ``build_dir`` (amaranth-boards'
    flow with the YoWASP tools, as :func:`wanreduce.hw.board.build`); return a dict describing the build.
    Each PHY's receive clock gets its 125 MHz constraint on its pin; nextpnr derives the PLL outputs'
    own from the oscillator's."""
    import importlib

    from ..board import _yowasp_env, build_top

    check_eth_board(board)
    boards_module, platform_name, top_module, top_name, ports = ETH_BOARDS[board]
    platform = getattr(importlib.import_module(f"amaranth_boards.{boards_module}"), platform_name)()
    top_class = getattr(importlib.import_module(f"{__package__}.{top_module}"), top_name)
    top = top_class(core=core)
    _yowasp_env()
    build_top(
        platform,
        top,
        name=name,
        build_dir=build_dir,
        seed=seed,
        add_preferences="".join(
            f'FREQUENCY PORT "eth_rgmii_{k}__rx_clk__io" {RGMII_MHZ * 1e6} HZ;\n' for k in range(ports)
        ),
    )
    return {
        "name": name,
        "top": top_name,
        "ports": ports,
        "device": platform.device,
        "package": platform.package,
        "speed": platform.speed,
        "core_mhz": round(top_class.CORE_MHZ, 3),
        "rgmii_mhz": RGMII_MHZ,
        "pll": dict(top_class.PLL),
        "config": top.config.as_dict(),
    }
