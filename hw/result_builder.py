"""RESULT builder: turns the reduce engine's summed beats into RESULT UDP payloads.

The RESULT header (PROTOCOL.md: kind RESULT, ``src`` = this site's rank, ``bitmap`` = contributors,
``flags`` = OR of the contributions' flags, ``group`` = the first stored contribution's group, the rest
from the chunk) is generated from the chunk's completion record. At ``B >= 64`` bytes per beat the header
shares the first beat with the first elements and overwrites its low 32 bytes (the member buffers keep the
wire alignment, so those bytes held the sum of header garbage); at smaller widths it is sent as
``32 / B`` beats of its own before the summed beats. Each output beat carries the payload length
(``plen``) for the fan-out.

Latency: one cycle. Back-pressure: one output register, ``i.ready`` follows ``o.ready``; one beat per cycle
except for the ``32 / B`` header beats that precede each RESULT at narrow widths.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import HEADER_FIELD_OFFSETS, KindCode, ResultWord, encode_be, header_words

__all__ = ["ResultBuilder", "ResultBeat", "result_header"]


def ResultBeat(width):
    """A RESULT payload beat, the payload's length in bytes and the group address it also goes to (``mdest``,
    0 for none)."""
    return data.StructLayout(
        {"data": width, "bytes": range(width // 8 + 1), "last": 1, "plen": 16, "mdest": 32}
    )


def result_header(cd, rank):
    """The 256 bits of a RESULT header (first wire byte lowest) for completion record ``cd``."""
    values = {
        "magic": Const(protocol.MAGIC, 16),
        "version": Const(protocol.VERSION, 8),
        "kind": Const(KindCode.RESULT.value, 8),
        "dtype": cd.desc.dtype.as_unsigned(),
        "flags": cd.desc.flags,
        "job": cd.desc.job,
        "round": cd.desc.round,
        "chunk": cd.desc.chunk,
        "src": rank,
        "group": cd.desc.group,
        "count": cd.desc.count,
        "reserved": Const(0, 16),
        "bitmap": cd.bitmap,
    }
    parts = []
    for name, (_, size) in HEADER_FIELD_OFFSETS.items():
        value = Signal(8 * size, name=f"hdr_{name}")
        parts.append((value, values[name]))
    return Cat(*[encode_be(v, len(v) // 8) for v, _ in parts]), [v.eq(x) for v, x in parts]


class ResultBuilder(wiring.Component):
    """Ports: ``i`` (:func:`ResultWord`), ``o`` (:func:`ResultBeat`), ``rank`` (this site's rank)."""

    def __init__(self, *, width, slots):
        self.width, self.slots = width, slots
        super().__init__(
            {
                "i": In(stream.Signature(ResultWord(width, slots))),
                "o": Out(stream.Signature(ResultBeat(width))),
                "rank": In(6),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        PW0 = header_words(W)
        ib = self.i.payload
        pw = Signal(16)

        hdr, assigns = result_header(ib.cd, self.rank)
        m.d.comb += assigns
        # count * element_bytes(dtype) as shifts: every element size is a power of two, and a multiplier here
        # would map to a DSP block on the beat's path.
        dtype, count = ib.cd.desc.dtype.as_unsigned(), ib.cd.desc.count
        elems = Const(0, 16)
        for code in protocol.DType:
            assert code.size & (code.size - 1) == 0
            elems = Mux(dtype == code.value, count << (code.size.bit_length() - 1), elems)
        plen = Signal(16)
        m.d.comb += plen.eq(protocol.HEADER_BYTES + elems)

        en = ~self.o.valid | self.o.ready
        # ``pw < PW0`` kept as a register of its own, so that ``i.ready`` is one gate from registers.
        header_beat = Signal(init=PW0 > 0)
        m.d.comb += self.i.ready.eq(en & ~header_beat)
        ob = Signal.like(self.o.payload)
        m.d.comb += [ob.plen.eq(plen), ob.mdest.eq(ib.cd.mdest), ob.bytes.eq(B), ob.data.eq(ib.data)]
        if PW0:
            with m.If(header_beat):
                m.d.comb += ob.data.eq(hdr.word_select(pw[: max(1, (PW0 - 1).bit_length())], W))
        else:
            with m.If(pw == 0):
                m.d.comb += ob.data[: 8 * protocol.HEADER_BYTES].eq(hdr)
        with m.If(~header_beat & ib.last):
            # plen - pw * B, of which the field keeps log2 B + 1 bits: only pw's lowest bit reaches them.
            m.d.comb += [ob.last.eq(1), ob.bytes.eq(plen - (pw[0] << (B.bit_length() - 1)))]

        with m.If(en):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(ob)]
            with m.If(self.i.valid):
                with m.If(~header_beat & ib.last):
                    m.d.sync += [pw.eq(0), header_beat.eq(PW0 > 0)]
                with m.Else():
                    m.d.sync += [pw.eq(pw + 1), header_beat.eq(pw + 1 < PW0)]
        return m
