"""Frame parser: Ethernet II / IPv4 / UDP frames in, UDP payloads out, drop codes 1-8 decided.

Latency: one cycle from an input beat to the output beat it completes. The UDP payload starts at frame
byte 42, which is not a beat boundary for any supported width, so output beat ``k`` is assembled from the
tails and heads of input beats ``42 // B + k`` and ``42 // B + k + 1`` (``B`` = bytes per beat). Each frame
yields exactly one payload packet, possibly a single empty beat, and its last beat carries the frame's
drop vector (codes 1-8): checks that need the whole frame (truncation, UDP checksum) are only known at its
end, so the payload streams on speculatively and the slot table discards it at its last beat.

Back-pressure: one output register, and a two-beat skid buffer at the input, so ``i.ready`` is a register
(the ready chain of the stages after this one ends here; the skid buffer adds no latency). One input beat per
cycle is accepted back to back across frames; the only bubble is when a frame's payload needs one more
output beat than the frame had input beats after its header *and* the next frame is a single beat long.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import Beat, PayloadBeat, be_bytes, check_width

__all__ = ["FrameParser"]

_HDR = protocol.FRAME_OVERHEAD  # 42
_ETH = protocol.ETH_HEADER_BYTES


def _fold1(value):
    """One end-around-carry fold: the low 16 bits plus the rest, congruent to ``value`` modulo 0xFFFF."""
    return value[:16] + value[16:]


def _ones_complement_ok(value, bits):
    """Whether the one's-complement sum of 16-bit words whose plain sum is ``value`` (``bits`` wide, at most
    31) is 0xFFFF, i.e. ``value`` is a non-zero multiple of 0xFFFF. One fold leaves ``y = value mod 0xFFFF``
    (plus a multiple of it) below ``2 * 0xFFFF``, where the only non-zero multiple is 0xFFFF itself: one
    adder and a compare instead of folding all the way down."""
    assert bits <= 31
    return _fold1(value) == 0xFFFF


class FrameParser(wiring.Component):
    """Ethernet/IPv4/UDP parser.

    Parameters: ``width`` (bits per beat, 64..512). Ports: ``i`` (frames as :func:`Beat` beats), ``o``
    (UDP payloads as :func:`PayloadBeat` beats, Ethernet padding removed), ``port`` (the UDP destination
    port the aggregator listens on).
    """

    def __init__(self, *, width):
        check_width(width)
        self.width = width
        super().__init__(
            {
                "i": In(stream.Signature(Beat(width))),
                "o": Out(stream.Signature(PayloadBeat(width))),
                "port": In(16),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        q, o = divmod(_HDR, B)

        j = Signal(16)  # beat index within the frame (saturates)
        hdr = Signal(8 * _HDR)  # header bytes captured so far
        prev = Signal(W)  # previous input beat
        csum = Signal(17)  # running UDP sum over frame bytes [34, 14 + total length),
        # folded once per beat: congruent modulo 0xFFFF, below 2**17
        flush = Signal()  # one more output beat owed by the previous frame
        flush_data = Signal(W)
        flush_bytes = Signal(range(B + 1))
        flush_drops = Signal(32)

        en = ~self.o.valid | self.o.ready
        sk_v = Signal()
        sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(~sk_v)
        in_v = Signal()
        ib = Signal.like(self.i.payload)
        m.d.comb += [in_v.eq(sk_v | self.i.valid), ib.eq(Mux(sk_v, sk, self.i.payload))]
        accept = in_v & en & ~(flush & ib.last)
        with m.If(sk_v):
            with m.If(accept):
                m.d.sync += sk_v.eq(0)
        with m.Elif(self.i.valid & ~accept):
            m.d.sync += [sk_v.eq(1), sk.eq(self.i.payload)]

        # The header as it stands with this beat's bytes merged in.
        cur = Signal(8 * _HDR)
        m.d.comb += cur.eq(hdr)
        for k in range(-(-_HDR // B)):
            lo, hi = k * B, min(_HDR, (k + 1) * B)
            with m.If(j == k):
                m.d.comb += cur[8 * lo : 8 * hi].eq(ib.data[: 8 * (hi - lo)])

        # A header field that lies wholly in beats before the one holding byte 41 is read from the
        # registered header: a frame whose last beat comes earlier is shorter than 42 bytes, so it is
        # truncated (code 1, the lowest, which decides its drop) whatever the field says. That keeps the
        # header-merge multiplexer off the drop-code and checksum paths (all fields but the UDP checksum at
        # W=64; fewer at wider beats, none at 512).
        def src(n, size):
            return hdr if (n + size - 1) // B < (_HDR - 1) // B else cur

        def byte(n):
            return src(n, 1)[8 * n : 8 * n + 8]

        def be16(n):
            return be_bytes(src(n, 2), n, 2)

        ethertype = be16(12)
        total = be16(16)
        frag = be16(20)
        udp_len = be16(38)
        udp_csum = be16(40)
        end = Signal(17)  # frame byte where the UDP payload ends
        m.d.comb += end.eq(total + _ETH)

        # Where the UDP payload ends relative to this beat's first byte (``end - j * B``), clamped to
        # [-B, 2B], which keeps every comparison below exact. Where every beat that can emit output, hold
        # checksum bytes (34 on) or end a frame of 42 bytes or more comes after the beat holding the IPv4
        # total length (W < 512), it is a register, computed on the beat before from the merged header; a
        # shorter frame is truncated (code 1) whatever the other codes say. At W = 512 it is computed here.
        start = Signal(17)
        m.d.comb += start.eq(j * B)
        rel_shape = signed((2 * B).bit_length() + 1)

        def clamp(v):
            return Mux(v < -B, -B, Mux(v > 2 * B, 2 * B, v))[: rel_shape.width].as_signed()

        rel = Signal(rel_shape)
        late_end = 34 // B > 17 // B
        if late_end:
            rel_q = Signal(rel_shape)
            nxt = Signal(signed(20))
            m.d.comb += nxt.eq(be_bytes(cur, 16, 2) + _ETH - start - B)
            with m.If(accept & ~ib.last):
                m.d.sync += rel_q.eq(clamp(nxt))
            m.d.comb += rel.eq(rel_q)
        else:
            here = Signal(signed(20))
            m.d.comb += here.eq(end - start)
            m.d.comb += rel.eq(clamp(here))

        # UDP checksum contribution of this beat: big-endian 16-bit words of bytes in [34, end).
        words = []
        for w in range(B // 2):
            from34 = j >= -(-(34 - 2 * w) // B) if 34 - 2 * w > 0 else Const(1)
            hi_ok = from34 & (rel > 2 * w)
            lo_ok = from34 & (rel > 2 * w + 1)
            words.append(
                Cat(
                    Mux(lo_ok, ib.data[16 * w + 8 : 16 * w + 16], 0),
                    Mux(hi_ok, ib.data[16 * w : 16 * w + 8], 0),
                )
            )
        beat_sum = Signal(24)
        m.d.comb += beat_sum.eq(sum(words))

        # The frame's end (this beat's bytes) and the payload's, whichever comes first, relative to ``start``.
        eff = Signal(rel_shape)
        m.d.comb += eff.eq(Mux(rel < ib.bytes, rel, ib.bytes))
        short = (j < _HDR // B) | ((j == _HDR // B) & (ib.bytes < _HDR % B))  # frame length < 42

        # Drop codes 1-8, evaluated on the last beat from the merged header.
        # Sums over header fields that are complete before the beat of byte 41 (W = 64) are taken on the
        # beat that completes them, from the registered header and that beat's own bytes, and kept: the IPv4
        # header check as a flag, the UDP pseudo-header sum as a number.
        def at_beat(k):
            return Cat(hdr[: 8 * B * k], ib.data)[: 8 * _HDR]

        def pseudo_of(h):
            return sum(be_bytes(h, n, 2) for n in (26, 28, 30, 32, 38)) + protocol.IPPROTO_UDP

        def ip_ok_of(h):
            ip_sum = Signal(20)
            m.d.comb += ip_sum.eq(sum(be_bytes(h, 14 + 2 * n, 2) for n in range(10)))
            return _ones_complement_ok(ip_sum, 20)

        jip, jps = 33 // B, 39 // B
        if (_HDR - 1) // B > jip:
            ip_ok = Signal()
            with m.If(accept & (j == jip)):
                m.d.sync += ip_ok.eq(ip_ok_of(at_beat(jip)))
        else:
            ip_ok = ip_ok_of(cur)
        late_pseudo = (_HDR - 1) // B > jps
        udp_sum = Signal(26)
        if late_pseudo:
            pseudo = Signal(20)
            with m.If(accept & (j == jps)):
                m.d.sync += pseudo.eq(pseudo_of(at_beat(jps)))
            m.d.comb += udp_sum.eq(csum + beat_sum + pseudo)
        else:
            m.d.comb += udp_sum.eq(csum + beat_sum + pseudo_of(cur))
        udp_ok = _ones_complement_ok(udp_sum, 26)
        drops = Signal(32)
        D = protocol.Drop
        m.d.comb += [
            drops[D.TRUNCATED].eq(short | ((ethertype == protocol.ETHERTYPE_IPV4) & (rel > ib.bytes))),
            drops[D.NOT_IPV4].eq(ethertype != protocol.ETHERTYPE_IPV4),
            drops[D.BAD_IP_HEADER].eq(
                (byte(14) != 0x45)
                | (frag & 0x3FFF).any()
                | (total < protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES)
            ),
            drops[D.BAD_IP_CHECKSUM].eq(~ip_ok),
            drops[D.NOT_UDP].eq(byte(23) != protocol.IPPROTO_UDP),
            drops[D.WRONG_PORT].eq(be16(36) != self.port),
            drops[D.BAD_UDP_LENGTH].eq(udp_len != total - protocol.IPV4_HEADER_BYTES),
            drops[D.BAD_UDP_CHECKSUM].eq((udp_csum != 0) & ~udp_ok),
        ]

        # Output beat k = frame bytes [(j-1)B + o, jB + o): the top B-o bytes of the previous beat and the
        # low o bytes of this one.
        joined = Cat(prev[8 * o :], ib.data[: 8 * o])
        lim = Signal(rel_shape)  # end of this output beat's bytes, relative to ``start``
        m.d.comb += lim.eq(Mux(ib.last, eff, rel))
        has_k = (j >= q + 1) & (lim > o - B)
        k_bytes = Mux(lim >= o, B, (lim + B - o)[: len(flush_bytes)])
        need_flush = ib.last & (j >= q) & (eff > o)
        tail = Cat(ib.data[8 * o :], Const(0, 8 * o))
        tail_bytes = (eff - o)[: len(flush_bytes)]

        ov, ob = Signal(), Signal.like(self.o.payload)
        # While a flush is owed, only a non-last beat can be accepted and it emits nothing (a frame's first
        # beat never completes an output beat), so the two never compete for the output register.
        with m.If(flush):
            m.d.comb += [
                ov.eq(1),
                ob.data.eq(flush_data),
                ob.bytes.eq(flush_bytes),
                ob.last.eq(1),
                ob.drops.eq(flush_drops),
            ]
        with m.Else():
            # The beat's fields do not wait for ``accept`` (only the valid bit does): they are not looked at
            # without it, and the input handshake stays off the data path.
            m.d.comb += ov.eq(accept & (has_k | need_flush | ib.last))
            with m.If(has_k):
                m.d.comb += [ob.data.eq(joined), ob.bytes.eq(k_bytes), ob.last.eq(ib.last & ~need_flush)]
            with m.Elif(need_flush):
                m.d.comb += [ob.data.eq(tail), ob.bytes.eq(tail_bytes), ob.last.eq(1)]
            with m.Elif(ib.last):
                m.d.comb += [ob.bytes.eq(0), ob.last.eq(1)]
            m.d.comb += ob.drops.eq(Mux(ib.last & ~(has_k & need_flush), drops, 0))

        with m.If(en):
            m.d.sync += [self.o.valid.eq(ov), self.o.payload.eq(ob)]
            with m.If(flush):
                m.d.sync += flush.eq(0)

        with m.If(accept):
            m.d.sync += prev.eq(ib.data)
            with m.If(ib.last):
                m.d.sync += [j.eq(0), hdr.eq(0), csum.eq(0)]
                with m.If(has_k & need_flush):
                    m.d.sync += [
                        flush.eq(1),
                        flush_data.eq(tail),
                        flush_bytes.eq(tail_bytes),
                        flush_drops.eq(drops),
                    ]
            with m.Else():
                m.d.sync += [hdr.eq(cur), csum.eq(_fold1(csum + beat_sum))]
                with m.If(j != 0xFFFF):
                    m.d.sync += j.eq(j + 1)
        return m
