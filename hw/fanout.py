"""Multicast fan-out: every RESULT payload framed as Ethernet/IPv4/UDP once per configured destination.

The payload is stored whole in one of two buffers (so the next RESULT can arrive while this one is sent)
and replayed ``ndest`` times, each copy with its destination's MAC, IPv4 address and UDP port, and once
more to the RESULT's group address when it has one (``mdest``, root aggregation: the RFC 1112 MAC of the
group, the core's own UDP port), after the destination entries (PROTOCOL.md
"RESULT frames": DF, TTL 64, identification 0, valid IPv4 checksum, UDP checksum 0). The 42 header bytes
shift the payload by ``42 mod B`` bytes within the beats, so output beat ``j`` joins the top bytes of
payload beat ``j - 42 // B - 1`` and the low bytes of payload beat ``j - 42 // B``.

Timing: everything a frame needs from its payload's length and group (beat counts, the last beat's byte
count, the copy count, and the IPv4 checksum of every copy) is computed into registers of the buffer
in the three cycles after the RESULT's last beat is stored, so the generator starts each frame from
registers and never adds or folds on the beat it issues. The output FIFO's occupancy is kept as a counter.

Latency: the whole payload is buffered (store and forward), then three cycles (the per-buffer
precomputation) before its first frame may start, then two cycles (buffer read, assembly) to the output
FIFO. Back-pressure: frames are generated only while the output FIFO has room for the beat being read, so
``o.ready`` may drop at any cycle without losing or corrupting a beat; while both buffers are full,
``i.ready`` is low. Configuration inputs reach the frames within three cycles of a change (configure,
then stream). ``plen`` must not exceed ``max_payload``.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import Beat, encode_be
from .result_builder import ResultBeat

__all__ = ["Fanout"]

_HDR = protocol.FRAME_OVERHEAD
# Arming delay: cycles from a buffer's ``full`` bit to its first frame, the depth of the precomputation.
_ARM = 3


class Fanout(wiring.Component):
    """Parameters: ``width``, ``dests`` (D), ``max_payload`` (bytes of the largest RESULT payload).
    Ports: ``i`` (:func:`ResultBeat`), ``o`` (frames, :func:`Beat`), and the addressing configuration."""

    def __init__(self, *, width, dests, max_payload, fifo_depth=4):
        if dests < 1:
            raise ValueError(f"The fan-out needs at least one destination entry, not {dests}.")
        if max_payload < 1:
            raise ValueError(f"The largest RESULT payload must be at least one byte, not {max_payload}.")
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
        LB = B.bit_length() - 1
        q, o = divmod(_HDR, B)
        # A power-of-two buffer stride makes the buffer's base address a concatenation, not an adder.
        AW = max(1, (PWN - 1).bit_length())
        JMAX = -(-(self.max_payload + _HDR) // B)
        JW = max(1, (JMAX - 1).bit_length())

        m.submodules.buf = buf = memory.Memory(shape=W, depth=2 << AW, init=[])
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
        m.d.comb += [
            wp.addr.eq(Cat(wpw[:AW], wb)),
            wp.data.eq(self.i.payload.data),
            wp.en.eq(wr & (wpw < PWN)),
        ]
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

        # Per-buffer precomputation (registers recomputed every cycle from the stored length and group and
        # the configuration; a buffer is armed once they have settled).
        ip_const = 0x4500 + 0x4000 + ((64 << 8) | protocol.IPPROTO_UDP)
        ipsum = Signal(17)  # this site's address, halves added
        dsum = [Signal(17, name=f"dsum{k}") for k in range(D)]  # destination entries' addresses
        m.d.sync += ipsum.eq(self.ip[16:] + self.ip[:16])
        for k in range(D):
            m.d.sync += dsum[k].eq(self.dest_ip[k][16:] + self.dest_ip[k][:16])
        total, udpl, fwm1, fwm2, fw0, lastb, hend, copies = ([] for _ in range(8))
        csum = []  # csum[b][k]: copy k < D to destination entry k, copy D to the group
        for n in range(2):
            t = Signal(16, name=f"total{n}")
            u = Signal(16, name=f"udpl{n}")
            f = Signal(JW, name=f"fwm1_{n}")  # index of the frame's last beat
            f2 = Signal(JW, name=f"fwm2_{n}")  # the beat before it
            f0 = Signal(name=f"fw0_{n}")  # a frame of one beat
            lb = Signal(range(B + 1), name=f"lastb{n}")  # bytes in the frame's last beat
            h = Signal(JW + 1, name=f"hend{n}")  # output beats below this one read a payload beat
            c = Signal(range(D + 2), name=f"copies{n}")
            bs = Signal(18, name=f"base{n}")
            ms = Signal(17, name=f"msum{n}")
            flen_m1 = plen[n] + (_HDR - 1)
            m.d.sync += [
                t.eq(plen[n] + protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES),
                u.eq(plen[n] + protocol.UDP_HEADER_BYTES),
                f.eq(flen_m1 >> LB),
                f2.eq((flen_m1 >> LB) - 1),
                f0.eq((flen_m1 >> LB) == 0),
                lb.eq(flen_m1[:LB] + 1),
                h.eq(q + ((plen[n] + B - 1) >> LB)),
                c.eq(self.ndest + (mdest[n] != 0)),
                bs.eq(plen[n] + (ip_const + protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES) + ipsum),
                ms.eq(mdest[n][16:] + mdest[n][:16]),
            ]
            sums = []
            for k in range(D + 1):
                s = Signal(19, name=f"ipsum{n}_{k}")
                m.d.sync += s.eq(bs + (dsum[k] if k < D else ms))
                fold = Signal(17, name=f"fold{n}_{k}")
                m.d.comb += fold.eq(s[:16] + s[16:])
                cs = Signal(16, name=f"csum{n}_{k}")
                m.d.sync += cs.eq(~(fold[:16] + fold[16]))
                sums.append(cs)
            total.append(t)
            udpl.append(u)
            fwm1.append(f)
            fwm2.append(f2)
            fw0.append(f0)
            lastb.append(lb)
            hend.append(h)
            copies.append(c)
            csum.append(sums)
        # A buffer is armed once it has been full for the last _ARM cycles, as a register: set _ARM cycles
        # after full, cleared one cycle after full is. That cycle is harmless: the generator has moved
        # to the other buffer when it clears full, and cannot come back before the next cycle. ``go``: armed
        # with copies to send; ``dis``: armed with none (the RESULT is discarded).
        full_d = [Signal(2, name=f"full_d{n}") for n in range(_ARM - 1)]
        m.d.sync += full_d[0].eq(full)
        for n in range(1, _ARM - 1):
            m.d.sync += full_d[n].eq(full_d[n - 1])
        settled = full
        for fd in full_d:
            settled = settled & fd
        go = Signal(2)
        dis = Signal(2)
        for n in range(2):
            m.d.sync += [
                go[n].eq(settled[n] & (copies[n] != 0)),
                dis[n].eq(settled[n] & (copies[n] == 0)),
            ]

        # Output FIFO; ``cnt`` is its level plus the beat in the assembler.
        m.submodules.fifo = out = fifo.SyncFIFOBuffered(width=Beat(W).size, depth=self.fifo_depth)
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy), out.r_en.eq(self.o.ready)]
        cnt = Signal(range(self.fifo_depth + 1))
        credit = cnt < self.fifo_depth

        # Read side: generator (G) then assembler (A).
        rb = Signal()
        # A second copy of rb, held inverted so that synthesis keeps both: rb steers the wide prefix and
        # buffer multiplexers, rbc the generator's control, so neither net reaches a hundred sinks.
        rb_n = Signal(init=1)
        rbc = ~rb_n
        d = Signal(range(D + 1))
        j = Signal(JW)
        av = Signal()
        cur_copies = Array(copies)[rbc]
        ready = go.bit_select(rbc, 1)
        gen = ready & credit
        # With no destination configured a RESULT is discarded rather than left to block the core.
        discard = dis.bit_select(rbc, 1)
        m.d.sync += cnt.eq(cnt + gen - (out.r_rdy & self.o.ready))
        p = Signal(JW)
        m.d.comb += p.eq(j - q)  # payload beat whose low bytes finish output beat j
        m.d.comb += [rp.addr.eq(Cat(p[:AW], rb)), rp.en.eq(1)]
        last_j = Signal()  # j is the frame's last beat: a register, set from the beat before
        last_copy = d + 1 >= cur_copies

        # Prefix for destination d.
        group = d == self.ndest
        cur_mdest = mdest[rb]
        dmac = Mux(group, Cat(cur_mdest[:23], Const(0x01005E << 1, 25)), Array(self.dest_mac)[d])
        dip = Mux(group, cur_mdest, Array(self.dest_ip)[d])
        dport = Mux(group, self.port, Array(self.dest_port)[d])
        cur_csum = Array([Array(csum[n][:D])[d] for n in range(2)])[rb]
        ip_csum = Mux(group, Array([csum[n][D] for n in range(2)])[rb], cur_csum)
        prefix = Cat(
            encode_be(dmac, 6),
            encode_be(self.mac, 6),
            encode_be(Const(protocol.ETHERTYPE_IPV4, 16), 2),
            Const(0x45, 8),
            Const(0, 8),
            encode_be(Array(total)[rb], 2),
            Const(0, 16),
            encode_be(Const(0x4000, 16), 2),
            Const(64, 8),
            Const(protocol.IPPROTO_UDP, 8),
            encode_be(ip_csum, 2),
            encode_be(self.ip, 4),
            encode_be(dip, 4),
            encode_be(self.port, 2),
            encode_be(dport, 2),
            encode_be(Array(udpl)[rb], 2),
            Const(0, 16),
        )
        assert len(prefix) == 8 * _HDR
        prefix_reg = Signal(8 * _HDR)
        prefix_beats = Signal(8 * B * (q + 1))
        m.d.comb += prefix_beats.eq(prefix_reg)

        # Assembler stage registers.
        a_j = Signal(JW)
        a_last = Signal()
        a_bytes = Signal(range(B + 1))
        a_has = Signal()  # a payload beat was read for this output beat
        prev = Signal(W)
        with m.If(gen):
            m.d.sync += [
                a_j.eq(j),
                a_last.eq(last_j),
                a_has.eq((j >= q) & (j < Array(hend)[rbc])),
                a_bytes.eq(Mux(last_j, Array(lastb)[rbc], B)),
            ]
        m.d.sync += av.eq(gen)
        # The prefix is loaded on every cycle j is 0, not only when that beat is generated: the load of the
        # generating cycle is the one the frame uses, and the next load at j = 0 takes effect only after
        # the frame's last beat has been assembled. So its enable (336 flip-flops) is a register.
        j0 = Signal(init=1)
        with m.If(j0):
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
            m.d.sync += j0.eq(last_j)
            with m.If(last_j):
                m.d.sync += j.eq(0)
                with m.If(last_copy):
                    m.d.sync += [d.eq(0), rb.eq(~rb), rb_n.eq(rbc)]
                with m.Else():
                    m.d.sync += d.eq(d + 1)
            with m.Else():
                m.d.sync += j.eq(j + 1)

        # last_j for the next cycle's j and rb. A buffer's lengths settle before it is armed, and last_j is
        # recomputed every idle cycle, so it is right by the time a frame starts.
        with m.If(gen):
            with m.If(last_j):
                m.d.sync += last_j.eq(Mux(last_copy, Array(fw0)[rb_n], Array(fw0)[rbc]))
            with m.Else():
                m.d.sync += last_j.eq(j == Array(fwm2)[rbc])
        with m.Elif(discard):
            m.d.sync += last_j.eq(j == Array(fwm1)[rb_n])
        with m.Else():
            m.d.sync += last_j.eq(j == Array(fwm1)[rbc])

        # Buffer occupancy: set when written, cleared after the last copy's last beat is generated.
        set_b = Mux(wr & self.i.payload.last, (Const(1, 2) << wb)[:2], 0)
        with m.If(discard):
            m.d.sync += [rb.eq(~rb), rb_n.eq(rbc)]
        clr_b = Mux((gen & last_j & last_copy) | discard, (Const(1, 2) << rbc)[:2], 0)
        m.d.sync += full.eq((full & ~clr_b) | set_b)
        return m
