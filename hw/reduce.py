"""Reduce engine: sums a completed chunk's member buffers in ascending rank order through the adder lanes.

How it hides the adders' latency. The engine is a ring of ``K = L + 2`` pipeline positions (issue → read
register → operand register → ``L`` adder stages, the last of which is back at issue). Every position works
on one beat position ``w`` of one chunk: on its first pass it reads member 0's beat and adds ``-0.0`` (which
leaves every number as it is and turns NaN into the canonical NaN, as the golden model does); on pass ``m``
it reads member ``m``'s beat and adds it to the partial sum that has just come around the ring, so the sum
is ``((x0 + x1) + x2) + ...`` with one rounding per addition, exactly the rank order. After ``g`` passes the
sum leaves the ring into the output FIFO and the position takes the next beat, of the same chunk or of the
next one. Because ``K`` positions are in flight at once, one member-buffer beat is read and one addition is
started every cycle, whatever ``L`` is, and for any chunk size: consecutive beats of a chunk and beats of
different chunks interleave freely. Beats leave the ring in the order they entered it: a new beat is started
only if it finishes after every beat already in the ring (``g * K`` greater than the remaining time of the
last one started), which only delays a chunk whose group is smaller than the one before it.

Cost: the ring holds ``K`` partial sums in its own pipeline registers (no accumulator memory), all three
formats' adders run side by side (``W/32`` fp32 lanes plus ``W/16`` fp16 and ``W/16`` bf16 lanes; the
result is selected per beat by dtype), and a beat costs ``g`` read cycles, the same as it cost the input
to write (one beat per contribution), so the engine keeps pace with a fully loaded input.

Re-emitting a RESULT (the slot table's ``replay`` requests, PROTOCOL.md's shadow): every finished sum is
also written to a shadow memory of ``slots * words`` beats (one member buffer's worth per slot) and every
completion record to a record memory of ``slots`` entries. A replay takes the slot's record (one cycle to
read it), waits for the ring to empty (so every sum it copies has been written), and then passes the
stored beats through the ring as a group of one, which adds -0.0 and leaves them as they are; the RESULT
builder sees the same record and beats as the first time. Replays neither read the member buffers nor
release the slot.

Back-pressure: a beat is started only when the output FIFO has room reserved for its sum, so a stalled
output never interrupts a sum in flight; it just stops new beats from starting. ``i.ready`` is a register:
one completion can wait inside the engine (``nxt``) behind the chunk being dispatched, so the completion
queue in front of it holds one more in effect and its read enable never depends on the dispatch decision.

Latency: 0 cycles added by the timing work of issue #11. A completion accepted by an idle engine has
its first beat read on the next cycle; a beat's sum enters the output FIFO ``g * K`` cycles after its
first read (K = L + 2 per pass: issue, read register R, operand register Q, then the L adder stages, the
last of which is the position back at issue), and shows on ``o`` two cycles later. For the timing, the
memories' read data is registered (Q) before the adders, and the accumulator comes straight off the
adders' output registers instead of a register of its own, so the ring keeps its length; the dispatch
conditions, the read addresses, the release and the ring's continue/finish decisions are registers
computed the cycle before.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec.protocol import DType
from .fadd import FAdd, FloatFormat
from .layouts import Completion, ResultWord

__all__ = ["Reduce"]


def _default_adder(fmt, stages):
    return FAdd(fmt, stages=stages)


def _formats():
    return [FloatFormat.from_dtype(int(d)) for d in sorted(DType)]


class Reduce(wiring.Component):
    """Rank-order reduction of completed chunks.

    Parameters: ``width``, ``slots``, ``members`` (G_max), ``words`` (beats per member buffer),
    ``stages`` (adder pipeline stages, passed to ``FAdd``; None = its default), ``fifo_depth`` (output
    FIFO beats; at least ``K``), ``adder``/``formats`` (for tests only: a factory ``(fmt, stages) ->
    component`` with ``a``, ``b``, ``en``, ``s`` and ``latency``, and the three formats, in dtype order,
    with ``width``).
    Ports: ``i`` (completions), ``rd`` (read port into the slot table's buffers), ``o`` (summed beats in
    payload order, :func:`ResultWord`), ``release`` / ``release_slot`` (the last read of a chunk was
    issued), ``read_strobe`` and ``active`` (for the performance counters).
    """

    def __init__(
        self, *, width, slots, members, words, stages=None, fifo_depth=None, adder=None, formats=None
    ):
        if words < 1:
            raise ValueError(f"A member buffer must hold at least one beat, not {words}.")
        self.width, self.slots, self.members, self.words = width, slots, members, words
        self.stages = stages
        self.adder = adder or _default_adder
        self.formats = formats or _formats()
        probes = [self.adder(fmt, stages) for fmt in self.formats]
        self.latency = max(p.latency for p in probes)
        for p in probes:
            p._MustUse__silence = True  # built only to learn the latency
        self.ring = self.latency + 2
        self.fifo_depth = fifo_depth or max(2 * self.ring, 8)
        if self.fifo_depth < self.ring:
            raise ValueError(f"The output FIFO must hold at least one ring ({self.ring} beats).")
        depth = slots * members * words
        super().__init__(
            {
                "i": In(stream.Signature(Completion(slots))),
                "rd": In(memory.ReadPort.Signature(addr_width=max(1, (depth - 1).bit_length()), shape=width)),
                "o": Out(stream.Signature(ResultWord(width, slots))),
                "release": Out(1),
                "release_slot": Out(range(slots)),
                "read_strobe": Out(1),
                "active": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W, G, NW, K = self.width, self.members, self.words, self.ring
        L = self.latency
        S = self.slots
        cd_layout = Completion(S)
        sb_layout = data.StructLayout({"cd": cd_layout, "w": 16, "m": 7})
        gk_shape = range(64 * K + 1)
        aw = len(self.rd.addr)

        # Output FIFO with reservations.
        m.submodules.fifo = out = fifo.SyncFIFOBuffered(width=ResultWord(W, S).size, depth=self.fifo_depth)
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy), out.r_en.eq(self.o.ready)]
        pop = out.r_en & out.r_rdy

        # The shadow: each slot's last sums and completion record, for re-emitting its RESULT. A replay is
        # a completion of group size 1 whose beat comes from here instead of member 0's buffer (adding -0.0
        # leaves a sum as it is); it starts only when the ring is empty, so that the sums it copies have all
        # been written.
        m.submodules.shadow = shadow = memory.Memory(shape=W, depth=S * NW, init=[])
        shw = shadow.write_port()
        shr = shadow.read_port(domain="sync")
        m.submodules.records = records = memory.Memory(shape=cd_layout, depth=S, init=[])
        rcw = records.write_port()
        rcr = records.read_port(domain="sync")

        # Input: one completion may wait in ``nxt`` behind the chunk being dispatched, so that ``i.ready``
        # is a register (the dispatch decision never reaches the completion queue). A completion goes
        # straight into ``cur`` when ``cur`` is free or frees on this cycle, so an idle engine starts it on
        # the same cycle as without the buffer.
        nxt_v = Signal()
        nxt = Signal(cd_layout)
        nxt_gk = Signal(gk_shape)  # nxt.g * K
        take = Signal()
        m.d.comb += [self.i.ready.eq(~nxt_v), take.eq(self.i.valid & ~nxt_v)]
        i_gk = Signal(gk_shape)
        m.d.comb += i_gk.eq(self.i.payload.g * K)

        # Dispatcher: the chunk whose beats are being started.
        cur_v = Signal()
        cur = Signal(cd_layout)
        cur_w = Signal(16)
        horizon = Signal(gk_shape)
        cur_gk = Signal(gk_shape)  # cur.g * K
        fetch = Signal()  # the cycle after a replay was loaded: its record arrives from ``records``
        # Registered conditions of the dispatcher, each updated from the candidates of the cycle before
        # (load, replay record, next beat, hold), so that the dispatch decision and the read address start
        # from registers.
        cur_last = Signal()  # cur_w + 1 >= cur.nwords
        cur_rel = Signal()  # this beat is the chunk's last read: (cur.g == 1) & (cur_w + 1 == cur.nwords)
        cur_addr = Signal(aw)  # member 0's beat cur_w of slot cur.slot
        cur_sh = Signal(range(S * NW))  # beat cur_w of slot cur.slot in the shadow
        gk_gt = Signal()  # cur_gk > horizon
        ring_empty = Signal(init=1)
        free_nz = Signal(init=1)
        in_ring = Signal(range(K + 1))
        # Room in the output FIFO not yet reserved for a sum in the ring (depth - level - beats in flight),
        # kept as a counter of its own: a dispatch reserves a place, a beat read out of the FIFO frees one.
        free = Signal(range(self.fifo_depth + 1), init=self.fifo_depth)

        # The ring position arriving at issue (O), with its conditions registered a cycle early.
        ov, osb = Signal(), Signal(sb_layout)
        cont = Signal()  # ov & (osb.m + 1 < osb.cd.g): the position goes round again
        fin = Signal()  # ov & (osb.m + 1 >= osb.cd.g): its sum is done
        o_m1 = Signal(7)  # osb.m + 1
        o_last = Signal()  # osb.w + 1 == osb.cd.nwords
        o_rel = Signal()  # its next read is the chunk's last
        o_addr = Signal(aw)  # member osb.m + 1's beat osb.w
        o_sh = Signal(range(S * NW))  # its place in the shadow
        o_shw = Signal()  # fin & ~osb.cd.replay
        acc = Signal(W)  # the position's partial sum, off the adders' output registers

        # Issue.
        disp = ~cont & cur_v & ~fetch & free_nz & gk_gt & (~cur.replay | ring_empty)
        issue = cont | disp
        isb = Signal(sb_layout)
        with m.If(cont):
            m.d.comb += [isb.eq(osb), isb.m.eq(o_m1)]
        with m.Else():
            m.d.comb += [isb.cd.eq(cur), isb.w.eq(cur_w), isb.m.eq(0)]
        m.d.comb += [
            self.rd.addr.eq(Mux(cont, o_addr, cur_addr)),
            self.rd.en.eq(1),
            shr.addr.eq(Mux(cont, o_sh, cur_sh)),
            shr.en.eq(1),
            self.read_strobe.eq((cont & ~osb.cd.replay) | (disp & ~cur.replay)),
            self.release.eq((cont & o_rel) | (disp & cur_rel)),
            self.release_slot.eq(isb.cd.slot),
            self.active.eq(cur_v | ~ring_empty),
        ]

        # Finished sums go to the FIFO, in the order they were started.
        word = Signal(ResultWord(W, S))
        m.d.comb += [
            word.data.eq(acc),
            word.last.eq(o_last),
            word.cd.eq(osb.cd),
            out.w_data.eq(word),
            out.w_en.eq(fin),
            shw.addr.eq(o_sh),
            shw.data.eq(acc),
            shw.en.eq(o_shw),
        ]
        in_ring_n = Signal.like(in_ring)
        free_n = Signal.like(free)
        m.d.comb += [in_ring_n.eq(in_ring + disp - fin), free_n.eq(free - disp + pop)]
        m.d.sync += [
            in_ring.eq(in_ring_n),
            ring_empty.eq(in_ring_n == 0),
            free.eq(free_n),
            free_nz.eq(free_n != 0),
        ]

        # Loading the dispatcher: from ``nxt`` if it holds one, else straight from the input.
        take_last = disp & cur_last
        load = (~cur_v | take_last) & (nxt_v | self.i.valid)
        src = Signal(cd_layout)
        src_gk = Signal(gk_shape)
        m.d.comb += [src.eq(Mux(nxt_v, nxt, self.i.payload)), src_gk.eq(Mux(nxt_v, nxt_gk, i_gk))]
        with m.If(nxt_v):
            with m.If(load):
                m.d.sync += nxt_v.eq(0)
        with m.Elif(take & ~load):
            m.d.sync += [nxt_v.eq(1), nxt.eq(self.i.payload), nxt_gk.eq(i_gk)]

        # Records are written as completions are taken: a replay behind a completion of its slot is loaded
        # (and reads its record) only after that completion was taken.
        m.d.comb += [
            rcw.addr.eq(self.i.payload.slot),
            rcw.data.eq(self.i.payload),
            rcw.en.eq(take & ~self.i.payload.replay),
            rcr.addr.eq(src.slot),
            rcr.en.eq(1),
        ]
        rec = rcr.data

        # The dispatcher's next state and its registered conditions, by case: load (a new chunk, beat 0),
        # fetch (the replay's record, beat 0, group of one), dispatch (the next beat), hold. A load never
        # meets a fetch (a fetch blocks dispatch, and cur is valid then).
        hw_ = len(horizon)
        hdec = Signal(hw_)
        hd = Signal(hw_)
        m.d.comb += [hdec.eq(horizon - (horizon != 0)), hd.eq(cur_gk - 1)]

        def base_addr(slot):
            return (slot * G * NW)[:aw]

        def base_sh(slot):
            return (slot * NW)[: len(cur_sh)]

        m.d.sync += fetch.eq(load & src.replay)
        with m.If(load):
            m.d.sync += [
                cur_v.eq(1),
                cur.eq(src),
                cur_w.eq(0),
                cur_gk.eq(src_gk),
                cur_last.eq(src.nwords <= 1),
                cur_rel.eq((src.g == 1) & (src.nwords == 1) & ~src.replay),
                cur_addr.eq(base_addr(src.slot)),
                cur_sh.eq(base_sh(src.slot)),
                gk_gt.eq(Mux(disp, src_gk > hd, src_gk > hdec)),
            ]
        with m.Elif(fetch):
            m.d.sync += [
                cur.eq(rec),
                cur.g.eq(1),
                cur.replay.eq(1),
                cur_gk.eq(K),
                cur_last.eq(rec.nwords <= 1),
                cur_rel.eq(0),
                cur_addr.eq(base_addr(rec.slot)),
                cur_sh.eq(base_sh(rec.slot)),
                gk_gt.eq(K > hdec),
            ]
        with m.Elif(disp):
            m.d.sync += [
                cur_w.eq(cur_w + 1),
                cur_last.eq(cur_w + 2 >= cur.nwords),
                cur_rel.eq((cur.g == 1) & (cur_w + 2 == cur.nwords) & ~cur.replay),
                cur_addr.eq(cur_addr + 1),
                cur_sh.eq(cur_sh + 1),
                gk_gt.eq(cur_gk > hd),
            ]
        with m.Else():
            m.d.sync += gk_gt.eq(cur_gk > hdec)
        with m.If(take_last & ~load):
            m.d.sync += cur_v.eq(0)
        with m.If(disp):
            m.d.sync += horizon.eq(hd)
        with m.Else():
            m.d.sync += horizon.eq(hdec)

        # Ring registers: R (read data arrives), Q (operands registered off the memories), the adder stages;
        # the last of them is O, the position back at issue.
        rv, rsb, racc, rfirst = Signal(), Signal(sb_layout), Signal(W), Signal()
        m.d.sync += [rv.eq(issue), rsb.eq(isb), racc.eq(acc), rfirst.eq(isb.m == 0)]

        # Q: the operands, so that the adders start from registers rather than from the memories' read
        # data (EBR clock-to-out, collision and shadow multiplexers). On a first pass a = x, b = -0.0.
        x = Mux(rsb.cd.replay, shr.data, self.rd.data)
        qa = Signal(W)
        m.d.sync += qa.eq(Mux(rfirst, x, racc))
        qb = {}
        for fmt in self.formats:
            fw = fmt.width
            if fw not in qb:
                qb[fw] = Signal(W, name=f"qb{fw}")
                neg_zero = Const(sum(1 << (k * fw + fw - 1) for k in range(W // fw)), W)
                m.d.sync += qb[fw].eq(Mux(rfirst, neg_zero, x))

        # Adders: every format's lanes see the same beat; the dtype picks one bank's result.
        results = []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            outs = []
            for k in range(W // fw):
                add = self.adder(fmt, self.stages)
                m.submodules[f"add_{n}_{k}"] = add
                m.d.comb += [
                    add.a.eq(qa[k * fw : (k + 1) * fw]),
                    add.b.eq(qb[fw][k * fw : (k + 1) * fw]),
                    add.en.eq(1),
                ]
                s = add.s
                for d in range(L - add.latency):
                    t = Signal(fw, name=f"add_{n}_{k}_d{d}")
                    m.d.sync += t.eq(s)
                    s = t
                outs.append(s)
            results.append(Cat(*outs))

        sv, ssb = rv, rsb
        for d in range(L + 1):
            last = d == L
            nv = ov if last else Signal(name=f"ring_v{d}")
            nsb = osb if last else Signal(sb_layout, name=f"ring_sb{d}")
            m.d.sync += [nv.eq(sv), nsb.eq(ssb)]
            if last:
                m1 = Signal(7)
                m.d.comb += m1.eq(ssb.m + 1)
                done = ssb.m + 1 >= ssb.cd.g
                m.d.sync += [
                    cont.eq(sv & ~done),
                    fin.eq(sv & done),
                    o_m1.eq(m1),
                    o_last.eq(ssb.w + 1 == ssb.cd.nwords),
                    o_rel.eq(~ssb.cd.replay & (m1 + 1 == ssb.cd.g) & (ssb.w + 1 == ssb.cd.nwords)),
                    o_addr.eq(((ssb.cd.slot * G + m1) * NW + ssb.w)[:aw]),
                    o_sh.eq((ssb.cd.slot * NW + ssb.w)[: len(o_sh)]),
                    o_shw.eq(sv & done & ~ssb.cd.replay),
                ]
            sv, ssb = nv, nsb
        with m.Switch(osb.cd.desc.dtype):
            for n, res in enumerate(results):
                with m.Case(n):
                    m.d.comb += acc.eq(res)
        return m
