"""Multicast fan-out: every RESULT payload framed as Ethernet/IPv4/UDP once per configured destination.

The payload is stored whole in one of two buffers (so the next RESULT can arrive while this one is sent)
and replayed ``ndest`` times, each copy with its destination's MAC, IPv4 address and UDP port, and once
more to the RESULT's group address when it has one (``mdest``, root aggregation: the RFC 1112 MAC of the
group, the core's own UDP port), after the destination entries (PROTOCOL.md
"RESULT frames": DF, TTL 64, identification 0, valid IPv4 checksum, UDP checksum 0). The 42 header bytes
shift the payload by ``42 mod B`` bytes within the beats, so output beat ``j`` joins the top bytes of
payload beat ``j - 42 // B - 1`` and the low bytes of payload beat ``j - 42 // B``.

Latency: the whole payload is buffered before its first frame starts (store and forward), then two cycles
(buffer read, assembly) to the output FIFO. Back-pressure: frames are generated only while the output FIFO
has room for the beat being read, so ``o.ready`` may drop at any cycle without losing or corrupting a beat;
while both buffers are full, ``i.ready`` is low.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import Beat, encode_be
from .result_builder import ResultBeat

__all__ = ["Fanout"]

_HDR = protocol.FRAME_OVERHEAD


def _fold16(value):
    for _ in range(4):
        value = value[:16] + value[16:]
    return value[:16]


class Fanout(wiring.Component):
    """Parameters: ``width``, ``dests`` (D), ``max_payload`` (bytes of the largest RESULT payload).
    Ports: ``i`` (:func:`ResultBeat`), ``o`` (frames, :func:`Beat`), and the addressing configuration."""

    def __init__(self, *, width, dests, max_payload, fifo_depth=4):
        if dests < 1:
            raise ValueError(f"The fan-out needs at least one destination entry, not {dests}.")
        self.width, self.dests, self.max_payload, self.fifo_depth = width, dests, max_payload, fifo_depth
        self.pwords = -(-max_payload // (width // 8))
        super().__init__(
            {
                "i": In(stream.Signature(ResultBeat(width))),
                "o": Out(stream.Signature(Beat(width))),
                "mac": In(48),
                "ip": In(32),
                "port": In(16),
                "ndest": In(range(dests + 1)),
                "dest_mac": In(48).array(dests),
                "dest_ip": In(32).array(dests),
                "dest_port": In(16).array(dests),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W, D, PWN = self.width, self.dests, self.pwords
        B = W // 8
        q, o = divmod(_HDR, B)

        m.submodules.buf = buf = memory.Memory(shape=W, depth=2 * PWN, init=[])
        wp = buf.write_port()
        rp = buf.read_port(domain="sync")
        full = Signal(2)
        plen = Array([Signal(16, name=f"plen{n}") for n in range(2)])
        mdest = Array([Signal(32, name=f"mdest{n}") for n in range(2)])

        # Write side.
        wb = Signal()
        wpw = Signal(range(PWN + 1))
        m.d.comb += self.i.ready.eq(~full.bit_select(wb, 1))
        wr = self.i.valid & self.i.ready
        m.d.comb += [wp.addr.eq(wb * PWN + wpw), wp.data.eq(self.i.payload.data), wp.en.eq(wr & (wpw < PWN))]
        with m.If(wr):
            with m.If(self.i.payload.last):
                m.d.sync += [
                    wpw.eq(0),
                    wb.eq(~wb),
                    plen[wb].eq(self.i.payload.plen),
                    mdest[wb].eq(self.i.payload.mdest),
                ]
            with m.Else():
                m.d.sync += wpw.eq(wpw + 1)

        # Output FIFO.
        m.submodules.fifo = out = fifo.SyncFIFOBuffered(width=Beat(W).size, depth=self.fifo_depth)
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy), out.r_en.eq(self.o.ready)]

        # Read side: generator (G) then assembler (A).
        rb = Signal()
        d = Signal(range(D + 1))
        j = Signal(16)
        cur_plen = plen[rb]
        flen = Signal(17)
        m.d.comb += flen.eq(cur_plen + _HDR)
        fwords = Signal(16)
        m.d.comb += fwords.eq((flen + B - 1) >> (B.bit_length() - 1))
        pwords = Signal(16)
        m.d.comb += pwords.eq((cur_plen + B - 1) >> (B.bit_length() - 1))

        # Copies of the current RESULT: the destination entries, then its group address if it has one.
        cur_mdest = mdest[rb]
        copies = Signal(range(D + 2))
        m.d.comb += copies.eq(self.ndest + (cur_mdest != 0))
        av = Signal()
        ready = full.bit_select(rb, 1) & (copies != 0)
        credit = out.level + av < self.fifo_depth
        gen = ready & credit
        p = Signal(17)
        m.d.comb += p.eq(j - q)  # payload beat whose low bytes finish output beat j
        m.d.comb += [rp.addr.eq(rb * PWN + p), rp.en.eq(1)]
        last_j = j + 1 == fwords

        # Prefix for destination d.
        group = d == self.ndest
        dmac = Mux(group, Cat(cur_mdest[:23], Const(0x01005E << 1, 25)), Array(self.dest_mac)[d])
        dip = Mux(group, cur_mdest, Array(self.dest_ip)[d])
        dport = Mux(group, self.port, Array(self.dest_port)[d])
        total = Signal(16)
        m.d.comb += total.eq(cur_plen + protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES)
        ip_sum = (
            0x4500
            + total
            + 0x0000
            + 0x4000
            + ((64 << 8) | protocol.IPPROTO_UDP)
            + self.ip[16:]
            + self.ip[:16]
            + dip[16:]
            + dip[:16]
        )
        ip_csum = Signal(16)
        m.d.comb += ip_csum.eq(~_fold16(Cat(ip_sum, Const(0, 8))))
        prefix = Cat(
            encode_be(dmac, 6),
            encode_be(self.mac, 6),
            encode_be(Const(protocol.ETHERTYPE_IPV4, 16), 2),
            Const(0x45, 8),
            Const(0, 8),
            encode_be(total, 2),
            Const(0, 16),
            encode_be(Const(0x4000, 16), 2),
            Const(64, 8),
            Const(protocol.IPPROTO_UDP, 8),
            encode_be(ip_csum, 2),
            encode_be(self.ip, 4),
            encode_be(dip, 4),
            encode_be(self.port, 2),
            encode_be(dport, 2),
            encode_be((cur_plen + protocol.UDP_HEADER_BYTES)[:16], 2),
            Const(0, 16),
        )
        assert len(prefix) == 8 * _HDR
        prefix_reg = Signal(8 * _HDR)
        prefix_beats = Signal(8 * B * (q + 1))
        m.d.comb += prefix_beats.eq(prefix_reg)

        # Assembler stage registers.
        a_j = Signal(16)
        a_last = Signal()
        a_bytes = Signal(range(B + 1))
        a_has = Signal()  # a payload beat was read for this output beat
        prev = Signal(W)
        with m.If(gen):
            m.d.sync += [
                a_j.eq(j),
                a_last.eq(last_j),
                a_has.eq((j >= q) & (p < pwords)),
                a_bytes.eq(Mux(last_j, flen - j * B, B)),
            ]
        m.d.sync += av.eq(gen)
        with m.If(gen & (j == 0)):
            m.d.sync += prefix_reg.eq(prefix)

        cur = Mux(a_has, rp.data, 0)
        word = Signal(W)
        with m.If(a_j < q):
            m.d.comb += word.eq(prefix_beats.word_select(a_j[: max(1, q.bit_length())], W))
        with m.Elif(a_j == q):
            m.d.comb += word.eq(Cat(prefix_reg[8 * q * B :], cur[: W - 8 * o]))
        with m.Else():
            m.d.comb += word.eq(Cat(prev[W - 8 * o :], cur[: W - 8 * o]))
        beat = Signal(Beat(W))
        m.d.comb += [
            beat.data.eq(word),
            beat.bytes.eq(a_bytes),
            beat.last.eq(a_last),
            out.w_data.eq(beat),
            out.w_en.eq(av),
        ]
        with m.If(av):
            m.d.sync += prev.eq(cur)

        # Generator counters.
        with m.If(gen):
            with m.If(last_j):
                m.d.sync += j.eq(0)
                with m.If(d + 1 >= copies):
                    m.d.sync += [d.eq(0), rb.eq(~rb)]
                with m.Else():
                    m.d.sync += d.eq(d + 1)
            with m.Else():
                m.d.sync += j.eq(j + 1)

        # Buffer occupancy: set when written, cleared after the last copy's last beat is generated.
        set_b = Mux(wr & self.i.payload.last, (Const(1, 2) << wb)[:2], 0)
        # With no destination configured a RESULT is discarded rather than left to block the core.
        discard = full.bit_select(rb, 1) & (copies == 0)
        with m.If(discard):
            m.d.sync += rb.eq(~rb)
        clr_b = Mux((gen & last_j & (d + 1 >= copies)) | discard, (Const(1, 2) << rb)[:2], 0)
        m.d.sync += full.eq((full & ~clr_b) | set_b)
        return m
