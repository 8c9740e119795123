"""The gigabit Ethernet MAC on RGMII: frames as the core's beats on one side, the PHY's pins on the other.

::

    rx_clk ─► eth_rx domain
    rxd/rx_ctl ─► DDRInput ─► reg ─► RxMac ─► RxPacker ─► AsyncFIFO ═╗  (eth_rx, 125 MHz, a byte a cycle)
                                                                     ╚═► FrameBuffer ─► o  (sync)
    i ─► FrameBuffer ═╗                                                                 (sync)
                      ╚═► AsyncFIFOBuffered ─► SkidBuffer ─► TxMac ─► DDROutput ─► txd/tx_ctl  (eth_tx)
                                                              "1,0" ─► DDROutput ─► tx_clk  (eth_tx90)

The receive clock comes from the PHY (``rx_clk``); its data are sampled as an RGMII PHY with its receive
delay presents them (the data change half a cycle away from the edge that takes them). The transmit side
runs in ``eth_tx`` and forwards its clock from ``eth_tx90``, the same clock a quarter period later, so the
PHY sees the data settle 2 ns before each edge (the board's PLL makes both). Frames are checked and
stored whole before they reach the core (bad ones are dropped and counted by reason) and stored whole
before they are sent (the line never waits for the core). ``primitive`` selects vendor DDR cells
("ecp5") or their models ("model", for Verilator); nothing else differs.
"""

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Module, ResetSignal, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from ...spec import ethernet, regmap
from ..layouts import Beat, check_width
from ..stream import SkidBuffer
from .ddr import DDRInput, DDROutput, check_primitive
from .framebuf import FrameBuffer
from .mac_rx import RxBeat, RxMac, RxPacker, RxStatus
from .mac_tx import TxMac

__all__ = ["RgmiiSignature", "EthMac", "RX_COUNTERS", "TX_COUNTERS"]

#: Receive counters, by the :class:`RxStatus` they count (``ok``: frames passed to the core).
RX_COUNTERS = {
    "rx_ok": RxStatus.OK,
    "rx_er": RxStatus.RX_ER,
    "rx_overflow": RxStatus.OVERFLOW,
    "rx_preamble": RxStatus.PREAMBLE,
    "rx_runt": RxStatus.RUNT,
    "rx_oversize": RxStatus.OVERSIZE,
    "rx_fcs": RxStatus.FCS,
}
#: Transmit counters: frames queued for the line, frames too long for the transmit buffer.
TX_COUNTERS = ("tx_queued", "tx_dropped")
# The board registers read them in this order.
assert (*RX_COUNTERS, *TX_COUNTERS) == regmap.BOARD_NAMES[: len(RX_COUNTERS) + len(TX_COUNTERS)]


def RgmiiSignature():
    """The RGMII pins, as the MAC sees them (``Out`` drives the PHY)."""
    return wiring.Signature(
        {
            "rx_clk": In(1),
            "rx_ctl": In(1),
            "rxd": In(4),
            "tx_clk": Out(1),
            "tx_ctl": Out(1),
            "txd": Out(4),
        }
    )


