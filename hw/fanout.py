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

from types import SimpleNamespace

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
        # The sizes and signals the stages share, each set by the stage that makes it (under the name the
        # signal has in the Verilog).
        ctx = SimpleNamespace()
        ctx.W, ctx.D, ctx.PWN = self.width, self.dests, self.pwords
        ctx.B = ctx.W // 8
        ctx.LB = ctx.B.bit_length() - 1
        ctx.q, ctx.o = divmod(_HDR, ctx.B)
        # A power-of-two buffer stride makes the buffer's base address a concatenation, not an adder.
        ctx.AW = max(1, (ctx.PWN - 1).bit_length())
        JMAX = -(-(self.max_payload + _HDR) // ctx.B)
        ctx.JW = max(1, (JMAX - 1).bit_length())

        self._write_side(m, ctx)
        self._precompute(m, ctx)
        self._arm(m, ctx)
        self._prefix(m, ctx)
        self._assemble(m, ctx)
        self._advance(m, ctx)
        return m

    def _write_side(self, m, ctx):
        """The payload buffers (two of max_payload bytes) and their write side; ``full`` bits set by
        ``_occupancy``."""
        m.submodules.buf = buf = memory.Memory(shape=ctx.W, depth=2 << ctx.AW, init=[])
        wp = buf.write_port()
        ctx.rp = buf.read_port(domain="sync")
        ctx.full = Signal(2)
        ctx.plen = Array([Signal(16, name=f"plen{n}") for n in range(2)])
        ctx.mdest = Array([Signal(32, name=f"mdest{n}") for n in range(2)])

        # Write side.
        ctx.wb = Signal()
        wpw = Signal(range(ctx.PWN + 1))
        m.d.comb += self.i.ready.eq(~ctx.full.bit_select(ctx.wb, 1))
        ctx.wr = self.i.valid & self.i.ready
        m.d.comb += [
            wp.addr.eq(Cat(wpw[: ctx.AW], ctx.wb)),
            wp.data.eq(self.i.payload.data),
            wp.en.eq(ctx.wr & (wpw < ctx.PWN)),
        ]
        with m.If(ctx.wr):
            with m.If(self.i.payload.last):
                m.d.sync += [
                    wpw.eq(0),
                    ctx.wb.eq(~ctx.wb),
                    ctx.plen[ctx.wb].eq(self.i.payload.plen),
                    ctx.mdest[ctx.wb].eq(self.i.payload.mdest),
                ]
            with m.Else():
                m.d.sync += wpw.eq(wpw + 1)

    def _precompute(self, m, ctx):
        """Per-buffer frame geometry and IPv4 checksums, registers recomputed every cycle (one to two
        cycles)."""
        # Per-buffer precomputation (registers recomputed every cycle from the stored length and group and
        # the configuration; a buffer is armed once they have settled).
        ip_const = 0x4500 + 0x4000 + ((64 << 8) | protocol.IPPROTO_UDP)
        ipsum = Signal(17)  # this site's address, halves added
        dsum = [Signal(17, name=f"dsum{k}") for k in range(ctx.D)]  # destination entries' addresses
        m.d.sync += ipsum.eq(self.ip[16:] + self.ip[:16])
        for k in range(ctx.D):
            m.d.sync += dsum[k].eq(self.dest_ip[k][16:] + self.dest_ip[k][:16])
        ctx.total, ctx.udpl, ctx.fwm1, ctx.fwm2, ctx.fw0, ctx.lastb, ctx.hend, ctx.copies = (
            [] for _ in range(8)
        )
        ctx.csum = []  # csum[b][k]: copy k < D to destination entry k, copy D to the group
        for n in range(2):
            t = Signal(16, name=f"total{n}")
            u = Signal(16, name=f"udpl{n}")
            f = Signal(ctx.JW, name=f"fwm1_{n}")  # index of the frame's last beat
            f2 = Signal(ctx.JW, name=f"fwm2_{n}")  # the beat before it
            f0 = Signal(name=f"fw0_{n}")  # a frame of one beat
            lb = Signal(range(ctx.B + 1), name=f"lastb{n}")  # bytes in the frame's last beat
            h = Signal(ctx.JW + 1, name=f"hend{n}")  # output beats below this one read a payload beat
            c = Signal(range(ctx.D + 2), name=f"copies{n}")
            bs = Signal(18, name=f"base{n}")
            ms = Signal(17, name=f"msum{n}")
            flen_m1 = ctx.plen[n] + (_HDR - 1)
            m.d.sync += [
                t.eq(ctx.plen[n] + protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES),
                u.eq(ctx.plen[n] + protocol.UDP_HEADER_BYTES),
                f.eq(flen_m1 >> ctx.LB),
                f2.eq((flen_m1 >> ctx.LB) - 1),
                f0.eq((flen_m1 >> ctx.LB) == 0),
                lb.eq(flen_m1[: ctx.LB] + 1),
                h.eq(ctx.q + ((ctx.plen[n] + ctx.B - 1) >> ctx.LB)),
                c.eq(self.ndest + (ctx.mdest[n] != 0)),
                bs.eq(
                    ctx.plen[n] + (ip_const + protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES) + ipsum
                ),
                ms.eq(ctx.mdest[n][16:] + ctx.mdest[n][:16]),
            ]
            sums = []
            for k in range(ctx.D + 1):
                s = Signal(19, name=f"ipsum{n}_{k}")
                m.d.sync += s.eq(bs + (dsum[k] if k < ctx.D else ms))
                fold = Signal(17, name=f"fold{n}_{k}")
                m.d.comb += fold.eq(s[:16] + s[16:])
                cs = Signal(16, name=f"csum{n}_{k}")
                m.d.sync += cs.eq(~(fold[:16] + fold[16]))
                sums.append(cs)
            ctx.total.append(t)
            ctx.udpl.append(u)
            ctx.fwm1.append(f)
            ctx.fwm2.append(f2)
            ctx.fw0.append(f0)
            ctx.lastb.append(lb)
            ctx.hend.append(h)
            ctx.copies.append(c)
            ctx.csum.append(sums)

    def _arm(self, m, ctx):
        """``go``/``dis``: a buffer has been full for _ARM cycles, with copies to send or none (a
        register)."""
        # A buffer is armed once it has been full for the last _ARM cycles, as a register: set _ARM cycles
        # after full, cleared one cycle after full is. That cycle is harmless: the generator has moved
        # to the other buffer when it clears full, and cannot come back before the next cycle. ``go``: armed
        # with copies to send; ``dis``: armed with none (the RESULT is discarded).
        full_d = [Signal(2, name=f"full_d{n}") for n in range(_ARM - 1)]
        m.d.sync += full_d[0].eq(ctx.full)
        for n in range(1, _ARM - 1):
            m.d.sync += full_d[n].eq(full_d[n - 1])
        settled = ctx.full
        for fd in full_d:
            settled = settled & fd
        ctx.go = Signal(2)
        ctx.dis = Signal(2)
        for n in range(2):
            m.d.sync += [
                ctx.go[n].eq(settled[n] & (ctx.copies[n] != 0)),
                ctx.dis[n].eq(settled[n] & (ctx.copies[n] == 0)),
            ]

    def _prefix(self, m, ctx):
        """Output FIFO, generator state and the 42-byte prefix of destination ``d`` (registered at j = 0)."""
        # Output FIFO; ``cnt`` is its level plus the beat in the assembler.
        m.submodules.fifo = ctx.out = fifo.SyncFIFOBuffered(width=Beat(ctx.W).size, depth=self.fifo_depth)
        m.d.comb += [
            self.o.payload.eq(ctx.out.r_data),
            self.o.valid.eq(ctx.out.r_rdy),
            ctx.out.r_en.eq(self.o.ready),
        ]
        cnt = Signal(range(self.fifo_depth + 1))
        credit = cnt < self.fifo_depth

        # Read side: generator (G) then assembler (A).
        ctx.rb = Signal()
        # A second copy of rb, held inverted so that synthesis keeps both: rb steers the wide prefix and
        # buffer multiplexers, rbc the generator's control, so neither net reaches a hundred sinks.
        ctx.rb_n = Signal(init=1)
        ctx.rbc = ~ctx.rb_n
        ctx.d = Signal(range(ctx.D + 1))
        ctx.j = Signal(ctx.JW)
        ctx.av = Signal()
        cur_copies = Array(ctx.copies)[ctx.rbc]
        ready = ctx.go.bit_select(ctx.rbc, 1)
        ctx.gen = ready & credit
        # With no destination configured a RESULT is discarded rather than left to block the core.
        ctx.discard = ctx.dis.bit_select(ctx.rbc, 1)
        m.d.sync += cnt.eq(cnt + ctx.gen - (ctx.out.r_rdy & self.o.ready))
        p = Signal(ctx.JW)
        m.d.comb += p.eq(ctx.j - ctx.q)  # payload beat whose low bytes finish output beat j
        m.d.comb += [ctx.rp.addr.eq(Cat(p[: ctx.AW], ctx.rb)), ctx.rp.en.eq(1)]
        ctx.last_j = Signal()  # j is the frame's last beat: a register, set from the beat before
        ctx.last_copy = ctx.d + 1 >= cur_copies

        # Prefix for destination d.
        group = ctx.d == self.ndest
        cur_mdest = ctx.mdest[ctx.rb]
        dmac = Mux(group, Cat(cur_mdest[:23], Const(0x01005E << 1, 25)), Array(self.dest_mac)[ctx.d])
        dip = Mux(group, cur_mdest, Array(self.dest_ip)[ctx.d])
        dport = Mux(group, self.port, Array(self.dest_port)[ctx.d])
        cur_csum = Array([Array(ctx.csum[n][: ctx.D])[ctx.d] for n in range(2)])[ctx.rb]
        ip_csum = Mux(group, Array([ctx.csum[n][ctx.D] for n in range(2)])[ctx.rb], cur_csum)
        ctx.prefix = Cat(
            encode_be(dmac, 6),
            encode_be(self.mac, 6),
            encode_be(Const(protocol.ETHERTYPE_IPV4, 16), 2),
            Const(0x45, 8),
            Const(0, 8),
            encode_be(Array(ctx.total)[ctx.rb], 2),
            Const(0, 16),
            encode_be(Const(0x4000, 16), 2),
            Const(64, 8),
            Const(protocol.IPPROTO_UDP, 8),
            encode_be(ip_csum, 2),
            encode_be(self.ip, 4),
            encode_be(dip, 4),
            encode_be(self.port, 2),
            encode_be(dport, 2),
            encode_be(Array(ctx.udpl)[ctx.rb], 2),
            Const(0, 16),
        )
        assert len(ctx.prefix) == 8 * _HDR
        ctx.prefix_reg = Signal(8 * _HDR)
        ctx.prefix_beats = Signal(8 * ctx.B * (ctx.q + 1))
        m.d.comb += ctx.prefix_beats.eq(ctx.prefix_reg)

    def _assemble(self, m, ctx):
        """Assembler stage: joins prefix and shifted payload beats into output beats, one cycle after the
        read."""
        # Assembler stage registers.
        a_j = Signal(ctx.JW)
        a_last = Signal()
        a_bytes = Signal(range(ctx.B + 1))
        a_has = Signal()  # a payload beat was read for this output beat
        prev = Signal(ctx.W)
        with m.If(ctx.gen):
            m.d.sync += [
                a_j.eq(ctx.j),
                a_last.eq(ctx.last_j),
                a_has.eq((ctx.j >= ctx.q) & (ctx.j < Array(ctx.hend)[ctx.rbc])),
                a_bytes.eq(Mux(ctx.last_j, Array(ctx.lastb)[ctx.rbc], ctx.B)),
            ]
        m.d.sync += ctx.av.eq(ctx.gen)
        # The prefix is loaded on every cycle j is 0, not only when that beat is generated: the load of the
        # generating cycle is the one the frame uses, and the next load at j = 0 takes effect only after
        # the frame's last beat has been assembled. So its enable (336 flip-flops) is a register.
        ctx.j0 = Signal(init=1)
        with m.If(ctx.j0):
            m.d.sync += ctx.prefix_reg.eq(ctx.prefix)

        cur = Mux(a_has, ctx.rp.data, 0)
        word = Signal(ctx.W)
        with m.If(a_j < ctx.q):
            m.d.comb += word.eq(ctx.prefix_beats.word_select(a_j[: max(1, ctx.q.bit_length())], ctx.W))
        with m.Elif(a_j == ctx.q):
            m.d.comb += word.eq(Cat(ctx.prefix_reg[8 * ctx.q * ctx.B :], cur[: ctx.W - 8 * ctx.o]))
        with m.Else():
            m.d.comb += word.eq(Cat(prev[ctx.W - 8 * ctx.o :], cur[: ctx.W - 8 * ctx.o]))
        beat = Signal(Beat(ctx.W))
        m.d.comb += [
            beat.data.eq(word),
            beat.bytes.eq(a_bytes),
            beat.last.eq(a_last),
            ctx.out.w_data.eq(beat),
            ctx.out.w_en.eq(ctx.av),
        ]
        with m.If(ctx.av):
            m.d.sync += prev.eq(cur)

    def _advance(self, m, ctx):
        """Generator counters (beat, destination, buffer), the registered last-beat flag and buffer
        occupancy."""
        # Generator counters.
        with m.If(ctx.gen):
            m.d.sync += ctx.j0.eq(ctx.last_j)
            with m.If(ctx.last_j):
                m.d.sync += ctx.j.eq(0)
                with m.If(ctx.last_copy):
                    m.d.sync += [ctx.d.eq(0), ctx.rb.eq(~ctx.rb), ctx.rb_n.eq(ctx.rbc)]
                with m.Else():
                    m.d.sync += ctx.d.eq(ctx.d + 1)
            with m.Else():
                m.d.sync += ctx.j.eq(ctx.j + 1)

        # last_j for the next cycle's j and rb. A buffer's lengths settle before it is armed, and last_j is
        # recomputed every idle cycle, so it is right by the time a frame starts.
        with m.If(ctx.gen):
            with m.If(ctx.last_j):
                m.d.sync += ctx.last_j.eq(
                    Mux(ctx.last_copy, Array(ctx.fw0)[ctx.rb_n], Array(ctx.fw0)[ctx.rbc])
                )
            with m.Else():
                m.d.sync += ctx.last_j.eq(ctx.j == Array(ctx.fwm2)[ctx.rbc])
        with m.Elif(ctx.discard):
            m.d.sync += ctx.last_j.eq(ctx.j == Array(ctx.fwm1)[ctx.rb_n])
        with m.Else():
            m.d.sync += ctx.last_j.eq(ctx.j == Array(ctx.fwm1)[ctx.rbc])

        # Buffer occupancy: set when written, cleared after the last copy's last beat is generated.
        set_b = Mux(ctx.wr & self.i.payload.last, (Const(1, 2) << ctx.wb)[:2], 0)
        with m.If(ctx.discard):
            m.d.sync += [ctx.rb.eq(~ctx.rb), ctx.rb_n.eq(ctx.rbc)]
        clr_b = Mux((ctx.gen & ctx.last_j & ctx.last_copy) | ctx.discard, (Const(1, 2) << ctx.rbc)[:2], 0)
        m.d.sync += ctx.full.eq((ctx.full & ~clr_b) | set_b)
