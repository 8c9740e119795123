"""AXI4-Stream / AXI4-Lite top around the aggregator core, for vendor flows (a 100G MAC on one side, the
host's management bus on the other).

::

    s_axis ─► SkidBuffer ─► RxPacketFifo ─► SkidBuffer ─► core.i
    core.o ─► tkeep from byte count ─► SkidBuffer ─► m_axis
    (tkeep, tuser)          (store and forward: tuser / bad tkeep / oversize frames dropped and counted)
    s_axil ─► AXI-Lite slave ══ command/response FIFOs (async when ctl_domain is not "sync") ══► core.ctl

Streams. ``s_axis`` takes frames (or bare UDP payloads with ``entry="payload"``) as a CMAC-style AXI4-Stream
of W bits: byte ``b`` of a beat in ``tdata[8b+7:8b]``, ``tkeep`` contiguous from bit 0 and all ones except
on the ``tlast`` beat, ``tuser`` high on any beat of a frame the MAC found bad (FCS error). A frame is held in
a store-and-forward FIFO until its last beat, because ``tuser`` is only known there: a frame with ``tuser``
set, a frame whose ``tkeep`` is not of that form, and a frame longer than the FIFO are dropped whole and
counted (wrapper registers below); the core never sees them. ``m_axis`` carries what the core emits, with
``tkeep`` from the beat's byte count and ``tuser`` low. Every further output stream the core has (``bypass``
in a later core) becomes ``m_axis_<name>`` the same way, without changes here.

Latency: a frame reaches the core 3 cycles after its last beat was accepted (a frame of ``n`` beats is in
the FIFO ``n`` cycles first); the core's output reaches ``m_axis`` 1 cycle later. Throughput: one beat per
cycle in and out, back to back across frames. Back-pressure: every ready is a register output (skid
buffers), so ``s_axis.tready`` and ``m_axis.tready`` have no combinational path into the core.

Control. ``s_axil`` is an AXI4-Lite slave with byte addresses of 19 bits; one transaction at a time (a read
waits for a write in flight and the other way round). Byte address ``4·a`` with ``a < 0x10000`` is the core's
register ``a`` (``docs/control.md``); nothing in here knows the core's register list, so registers added to
the core work unchanged. ``0x40000 + 4·n`` are this wrapper's registers:

====  ============  ======  ===================================================================
 n    name          access  meaning
====  ============  ======  ===================================================================
 0    AXI_ID        R       ``0x57524131`` ("WRA1")
 1    FIFO_BEATS    R       depth of the receive FIFO in beats (the longest frame that passes)
 2    RX_FRAMES     R       frames passed to the core
 3    RX_USER       R       frames dropped because ``tuser`` was set on one of their beats
 4    RX_KEEP       R       frames dropped because of a ``tkeep`` that is not contiguous from bit 0
                            (or not all ones before ``tlast``), unless already counted in RX_USER
 5    RX_OVERSIZE   R       frames dropped because they are longer than FIFO_BEATS beats
 6+k  TX_FRAMES[k]  R       frames sent on output stream k (k = 0: ``m_axis``)
 13   MEM_ERRORS    R       external member buffers: SLVERR/DECERR responses (the core's, not cleared)
 14   MEM_DROPS     R       external member buffers: chunks dropped for them (the core's, not cleared)
 15   CLEAR         W       write 1: zero the wrapper's counters (not the core's)
====  ============  ======  ===================================================================

A write with a ``wstrb`` other than all ones is refused with SLVERR and changes nothing (every register is
a whole 32-bit word). With ``ctl_domain`` other than ``"sync"`` the AXI4-Lite port runs in that clock
domain, which the enclosing design defines (left undefined, the Verilog top gets the ports
``<domain>_clk`` and ``<domain>_rst``), and
commands and responses cross through :class:`~amaranth.lib.fifo.AsyncFIFO` pairs: a register access takes
about a dozen cycles of the slower clock.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import Beat
from .stream import SkidBuffer

__all__ = [
    "AXIStreamSignature",
    "AXILiteSignature",
    "RxPacketFifo",
    "AXILiteBridge",
    "AXIAggregator",
    "AXI_ID_VALUE",
    "WRAP_REGS",
    "WRAP_BASE",
    "AXIL_ADDR_BITS",
]

#: Value of the wrapper's AXI_ID register: "WRA1".
AXI_ID_VALUE = 0x57524131
#: AXI4-Lite byte-address bits: the core's 16-bit word space, plus one bit selecting the wrapper's registers.
AXIL_ADDR_BITS = 19
#: Byte address of the wrapper's register 0.
WRAP_BASE = 1 << (AXIL_ADDR_BITS - 1)
#: Word offsets of the wrapper's registers.
WRAP_REGS = {
    "AXI_ID": 0,
    "FIFO_BEATS": 1,
    "RX_FRAMES": 2,
    "RX_USER": 3,
    "RX_KEEP": 4,
    "RX_OVERSIZE": 5,
    "TX_FRAMES": 6,
    "MEM_ERRORS": 13,
    "MEM_DROPS": 14,
    "CLEAR": 15,
}
_MAX_OUTPUTS = WRAP_REGS["MEM_ERRORS"] - WRAP_REGS["TX_FRAMES"]

_OKAY, _SLVERR = 0b00, 0b10


class AXIStreamSignature(wiring.Signature):
    """The source's view of an AXI4-Stream: ``tdata`` (W), ``tkeep`` (W/8), ``tlast``, ``tuser`` (``user``
    bits), ``tvalid``; ``tready`` comes back."""

    def __init__(self, width, *, user=1):
        if width % 8 or width <= 0:
            raise ValueError(
                f"The AXI4-Stream data width must be a positive multiple of 8 bits, not {width}."
            )
        self.width, self.user = width, user
        super().__init__(
            {
                "tdata": Out(width),
                "tkeep": Out(width // 8),
                "tlast": Out(1),
                "tuser": Out(user),
                "tvalid": Out(1),
                "tready": In(1),
            }
        )


class AXILiteSignature(wiring.Signature):
    """The master's view of AXI4-Lite with 32-bit data and ``addr_bits`` byte-address bits (no ``prot``)."""

    def __init__(self, *, addr_bits=AXIL_ADDR_BITS):
        super().__init__(
            {
                "awaddr": Out(addr_bits),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(32),
                "wstrb": Out(4),
                "wvalid": Out(1),
                "wready": In(1),
                "bresp": In(2),
                "bvalid": In(1),
                "bready": Out(1),
                "araddr": Out(addr_bits),
                "arvalid": Out(1),
                "arready": In(1),
                "rdata": In(32),
                "rresp": In(2),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )


def AxisBeat(width):
    """An AXI4-Stream beat as one payload: ``data``, ``keep``, ``last``, ``user``."""
    return data.StructLayout({"data": width, "keep": width // 8, "last": 1, "user": 1})


def _keep_bytes(m, keep, nbytes):
    """Byte count of a ``tkeep`` contiguous from bit 0 (its highest set bit's position plus one) and whether
    it has that form. An OR-tree encoder of the highest set bit rather than a population count: fewer logic
    levels, and the same answer for the only form that is accepted."""
    top = Signal(nbytes)
    count = Signal(range(nbytes + 1))
    contiguous = Signal()
    m.d.comb += [top.eq(keep & ~(keep >> 1)), contiguous.eq((keep & (keep + 1)[:nbytes]) == 0)]
    value = 0
    for k in range(nbytes):
        value = value | Mux(top[k], k + 1, 0)
    m.d.comb += count.eq(value)
    return count, contiguous


class RxPacketFifo(wiring.Component):
    """Store-and-forward frame FIFO of ``depth`` beats (a power of two) that drops bad frames whole.

    ``i`` takes :func:`AxisBeat` beats, ``o`` gives :func:`~wanreduce.hw.layouts.Beat` beats. A frame is
    released to ``o`` only once its last beat is in and good; a frame with ``user`` set on any beat, a
    ``keep`` that is not contiguous from bit 0 (or not all ones before ``last``), or more than ``depth``
    beats is discarded and counted: one-cycle strobes ``ev_frame``, ``ev_user``, ``ev_keep``,
    ``ev_oversize``.

    Latency: the last beat's write to the first beat on ``o`` is 2 cycles. Back-pressure: ``i.ready`` is low
    only while the FIFO is full with a frame that fits (a frame that cannot fit is accepted and discarded),
    and ``o.ready`` reaches only the memory's read enable.
    """

    def __init__(self, *, width, depth):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(
                f"The receive FIFO depth must be a power of two of at least 2 beats, not {depth}."
            )
        self.width, self.depth = width, depth
        super().__init__(
            {
                "i": In(stream.Signature(AxisBeat(width))),
                "o": Out(stream.Signature(Beat(width))),
                "ev_frame": Out(1),
                "ev_user": Out(1),
                "ev_keep": Out(1),
                "ev_oversize": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W, D = self.width, self.depth
        B = W // 8
        abits = (D - 1).bit_length()
        beat = Beat(W)

        m.submodules.mem = mem = Memory(shape=beat, depth=D, init=[])
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")

        wp = Signal(abits + 1)  # next write position
        cp = Signal(abits + 1)  # end of the last committed frame: readable below it
        rp = Signal(abits + 1)  # next read position
        dropping = Signal()  # discarding the rest of an oversize frame
        err_user = Signal()
        err_keep = Signal()
        flen = Signal(abits + 1)
        used = Signal(abits + 1)
        m.d.comb += [flen.eq(wp - cp), used.eq(wp - rp)]

        ib = self.i.payload
        count, contiguous = _keep_bytes(m, ib.keep, B)
        all_ones = ib.keep == (1 << B) - 1
        keep_ok = Signal()
        m.d.comb += keep_ok.eq(Mux(ib.last, contiguous & (ib.keep != 0), all_ones))

        too_long = flen == D
        m.d.comb += self.i.ready.eq(dropping | (used != D) | too_long)
        m.d.comb += [
            wr.addr.eq(wp[:abits]),
            wr.data.data.eq(ib.data),
            wr.data.bytes.eq(count),
            wr.data.last.eq(ib.last),
        ]

        with m.If(self.i.valid & self.i.ready):
            with m.If(dropping):
                with m.If(ib.last):
                    m.d.sync += dropping.eq(0)
                    m.d.comb += self.ev_oversize.eq(1)
            with m.Elif(too_long):
                m.d.sync += [wp.eq(cp), err_user.eq(0), err_keep.eq(0)]
                with m.If(ib.last):
                    m.d.comb += self.ev_oversize.eq(1)
                with m.Else():
                    m.d.sync += dropping.eq(1)
            with m.Else():
                m.d.comb += wr.en.eq(1)
                user = err_user | ib.user
                keep = err_keep | ~keep_ok
                with m.If(ib.last):
                    m.d.sync += [err_user.eq(0), err_keep.eq(0)]
                    with m.If(user):
                        m.d.sync += wp.eq(cp)
                        m.d.comb += self.ev_user.eq(1)
                    with m.Elif(keep):
                        m.d.sync += wp.eq(cp)
                        m.d.comb += self.ev_keep.eq(1)
                    with m.Else():
                        m.d.sync += [wp.eq(wp + 1), cp.eq(wp + 1)]
                        m.d.comb += self.ev_frame.eq(1)
                with m.Else():
                    m.d.sync += [wp.eq(wp + 1), err_user.eq(user), err_keep.eq(keep)]

        # Read side: the memory's output register is the output stage; it holds while o is stalled.
        take = Signal()
        m.d.comb += [
            take.eq((rp != cp) & (self.o.ready | ~self.o.valid)),
            rd.addr.eq(rp[:abits]),
            rd.en.eq(take),
            self.o.payload.eq(rd.data),
        ]
        with m.If(take):
            m.d.sync += [rp.eq(rp + 1), self.o.valid.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class AXILiteBridge(wiring.Component):
    """AXI4-Lite slave (in ``ctl_domain``) to the core's control port (in ``sync``) and the wrapper's own
    registers.

    ``wrap_rdata`` is read combinationally from ``wrap_addr`` (the word offset) in ``sync``; ``wrap_we``
    strobes a write of ``wrap_wdata`` to it. The core's register reads take the control port's two-cycle
    latency. One transaction is in flight at a time; reads win over writes when both are offered.
    """

    def __init__(self, *, ctl_domain="sync", addr_bits=AXIL_ADDR_BITS):
        self.ctl_domain, self.addr_bits = ctl_domain, addr_bits
        from .control import ControlSignature

        super().__init__(
            {
                "axil": In(AXILiteSignature(addr_bits=addr_bits)),
                "ctl": Out(ControlSignature()),
                "wrap_addr": Out(addr_bits - 3),
                "wrap_wdata": Out(32),
                "wrap_we": Out(1),
                "wrap_rdata": In(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cd = self.ctl_domain
        word_bits = self.addr_bits - 2
        cmd_layout = data.StructLayout({"write": 1, "addr": word_bits, "wdata": 32, "ok": 1})
        resp_layout = data.StructLayout({"rdata": 32, "resp": 2})
        if cd == "sync":
            m.submodules.cmd = cmdq = fifo.SyncFIFOBuffered(width=cmd_layout.size, depth=2)
            m.submodules.resp = respq = fifo.SyncFIFOBuffered(width=resp_layout.size, depth=2)
        else:
            m.submodules.cmd = cmdq = fifo.AsyncFIFO(
                width=cmd_layout.size, depth=4, w_domain=cd, r_domain="sync"
            )
            m.submodules.resp = respq = fifo.AsyncFIFO(
                width=resp_layout.size, depth=4, w_domain="sync", r_domain=cd
            )
        a = self.axil

        # AXI side, in the control domain.
        cmd_w = Signal(cmd_layout)
        resp_r = Signal(resp_layout)
        m.d.comb += [cmdq.w_data.eq(cmd_w), resp_r.eq(respq.r_data)]
        rdata = Signal(32)
        rresp = Signal(2)
        m.d.comb += [a.rdata.eq(rdata), a.rresp.eq(rresp), a.bresp.eq(rresp)]
        with m.FSM(domain=cd):
            with m.State("IDLE"):
                with m.If(a.arvalid & cmdq.w_rdy):
                    m.d.comb += [
                        a.arready.eq(1),
                        cmdq.w_en.eq(1),
                        cmd_w.write.eq(0),
                        cmd_w.addr.eq(a.araddr[2:]),
                    ]
                    m.next = "READ"
                with m.Elif(a.awvalid & a.wvalid & cmdq.w_rdy):
                    m.d.comb += [
                        a.awready.eq(1),
                        a.wready.eq(1),
                        cmdq.w_en.eq(1),
                        cmd_w.write.eq(1),
                        cmd_w.addr.eq(a.awaddr[2:]),
                        cmd_w.wdata.eq(a.wdata),
                        cmd_w.ok.eq(a.wstrb == 0b1111),
                    ]
                    m.next = "WRITE"
            for name, valid, ready in (("READ", a.rvalid, a.rready), ("WRITE", a.bvalid, a.bready)):
                with m.State(name):
                    with m.If(respq.r_rdy):
                        m.d.comb += respq.r_en.eq(1)
                        m.d[cd] += [rdata.eq(resp_r.rdata), rresp.eq(resp_r.resp)]
                        m.next = f"{name}_RESP"
                with m.State(f"{name}_RESP"):
                    m.d.comb += valid.eq(1)
                    with m.If(ready):
                        m.next = "IDLE"

        # Core side, in sync.
        cmd = Signal(cmd_layout)
        resp_w = Signal(resp_layout)
        m.d.comb += respq.w_data.eq(resp_w)
        wrap = cmd.addr[word_bits - 1]
        m.d.comb += [
            self.ctl.addr.eq(cmd.addr[:16]),
            self.ctl.wdata.eq(cmd.wdata),
            self.wrap_addr.eq(cmd.addr[: word_bits - 1]),
            self.wrap_wdata.eq(cmd.wdata),
        ]
        result = Signal(resp_layout)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += cmdq.r_en.eq(1)
                with m.If(cmdq.r_rdy):
                    m.d.sync += cmd.eq(cmdq.r_data)
                    m.next = "EXEC"
            with m.State("EXEC"):
                with m.If(cmd.write):
                    m.d.comb += [self.ctl.we.eq(cmd.ok & ~wrap), self.wrap_we.eq(cmd.ok & wrap)]
                    m.d.sync += [result.rdata.eq(0), result.resp.eq(Mux(cmd.ok, _OKAY, _SLVERR))]
                    m.next = "RESP"
                with m.Else():
                    m.d.comb += self.ctl.re.eq(~wrap)
                    m.next = "RWAIT"
            with m.State("RWAIT"):
                # The core's rdata comes two cycles after re.
                m.next = "RDATA"
            with m.State("RDATA"):
                m.d.sync += [
                    result.rdata.eq(Mux(wrap, self.wrap_rdata, self.ctl.rdata)),
                    result.resp.eq(_OKAY),
                ]
                m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [respq.w_en.eq(1), resp_w.eq(result)]
                with m.If(respq.w_rdy):
                    m.next = "IDLE"
        return m


def _to_axis(m, beat, width):
    """Combinational AXIS view of a :func:`Beat`: ``tkeep`` is the thermometer of the byte count."""
    B = width // 8
    out = Signal(AxisBeat(width))
    m.d.comb += [
        out.data.eq(beat.data),
        out.last.eq(beat.last),
        out.user.eq(0),
        out.keep.eq(Cat(*[beat.bytes > k for k in range(B)])),
    ]
    return out


class AXIAggregator(wiring.Component):
    """The aggregator ``core`` (an :class:`~wanreduce.hw.core.AggregatorCore`) with AXI4-Stream data ports
    and an AXI4-Lite control port (see the module docstring for ports, registers, latency).

    Keyword-only: ``core``; ``ctl_domain`` ("sync", or the clock domain of ``s_axil``; default ``"axil"``);
    ``fifo_beats`` (receive FIFO depth, a power of two; default: room for two of the longest frames the core
    accepts, so one frame streams out while the next comes in).
    """

    def __init__(self, *, core, ctl_domain="axil", fifo_beats=None):
        from ..spec import protocol

        members = core.signature.members
        if not all(n in members for n in ("i", "o", "ctl")):
            raise ValueError(
                "The core must have an input stream 'i', an output stream 'o' and a control port 'ctl'."
            )
        if not isinstance(ctl_domain, str) or not ctl_domain.isidentifier():
            raise ValueError(f"The control clock domain must be a domain name, not {ctl_domain!r}.")
        self.core, self.ctl_domain = core, ctl_domain
        self.width = W = core.width
        streams = {
            name: mem.flow
            for name, mem in members.items()
            if mem.is_signature and isinstance(mem.signature, stream.Signature)
        }
        self.outputs = [name for name, flow in streams.items() if flow == Out]
        inputs = [name for name, flow in streams.items() if flow == In]
        if inputs != ["i"]:
            raise ValueError(f"The core must have exactly one input stream 'i', not {inputs}.")
        if len(self.outputs) > _MAX_OUTPUTS:
            raise ValueError(
                f"The wrapper counts at most {_MAX_OUTPUTS} output streams, not {len(self.outputs)}."
            )
        longest = protocol.HEADER_BYTES + core.chunk_bytes
        if getattr(core, "entry", "frame") == "frame":
            longest += protocol.FRAME_OVERHEAD
        beats = -(-longest // (W // 8))
        if fifo_beats is None:
            fifo_beats = 1 << (2 * beats - 1).bit_length()
        if fifo_beats < 2 or fifo_beats & (fifo_beats - 1):
            raise ValueError(
                f"The receive FIFO depth must be a power of two of at least 2 beats, not {fifo_beats}."
            )
        self.fifo_beats = fifo_beats
        ports = {"s_axis": In(AXIStreamSignature(W)), "s_axil": In(AXILiteSignature())}
        for name in self.outputs:
            ports[self.axis_name(name)] = Out(AXIStreamSignature(W))
        # External member buffers: the core's AXI4 master ports leave as they are, as m_axi_mem<k>.
        self.mem_ports = [name for name in members if name.startswith("mem") and name[3:].isdigit()]
        for name in self.mem_ports:
            ports[f"m_axi_{name}"] = Out(members[name].signature)
        super().__init__(ports)

    @staticmethod
    def axis_name(output):
        """The AXI4-Stream port of core output ``output``: ``m_axis`` for ``o``, else ``m_axis_<name>``."""
        return "m_axis" if output == "o" else f"m_axis_{output}"

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.core = core = self.core

        # Receive: register the AXIS input, store and forward, register again into the core.
        m.submodules.rx_in = rx_in = SkidBuffer(AxisBeat(W))
        s = self.s_axis
        m.d.comb += [
            rx_in.i.valid.eq(s.tvalid),
            s.tready.eq(rx_in.i.ready),
            rx_in.i.payload.data.eq(s.tdata),
            rx_in.i.payload.keep.eq(s.tkeep),
            rx_in.i.payload.last.eq(s.tlast),
            rx_in.i.payload.user.eq(s.tuser[0]),
        ]
        m.submodules.rx_fifo = rx_fifo = RxPacketFifo(width=W, depth=self.fifo_beats)
        wiring.connect(m, rx_in.o, rx_fifo.i)
        m.submodules.rx_out = rx_out = SkidBuffer(Beat(W))
        wiring.connect(m, rx_fifo.o, rx_out.i)
        wiring.connect(m, rx_out.o, core.i)

        # Transmit: every output stream of the core becomes an AXIS master.
        tx_events = []
        for name in self.outputs:
            src = getattr(core, name)
            skid = SkidBuffer(AxisBeat(W))
            m.submodules[f"tx_{name}"] = skid
            view = _to_axis(m, src.payload, W)
            m.d.comb += [skid.i.valid.eq(src.valid), src.ready.eq(skid.i.ready), skid.i.payload.eq(view)]
            dst = getattr(self, self.axis_name(name))
            m.d.comb += [
                dst.tvalid.eq(skid.o.valid),
                skid.o.ready.eq(dst.tready),
                dst.tdata.eq(skid.o.payload.data),
                dst.tkeep.eq(skid.o.payload.keep),
                dst.tlast.eq(skid.o.payload.last),
                dst.tuser.eq(skid.o.payload.user),
            ]
            tx_events.append(dst.tvalid & dst.tready & dst.tlast)

        for name in self.mem_ports:
            wiring.connect(m, getattr(core, name), wiring.flipped(getattr(self, f"m_axi_{name}")))

        # Control.
        m.submodules.bridge = bridge = AXILiteBridge(ctl_domain=self.ctl_domain)
        wiring.connect(m, wiring.flipped(self.s_axil), bridge.axil)
        wiring.connect(m, bridge.ctl, core.ctl)

        counters = {name: Signal(32) for name in ("RX_FRAMES", "RX_USER", "RX_KEEP", "RX_OVERSIZE")}
        tx_counters = [Signal(32, name=f"tx_frames_{k}") for k in range(len(self.outputs))]
        clear = bridge.wrap_we & (bridge.wrap_addr == WRAP_REGS["CLEAR"]) & bridge.wrap_wdata[0]
        events = {
            "RX_FRAMES": rx_fifo.ev_frame,
            "RX_USER": rx_fifo.ev_user,
            "RX_KEEP": rx_fifo.ev_keep,
            "RX_OVERSIZE": rx_fifo.ev_oversize,
        }
        for name, ctr in counters.items():
            with m.If(clear):
                m.d.sync += ctr.eq(0)
            with m.Elif(events[name]):
                m.d.sync += ctr.eq(ctr + 1)
        for ctr, ev in zip(tx_counters, tx_events, strict=True):
            with m.If(clear):
                m.d.sync += ctr.eq(0)
            with m.Elif(ev):
                m.d.sync += ctr.eq(ctr + 1)
        with m.Switch(bridge.wrap_addr):
            with m.Case(WRAP_REGS["AXI_ID"]):
                m.d.comb += bridge.wrap_rdata.eq(AXI_ID_VALUE)
            with m.Case(WRAP_REGS["FIFO_BEATS"]):
                m.d.comb += bridge.wrap_rdata.eq(self.fifo_beats)
            for name, ctr in counters.items():
                with m.Case(WRAP_REGS[name]):
                    m.d.comb += bridge.wrap_rdata.eq(ctr)
            for k, ctr in enumerate(tx_counters):
                with m.Case(WRAP_REGS["TX_FRAMES"] + k):
                    m.d.comb += bridge.wrap_rdata.eq(ctr)
            if self.mem_ports:
                # The external memory's error responses and the chunks dropped for them (free-running).
                for reg in ("MEM_ERRORS", "MEM_DROPS"):
                    with m.Case(WRAP_REGS[reg]):
                        m.d.comb += bridge.wrap_rdata.eq(getattr(core, reg.lower()))
        return m