def _beats(width, frame_bytes):
    return -(-frame_bytes // (width // 8))


class EthMac(wiring.Component):
    """A gigabit RGMII MAC for a core of ``width``-bit beats (64..512).

    Keywords: ``primitive`` ("ecp5" or "model"), ``max_frame`` (longest frame accepted, FCS included;
    longer ones are counted ``rx_oversize``), ``tx_frame`` (longest frame sent). Ports: ``rgmii``
    (:func:`RgmiiSignature`), ``o`` (received good frames without FCS, in ``sync``), ``i`` (frames to send
    without FCS, padded by the MAC, in ``sync``), one 32-bit counter per :data:`RX_COUNTERS` and
    :data:`TX_COUNTERS` entry (in ``sync``). Domains used: ``sync``, ``eth_tx`` and ``eth_tx90`` (from
    outside), ``eth_rx`` (made here from ``rx_clk``, reset from ``sync``'s reset).

    Latency: a received frame starts leaving on ``o`` about 10 core cycles after its last byte; a frame on
    ``i`` starts its preamble about 10 transmit cycles after its last beat. Back-pressure: ``o`` may wait as
    long as the receive buffer holds (two longest frames); after that arriving frames are dropped and
    counted ``rx_overflow``. ``i`` waits while the transmit buffer is full.
    """

    def __init__(self, *, width, primitive="ecp5", max_frame=ethernet.MAX_FRAME_BYTES, tx_frame=None):
        check_width(width)
        check_primitive(primitive)
        tx_frame = max_frame - ethernet.ETH_FCS_BYTES if tx_frame is None else tx_frame
        if tx_frame < ethernet.MIN_PAYLOAD_FRAME_BYTES:
            raise ValueError(f"The longest frame sent must be at least 60 bytes, not {tx_frame}.")
        self.width, self.primitive, self.max_frame, self.tx_frame = width, primitive, max_frame, tx_frame
        self.rx_depth = 1 << (2 * _beats(width, max_frame) + 1).bit_length()
        self.tx_depth = 1 << (2 * _beats(width, tx_frame) + 1).bit_length()
        ports = {
            "rgmii": Out(RgmiiSignature()),
            "o": Out(stream.Signature(Beat(width))),
            "i": In(stream.Signature(Beat(width))),
        }
        for name in (*RX_COUNTERS, *TX_COUNTERS):
            ports[name] = Out(32)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        W = self.width
        pins = self.rgmii
        # Local: a board with two ports has two receive clocks of this name, one inside each MAC.
        m.domains.eth_rx = ClockDomain("eth_rx", local=True)
        m.d.comb += ClockSignal("eth_rx").eq(pins.rx_clk)
        m.submodules.rx_reset = ResetSynchronizer(ResetSignal("sync"), domain="eth_rx")

        # Receive: pins -> bytes -> checked bytes -> beats -> the core's clock -> whole good frames.
        m.submodules.rx_ddr = rx_ddr = DDRInput(width=5, domain="eth_rx", primitive=self.primitive)
        m.submodules.rx_mac = rx_mac = _rename(RxMac(max_frame=self.max_frame), "eth_rx")
        m.submodules.rx_pack = rx_pack = _rename(RxPacker(width=W), "eth_rx")
        m.submodules.rx_cdc = rx_cdc = fifo.AsyncFIFO(
            width=RxBeat(W).size, depth=8, r_domain="sync", w_domain="eth_rx"
        )
        # The frame buffer drops a frame whose status field (code and ``lost`` count) is not zero.
        status_bits = RxBeat(W).size - Beat(W).size
        m.submodules.rx_buf = rx_buf = FrameBuffer(width=W, depth=self.rx_depth, status_bits=status_bits)
        # A register stage after the DDR cells: the receive MAC may be placed away from the pins, and the
        # wire to it then has a cycle of its own instead of sharing one with the MAC's CRC logic.
        rx_q0, rx_q1 = Signal(5, reset_less=True), Signal(5, reset_less=True)
        m.d.eth_rx += [rx_q0.eq(rx_ddr.q0), rx_q1.eq(rx_ddr.q1)]
        fields = ("valid", "data", "end", "status")
        m.d.comb += [
            rx_ddr.d.eq(Cat(pins.rxd, pins.rx_ctl)),
            rx_mac.data.eq(Cat(rx_q0[:4], rx_q1[:4])),
            rx_mac.dv.eq(rx_q0[4]),
            rx_mac.er.eq(rx_q0[4] ^ rx_q1[4]),
            # The packer's inputs are the MAC's outputs, field by field.
            *(getattr(rx_pack, f"i_{f}").eq(getattr(rx_mac, f"o_{f}")) for f in fields),
            rx_cdc.w_en.eq(rx_pack.w_en),
            rx_cdc.w_data.eq(rx_pack.w_data),
            rx_pack.w_rdy.eq(rx_cdc.w_rdy),
        ]
        # The crossing's words are the frame buffer's beats: the same fields in the same order, status and
        # lost-frame count last.
        wiring.connect(m, rx_cdc.r_stream, rx_buf.i)
        wiring.connect(m, rx_buf.o, wiring.flipped(self.o))
        code, lost = rx_buf.ev_status[:3], rx_buf.ev_status[3:]
        for name, status in RX_COUNTERS.items():
            counter = getattr(self, name)
            hit = rx_buf.ev_valid & (code == status.value)
            if status is RxStatus.OVERFLOW:
                with m.If(hit):
                    m.d.sync += counter.eq(counter + 1 + lost)
                with m.Elif(rx_buf.ev_full):
                    m.d.sync += counter.eq(counter + 1)
            else:
                with m.If(hit):
                    m.d.sync += counter.eq(counter + 1)

        # Transmit: whole frames -> the transmit clock -> bytes -> pins.
        # On the transmit clock, reset from a registered copy of its reset of this MAC's own (two registers
        # deep), so that the reset's way across the die from its synchroniser takes two cycles, not one.
        m.domains.mac_tx = ClockDomain("mac_tx", local=True)
        tx_rst = [Signal(init=1, reset_less=True, name=f"tx_rst{k}") for k in range(2)]
        m.d.eth_tx += [tx_rst[0].eq(ResetSignal("eth_tx")), tx_rst[1].eq(tx_rst[0])]
        m.d.comb += [ClockSignal("mac_tx").eq(ClockSignal("eth_tx")), ResetSignal("mac_tx").eq(tx_rst[1])]
        m.submodules.tx_buf = tx_buf = FrameBuffer(width=W, depth=self.tx_depth, status_bits=1)
        # The crossing's read side is registered (the buffered FIFO), and a skid buffer sits between it and
        # the MAC, so no combinational path joins the crossing's pointers and the MAC's byte logic in either
        # direction: the placer may put them apart.
        m.submodules.tx_cdc = tx_cdc = fifo.AsyncFIFOBuffered(
            width=Beat(W).size, depth=9, r_domain="mac_tx", w_domain="sync"
        )
        m.submodules.tx_skid = tx_skid = _rename(SkidBuffer(Beat(W)), "mac_tx")
        m.submodules.tx_mac = tx_mac = _rename(TxMac(width=W), "mac_tx")
        m.submodules.tx_ddr = tx_ddr = DDROutput(width=5, domain="mac_tx", primitive=self.primitive)
        m.submodules.tx_clk_ddr = tx_clk_ddr = DDROutput(width=1, domain="eth_tx90", primitive=self.primitive)
        m.d.comb += [
            tx_buf.i.valid.eq(self.i.valid),
            tx_buf.i.payload.data.eq(self.i.payload.data),
            tx_buf.i.payload.bytes.eq(self.i.payload.bytes),
            tx_buf.i.payload.last.eq(self.i.payload.last),
            self.i.ready.eq(tx_buf.i.ready),
            tx_ddr.d0.eq(Cat(tx_mac.data[:4], tx_mac.en)),
            tx_ddr.d1.eq(Cat(tx_mac.data[4:], tx_mac.en ^ tx_mac.er)),
            pins.txd.eq(tx_ddr.q[:4]),
            pins.tx_ctl.eq(tx_ddr.q[4]),
            tx_clk_ddr.d0.eq(1),
            tx_clk_ddr.d1.eq(0),
            pins.tx_clk.eq(tx_clk_ddr.q),
        ]
        wiring.connect(m, tx_buf.o, tx_cdc.w_stream)
        wiring.connect(m, tx_cdc.r_stream, tx_skid.i)
        wiring.connect(m, tx_skid.o, tx_mac.i)
        with m.If(tx_buf.ev_valid):
            m.d.sync += self.tx_queued.eq(self.tx_queued + 1)
        with m.If(tx_buf.ev_full):
            m.d.sync += self.tx_dropped.eq(self.tx_dropped + 1)
        return m


def _rename(component, domain):
    from amaranth.hdl import DomainRenamer

    return DomainRenamer(domain)(component)
