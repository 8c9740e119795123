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
        W = self.width
        B = W // 8
        q, o = divmod(_HDR, B)

        j = Signal(16)  # beat index within the frame (saturates)
        # ``j`` saturated at the largest beat index any check below names: the same compares on a few bits.
        JS = -(-_HDR // B) + 1
        jh = Signal(JS + 1, init=1)  # js one-hot: every check against it is an OR of a few of these bits

        def js_eq(k):
            return jh[k]

        def js_ge(k):
            return jh[k:].any()

        def js_lt(k):
            return jh[:k].any()

        hdr = Signal(8 * _HDR)  # header bytes captured so far
        prev = Signal(W)  # previous input beat
        flush = Signal()  # one more output beat owed by the previous frame
        flush_data = Signal(W)
        flush_bytes = Signal(range(B + 1))
        flush_drops = Signal(32)

        # Two output registers: ``r`` takes the beat as it is formed, ``o`` a cycle later, when the two
        # checksum verdicts of a frame's last beat are added to its drop bits (below). Between them a skid
        # register ``q2`` makes ``r``'s enable a function of registers (``r`` hands its beat on whenever
        # ``q2`` is empty), so ``o.ready`` does not run through two stages into the input handshake.
        r_v, r_p = Signal(), Signal.like(self.o.payload)
        q2_v, q2 = Signal(), Signal.like(self.o.payload)
        # ``r``'s state and ``q2``'s kept twice (``nrv``, ``r_go``: complements, so the flip-flops are not
        # merged): ``en`` enables the wide register ``r``, ``en_c``, the same function of the copies, the
        # input handshake and the state updates of an accepted beat.
        nrv = Signal(init=1)
        r_go = Signal(init=1)
        en_o = ~self.o.valid | self.o.ready
        en = ~r_v | ~q2_v
        en_c = nrv | r_go
        # The skid buffer's state twice as well: ``sk_v`` selects the beat's data, ``nsk`` (its complement,
        # so the two flip-flops are not merged) is ``i.ready``, selects the output beat's decisions and the
        # checksum sums (both registered beside the skid register, below) and, for the handshake, ``last``.
        sk_v = Signal()
        nsk = Signal(init=1)
        sk = Signal.like(self.i.payload)
        m.d.comb += self.i.ready.eq(nsk)
        in_v = Signal()
        ib = Signal.like(self.i.payload)
        m.d.comb += [
            in_v.eq(~nsk | self.i.valid),
            ib.data.eq(Mux(sk_v, sk.data, self.i.payload.data)),
            ib.last.eq(Mux(sk_v, sk.last, self.i.payload.last)),
        ]
        # ``last`` once more, selected by the copy, for the handshake alone (the same function of other
        # flip-flops, so it is not shared with the beat's many other uses of ``last``).
        last_c = Mux(nsk, self.i.payload.last, sk.last)
        # ``flush`` once more for the handshake (its complement, so the two are not merged): ``flush`` itself
        # selects the whole output beat and enables the flush beat's registers.
        nflush = Signal(init=1)
        accept = in_v & en_c & (nflush | ~last_c)
        sk_load = nsk & self.i.valid & ~accept
        with m.If(~nsk):
            with m.If(accept):
                m.d.sync += [sk_v.eq(0), nsk.eq(1)]
        with m.Elif(sk_load):
            m.d.sync += [sk_v.eq(1), nsk.eq(0), sk.eq(self.i.payload)]

        # The header as it stands with this beat's bytes merged in.
        cur = Signal(8 * _HDR)
        m.d.comb += cur.eq(hdr)
        for k in range(-(-_HDR // B)):
            lo, hi = k * B, min(_HDR, (k + 1) * B)
            with m.If(js_eq(k)):
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

        # Where the UDP payload ends relative to this beat's first byte (``end - j * B``), clamped to
        # [-B, 2B], which keeps every comparison below exact. Where every beat that can emit output, hold
        # checksum bytes (34 on) or end a frame of 42 bytes or more comes after the beat holding the IPv4
        # total length (W < 512), it is a register, loaded on the beat that completes the total length
        # straight from that beat's bytes (or on the next, from the registered header) and then counted
        # down by B a beat (``rem`` is the next beat's, unclamped); a shorter frame is truncated (code 1)
        # whatever the other codes say. At W = 512 it is computed here.
        rel_shape = signed((2 * B).bit_length() + 1)

        def clamp(v):
            return Mux(v < -B, -B, Mux(v > 2 * B, 2 * B, v))[: rel_shape.width].as_signed()

        rel = Signal(rel_shape)
        # ``rel + B - o`` and ``rel - o`` in the bits of a byte count (the output beat's and the tail's end),
        # registered beside ``rel`` where it is a register: the same clamped choice with shifted constants.
        nb = len(flush_bytes)
        relp, relm = Signal(nb), Signal(nb)
        shifts = ((relp, B - o), (relm, -o))
        # ``rel`` against each constant in [-B, 2B), as flags: ``gt[c + B]`` is ``rel > c``. The byte masks
        # of the checksum and the output beat's decisions are then a gate or two from registers.
        GT = range(-B, 2 * B)
        gt = Signal(len(GT))
        jt = 17 // B
        late_end = 34 // B > jt
        if late_end:
            rel_q = Signal(rel_shape)
            # ``rem`` is the next beat's ``rel``, unclamped, as ``hi * B + lo``: counting down by B leaves
            # ``lo`` alone and steps ``hi`` down by one, so the next beat's flags come from a ladder of
            # registered facts about ``hi`` (>= 3, >= 2, 1, 0, -1; none of them: <= -2) that moves down a
            # rung a beat, and only its top rung (``rem >= 4B``) needs a comparison of ``rem``.
            k = B.bit_length() - 1
            rem = Signal(signed(24))  # counts down without stopping: 2**20 beats of one frame to wrap
            lo = rem[:k]
            n_ge3, n_ge2, n_1, n_0, n_m1 = (Signal(name=f"rem_{n}") for n in ("ge3", "ge2", "1", "0", "m1"))
            hi_gt = {-1: n_0 | n_1 | n_ge2, 0: n_1 | n_ge2, 1: n_ge2}
            hi_eq = {-1: n_m1, 0: n_0, 1: n_1}
            n_low = ~(n_m1 | n_0 | n_1 | n_ge2)  # rem < -B
            # The first beat that looks at ``rel`` (checksum bytes from 34, a flush, a 42-byte frame's
            # end): where it comes two beats after the total length's (W = 64), the load waits a beat and
            # reads the total from the registered header instead of the input beat.
            first_use = min(-(-(36 - B) // B), q)
            jl = jt + 1 if first_use > jt + 1 else jt
            tot = Signal(18)
            m.d.comb += tot.eq(be_bytes(hdr if jl > jt else Cat(hdr[: 8 * B * jt], ib.data), 16, 2))
            first = _ETH - (jl + 1) * B  # rel of the beat after the load, less the total
            # Updated on a frame's last beat as well (the next frame's beats up to ``jl`` do not look at
            # ``rel``: no checksum byte, output or flush there, and a frame ending there is truncated), so
            # the enable is ``accept`` alone.
            with m.If(accept):
                with m.If(js_eq(jl)):
                    # Compared as ``tot`` against shifted constants, so no adder precedes the compares.
                    m.d.sync += [
                        rel_q.eq(
                            Mux(
                                tot < -B - first,
                                -B,
                                Mux(tot > 2 * B - first, 2 * B, (tot + first)[: rel_shape.width]),
                            )
                        ),
                        gt.eq(Cat(*[tot > c - first for c in GT])),
                        rem.eq(tot + (first - B)),
                        *(
                            r.eq(
                                Mux(
                                    tot < -B - first,
                                    (-B + c) % 2**nb,
                                    Mux(tot > 2 * B - first, (2 * B + c) % 2**nb, (tot + (first + c))[:nb]),
                                )
                            )
                            for r, c in shifts
                        ),
                        n_ge3.eq(tot >= 4 * B - first),
                        n_ge2.eq(tot >= 3 * B - first),
                        n_1.eq((tot >= 2 * B - first) & (tot < 3 * B - first)),
                        n_0.eq((tot >= B - first) & (tot < 2 * B - first)),
                        n_m1.eq((tot >= -first) & (tot < B - first)),
                    ]
                with m.Else():
                    m.d.sync += [
                        rel_q.eq(Mux(n_ge2, 2 * B, Mux(n_low, -B, rem[: rel_shape.width]))),
                        *(
                            r.eq(
                                Mux(
                                    n_ge2,
                                    (2 * B + c) % 2**nb,
                                    Mux(n_low, (-B + c) % 2**nb, (rem[:nb] + c)[:nb]),
                                )
                            )
                            for r, c in shifts
                        ),
                        # (``lo > B - 1`` never holds: left out rather than compared.)
                        gt.eq(
                            Cat(
                                *[
                                    hi_gt[c // B] | (hi_eq[c // B] & (lo > c % B))
                                    if c % B < B - 1
                                    else hi_gt[c // B]
                                    for c in GT
                                ]
                            )
                        ),
                        n_ge3.eq(rem >= 4 * B),
                        n_ge2.eq(n_ge3),
                        n_1.eq(n_ge2 & ~n_ge3),
                        n_0.eq(n_1),
                        n_m1.eq(n_0),
                    ]
                    m.d.sync += rem.eq(rem - B)
            m.d.comb += rel.eq(rel_q)
        else:
            here = Signal(signed(20))
            m.d.comb += here.eq(total + _ETH - j * B)
            m.d.comb += [rel.eq(clamp(here)), gt.eq(Cat(*[rel > c for c in GT]))]
            m.d.comb += [r.eq((rel + c)[:nb]) for r, c in shifts]

        def rel_gt(c):
            return gt[c + B]

        # This beat's checksum words (big-endian 16-bit words), summed apart for the two checks: the IPv4
        # header (bytes [14, 34)) and the UDP checksum, which covers the pseudo-header's addresses (bytes
        # [26, 34)), its length (byte 38, counted once more below), the protocol (the accumulator's initial
        # value) and the UDP header and payload (bytes [34, end)). Which words count is fixed by the beat's
        # index but for the payload's end.
        def beats_where(w, lo, hi):
            """The beat indices at which word ``w`` of a beat lies in frame bytes ``[lo, hi)``."""
            return [k for k in range(JS + 1) if lo <= k * B + 2 * w < hi and k < JS]

        def beat_flag(pred, inv=False):
            """A flip-flop holding ``pred(k)`` for this beat's index ``k`` (saturated at JS), set up on the
            beat before: the byte masks then start from registers. ``inv``: the flip-flop holds the
            complement, so that it is not merged with the one holding ``pred`` (each masks half the words,
            halving the fan-out)."""
            flag = Signal(init=bool(pred(0)) ^ inv)
            ks = [k for k in range(JS + 1) if pred(min(k + 1, JS))]
            # The next index's part kept apart (``keep``: the synthesis otherwise chains the flags' ORs
            # behind ``last``), so ``last`` is one gate from the flip-flop.
            nxt = Signal(name="flag_nxt_" + "_".join(map(str, ks)), attrs={"keep": 1})
            m.d.comb += nxt.eq(Cat(*[jh[k] for k in ks]).any() if ks else 0)
            with m.If(accept):
                m.d.sync += flag.eq(Mux(ib.last, bool(pred(0)), nxt) ^ inv)
            return ~flag if inv else flag

        def js_in(ks, inv=False):
            return beat_flag(lambda k: k in ks, inv) if ks else Const(0)

        def tree(vals):
            """A balanced adder tree: about log2(n) adders deep instead of n - 1."""
            vals = list(vals)
            while len(vals) > 1:
                vals = [
                    vals[k] + vals[k + 1] if k + 1 < len(vals) else vals[k] for k in range(0, len(vals), 2)
                ]
            return vals[0]

        # The masks are set up once; the operands are formed twice, from the input port's beat and (as the
        # skid register takes it) from the beat going into the skid register, whose sums are registered
        # beside it: the adder trees then start from the port or registers, and the skid buffer's choice
        # comes after them. A beat waits in the skid register only while no beat is accepted, and every
        # mask changes only when one is, so the sums taken as it went in are the ones it would give now.
        masks = []
        for w in range(B // 2):
            inv = bool(w & 1)
            ipm = js_in(beats_where(w, 14, 34), inv) if beats_where(w, 14, 34) else None
            from34 = beat_flag(lambda k, w=w: k * B + 2 * w >= 34, inv)
            pseudo = js_in(beats_where(w, 26, 34), inv)
            hi_ok = pseudo | (from34 & rel_gt(2 * w))
            lo_ok = pseudo | (from34 & rel_gt(2 * w + 1))
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
            return tree(ip_words), tree(udp_words)

        # at most 10 words (IPv4), B / 2 + 1 words (UDP: its length twice)
        ip_i, udp_i = Signal(20), Signal(24)
        ip_sk, udp_sk = Signal(20), Signal(24)
        ip_t, udp_t = sums(self.i.payload.data)
        m.d.comb += [ip_i.eq(ip_t), udp_i.eq(udp_t)]
        with m.If(sk_load):
            m.d.sync += [ip_sk.eq(ip_i), udp_sk.eq(udp_i)]
        # The sums run a beat behind the input: each beat's sum is registered, and added to the running sum
        # on the next beat. A frame's last beat leaves its two parts (the sum before it, its own) in the
        # ``fin_`` registers, which the output stage adds and checks a cycle later. Both candidates of an
        # accepted beat's sum are registered (the port's and the skid register's) with the choice, which is
        # made where they are used: the adder trees end at registers.
        ip_bq_i, ip_bq_s = Signal(20), Signal(20)
        udp_bq_i, udp_bq_s = Signal(24), Signal(24)
        bq_port = Signal()
        ip_bq, udp_bq = Mux(bq_port, ip_bq_i, ip_bq_s), Mux(bq_port, udp_bq_i, udp_bq_s)
        ip_acc = Signal(20)  # the IPv4 header sum is 10 words: no fold needed
        udp_acc = Signal(17)  # folded once per beat: congruent modulo 0xFFFF, below 2**17
        ip_next, udp_next = Signal(20), Signal(17)
        m.d.comb += [
            ip_next.eq(Mux(js_eq(0), 0, ip_acc + ip_bq)),
            udp_next.eq(Mux(js_eq(0), protocol.IPPROTO_UDP, _fold1(udp_acc + udp_bq))),
        ]
        fin_ip, fin_ip_i, fin_ip_s = Signal(20), Signal(20), Signal(20)
        fin_udp, fin_udp_i, fin_udp_s = Signal(17), Signal(24), Signal(24)
        # The choice twice (``fin_nport`` the complement, so the two are not merged): one per sum.
        fin_port, fin_nport = Signal(), Signal()
        fin_ip_b, fin_udp_b = Mux(fin_port, fin_ip_i, fin_ip_s), Mux(fin_nport, fin_udp_s, fin_udp_i)
        fin_nz = Signal()  # the frame's UDP checksum field is not 0 (0: not computed)

        # Output beat k = frame bytes [(j-1)B + o, jB + o): the top B-o bytes of the previous beat and the
        # low o bytes of this one.
        joined = Cat(prev[8 * o :], ib.data[: 8 * o])
        has_k = beat_flag(lambda k: k >= q + 1) & rel_gt(o - B)
        ge_q = beat_flag(lambda k: k >= q)
        tail = Cat(ib.data[8 * o :], Const(0, 8 * o))

        def decide(nbytes, last):
            """The decisions that depend on the beat's byte count ``nbytes`` and ``last``."""
            short = js_lt(_HDR // B) | (js_eq(_HDR // B) & (nbytes < _HDR % B))  # frame length < 42
            # From the flags: ``min(rel, bytes) > c`` is ``rel > c`` and ``bytes > c``, and ``bytes > o - B``
            # always holds (o < B).
            lim_ge_o = rel_gt(o - 1) & (~last | (nbytes >= o))
            # The output beat's end relative to ``start`` is ``bytes`` on a last beat where the frame ends
            # before the payload, else ``rel``: the constant offsets are added to both beside the comparison
            # rather than after the choice, so the adders run in parallel with it.
            # ``rel`` against the byte count as a selection among the registered flags (``bytes`` is at most
            # B): a small multiplexer instead of a subtraction.
            rel_lt_bytes = ~Cat(*(rel_gt(v - 1) for v in range(B + 1))).bit_select(nbytes, 1)
            rel_gt_bytes = Cat(*(rel_gt(v) for v in range(B + 1))).bit_select(nbytes, 1)
            lim_is_bytes = last & ~rel_lt_bytes
            tail_ok = ge_q & rel_gt(o) & (nbytes > o)
            return {
                "trunc": short | ((ethertype == protocol.ETHERTYPE_IPV4) & rel_gt_bytes),
                "k_bytes": Mux(
                    lim_ge_o,
                    B,
                    Mux(lim_is_bytes, (nbytes + (B - o))[:nb], relp),
                ),
                "tail_ok": tail_ok,
                "need_flush": last & tail_ok,
                "tail_bytes": Mux(rel_lt_bytes, relm, (nbytes - o)[:nb]),
            }

        # Taken, like the checksum sums, from the input port's beat and registered beside the skid register
        # as it takes the beat, so that the skid buffer's choice comes after them.
        dec_i = decide(self.i.payload.bytes, self.i.payload.last)
        dec, dec_now, dec_held = {}, {}, {}
        for name, v in dec_i.items():
            width = nb if name.endswith("bytes") else 1
            now, held = Signal(width, name=f"dec_{name}"), Signal(width, name=f"sk_{name}")
            m.d.comb += now.eq(v)
            with m.If(sk_load):
                m.d.sync += held.eq(now)
            dec[name] = Mux(nsk, now, held)
            dec_now[name], dec_held[name] = now, held
        k_bytes, tail_ok, need_flush, tail_bytes = (
            dec[n] for n in ("k_bytes", "tail_ok", "need_flush", "tail_bytes")
        )

        # Drop codes 1-8 but the two checksums (4, 8), evaluated on the last beat from the merged header.
        drops = Signal(32)
        D = protocol.Drop
        m.d.comb += [
            drops[D.TRUNCATED].eq(dec["trunc"]),
            drops[D.NOT_IPV4].eq(ethertype != protocol.ETHERTYPE_IPV4),
            drops[D.BAD_IP_HEADER].eq(
                (byte(14) != 0x45)
                | (frag & 0x3FFF).any()
                | (total < protocol.IPV4_HEADER_BYTES + protocol.UDP_HEADER_BYTES)
            ),
            drops[D.NOT_UDP].eq(byte(23) != protocol.IPPROTO_UDP),
            drops[D.WRONG_PORT].eq(be16(36) != self.port),
            drops[D.BAD_UDP_LENGTH].eq(udp_len != total - protocol.IPV4_HEADER_BYTES),
        ]

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
            # (``need_flush`` implies ``last``.)
            m.d.comb += ov.eq(accept & (has_k | ib.last))
            # Without ``has_k`` a beat is only emitted if it is the last, so the selects below leave ``last``
            # out (``tail_ok`` is ``need_flush`` but for it): it drives the handshake and many enables.
            with m.If(has_k):
                m.d.comb += [ob.data.eq(joined), ob.bytes.eq(k_bytes), ob.last.eq(ib.last & ~need_flush)]
            with m.Else():
                m.d.comb += ob.last.eq(1)
                with m.If(tail_ok):
                    m.d.comb += [ob.data.eq(tail), ob.bytes.eq(tail_bytes)]
            # Unmasked here: ``r``'s own ``last`` bit masks them on the way out.
            m.d.comb += ob.drops.eq(drops)

        with m.If(en):
            m.d.sync += [r_v.eq(ov), nrv.eq(~ov), r_p.eq(ob)]
        # ``flush`` set by an accepted last beat that owes one, cleared when ``r`` takes the flush beat. While
        # it is set no last beat is accepted, so the set term leaves ``flush`` (and ``accept``'s use of it)
        # out: ``in_v & en_c`` is ``accept`` there.
        # (``in_v & ib.last & need_flush`` is ``need_flush`` with the port's valid bit: ``need_flush`` implies
        # ``last``, and the skid register holds a valid beat.)
        flush_set = en_c & has_k & Mux(nsk, self.i.valid & dec_now["need_flush"], dec_held["need_flush"])
        flush_nxt = Mux(flush, ~en, flush_set)
        # ``flush`` a third time, for the flush beat's load enables: its own feedback, so it is not merged.
        flush_e = Signal()
        m.d.sync += [flush.eq(flush_nxt), nflush.eq(~flush_nxt), flush_e.eq(Mux(flush_e, ~en, flush_set))]
        # The flush beat's fields are loaded on every beat while none is owed: the beat that sets ``flush``
        # loads its own, and nothing reads them before. Their enable is then one flip-flop.
        with m.If(~flush_e):
            m.d.sync += [flush_data.eq(tail), flush_bytes.eq(tail_bytes), flush_drops.eq(drops)]

        # A frame's last beat gets the checksum verdicts from the ``fin_`` registers as it leaves ``r`` (for
        # ``o`` or ``q2``): they hold that frame's until then (the next frame's last beat cannot be taken
        # earlier: it waits for a pending flush, and for ``r``).
        late = Signal(32)
        m.d.comb += [
            late[D.BAD_IP_CHECKSUM].eq(~_ones_complement_ok(fin_ip + fin_ip_b, 21)),
            late[D.BAD_UDP_CHECKSUM].eq(fin_nz & ~_ones_complement_ok(fin_udp + fin_udp_b, 25)),
        ]
        r_out = Signal.like(self.o.payload)
        m.d.comb += [r_out.eq(r_p), r_out.drops.eq(Mux(r_p.last, r_p.drops | late, 0))]
        with m.If(q2_v):
            with m.If(en_o):
                m.d.sync += [q2_v.eq(0), r_go.eq(1)]
        with m.Elif(r_v & ~en_o):
            m.d.sync += [q2_v.eq(1), r_go.eq(0), q2.eq(r_out)]
        with m.If(en_o):
            m.d.sync += [self.o.valid.eq(q2_v | r_v), self.o.payload.eq(Mux(q2_v, q2, r_out))]

        with m.If(accept):
            m.d.sync += [
                prev.eq(ib.data),
                ip_bq_i.eq(ip_i),
                ip_bq_s.eq(ip_sk),
                udp_bq_i.eq(udp_i),
                udp_bq_s.eq(udp_sk),
                bq_port.eq(nsk),
                ip_acc.eq(ip_next),
                udp_acc.eq(udp_next),
            ]
            with m.If(ib.last):
                m.d.sync += [j.eq(0), jh.eq(1), hdr.eq(0)]
                m.d.sync += [
                    fin_ip.eq(ip_next),
                    fin_ip_i.eq(ip_i),
                    fin_ip_s.eq(ip_sk),
                    fin_udp.eq(udp_next),
                    fin_udp_i.eq(udp_i),
                    fin_udp_s.eq(udp_sk),
                    fin_port.eq(nsk),
                    fin_nport.eq(sk_v),
                    fin_nz.eq(udp_csum != 0),
                ]
            with m.Else():
                m.d.sync += hdr.eq(cur)
                with m.If(j != 0xFFFF):
                    m.d.sync += j.eq(j + 1)
                with m.If(~jh[JS]):
                    m.d.sync += jh.eq(jh << 1)
        return m
