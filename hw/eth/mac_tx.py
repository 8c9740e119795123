"""Transmit side of the gigabit MAC, in the transmit clock's domain: one byte per cycle.

:class:`TxMac` reads whole frames as beats from a stream (the crossing's FIFO; the frame buffer on the
core's side puts a frame there only once all of it is stored, and that side is several times faster
than the line, so a frame never runs dry once started) and sends each as preamble and delimiter, its
bytes, zero padding to 60 bytes, the FCS computed with ``amaranth.lib.crc``, and the 12-byte gap.
"""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import crc, stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec import ethernet
from ..layouts import Beat, check_width

__all__ = ["TxMac"]


class TxMac(wiring.Component):
    """Frame sender, one byte per cycle of its ``sync`` domain (rename it to the transmit clock's).

    Ports: ``i`` (a stream of :func:`Beat` beats, taken the cycle ``i.ready`` is set), out
    ``data``/``en``/``er`` (a byte per cycle for the PHY interface), ``sent`` (one cycle per frame sent)
    and ``underrun`` (one cycle per frame whose next beat was missing: its remaining bytes go out with
    ``er`` so that the receiver drops it). Latency: the first preamble byte 1 cycle after a beat is there.
    Back-pressure: frames wait in the FIFO while one is sent; the gap is exactly 12 bytes.
    """

    def __init__(self, *, width):
        check_width(width)
        self.width = width
        super().__init__(
            {
                "i": In(stream.Signature(Beat(width))),
                "data": Out(8),
                "en": Out(1),
                "er": Out(1),
                "sent": Out(1),
                "underrun": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        m.submodules.crc = fcs = crc.catalog.CRC32_ETHERNET(data_width=8).create()
        cur = Signal(Beat(self.width))
        # Bytes of ``cur`` after the one going out, and whether it is the beat's last, both as registers so
        # that asking the FIFO for the next beat is decided from flip-flops (``bytes == 0`` sends one byte).
        left = Signal(range(B))
        end = Signal()
        sent = Signal(range(ethernet.MIN_PAYLOAD_FRAME_BYTES + 1))  # frame bytes so far, saturating
        step = Signal(range(max(ethernet.ETH_PREAMBLE_BYTES, ethernet.ETH_IFG_BYTES) + 1))
        broken = Signal()
        fcs_bytes = Array(fcs.crc.word_select(j, 8) for j in range(4))
        byte, en = Signal(8), Signal()
        m.d.comb += fcs.data.eq(byte)
        m.d.sync += [self.data.eq(byte), self.en.eq(en), self.er.eq(en & broken)]
        m.d.sync += [self.sent.eq(0), self.underrun.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.i.valid):
                    m.d.comb += self.i.ready.eq(1)
                    m.d.sync += [cur.eq(self.i.payload), sent.eq(0), step.eq(0), broken.eq(0)]
                    m.d.sync += _beat_bytes(left, end, self.i.payload.bytes)
                    m.next = "PREAMBLE"
            with m.State("PREAMBLE"):
                m.d.comb += en.eq(1)
                m.d.sync += step.eq(step + 1)
                with m.If(step == ethernet.ETH_PREAMBLE_BYTES - 1):
                    m.d.comb += [byte.eq(ethernet.SFD_BYTE), fcs.start.eq(1)]
                    m.next = "DATA"
                with m.Else():
                    m.d.comb += byte.eq(ethernet.PREAMBLE_BYTE)
            with m.State("DATA"):
                # The beat's bytes leave from its low end, shifted down a byte a cycle: the byte on the
                # line and into the FCS is a register's, not a choice among the beat's lanes.
                m.d.comb += [en.eq(1), byte.eq(cur.data[:8]), fcs.valid.eq(1)]
                m.d.sync += [
                    cur.data.eq(cur.data >> 8),
                    left.eq(left - 1),
                    end.eq(left == 1),
                    sent.eq(Mux(sent == ethernet.MIN_PAYLOAD_FRAME_BYTES, sent, sent + 1)),
                ]
                with m.If(end):
                    with m.If(cur.last):
                        m.d.sync += step.eq(0)
                        with m.If(sent + 1 < ethernet.MIN_PAYLOAD_FRAME_BYTES):
                            m.next = "PAD"
                        with m.Else():
                            m.next = "FCS"
                    with m.Elif(self.i.valid):
                        m.d.comb += self.i.ready.eq(1)
                        m.d.sync += [cur.eq(self.i.payload), *_beat_bytes(left, end, self.i.payload.bytes)]
                    with m.Else():
                        # The next beat is late: the frame is lost; mark it and wait for its beats.
                        m.d.sync += [broken.eq(1), self.underrun.eq(1)]
                        m.next = "DRAIN"
            with m.State("PAD"):
                m.d.comb += [en.eq(1), byte.eq(0), fcs.valid.eq(1)]
                m.d.sync += sent.eq(sent + 1)
                with m.If(sent == ethernet.MIN_PAYLOAD_FRAME_BYTES - 1):
                    m.next = "FCS"
            with m.State("DRAIN"):
                m.d.comb += en.eq(1)
                with m.If(self.i.valid):
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.payload.last):
                        m.d.sync += step.eq(0)
                        m.next = "FCS"
            with m.State("FCS"):
                m.d.comb += [en.eq(1), byte.eq(fcs_bytes[step[:2]])]
                m.d.sync += step.eq(step + 1)
                with m.If(step == ethernet.ETH_FCS_BYTES - 1):
                    m.d.sync += [step.eq(0), self.sent.eq(~broken)]
                    m.next = "GAP"
            with m.State("GAP"):
                m.d.sync += step.eq(step + 1)
                # IDLE takes one more cycle before the next preamble: the gap ends one step early here.
                with m.If(step == ethernet.ETH_IFG_BYTES - 2):
                    m.next = "IDLE"
        return m


def _beat_bytes(left, end, nbytes):
    """``left`` and ``end`` for a beat of ``nbytes`` just loaded: its first byte goes out next."""
    return [left.eq(Mux(nbytes == 0, 0, nbytes - 1)), end.eq(nbytes <= 1)]
