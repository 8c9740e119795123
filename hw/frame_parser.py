"""Frame parser: Ethernet II / IPv4 / UDP frames in, UDP payloads out, drop codes 1-8 decided.

Latency: two cycles from an input beat to the output beat it completes (the second for the checksums,
below). The UDP payload starts at frame byte 42, which is not a beat boundary for any supported width, so
output beat ``k`` is assembled from the tails and heads of input beats ``42 // B + k`` and
``42 // B + k + 1`` (``B`` = bytes per beat). Each frame yields exactly one payload packet, possibly a single
empty beat, and its last beat carries the frame's drop vector (codes 1-8): checks that need the whole frame
(truncation, UDP checksum) are only known at its end, so the payload streams on speculatively and the slot
table discards it at its last beat. Each beat's checksum words are summed and registered, and the two
checksums (IPv4 header, UDP) are checked from registers in the second output register, a cycle after the
frame's last beat: every beat passes through it, so the stream keeps its order and rate.

Back-pressure: two output registers with a skid register between them (so the first one's enable, and the
input handshake, are functions of registers), and a two-beat skid buffer at the input, so ``i.ready`` is a
register (the ready chain of the stages after this one ends here; the skid buffers add no latency). What the
input skid buffer's beat decides (its checksum sums, its byte-count decisions) is worked out from the input
port and registered beside the skid register as it takes a beat, so the skid buffer's choice comes after that
logic rather than before it. One input beat per cycle is accepted back to back across frames; the only bubble
is when a frame's payload needs one more output beat than the frame had input beats after its header *and* the
next frame is a single beat long.
"""

import operator
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import Beat, PayloadBeat, be_bytes, check_width
from .stream import balanced_tree, kept_copies

__all__ = ["FrameParser"]

_HDR = protocol.FRAME_OVERHEAD  # 42
_ETH = protocol.ETH_HEADER_BYTES


def _fold1(value):
    """One end-around-carry fold: the low 16 bits plus the rest, congruent to ``value`` modulo 0xFFFF."""
    return value[:16] + value[16:]


