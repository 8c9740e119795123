"""Header parser: the 32-byte wanreduce header checked against drop codes 9-20.

Latency: one cycle (one output register). The header fills the first ``ceil(32 / B)`` beats of a payload
(``B`` bytes per beat); the beat that completes it (or the last beat of a shorter packet) is marked ``hc``
and from then on every beat of the packet carries the decoded :data:`Desc` and the drop bits decided so far,
so later stages can look at any beat. Codes that need the payload length (``short_header``,
``bad_length``) are set on the last beat, which also carries the frame parser's codes 1-8; the slot table
applies the precedence rule (lowest code wins) there. In a packet shorter than the header, ``desc`` and
the codes above ``short_header`` (9) are not meaningful: that code, the lowest of this parser's, decides.

Back-pressure: a two-beat skid buffer at the input makes ``i.ready`` a register (so the ready chain of the
stages after this one ends here); one beat per cycle. The skid buffer adds no latency. The codes taken a
beat ahead and the bitmap comparison are worked out from the input port and registered beside the skid
register as it takes a beat, so the skid buffer's choice comes after them.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import DTypeCode, KindCode, ParsedBeat, PayloadBeat, be_field, check_width, element_bytes
from .stream import kept_copies

__all__ = ["HeaderParser"]


class HeaderParser(wiring.Component):
    """Decode and check the wanreduce header.

    Parameters: ``width`` (bits per beat), ``slot_bytes`` (C, for ``too_large``).
    Ports: ``i`` (:func:`PayloadBeat`), ``o`` (:func:`ParsedBeat`).
    """

    def __init__(self, *, width, slot_bytes):
        check_width(width)
        if slot_bytes < 1:
            raise ValueError(f"The slot size must be at least one byte, not {slot_bytes}.")
        self.width = width
        self.slot_bytes = slot_bytes
        super().__init__(
            {
                "i": In(stream.Signature(PayloadBeat(width))),
                "o": Out(stream.Signature(ParsedBeat(width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        # The sizes and signals the stages share, each set by the stage that makes it (under the name the
        # signal has in the Verilog).
        ctx = SimpleNamespace()
        W = self.width
        ctx.B = W // 8
        ctx.HB = -(-protocol.HEADER_BYTES // ctx.B)
        ctx.D = protocol.Drop

        self._input(m, ctx)
        self._header_checks(m, ctx)
        self._bitmap(m, ctx)
        self._descriptor(m, ctx)
        self._length(m, ctx)
        self._output(m, ctx)
        return m

    def _input(self, m, ctx):
        """Beat count, header and held registers, and the input skid buffer."""
        ctx.pw = Signal(16)
        # ``pw`` against the header's last beat, kept as flags beside it so that ``hc`` and the short-header
        # check are one gate from registers.
        ctx.at_hb = Signal(init=ctx.HB == 1)  # pw == HB - 1
        ctx.before_hb = Signal(init=ctx.HB > 1)  # pw < HB - 1
        ctx.nbytes = Signal(17)
        ctx.hdr = Signal(8 * protocol.HEADER_BYTES)
        ctx.held_desc = Signal.like(self.o.payload.desc)
        ctx.held_drops = Signal(32)

        ctx.en = ~self.o.valid | self.o.ready
        # ``o.valid`` kept twice as well (its complement ``nov``): ``en`` enables the wide output register,
        # ``en_c``, the same function of other flip-flops, the state updates of an accepted beat.
        ctx.nov = Signal(init=1)
        ctx.en_c = ctx.nov | self.o.ready
        # The skid buffer's state twice: ``sk_v`` selects the beat (a wide multiplexer), its complement
        # ``nsk`` (so the two flip-flops are not merged) is ``i.ready`` and drives the handshake, so the
        # stage before sees a register with few loads.
        ctx.sk_v = Signal()
        ctx.nsk = Signal(init=1)
        sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(ctx.nsk)
        ctx.in_v = Signal()
        ctx.ib = Signal.like(self.i.payload)
        m.d.comb += [
            ctx.in_v.eq(~ctx.nsk | self.i.valid),
            ctx.ib.eq(Mux(ctx.sk_v, sk, self.i.payload)),
            # ``bytes`` and ``last`` drive the handshake and the length checks: selected by the copy.
            ctx.ib.bytes.eq(Mux(ctx.nsk, self.i.payload.bytes, sk.bytes)),
            ctx.ib.last.eq(Mux(ctx.nsk, self.i.payload.last, sk.last)),
        ]
        # A beat goes into the skid register only on a cycle that accepts none, and waits there while none
        # is accepted; every register the checks below read changes only when a beat is accepted, so what is
        # worked out from a beat as the skid register takes it holds when the beat leaves it. Values taken so
        # (``sk_``) let the skid buffer's choice come after the logic instead of before it.
        ctx.sk_load = ctx.nsk & self.i.valid & ~ctx.en
        with m.If(~ctx.nsk):
            with m.If(ctx.en):
                m.d.sync += kept_copies([(ctx.sk_v, False), (ctx.nsk, True)], 0)
        with m.Elif(ctx.sk_load):
            m.d.sync += [*kept_copies([(ctx.sk_v, False), (ctx.nsk, True)], 1), sk.eq(self.i.payload)]
        ctx.accept = ctx.in_v & ctx.en_c

    def _header_checks(self, m, ctx):
        """The header merged with this beat, its fields and the checks on them."""
        ctx.cur = Signal(8 * protocol.HEADER_BYTES)
        m.d.comb += ctx.cur.eq(ctx.hdr)
        for k in range(ctx.HB):
            lo, hi = k * ctx.B, min(protocol.HEADER_BYTES, (k + 1) * ctx.B)
            with m.If(ctx.pw == k):
                m.d.comb += ctx.cur[8 * lo : 8 * hi].eq(ctx.ib.data[: 8 * (hi - lo)])

        ctx.hc = Signal()
        m.d.comb += ctx.hc.eq(ctx.at_hb | (ctx.ib.last & ctx.before_hb))

        # The fields are read from the registered header for the beats before the last header beat and from
        # the input beat itself for the last one, without the merge multiplexer: they only matter on the beat
        # that completes the header (``pw == HB - 1``), where the two agree. A packet that ends earlier
        # carries ``short_header``, the lowest of this parser's codes, whatever these fields say.
        ctx.split = 8 * ctx.B * (ctx.HB - 1)
        fields = Cat(ctx.hdr[: ctx.split], ctx.ib.data[: 8 * protocol.HEADER_BYTES - ctx.split])

        def f(name):
            return be_field(fields, name)

        ctx.f = f

        def beat_of(name):
            """The payload beat that holds the last byte of header field ``name``."""
            offset, size = protocol.HEADER_LAYOUT[name]
            return (offset + size - 1) // ctx.B

        ctx.beat_of = beat_of

        def early(*names):
            """Whether the fields lie wholly in beats before the header's last (only at W = 64: all but
            ``bitmap``): what depends on them alone can be prepared a beat ahead, from registers."""
            return all(ctx.beat_of(n) < ctx.HB - 1 for n in names)

        ctx.early = early

        def checks(f):
            """The descriptor and the header codes but ``bad_bitmap`` from field accessor ``f``, with
            ``contrib`` (a CONTRIB) and ``src`` for the bitmap check."""
            dtype, count, kind, src = f("dtype"), f("count"), f("kind"), f("src")
            desc = Signal.like(ctx.held_desc)
            m.d.comb += [
                desc.job.eq(f("job")),
                desc.round.eq(f("round")),
                desc.chunk.eq(f("chunk")),
                desc.src.eq(src[:6]),
                desc.group.eq(f("group")),
                desc.count.eq(count),
                desc.dtype.eq(dtype[:2]),
                desc.flags.eq(f("flags")[0]),
            ]
            drops = Signal(32)
            m.d.comb += [
                drops[ctx.D.BAD_MAGIC].eq(f("magic") != protocol.MAGIC),
                drops[ctx.D.BAD_VERSION].eq(f("version") != protocol.VERSION),
                drops[ctx.D.BAD_KIND].eq((kind != KindCode.CONTRIB.value) & (kind != KindCode.RESULT.value)),
                drops[ctx.D.BAD_DTYPE].eq(dtype > max(d.value for d in DTypeCode)),
                drops[ctx.D.BAD_FLAGS].eq((f("flags") & ~protocol.FLAGS_VALID & 0xFF).any()),
                drops[ctx.D.BAD_RESERVED].eq(f("reserved") != 0),
                drops[ctx.D.BAD_COUNT].eq(count == 0),
                drops[ctx.D.RESULT_ON_INPUT].eq(kind == KindCode.RESULT.value),
                # count * size > C as one comparison with a constant per element size, chosen by the dtype.
                drops[ctx.D.TOO_LARGE].eq(
                    Cat(
                        (dtype == d.value) & (count > self.slot_bytes // d.size) for d in protocol.DType
                    ).any()
                ),
            ]
            return desc, drops, kind == KindCode.CONTRIB.value, src

        ctx.checks = checks

        new_desc, hc_drops_nb, contrib, src = ctx.checks(ctx.f)
        ctx.new_desc, ctx.hc_drops_nb, ctx.contrib, ctx.src = new_desc, hc_drops_nb, contrib, src

    def _bitmap(self, m, ctx):
        """The bitmap check (``bitmap != 1 << src``), and the header's codes with it."""
        # ``bitmap != 1 << src``. With ``src`` in an earlier beat (W = 64) the one-hot is registered from the
        # merged header, and the bitmap's beat is compared with it both as it arrives and as the skid
        # buffer takes it (registered there), so that the skid buffer's multiplexer comes after the
        # comparison instead of before it.
        ctx.bitmap_ne = Signal()
        if ctx.early("src"):
            js = ctx.beat_of("src")
            src_hot = Signal(64)
            with m.If(ctx.pw == js):
                m.d.sync += src_hot.eq(
                    Const(1, 64) << be_field(Cat(ctx.hdr[: 8 * ctx.B * js], ctx.ib.data), "src")[:6]
                )

            # The comparison as a tree of byte-wide parts (``keep``: the synthesis otherwise merges it with
            # the logic after it into a deeper chain).
            diff = (
                be_field(
                    Cat(ctx.hdr[: ctx.split], self.i.payload.data[: 8 * protocol.HEADER_BYTES - ctx.split]),
                    "bitmap",
                )
                ^ src_hot
            )
            # Two bits a leaf (one LUT each), then ORs of four: every level kept.
            parts = []
            for k in range(0, 64, 2):
                leaf = Signal(name=f"bm_leaf{k // 2}", attrs={"keep": 1})
                m.d.comb += leaf.eq(diff[k : k + 2].any())
                parts.append(leaf)
            level = 0
            while len(parts) > 1:
                nxt = []
                for k in range(0, len(parts), 4):
                    part = Signal(name=f"bm_ne{level}_{k // 4}", attrs={"keep": 1})
                    m.d.comb += part.eq(Cat(*parts[k : k + 4]).any())
                    nxt.append(part)
                parts, level = nxt, level + 1
            ne_i = parts[0]

            sk_ne = Signal()
            with m.If(ctx.sk_load):
                m.d.sync += sk_ne.eq(ne_i)
            m.d.comb += ctx.bitmap_ne.eq(Mux(ctx.sk_v, sk_ne, ne_i))
        else:
            m.d.comb += ctx.bitmap_ne.eq(ctx.f("bitmap") != (Const(1, 64) << ctx.src[:6]))

        ctx.hc_drops = Signal(32)
        m.d.comb += [
            ctx.hc_drops.eq(ctx.hc_drops_nb),
            ctx.hc_drops[ctx.D.BAD_BITMAP].eq(
                ctx.contrib & ((ctx.src >= protocol.MAX_RANKS) | ctx.bitmap_ne)
            ),
        ]

    def _descriptor(self, m, ctx):
        """The descriptor and header codes, taken a beat ahead where the fields allow (W = 64)."""
        # Where every field but the bitmap lies in beats before the header's last (W = 64), the descriptor
        # and those codes are taken on the beat before it, straight from that beat's bytes, into the held
        # registers: the header's last beat and the beats after it read registers, and only the bitmap
        # check is made on the header's last beat. (Beats before the header's last carry the held
        # registers as before; a packet that ends before it is short, code 9, whatever they say.)
        ctx.ahead = ctx.HB >= 2 and ctx.early(*(n for n in protocol.HEADER_LAYOUT if n != "bitmap"))
        ctx.desc = Signal.like(ctx.held_desc)
        if ctx.ahead:
            ctx.at_pre = Signal(init=ctx.HB == 2)  # pw == HB - 2
            # bad_bitmap apart from the other held codes, in two flip-flops of one load each: src >= 64
            # (known a beat ahead) and the bitmap's comparison (from the header's last beat on).
            pre_bm, hc_bm = Signal(), Signal()
            ctx.hc_bm = hc_bm
            bm_chk = Signal()  # a CONTRIB with src < 64: its bitmap is compared on the header's last beat
            # The descriptor (fields alone, no logic) from the beat; the codes from the input port's beat,
            # and as the skid register took its beat (above).
            pre_desc = ctx.checks(
                lambda name: be_field(Cat(ctx.hdr[: 8 * ctx.B * (ctx.HB - 2)], ctx.ib.data), name)
            )[0]
            _, pre_drops_i, pre_contrib, pre_src = ctx.checks(
                lambda name: be_field(Cat(ctx.hdr[: 8 * ctx.B * (ctx.HB - 2)], self.i.payload.data), name)
            )
            pre_i = Signal(34)
            pre_sk = Signal(34)
            m.d.comb += pre_i.eq(
                Cat(
                    pre_drops_i,
                    pre_contrib & (pre_src >= protocol.MAX_RANKS),
                    pre_contrib & (pre_src < protocol.MAX_RANKS),
                )
            )
            with m.If(ctx.sk_load):
                m.d.sync += pre_sk.eq(pre_i)
            pre = Mux(ctx.nsk, pre_i, pre_sk)
            # The enable of the held registers (``accept & ~ib.last & at_pre``) the same way: the beat's
            # part taken from the port or as the skid register took the beat, the output's after.
            go_i = self.i.valid & ~self.i.payload.last & ctx.at_pre
            go_sk = Signal()
            with m.If(ctx.sk_load):
                m.d.sync += go_sk.eq(go_i)
            with m.If(Mux(ctx.nsk, go_i, go_sk) & ctx.en_c):
                m.d.sync += [
                    ctx.held_desc.eq(pre_desc),
                    ctx.held_drops.eq(pre[:32]),
                    pre_bm.eq(pre[32]),
                    bm_chk.eq(pre[33]),
                ]
            ctx.bm_now = bm_chk & ctx.bitmap_ne
            bitmap_bad = pre_bm | Mux(ctx.at_hb, ctx.bm_now, ctx.hc_bm)
            # The held codes are not cleared at a packet's end: the beats before the header's last show none.
            ctx.ahead_drops = Mux(ctx.before_hb, 0, ctx.held_drops | (bitmap_bad << ctx.D.BAD_BITMAP))
            m.d.comb += ctx.desc.eq(ctx.held_desc)
        else:
            m.d.comb += ctx.desc.eq(Mux(ctx.hc, ctx.new_desc, ctx.held_desc))

    def _length(self, m, ctx):
        """The short-header and length checks, and the beat's drop codes."""
        ctx.drops = Signal(32)
        ctx.total = Signal(17)
        m.d.comb += ctx.total.eq(ctx.nbytes + ctx.ib.bytes)
        # Every beat but the last is full, so the payload is shorter than the header exactly when it ends
        # before the header's last beat or in it with fewer bytes than the header has left there.
        # ``rest``: header bytes still missing before this beat (32 - nbytes), so that the short-header check
        # is one compare with a register. Not every beat but the last is full: the frame parser cuts the
        # payload at the IPv4 total length and a frame's Ethernet padding leaves a partial beat before an
        # empty last one.
        # With flags of it kept beside it (``rest > B``, ``rest > 0``), ``bytes < rest`` is a compare of a
        # few bits.
        ctx.rest = Signal(signed(19), init=protocol.HEADER_BYTES)
        ctx.rest_gt_b = Signal(init=protocol.HEADER_BYTES > ctx.B)
        ctx.rest_pos = Signal(init=1)
        ctx.rest_next = Signal(signed(19))
        m.d.comb += ctx.rest_next.eq(ctx.rest - ctx.ib.bytes)
        # Its next flags from the port's byte count, and as the skid register took its beat.
        rest_i = Signal(signed(19))
        m.d.comb += rest_i.eq(ctx.rest - self.i.payload.bytes)
        rest_f_i, rest_f_sk = Signal(2), Signal(2)
        m.d.comb += rest_f_i.eq(Cat(rest_i > ctx.B, rest_i > 0))
        with m.If(ctx.sk_load):
            m.d.sync += rest_f_sk.eq(rest_f_i)
        ctx.rest_f = Mux(ctx.nsk, rest_f_i, rest_f_sk)
        short = ctx.rest_gt_b | (ctx.rest_pos & (ctx.ib.bytes < ctx.rest[: ctx.B.bit_length() + 1]))
        bad_length = Signal()
        if ctx.early("count", "dtype"):
            # The payload bytes still expected from this beat on, prepared from the beat that completes
            # ``count`` (at W = 64 before the header's last beat: a packet ending earlier, or with fewer
            # bytes in it, is short, so the beats before it were full) and counted down by each beat's
            # bytes, so the last beat compares its byte count with a register.
            jc = ctx.beat_of("count")
            left = Signal(signed(21))

            def at_beat(j, name):
                """``pw == j`` as a flag kept beside ``pw``, like ``at_hb``."""
                flag = Signal(init=j == 0, name=name)
                with m.If(ctx.accept):
                    with m.If(ctx.ib.last):
                        m.d.sync += flag.eq(j == 0)
                    with m.Elif(ctx.pw != 0xFFFF):
                        m.d.sync += flag.eq(ctx.pw == j - 1)
                return flag

            at_jc = at_beat(jc, "at_jc")
            dts = list(protocol.DType)
            now = Cat(ctx.hdr[: 8 * ctx.B * jc], ctx.ib.data)
            if ctx.beat_of("dtype") < jc:
                # The dtype is known a beat or more ahead: its one-hot is registered on the beat that
                # completes it, so the product below starts from registers.
                jd = ctx.beat_of("dtype")
                dt_hot = Signal(len(dts))
                at_jd = at_beat(jd, "at_jd")
                with m.If(ctx.accept & at_jd):
                    t = be_field(Cat(ctx.hdr[: 8 * ctx.B * jd], ctx.ib.data), "dtype")
                    m.d.sync += dt_hot.eq(Cat(t == d.value for d in dts))
            else:
                dt_hot = Cat(be_field(now, "dtype") == d.value for d in dts)
            with m.If(ctx.accept & ~ctx.ib.last):
                with m.If(at_jc):
                    # This beat completes ``count``: its bytes come straight from the beat (no merge
                    # multiplexer), and count * size is a shift chosen by the dtype (sizes are powers of 2).
                    c = be_field(now, "count")
                    prod = Const(0, 19)
                    for k, d in enumerate(dts):
                        assert d.size & (d.size - 1) == 0
                        prod = prod | Mux(dt_hot[k], c << (d.size.bit_length() - 1), 0)
                    m.d.sync += left.eq(protocol.HEADER_BYTES - (jc + 1) * ctx.B + prod)
                with m.Else():
                    m.d.sync += left.eq(left - ctx.ib.bytes)
            m.d.comb += bad_length.eq(left != ctx.ib.bytes)
        else:
            m.d.comb += bad_length.eq(
                ctx.total != protocol.HEADER_BYTES + ctx.desc.count * element_bytes(ctx.desc.dtype)
            )
        length_drops = Signal(32)
        m.d.comb += [
            length_drops[ctx.D.SHORT_HEADER].eq(short),
            length_drops[ctx.D.BAD_LENGTH].eq(bad_length),
        ]
        if ctx.ahead:
            m.d.comb += ctx.drops.eq(ctx.ahead_drops | Mux(ctx.ib.last, length_drops | ctx.ib.drops, 0))
        else:
            m.d.comb += ctx.drops.eq(
                Mux(ctx.hc, ctx.hc_drops, ctx.held_drops) | Mux(ctx.ib.last, length_drops | ctx.ib.drops, 0)
            )

    def _output(self, m, ctx):
        """The output register and the state updates of an accepted beat."""
        with m.If(ctx.en):
            m.d.sync += [
                self.o.valid.eq(ctx.in_v),
                ctx.nov.eq(~ctx.in_v),
                self.o.payload.data.eq(ctx.ib.data),
                self.o.payload.bytes.eq(ctx.ib.bytes),
                self.o.payload.last.eq(ctx.ib.last),
                self.o.payload.pw.eq(ctx.pw),
                self.o.payload.hc.eq(ctx.hc),
                self.o.payload.desc.eq(ctx.desc),
                self.o.payload.drops.eq(ctx.drops),
            ]
        with m.If(ctx.accept):
            with m.If(ctx.ib.last):
                m.d.sync += [
                    ctx.pw.eq(0),
                    ctx.at_hb.eq(ctx.HB == 1),
                    ctx.before_hb.eq(ctx.HB > 1),
                    ctx.nbytes.eq(0),
                    ctx.rest.eq(protocol.HEADER_BYTES),
                    ctx.rest_gt_b.eq(protocol.HEADER_BYTES > ctx.B),
                    ctx.rest_pos.eq(1),
                    ctx.hdr.eq(0),
                ]
                if ctx.ahead:
                    m.d.sync += ctx.at_pre.eq(ctx.HB == 2)
                else:
                    m.d.sync += ctx.held_drops.eq(0)
            with m.Else():
                m.d.sync += [ctx.nbytes.eq(ctx.total), ctx.rest.eq(ctx.rest_next), ctx.hdr.eq(ctx.cur)]
                m.d.sync += [ctx.rest_gt_b.eq(ctx.rest_f[0]), ctx.rest_pos.eq(ctx.rest_f[1])]
                with m.If(ctx.pw != 0xFFFF):
                    m.d.sync += [
                        ctx.pw.eq(ctx.pw + 1),
                        ctx.at_hb.eq(ctx.pw == ctx.HB - 2),
                        ctx.before_hb.eq(ctx.pw < ctx.HB - 2),
                    ]
                    if ctx.ahead:
                        m.d.sync += ctx.at_pre.eq(ctx.pw == ctx.HB - 3)
                if ctx.ahead:
                    with m.If(ctx.at_hb):
                        m.d.sync += ctx.hc_bm.eq(ctx.bm_now)
                else:
                    with m.If(ctx.hc):
                        m.d.sync += [ctx.held_desc.eq(ctx.new_desc), ctx.held_drops.eq(ctx.hc_drops)]
