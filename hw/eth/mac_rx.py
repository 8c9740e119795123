"""Receive side of the gigabit MAC, in the RGMII receive clock's domain: one byte per cycle.

:class:`RxMac` strips the preamble and delimiter, checks the FCS with ``amaranth.lib.crc`` (the residue
after the whole frame, FCS included), the frame's length and the PHY's error signal, and passes the bytes
before the FCS on with a status at the frame's end. :class:`RxPacker` gathers those bytes into beats of
the core's width for the clock-domain crossing, and writes one beat for every frame that ended, even an
empty one, so that the core's side counts every frame by its status.
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import crc, data, enum, wiring
from amaranth.lib.wiring import In, Out

from ...spec import ethernet
from ..layouts import check_width

__all__ = ["RxStatus", "RxMac", "RxPacker", "RxBeat", "LOST_BITS"]

#: Width of the count of frames lost behind a waiting last beat (saturating).
LOST_BITS = 8


class RxStatus(enum.Enum, shape=3):
    """Why a received frame is dropped (``OK``: it is not). Lower codes win when several apply."""

    OK = 0
    RX_ER = 1  # the PHY signalled a receive error during the frame
    OVERFLOW = 2  # the crossing to the core's clock was full: bytes were lost
    PREAMBLE = 3  # the frame did not open with preamble bytes and the delimiter (an alignment error)
    RUNT = 4  # shorter than 64 bytes with its FCS
    OVERSIZE = 5  # longer than the MAC's largest frame (a jumbo frame on a standard MAC)
    FCS = 6  # the frame check sequence does not match


def RxBeat(width):
    """A beat crossing from the receive clock to the core's: the frame's ``status`` on its last beat, and
    in ``lost`` how many earlier frames ended while this last beat waited for room (all ``OVERFLOW``)."""
    return data.StructLayout(
        {"data": width, "bytes": range(width // 8 + 1), "last": 1, "status": RxStatus, "lost": LOST_BITS}
    )


class RxMac(wiring.Component):
    """Frame delimiting and checking, one byte per cycle of its ``sync`` domain (rename it to the RGMII
    receive clock's).

    Ports: ``data``/``dv``/``er`` (a byte per cycle from the PHY interface); out ``o_valid``/``o_data``
    (the frame's bytes before its FCS) and ``o_end``/``o_status`` (one cycle after the last of them).
    Latency: a byte leaves 5 cycles after it arrived (4 bytes held back: they may be the FCS).
    Back-pressure: none; the line does not wait.
    """

    def __init__(self, *, max_frame=ethernet.MAX_FRAME_BYTES):
        if max_frame < ethernet.MIN_FRAME_BYTES:
            raise ValueError(
                f"The largest frame must be at least {ethernet.MIN_FRAME_BYTES} bytes, not {max_frame}."
            )
        self.max_frame = max_frame
        super().__init__(
            {
                "data": In(8),
                "dv": In(1),
                "er": In(1),
                "o_valid": Out(1),
                "o_data": Out(8),
                "o_end": Out(1),
                "o_status": Out(RxStatus),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = fcs = crc.catalog.CRC32_ETHERNET(data_width=8).create()
        held = Array(Signal(8, name=f"held{k}") for k in range(4))
        count = Signal(range(self.max_frame + 2))  # frame bytes so far, FCS included; saturates
        er_seen = Signal()
        m.d.comb += fcs.data.eq(self.data)
        m.d.sync += [self.o_valid.eq(0), self.o_end.eq(0)]

        def end(status):
            return [self.o_end.eq(1), self.o_status.eq(status)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.dv):
                    m.d.sync += [count.eq(0), er_seen.eq(self.er)]
                    with m.If(self.data == ethernet.SFD_BYTE):
                        m.d.comb += fcs.start.eq(1)
                        m.next = "DATA"
                    with m.Elif(self.data == ethernet.PREAMBLE_BYTE):
                        m.next = "PREAMBLE"
                    with m.Else():
                        m.next = "BAD"
            with m.State("PREAMBLE"):
                m.d.sync += er_seen.eq(er_seen | self.er)
                with m.If(~self.dv):
                    m.d.sync += end(RxStatus.PREAMBLE)
                    m.next = "IDLE"
                with m.Elif(self.data == ethernet.SFD_BYTE):
                    m.d.comb += fcs.start.eq(1)
                    m.next = "DATA"
                with m.Elif(self.data != ethernet.PREAMBLE_BYTE):
                    m.next = "BAD"
            with m.State("BAD"):
                with m.If(~self.dv):
                    m.d.sync += end(Mux(er_seen | self.er, RxStatus.RX_ER, RxStatus.PREAMBLE))
                    m.next = "IDLE"
            with m.State("DATA"):
                with m.If(self.dv):
                    m.d.comb += fcs.valid.eq(1)
                    m.d.sync += [
                        er_seen.eq(er_seen | self.er),
                        count.eq(Mux(count > self.max_frame, count, count + 1)),
                        held[0].eq(self.data),
                        held[1].eq(held[0]),
                        held[2].eq(held[1]),
                        held[3].eq(held[2]),
                    ]
                    with m.If(count >= ethernet.ETH_FCS_BYTES):
                        m.d.sync += [self.o_valid.eq(1), self.o_data.eq(held[3])]
                with m.Else():
                    status = Mux(
                        er_seen,
                        RxStatus.RX_ER,
                        Mux(
                            count < ethernet.MIN_FRAME_BYTES,
                            RxStatus.RUNT,
                            Mux(
                                count > self.max_frame,
                                RxStatus.OVERSIZE,
                                Mux(fcs.match_detected, RxStatus.OK, RxStatus.FCS),
                            ),
                        ),
                    )
                    m.d.sync += end(status)
                    m.next = "IDLE"
        return m


class RxPacker(wiring.Component):
    """Bytes of :class:`RxMac` into :func:`RxBeat` beats of ``width`` bits for an ``AsyncFIFO``'s write
    side (``w_en``/``w_data``/``w_rdy``), in the same domain as :class:`RxMac`.

    A full beat is written when the next byte arrives (so the last beat is known to be last); every frame
    end writes a last beat with the frame's status (zero bytes if the frame had none left). If the FIFO is
    full when a beat is due, the frame is marked ``OVERFLOW`` and its remaining bytes are not written; a
    last beat that cannot be written waits in a register, and the bytes of a frame that starts meanwhile
    are dropped (that frame ends ``OVERFLOW`` too, and if it ends before the waiting beat is written, that
    beat takes its place and counts it in ``lost``). Latency: one cycle after the byte that completes a beat.
    """

    def __init__(self, *, width):
        check_width(width)
        self.width = width
        super().__init__(
            {
                "i_valid": In(1),
                "i_data": In(8),
                "i_end": In(1),
                "i_status": In(RxStatus),
                "w_en": Out(1),
                "w_data": Out(RxBeat(width)),
                "w_rdy": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        acc = Signal(self.width)
        n = Signal(range(B + 1))
        overflow = Signal()  # this frame lost bytes
        pending = Signal()  # ``term`` (a last beat) waits for room
        term = Signal(RxBeat(self.width))
        full_beat = Signal(RxBeat(self.width))
        m.d.comb += [
            full_beat.data.eq(acc),
            full_beat.bytes.eq(B),
            full_beat.last.eq(0),
            self.w_data.eq(Mux(pending, term, full_beat)),
        ]
        lanes = Array(acc.word_select(k, 8) for k in range(B))

        with m.If(pending):
            m.d.comb += self.w_en.eq(1)
            with m.If(self.w_rdy):
                m.d.sync += pending.eq(0)
        with m.If(self.i_valid):
            with m.If(n == B):
                with m.If(~overflow & ~pending):
                    m.d.comb += self.w_en.eq(1)
                with m.If(~self.w_rdy | pending):
                    m.d.sync += overflow.eq(1)
                m.d.sync += [acc.eq(self.i_data), n.eq(1)]
            with m.Else():
                m.d.sync += [lanes[n].eq(self.i_data), n.eq(n + 1)]
            with m.If(pending):
                m.d.sync += overflow.eq(1)
        with m.If(self.i_end):
            status = Mux(overflow | pending, RxStatus.OVERFLOW, self.i_status)
            m.d.sync += [
                term.data.eq(acc),
                term.bytes.eq(n),
                term.last.eq(1),
                term.status.eq(status),
                term.lost.eq(
                    Mux(pending, Mux(term.lost == (1 << LOST_BITS) - 1, term.lost, term.lost + 1), 0)
                ),
                pending.eq(1),
                n.eq(0),
                overflow.eq(0),
            ]
        return m