def _ones_complement_ok(value, bits):
    """Whether the one's-complement sum of 16-bit words whose plain sum is ``value`` (``bits`` wide, at most
    32) is 0xFFFF, i.e. ``value`` is a non-zero multiple of 0xFFFF. One fold ``lo + hi`` (``lo`` the low 16
    bits, ``hi`` the rest) leaves a value below ``2 * 0xFFFF`` congruent to it, where the only non-zero
    multiple is 0xFFFF itself; and ``lo + hi == 0xFFFF`` is ``lo == ~hi`` in 16 bits, so no adder at all."""
    assert bits <= 32
    return (value[:16] ^ value[16:bits]) == 0xFFFF


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
        # The sizes and signals the stages share, each set by the stage that makes it (under the name the
        # signal has in the Verilog).
        ctx = SimpleNamespace()
        ctx.W = self.width
        ctx.B = ctx.W // 8
        ctx.q, ctx.o = divmod(_HDR, ctx.B)

        self._input(m, ctx)
        self._fields(m, ctx)
        self._payload_end(m, ctx)
        self._rel_flags(m, ctx)
        self._checksum_words(m, ctx)
        self._checksum_sums(m, ctx)
        self._decide(m, ctx)
        self._output(m, ctx)
        return m

    def _input(self, m, ctx):
        """Beat index, header and output registers' state, and the input skid buffer."""
        ctx.j = Signal(16)  # beat index within the frame (saturates)
        # ``j`` saturated at the largest beat index any check below names: the same compares on a few bits.
        ctx.JS = -(-_HDR // ctx.B) + 1
        ctx.jh = Signal(
            ctx.JS + 1, init=1
        )  # js one-hot: every check against it is an OR of a few of these bits

        def js_eq(k):
            return ctx.jh[k]

        ctx.js_eq = js_eq

        def js_ge(k):
            return ctx.jh[k:].any()

        def js_lt(k):
            return ctx.jh[:k].any()

        ctx.js_lt = js_lt

        ctx.hdr = Signal(8 * _HDR)  # header bytes captured so far
        ctx.prev = Signal(ctx.W)  # previous input beat
        ctx.flush = Signal()  # one more output beat owed by the previous frame
        ctx.flush_data = Signal(ctx.W)
        ctx.flush_bytes = Signal(range(ctx.B + 1))
        ctx.flush_drops = Signal(32)

        # Two output registers: ``r`` takes the beat as it is formed, ``o`` a cycle later, when the two
        # checksum verdicts of a frame's last beat are added to its drop bits (below). Between them a skid
        # register ``q2`` makes ``r``'s enable a function of registers (``r`` hands its beat on whenever
        # ``q2`` is empty), so ``o.ready`` does not run through two stages into the input handshake.
        r_v, r_p = Signal(), Signal.like(self.o.payload)
        ctx.r_v, ctx.r_p = r_v, r_p
        q2_v, q2 = Signal(), Signal.like(self.o.payload)
        ctx.q2_v, ctx.q2 = q2_v, q2
        # ``r``'s state and ``q2``'s kept twice (``nrv``, ``r_go``: complements, so the flip-flops are not
        # merged): ``en`` enables the wide register ``r``, ``en_c``, the same function of the copies, the
        # input handshake and the state updates of an accepted beat.
        ctx.nrv = Signal(init=1)
        ctx.r_go = Signal(init=1)
        ctx.en_o = ~self.o.valid | self.o.ready
        ctx.en = ~ctx.r_v | ~ctx.q2_v
        ctx.en_c = ctx.nrv | ctx.r_go
        # The skid buffer's state twice as well: ``sk_v`` selects the beat's data, ``nsk`` (its complement,
        # so the two flip-flops are not merged) is ``i.ready``, selects the output beat's decisions and the
        # checksum sums (both registered beside the skid register, below) and, for the handshake, ``last``.
        ctx.sk_v = Signal()
        ctx.nsk = Signal(init=1)
        sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(ctx.nsk)
        in_v = Signal()
        ctx.ib = Signal.like(self.i.payload)
        m.d.comb += [
            in_v.eq(~ctx.nsk | self.i.valid),
            ctx.ib.data.eq(Mux(ctx.sk_v, sk.data, self.i.payload.data)),
            ctx.ib.last.eq(Mux(ctx.sk_v, sk.last, self.i.payload.last)),
        ]
        # ``last`` once more, selected by the copy, for the handshake alone (the same function of other
        # flip-flops, so it is not shared with the beat's many other uses of ``last``).
        last_c = Mux(ctx.nsk, self.i.payload.last, sk.last)
        # ``flush`` once more for the handshake (its complement, so the two are not merged): ``flush`` itself
        # selects the whole output beat and enables the flush beat's registers.
        ctx.nflush = Signal(init=1)
        ctx.accept = in_v & ctx.en_c & (ctx.nflush | ~last_c)
        ctx.sk_load = ctx.nsk & self.i.valid & ~ctx.accept
        with m.If(~ctx.nsk):
            with m.If(ctx.accept):
                m.d.sync += kept_copies([(ctx.sk_v, False), (ctx.nsk, True)], 0)
        with m.Elif(ctx.sk_load):
            m.d.sync += [*kept_copies([(ctx.sk_v, False), (ctx.nsk, True)], 1), sk.eq(self.i.payload)]

    def _fields(self, m, ctx):
        """The header with this beat's bytes merged in, and the fields the checks read."""
        # The header as it stands with this beat's bytes merged in.
        ctx.cur = Signal(8 * _HDR)
        m.d.comb += ctx.cur.eq(ctx.hdr)
        for k in range(-(-_HDR // ctx.B)):
            lo, hi = k * ctx.B, min(_HDR, (k + 1) * ctx.B)
            with m.If(ctx.js_eq(k)):
                m.d.comb += ctx.cur[8 * lo : 8 * hi].eq(ctx.ib.data[: 8 * (hi - lo)])

        # A header field that lies wholly in beats before the one holding byte 41 is read from the
        # registered header: a frame whose last beat comes earlier is shorter than 42 bytes, so it is
        # truncated (code 1, the lowest, which decides its drop) whatever the field says. That keeps the
        # header-merge multiplexer off the drop-code and checksum paths (all fields but the UDP checksum at
        # W=64; fewer at wider beats, none at 512).
        def src(n, size):
            return ctx.hdr if (n + size - 1) // ctx.B < (_HDR - 1) // ctx.B else ctx.cur

        def byte(n):
            return src(n, 1)[8 * n : 8 * n + 8]

        ctx.byte = byte

        def be16(n):
            return be_bytes(src(n, 2), n, 2)

        ctx.be16 = be16

        ctx.ethertype = ctx.be16(12)
        ctx.total = ctx.be16(16)
        ctx.frag = ctx.be16(20)
        ctx.udp_len = ctx.be16(38)
        ctx.udp_csum = ctx.be16(40)

    def _payload_end(self, m, ctx):
        """Where the UDP payload ends relative to this beat: ``rel`` and its byte counts."""
        # Where the UDP payload ends relative to this beat's first byte (``end - j * B``), clamped to
        # [-B, 2B], which keeps every comparison below exact. Where every beat that can emit output, hold
        # checksum bytes (34 on) or end a frame of 42 bytes or more comes after the beat holding the IPv4
        # total length (W < 512), it is a register, loaded on the beat that completes the total length
        # straight from that beat's bytes (or on the next, from the registered header) and then counted
        # down by B a beat (``rem`` is the next beat's, unclamped); a shorter frame is truncated (code 1)
        # whatever the other codes say. At W = 512 it is computed here.
        ctx.rel_shape = signed((2 * ctx.B).bit_length() + 1)

        def clamp(v):
            return Mux(v < -ctx.B, -ctx.B, Mux(v > 2 * ctx.B, 2 * ctx.B, v))[
                : ctx.rel_shape.width
            ].as_signed()

        ctx.clamp = clamp

        ctx.rel = Signal(ctx.rel_shape)
        # ``rel + B - o`` and ``rel - o`` in the bits of a byte count (the output beat's and the tail's end),
        # registered beside ``rel`` where it is a register: the same clamped choice with shifted constants.
        ctx.nb = len(ctx.flush_bytes)
        ctx.relp, ctx.relm = Signal(ctx.nb), Signal(ctx.nb)
        ctx.shifts = ((ctx.relp, ctx.B - ctx.o), (ctx.relm, -ctx.o))
        # ``rel`` against each constant in [-B, 2B), as flags: ``gt[c + B]`` is ``rel > c``. The byte masks
        # of the checksum and the output beat's decisions are then a gate or two from registers.
        ctx.GT = range(-ctx.B, 2 * ctx.B)
        ctx.gt = Signal(len(ctx.GT))
        ctx.jt = 17 // ctx.B
        ctx.late_end = 34 // ctx.B > ctx.jt

    def _rel_flags(self, m, ctx):
        """``rel`` and its flags ``gt``: a register counted down a beat, or (W = 512) computed."""
        if ctx.late_end:
            rel_q = Signal(ctx.rel_shape)
            # ``rem`` is the next beat's ``rel``, unclamped, as ``hi * B + lo``: counting down by B leaves
            # ``lo`` alone and steps ``hi`` down by one, so the next beat's flags come from a ladder of
            # registered facts about ``hi`` (>= 3, >= 2, 1, 0, -1; none of them: <= -2) that moves down a
            # rung a beat, and only its top rung (``rem >= 4B``) needs a comparison of ``rem``.
            k = ctx.B.bit_length() - 1
            rem = Signal(signed(24))  # counts down without stopping: 2**20 beats of one frame to wrap
            lo = rem[:k]
            n_ge3, n_ge2, n_1, n_0, n_m1 = (Signal(name=f"rem_{n}") for n in ("ge3", "ge2", "1", "0", "m1"))
            hi_gt = {-1: n_0 | n_1 | n_ge2, 0: n_1 | n_ge2, 1: n_ge2}
            hi_eq = {-1: n_m1, 0: n_0, 1: n_1}
            n_low = ~(n_m1 | n_0 | n_1 | n_ge2)  # rem < -B
            # The first beat that looks at ``rel`` (checksum bytes from 34, a flush, a 42-byte frame's
            # end): where it comes two beats after the total length's (W = 64), the load waits a beat and
            # reads the total from the registered header instead of the input beat.
            first_use = min(-(-(36 - ctx.B) // ctx.B), ctx.q)
            jl = ctx.jt + 1 if first_use > ctx.jt + 1 else ctx.jt
            tot = Signal(18)
            m.d.comb += tot.eq(
                be_bytes(ctx.hdr if jl > ctx.jt else Cat(ctx.hdr[: 8 * ctx.B * ctx.jt], ctx.ib.data), 16, 2)
            )
            first = _ETH - (jl + 1) * ctx.B  # rel of the beat after the load, less the total
            # Updated on a frame's last beat as well (the next frame's beats up to ``jl`` do not look at
            # ``rel``: no checksum byte, output or flush there, and a frame ending there is truncated), so
            # the enable is ``accept`` alone.
            with m.If(ctx.accept):
                with m.If(ctx.js_eq(jl)):
                    # Compared as ``tot`` against shifted constants, so no adder precedes the compares.
                    m.d.sync += [
                        rel_q.eq(
                            Mux(
                                tot < -ctx.B - first,
                                -ctx.B,
                                Mux(tot > 2 * ctx.B - first, 2 * ctx.B, (tot + first)[: ctx.rel_shape.width]),
                            )
                        ),
                        ctx.gt.eq(Cat(*[tot > c - first for c in ctx.GT])),
                        rem.eq(tot + (first - ctx.B)),
                        *(
                            r.eq(
                                Mux(
                                    tot < -ctx.B - first,
                                    (-ctx.B + c) % 2**ctx.nb,
                                    Mux(
                                        tot > 2 * ctx.B - first,
                                        (2 * ctx.B + c) % 2**ctx.nb,
                                        (tot + (first + c))[: ctx.nb],
                                    ),
                                )
                            )
                            for r, c in ctx.shifts
                        ),
                        n_ge3.eq(tot >= 4 * ctx.B - first),
                        n_ge2.eq(tot >= 3 * ctx.B - first),
                        n_1.eq((tot >= 2 * ctx.B - first) & (tot < 3 * ctx.B - first)),
                        n_0.eq((tot >= ctx.B - first) & (tot < 2 * ctx.B - first)),
                        n_m1.eq((tot >= -first) & (tot < ctx.B - first)),
                    ]
                with m.Else():
                    m.d.sync += [
                        rel_q.eq(Mux(n_ge2, 2 * ctx.B, Mux(n_low, -ctx.B, rem[: ctx.rel_shape.width]))),
                        *(
                            r.eq(
                                Mux(
                                    n_ge2,
                                    (2 * ctx.B + c) % 2**ctx.nb,
                                    Mux(n_low, (-ctx.B + c) % 2**ctx.nb, (rem[: ctx.nb] + c)[: ctx.nb]),
                                )
                            )
                            for r, c in ctx.shifts
                        ),
                        # (``lo > B - 1`` never holds: left out rather than compared.)
                        ctx.gt.eq(
                            Cat(
                                *[
                                    hi_gt[c // ctx.B] | (hi_eq[c // ctx.B] & (lo > c % ctx.B))
                                    if c % ctx.B < ctx.B - 1
                                    else hi_gt[c // ctx.B]
                                    for c in ctx.GT
                                ]
                            )
                        ),
                        n_ge3.eq(rem >= 4 * ctx.B),
                        n_ge2.eq(n_ge3),
                        n_1.eq(n_ge2 & ~n_ge3),
                        n_0.eq(n_1),
                        n_m1.eq(n_0),
                    ]
                    m.d.sync += rem.eq(rem - ctx.B)
            m.d.comb += ctx.rel.eq(rel_q)
        else:
            here = Signal(signed(20))
            m.d.comb += here.eq(ctx.total + _ETH - ctx.j * ctx.B)
            m.d.comb += [ctx.rel.eq(ctx.clamp(here)), ctx.gt.eq(Cat(*[ctx.rel > c for c in ctx.GT]))]
            m.d.comb += [r.eq((ctx.rel + c)[: ctx.nb]) for r, c in ctx.shifts]

        def rel_gt(c):
            return ctx.gt[c + ctx.B]

        ctx.rel_gt = rel_gt

    def _checksum_words(self, m, ctx):
        """This beat's IPv4 header and UDP checksum words, summed from the port and the skid register."""

        # This beat's checksum words (big-endian 16-bit words), summed apart for the two checks: the IPv4
        # header (bytes [14, 34)) and the UDP checksum, which covers the pseudo-header's addresses (bytes
        # [26, 34)), its length (byte 38, counted once more below), the protocol (the accumulator's initial
        # value) and the UDP header and payload (bytes [34, end)). Which words count is fixed by the beat's
        # index but for the payload's end.
        def beats_where(w, lo, hi):
            """The beat indices at which word ``w`` of a beat lies in frame bytes ``[lo, hi)``."""
            return [k for k in range(ctx.JS + 1) if lo <= k * ctx.B + 2 * w < hi and k < ctx.JS]

        def beat_flag(pred, inv=False):
            """A flip-flop holding ``pred(k)`` for this beat's index ``k`` (saturated at JS), set up on the
            beat before: the byte masks then start from registers. ``inv``: the flip-flop holds the
            complement, so that it is not merged with the one holding ``pred`` (each masks half the words,
            halving the fan-out)."""
            flag = Signal(init=bool(pred(0)) ^ inv)
            ks = [k for k in range(ctx.JS + 1) if pred(min(k + 1, ctx.JS))]
            # The next index's part kept apart (``keep``: the synthesis otherwise chains the flags' ORs
            # behind ``last``), so ``last`` is one gate from the flip-flop.
            nxt = Signal(name="flag_nxt_" + "_".join(map(str, ks)), attrs={"keep": 1})
            m.d.comb += nxt.eq(Cat(*[ctx.jh[k] for k in ks]).any() if ks else 0)
            with m.If(ctx.accept):
                m.d.sync += flag.eq(Mux(ctx.ib.last, bool(pred(0)), nxt) ^ inv)
            return ~flag if inv else flag

        ctx.beat_flag = beat_flag

        def js_in(ks, inv=False):
            return ctx.beat_flag(lambda k: k in ks, inv) if ks else Const(0)

        # The masks are set up once; the operands are formed twice, from the input port's beat and (as the
        # skid register takes it) from the beat going into the skid register, whose sums are registered
        # beside it: the adder trees then start from the port or registers, and the skid buffer's choice
        # comes after them. A beat waits in the skid register only while no beat is accepted, and every
        # mask changes only when one is, so the sums taken as it went in are the ones it would give now.
        masks = []
        for w in range(ctx.B // 2):
            inv = bool(w & 1)
            ipm = js_in(beats_where(w, 14, 34), inv) if beats_where(w, 14, 34) else None
            from34 = ctx.beat_flag(lambda k, w=w: k * ctx.B + 2 * w >= 34, inv)
            pseudo = js_in(beats_where(w, 26, 34), inv)
            hi_ok = pseudo | (from34 & ctx.rel_gt(2 * w))
            lo_ok = pseudo | (from34 & ctx.rel_gt(2 * w + 1))
            ulen = js_in(beats_where(w, 38, 40), inv)
            masks.append((ipm, hi_ok, lo_ok, ulen))

        def sums(data):
            ip_words, udp_words = [], []
            for w, (ipm, hi_ok, lo_ok, ulen) in enumerate(masks):
                hi_b, lo_b = data[16 * w : 16 * w + 8], data[16 * w + 8 : 16 * w + 16]
                word = Cat(lo_b, hi_b)
                if ipm is not None:
                    ip_words.append(Mux(ipm, word, 0))
                udp_words.append(
                    Mux(
                        ulen,
                        # The UDP length counts twice (pseudo-header and UDP header) where it lies in
                        # [34, end): one operand, twice the word, or its high byte twice (``lo_ok`` implies
                        # ``hi_ok``), or the word once.
                        Mux(lo_ok, Cat(Const(0, 1), word), Mux(hi_ok, Cat(lo_b, Const(0, 1), hi_b), word)),
                        Cat(Mux(lo_ok, lo_b, 0), Mux(hi_ok, hi_b, 0)),
                    )
                )
            return balanced_tree(ip_words, operator.add), balanced_tree(udp_words, operator.add)

        # at most 10 words (IPv4), B / 2 + 1 words (UDP: its length twice)
        ip_i, udp_i = Signal(20), Signal(24)
        ctx.ip_i, ctx.udp_i = ip_i, udp_i
        ip_sk, udp_sk = Signal(20), Signal(24)
        ctx.ip_sk, ctx.udp_sk = ip_sk, udp_sk
        ip_t, udp_t = sums(self.i.payload.data)
        m.d.comb += [ctx.ip_i.eq(ip_t), ctx.udp_i.eq(udp_t)]
        with m.If(ctx.sk_load):
            m.d.sync += [ctx.ip_sk.eq(ctx.ip_i), ctx.udp_sk.eq(ctx.udp_i)]

    def _checksum_sums(self, m, ctx):
        """The running checksum sums, a beat behind the input, and a frame's final parts."""
        # The sums run a beat behind the input: each beat's sum is registered, and added to the running sum
        # on the next beat. A frame's last beat leaves its two parts (the sum before it, its own) in the
        # ``fin_`` registers, which the output stage adds and checks a cycle later. Both candidates of an
        # accepted beat's sum are registered (the port's and the skid register's) with the choice, which is
        # made where they are used: the adder trees end at registers.
        ip_bq_i, ip_bq_s = Signal(20), Signal(20)
        ctx.ip_bq_i, ctx.ip_bq_s = ip_bq_i, ip_bq_s
        udp_bq_i, udp_bq_s = Signal(24), Signal(24)
        ctx.udp_bq_i, ctx.udp_bq_s = udp_bq_i, udp_bq_s
        ctx.bq_port = Signal()
        ip_bq, udp_bq = (
            Mux(ctx.bq_port, ctx.ip_bq_i, ctx.ip_bq_s),
            Mux(ctx.bq_port, ctx.udp_bq_i, ctx.udp_bq_s),
        )
        ctx.ip_acc = Signal(20)  # the IPv4 header sum is 10 words: no fold needed
        ctx.udp_acc = Signal(17)  # folded once per beat: congruent modulo 0xFFFF, below 2**17
        ip_next, udp_next = Signal(20), Signal(17)
        ctx.ip_next, ctx.udp_next = ip_next, udp_next
        m.d.comb += [
            ctx.ip_next.eq(Mux(ctx.js_eq(0), 0, ctx.ip_acc + ip_bq)),
            ctx.udp_next.eq(Mux(ctx.js_eq(0), protocol.IPPROTO_UDP, _fold1(ctx.udp_acc + udp_bq))),
        ]
        fin_ip, fin_ip_i, fin_ip_s = Signal(20), Signal(20), Signal(20)
        ctx.fin_ip, ctx.fin_ip_i, ctx.fin_ip_s = fin_ip, fin_ip_i, fin_ip_s
        fin_udp, fin_udp_i, fin_udp_s = Signal(17), Signal(24), Signal(24)
        ctx.fin_udp, ctx.fin_udp_i, ctx.fin_udp_s = fin_udp, fin_udp_i, fin_udp_s
        # The choice twice (``fin_nport`` the complement, so the two are not merged): one per sum.
        fin_port, fin_nport = Signal(), Signal()
        ctx.fin_port, ctx.fin_nport = fin_port, fin_nport
        fin_ip_b, fin_udp_b = (
            Mux(ctx.fin_port, ctx.fin_ip_i, ctx.fin_ip_s),
            Mux(ctx.fin_nport, ctx.fin_udp_s, ctx.fin_udp_i),
        )
        ctx.fin_ip_b, ctx.fin_udp_b = fin_ip_b, fin_udp_b
        ctx.fin_nz = Signal()  # the frame's UDP checksum field is not 0 (0: not computed)

    def _decide(self, m, ctx):
        """The output beat's decisions and drop codes of this beat."""
        # Output beat k = frame bytes [(j-1)B + o, jB + o): the top B-o bytes of the previous beat and the
        # low o bytes of this one.
        ctx.joined = Cat(ctx.prev[8 * ctx.o :], ctx.ib.data[: 8 * ctx.o])
        ctx.has_k = ctx.beat_flag(lambda k: k >= ctx.q + 1) & ctx.rel_gt(ctx.o - ctx.B)
        ge_q = ctx.beat_flag(lambda k: k >= ctx.q)
        ctx.tail = Cat(ctx.ib.data[8 * ctx.o :], Const(0, 8 * ctx.o))

        def decide(nbytes, last):
            """The decisions that depend on the beat's byte count ``nbytes`` and ``last``."""
            short = ctx.js_lt(_HDR // ctx.B) | (
                ctx.js_eq(_HDR // ctx.B) & (nbytes < _HDR % ctx.B)
            )  # frame length < 42
            # From the flags: ``min(rel, bytes) > c`` is ``rel > c`` and ``bytes > c``, and ``bytes > o - B``
            # always holds (o < B).
            lim_ge_o = ctx.rel_gt(ctx.o - 1) & (~last | (nbytes >= ctx.o))
            # The output beat's end relative to ``start`` is ``bytes`` on a last beat where the frame ends
            # before the payload, else ``rel``: the constant offsets are added to both beside the comparison
            # rather than after the choice, so the adders run in parallel with it.
            # ``rel`` against the byte count as a selection among the registered flags (``bytes`` is at most
            # B): a small multiplexer instead of a subtraction.
            rel_lt_bytes = ~Cat(*(ctx.rel_gt(v - 1) for v in range(ctx.B + 1))).bit_select(nbytes, 1)
            rel_gt_bytes = Cat(*(ctx.rel_gt(v) for v in range(ctx.B + 1))).bit_select(nbytes, 1)
            lim_is_bytes = last & ~rel_lt_bytes
            tail_ok = ge_q & ctx.rel_gt(ctx.o) & (nbytes > ctx.o)
            return {
                "trunc": short | ((ctx.ethertype == protocol.ETHERTYPE_IPV4) & rel_gt_bytes),
                "k_bytes": Mux(
                    lim_ge_o,
                    ctx.B,
                    Mux(lim_is_bytes, (nbytes + (ctx.B - ctx.o))[: ctx.nb], ctx.relp),
                ),
                "tail_ok": tail_ok,
                "need_flush": last & tail_ok,
                "tail_bytes": Mux(rel_lt_bytes, ctx.relm, (nbytes - ctx.o)[: ctx.nb]),
            }

        # Taken, like the checksum sums, from the input port's beat and registered beside the skid register
        # as it takes the beat, so that the skid buffer's choice comes after them.
        dec_i = decide(self.i.payload.bytes, self.i.payload.last)
        dec, dec_now, dec_held = {}, {}, {}
        ctx.dec_now, ctx.dec_held = dec_now, dec_held
        for name, v in dec_i.items():
            width = ctx.nb if name.endswith("bytes") else 1
            now, held = Signal(width, name=f"dec_{name}"), Signal(width, name=f"sk_{name}")
            m.d.comb += now.eq(v)
            with m.If(ctx.sk_load):
                m.d.sync += held.eq(now)
            dec[name] = Mux(ctx.nsk, now, held)
            ctx.dec_now[name], ctx.dec_held[name] = now, held
            ctx.dec_now, ctx.dec_held = dec_now, dec_held
        k_bytes, tail_ok, need_flush, tail_bytes = (
            dec[n] for n in ("k_bytes", "tail_ok", "need_flush", "tail_bytes")
        )
        ctx.k_bytes, ctx.tail_ok, ctx.need_flush, ctx.tail_bytes = k_bytes, tail_ok, need_flush, tail_bytes

        # Drop codes 1-8 but the two checksums (4, 8), evaluated on the last beat from the merged header.
        ctx.drops = Signal(32)
        ctx.D = protocol.Drop
        m.d.comb += [
            ctx.drops[ctx.D.TRUNCATED].eq(dec["trunc"]),
            ctx.drops[ctx.D.NOT_IPV4].eq(ctx.ethertype != protocol.ETHERTYPE_IPV4),
            ctx.drops[ctx.D.BAD_IP_HEADER].eq(
                (ctx.byte(14) != 0x45)
                | (ctx.frag & 0x3FFF).any()
                | (ctx.total < protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES)
            ),
            ctx.drops[ctx.D.NOT_UDP].eq(ctx.byte(23) != protocol.IPPROTO_UDP),
            ctx.drops[ctx.D.WRONG_PORT].eq(ctx.be16(36) != self.port),
            ctx.drops[ctx.D.BAD_UDP_LENGTH].eq(ctx.udp_len != ctx.total - protocol.IPV4_HEADER_BYTES),
        ]

    def _output(self, m, ctx):
        """The output registers ``r``, ``q2`` and ``o``, the flush beat and the state updates."""
        ov, ob = Signal(), Signal.like(self.o.payload)
        # While a flush is owed, only a non-last beat can be accepted and it emits nothing (a frame's first
        # beat never completes an output beat), so the two never compete for the output register.
        with m.If(ctx.flush):
            m.d.comb += [
                ov.eq(1),
                ob.data.eq(ctx.flush_data),
                ob.bytes.eq(ctx.flush_bytes),
                ob.last.eq(1),
                ob.drops.eq(ctx.flush_drops),
            ]
        with m.Else():
            # The beat's fields do not wait for ``accept`` (only the valid bit does): they are not looked at
            # without it, and the input handshake stays off the data path.
            # (``need_flush`` implies ``last``.)
            m.d.comb += ov.eq(ctx.accept & (ctx.has_k | ctx.ib.last))
            # Without ``has_k`` a beat is only emitted if it is the last, so the selects below leave ``last``
            # out (``tail_ok`` is ``need_flush`` but for it): it drives the handshake and many enables.
            with m.If(ctx.has_k):
                m.d.comb += [
                    ob.data.eq(ctx.joined),
                    ob.bytes.eq(ctx.k_bytes),
                    ob.last.eq(ctx.ib.last & ~ctx.need_flush),
                ]
            with m.Else():
                m.d.comb += ob.last.eq(1)
                with m.If(ctx.tail_ok):
                    m.d.comb += [ob.data.eq(ctx.tail), ob.bytes.eq(ctx.tail_bytes)]
            # Unmasked here: ``r``'s own ``last`` bit masks them on the way out.
            m.d.comb += ob.drops.eq(ctx.drops)

        with m.If(ctx.en):
            m.d.sync += [*kept_copies([(ctx.r_v, False), (ctx.nrv, True)], ov), ctx.r_p.eq(ob)]
        # ``flush`` set by an accepted last beat that owes one, cleared when ``r`` takes the flush beat. While
        # it is set no last beat is accepted, so the set term leaves ``flush`` (and ``accept``'s use of it)
        # out: ``in_v & en_c`` is ``accept`` there.
        # (``in_v & ib.last & need_flush`` is ``need_flush`` with the port's valid bit: ``need_flush`` implies
        # ``last``, and the skid register holds a valid beat.)
        flush_set = (
            ctx.en_c
            & ctx.has_k
            & Mux(ctx.nsk, self.i.valid & ctx.dec_now["need_flush"], ctx.dec_held["need_flush"])
        )
        flush_nxt = Mux(ctx.flush, ~ctx.en, flush_set)
        # ``flush`` a third time, for the flush beat's load enables: its own feedback, so it is not merged.
        flush_e = Signal()
        m.d.sync += [
            ctx.flush.eq(flush_nxt),
            ctx.nflush.eq(~flush_nxt),
            flush_e.eq(Mux(flush_e, ~ctx.en, flush_set)),
        ]
        # The flush beat's fields are loaded on every beat while none is owed: the beat that sets ``flush``
        # loads its own, and nothing reads them before. Their enable is then one flip-flop.
        with m.If(~flush_e):
            m.d.sync += [
                ctx.flush_data.eq(ctx.tail),
                ctx.flush_bytes.eq(ctx.tail_bytes),
                ctx.flush_drops.eq(ctx.drops),
            ]

        # A frame's last beat gets the checksum verdicts from the ``fin_`` registers as it leaves ``r`` (for
        # ``o`` or ``q2``): they hold that frame's until then (the next frame's last beat cannot be taken
        # earlier: it waits for a pending flush, and for ``r``).
        late = Signal(32)
        m.d.comb += [
            late[ctx.D.BAD_IP_CHECKSUM].eq(~_ones_complement_ok(ctx.fin_ip + ctx.fin_ip_b, 21)),
            late[ctx.D.BAD_UDP_CHECKSUM].eq(
                ctx.fin_nz & ~_ones_complement_ok(ctx.fin_udp + ctx.fin_udp_b, 25)
            ),
        ]
        r_out = Signal.like(self.o.payload)
        m.d.comb += [r_out.eq(ctx.r_p), r_out.drops.eq(Mux(ctx.r_p.last, ctx.r_p.drops | late, 0))]
        with m.If(ctx.q2_v):
            with m.If(ctx.en_o):
                m.d.sync += [ctx.q2_v.eq(0), ctx.r_go.eq(1)]
        with m.Elif(ctx.r_v & ~ctx.en_o):
            m.d.sync += [ctx.q2_v.eq(1), ctx.r_go.eq(0), ctx.q2.eq(r_out)]
        with m.If(ctx.en_o):
            m.d.sync += [self.o.valid.eq(ctx.q2_v | ctx.r_v), self.o.payload.eq(Mux(ctx.q2_v, ctx.q2, r_out))]

        with m.If(ctx.accept):
            m.d.sync += [
                ctx.prev.eq(ctx.ib.data),
                ctx.ip_bq_i.eq(ctx.ip_i),
                ctx.ip_bq_s.eq(ctx.ip_sk),
                ctx.udp_bq_i.eq(ctx.udp_i),
                ctx.udp_bq_s.eq(ctx.udp_sk),
                ctx.bq_port.eq(ctx.nsk),
                ctx.ip_acc.eq(ctx.ip_next),
                ctx.udp_acc.eq(ctx.udp_next),
            ]
            with m.If(ctx.ib.last):
                m.d.sync += [ctx.j.eq(0), ctx.jh.eq(1), ctx.hdr.eq(0)]
                m.d.sync += [
                    ctx.fin_ip.eq(ctx.ip_next),
                    ctx.fin_ip_i.eq(ctx.ip_i),
                    ctx.fin_ip_s.eq(ctx.ip_sk),
                    ctx.fin_udp.eq(ctx.udp_next),
                    ctx.fin_udp_i.eq(ctx.udp_i),
                    ctx.fin_udp_s.eq(ctx.udp_sk),
                    ctx.fin_port.eq(ctx.nsk),
                    ctx.fin_nport.eq(ctx.sk_v),
                    ctx.fin_nz.eq(ctx.udp_csum != 0),
                ]
            with m.Else():
                m.d.sync += ctx.hdr.eq(ctx.cur)
                with m.If(ctx.j != 0xFFFF):
                    m.d.sync += ctx.j.eq(ctx.j + 1)
                with m.If(~ctx.jh[ctx.JS]):
                    m.d.sync += ctx.jh.eq(ctx.jh << 1)
