"""Reduce engine: sums a completed chunk's member buffers in ascending rank order through the adder lanes.

How it hides the adders' latency. The engine is a ring of ``K = L + 2`` pipeline positions (issue → read
register → operand register → ``L`` adder stages, the last of which is back at issue). Every position works
on one beat position ``w`` of one chunk: on its first pass it reads member 0's beat and adds ``-0.0`` (which
leaves every number as it is and turns NaN into the canonical NaN, as the golden model does); on pass ``m``
it reads member ``m``'s beat and adds it to the partial sum that has just come around the ring, so the sum
is ``((x0 + x1) + x2) + ...`` with one rounding per addition, exactly the rank order. Member ``m`` of a
slot is in the slot's buffer ``(m + rot) mod G`` (``rot`` from the completion record, the slot table's
eviction rule), so the reads go round the slot's buffers from buffer ``rot``. After ``g`` passes the
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
``o`` is the output of a two-beat skid buffer behind the FIFO: ``o.ready`` reaches only its registers.

Latency: 1 cycle added by the timing work of issue #11 (the skid buffer at ``o``, so that the consumer's
ready reaches neither the output FIFO nor the dispatch decision). A completion accepted by an idle engine
has its first beat read on the next cycle; a beat's sum enters the output FIFO ``g * K`` cycles after its
first read (K = L + 2 per pass: issue, read register R, operand register Q, then the L adder stages, the
last of which is the position back at issue), and shows on ``o`` three cycles later (two through the
FIFO, one through the skid buffer). For the timing, the memories' read data is registered (Q) before the
adders, and the accumulator comes straight off the adders' output registers instead of a register of its
own, so the ring keeps its length; the dispatch itself ("cur may dispatch and no position continues"),
its conditions, the read addresses, the release and the ring's continue/finish decisions are registers
computed the cycle before; the beats of the chunk still to dispatch are counted down (``left``), so "the
beat after next is the last" compares one register with a constant; and the horizon is kept also as the
value the comparisons need on this cycle (``hqd``), so that "g * K > horizon" is one comparison of
registers. Only a few control bits travel round the ring with a beat; the completion records of the
chunks loaded and not yet finished wait in a small list (LUT memory) in order, and the record of a
finished sum is the oldest there, because sums leave in the order they started. Completions have a group
size of at least one (the slot table never sends g = 0).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
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
    with ``width``), ``frames`` (the read port's space in chunks: None = ``slots``; fewer, a power of two,
    when the member buffers are staged on chip from external memory and slot s is read from frame s mod
    ``frames``).
    Ports: ``i`` (completions), ``rd`` (read port into the slot table's buffers), ``o`` (summed beats in
    payload order, :func:`ResultWord`), ``release`` / ``release_slot`` (the last read of a chunk was
    issued), ``read_strobe`` and ``active`` (for the performance counters).
    """

    def __init__(
        self,
        *,
        width,
        slots,
        members,
        words,
        stages=None,
        fifo_depth=None,
        adder=None,
        formats=None,
        frames=None,
    ):
        if words < 1:
            raise ValueError(f"A member buffer must hold at least one beat, not {words}.")
        frames = slots if frames is None else frames
        if frames < 1 or frames & (frames - 1) or frames > slots:
            raise ValueError(
                f"The read frames must be a power of two no larger than the slots, not {frames}."
            )
        self.width, self.slots, self.members, self.words = width, slots, members, words
        self.frames = frames
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
        depth = frames * members * words
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
        aw = len(self.rd.addr)

        # Output FIFO with reservations.
        m.submodules.fifo = out = fifo.SyncFIFOBuffered(width=ResultWord(W, S).size, depth=self.fifo_depth)
        # A skid buffer behind it: ``o`` is a register and the FIFO's read enable is one too (the spare is
        # empty), so the consumer's ready reaches only the skid's enables, never the FIFO or the reservation
        # counter below. With ``o.ready`` high the spare stays empty and a beat leaves every cycle.
        # The spare's state is kept twice, computed apart so that the synthesis keeps both: ``sk_v`` selects
        # the data, ``room`` enables the FIFO's read and the spare's capture, each driving only its own sinks.
        # The spare copies the FIFO's output whenever it is empty, so that its enable is a register.
        # ``sk_cap`` is a third copy (the spare's capture enable), each copy from its own previous value.
        sk_v = Signal()
        room = Signal(init=1)
        sk_cap = Signal(init=1)
        sk = Signal(ResultWord(W, S))
        pop = Signal()
        m.d.comb += [out.r_en.eq(room), pop.eq(out.r_rdy & room)]
        with m.If(sk_cap):
            m.d.sync += sk.eq(out.r_data)
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += [
                self.o.valid.eq(sk_v | pop),
                self.o.payload.eq(Mux(sk_v, sk, out.r_data)),
                sk_v.eq(0),
                room.eq(1),
                sk_cap.eq(1),
            ]
        with m.Else():
            m.d.sync += [
                sk_v.eq(sk_v | pop),
                room.eq(room & ~pop),
                sk_cap.eq(sk_cap & ~(out.r_rdy & sk_cap)),
            ]

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
        shaw = len(shr.addr)

        # The completion records of the chunks loaded and not yet finished, in order: sums leave the ring in
        # the order their beats entered it, so the oldest is the record of the sum leaving, and only a few
        # bits of it have to travel round the ring.
        CD = 1 << (K + 1).bit_length()  # more than the K + 1 chunks that can be loaded and unfinished
        m.submodules.chunks = chunks = memory.Memory(shape=cd_layout, depth=CD, init=[])
        ckw = chunks.write_port()
        ckr = chunks.read_port(domain="comb")
        ck_wp = Signal(range(CD))
        ck_rp = Signal(range(CD))

        # What travels round the ring with a beat: the passes left after this one, whether it is the chunk's
        # last beat, its addresses (the next member's beat is ``NW`` further on), and what the ring needs of
        # its record.
        sb_layout = data.StructLayout(
            {
                "rem": 7,
                "wl": 1,
                "addr": aw,
                "pos": range(G),  # the buffer of the slot that ``addr`` is in
                "sh": shaw,
                "slot": range(S),
                "replay": 1,
                "dtype": 2,
            }
        )
        # The dispatcher's own copy of the fields it needs of the chunk being dispatched.
        cur_layout = data.StructLayout({"slot": range(S), "g": 7, "replay": 1, "dtype": 2, "rot": range(G)})

        # Input: one completion may wait in ``nxt`` behind the chunk being dispatched, so that ``i.ready``
        # is a register (the dispatch decision never reaches the completion queue). A completion goes
        # straight into ``cur`` when ``cur`` is free or frees on this cycle, so an idle engine starts it on
        # the same cycle as without the buffer.
        nxt_v = Signal()
        # A copy of ``nxt_v`` for the load decision alone (``nxt_v`` drives the input's ready and the
        # choice of every field loaded), from its own previous value so that the synthesis keeps both.
        nxt_ld = Signal()
        nxt = Signal(cd_layout)
        take = Signal()
        m.d.comb += [self.i.ready.eq(~nxt_v), take.eq(self.i.valid & ~nxt_v)]
        # ``nxt`` takes every completion taken, even one that goes straight into ``cur``: on the cycle after
        # a load it holds the record just loaded (nothing is taken while it waits), which is where the
        # record list below copies it from. Its conditions are registered with it.
        n_last1, n_wl1, n_rel1 = Signal(), Signal(), Signal()

        # Dispatcher: the chunk whose beats are being started.
        cur_v = Signal()
        cur = Signal(cur_layout)
        # The beats of cur after the one it dispatches next (nwords - 1 - its index), counted down, so that
        # "the beat after next is the last" is a comparison of one register with a constant, not an adder.
        left = Signal(signed(18))
        fetch = Signal()  # the cycle after a replay was loaded: its record arrives from ``records``
        # The time left to the last beat started (a beat may start only if it finishes after it: its g * K
        # greater than that), kept as hq * K + hr with hr < K, so that "g * K > horizon" is "g > hq".
        hq = Signal(7)
        hr = Signal(range(K))
        # hq as the comparisons of this cycle see it (hq less one when hr has reached 0 and hq has not),
        # kept as a register of its own so that "g > horizon" is one carry chain from registers.
        hqd = Signal(7)
        # Registered conditions of the dispatcher, each taken from its candidates of the cycle before (load,
        # replay record, next beat, hold), so that the dispatch and the read address start from registers.
        # ``disp`` (below) is itself a register: "cur may dispatch" and "no ring position continues", both
        # known the cycle before, so the load decision and the dispatcher's enables start from registers.
        cur_last = Signal()  # left <= 0
        cur_wl = Signal()  # left == 0
        cur_rel = Signal()  # a dispatch now is the chunk's last read
        cur_addr = Signal(aw)  # member 0's beat of slot cur.slot that cur dispatches next
        cur_sh = Signal(shaw)  # that beat of slot cur.slot in the shadow
        in_ring = Signal(range(K + 1))
        ring_empty = Signal(init=1)
        ring_one = Signal()
        # Room in the output FIFO not yet reserved for a sum in the ring (depth - level - beats in flight),
        # kept as a counter of its own: a dispatch reserves a place, a beat read out of the FIFO frees one.
        free = Signal(range(self.fifo_depth + 1), init=self.fifo_depth)
        free_nz = Signal(init=self.fifo_depth != 0)
        free_is1 = Signal(init=self.fifo_depth == 1)

        # The ring position arriving at issue (O), with its decisions registered a cycle early.
        osb = Signal(sb_layout)
        cont = Signal()  # osb.rem != 0: the position goes round again
        fin = Signal()  # osb.rem == 0: its sum is done
        o_rem = Signal(7)  # osb.rem - 1
        o_rel = Signal()  # its next read is the chunk's last
        o_addr = Signal(aw)  # the next member's beat: osb.addr + NW, or back to the slot's first buffer
        o_pos = Signal(range(G))  # the buffer that beat is in
        o_shw = Signal()  # fin & ~osb.replay
        acc = Signal(W)  # the position's partial sum, off the adders' output registers

        # Issue.
        disp = Signal()  # cur dispatches a beat now: cur may dispatch and no ring position continues
        issue = cont | disp
        isb = Signal(sb_layout)
        with m.If(cont):
            m.d.comb += [isb.eq(osb), isb.rem.eq(o_rem), isb.addr.eq(o_addr), isb.pos.eq(o_pos)]
        with m.Else():
            m.d.comb += [
                isb.rem.eq(cur.g - 1),
                isb.wl.eq(cur_wl),
                isb.addr.eq(cur_addr),
                isb.pos.eq(cur.rot),
                isb.sh.eq(cur_sh),
                isb.slot.eq(cur.slot),
                isb.replay.eq(cur.replay),
                isb.dtype.eq(cur.dtype),
            ]
        m.d.comb += [
            self.rd.addr.eq(isb.addr),
            self.rd.en.eq(1),
            # Only a replay reads the shadow, and a replay (a group of one) never goes round again.
            shr.addr.eq(cur_sh),
            shr.en.eq(1),
            self.read_strobe.eq((cont & ~osb.replay) | (disp & ~cur.replay)),
            self.release.eq((cont & o_rel) | (disp & cur_rel)),
            self.release_slot.eq(isb.slot),
            self.active.eq(cur_v | ~ring_empty),
        ]

        # Finished sums go to the FIFO, in the order they were started, with their chunk's record.
        word = Signal(ResultWord(W, S))
        m.d.comb += [
            ckr.addr.eq(ck_rp),
            word.data.eq(acc),
            word.last.eq(osb.wl),
            word.cd.eq(ckr.data),
            out.w_data.eq(word),
            out.w_en.eq(fin),
            shw.addr.eq(osb.sh),
            shw.data.eq(acc),
            shw.en.eq(o_shw),
        ]
        m.d.sync += ck_rp.eq(ck_rp + (fin & osb.wl))
        ring_empty_hold = Mux(fin, ring_one, ring_empty)  # the ring is empty next unless a beat starts
        m.d.sync += [
            in_ring.eq(in_ring + disp - fin),
            ring_empty.eq(~disp & ring_empty_hold),
            ring_one.eq(Mux(disp, ring_empty_hold, Mux(fin, in_ring == 2, ring_one))),
            free.eq(free - disp + pop),
            free_nz.eq(pop | Mux(disp, ~free_is1, free_nz)),
            free_is1.eq(Mux(pop, Mux(disp, free_is1, ~free_nz), Mux(disp, free == 2, free_is1))),
        ]
        free_ok = pop | Mux(disp, ~free_is1, free_nz)  # free_nz of the next cycle

        # Loading the dispatcher: from ``nxt`` if it holds one, else straight from the input; from registers.
        load = Signal()
        m.d.comb += load.eq((~cur_v | (disp & cur_last)) & (nxt_ld | self.i.valid))
        m.d.sync += nxt_ld.eq((nxt_ld | self.i.valid) & ~load)
        ip = self.i.payload
        with m.If(nxt_v):
            with m.If(load):
                m.d.sync += nxt_v.eq(0)
        with m.Elif(take):
            m.d.sync += [
                nxt_v.eq(~load),
                nxt.eq(ip),
                n_last1.eq(ip.nwords <= 1),
                n_wl1.eq(ip.nwords == 1),
                n_rel1.eq((ip.g == 1) & (ip.nwords == 1) & ~ip.replay),
            ]
        # What the dispatcher needs of the completion it loads, chosen after the comparisons.
        src_slot, src_g, src_replay = (Mux(nxt_v, nxt[f], ip[f]) for f in ("slot", "g", "replay"))
        src_rot = Mux(nxt_v, nxt.rot, ip.rot)[: len(cur.rot)]
        src_last = Mux(nxt_v, n_last1, ip.nwords <= 1)
        src_wl = Mux(nxt_v, n_wl1, ip.nwords == 1)
        src_rel = Mux(nxt_v, n_rel1, (ip.g == 1) & (ip.nwords == 1) & ~ip.replay)

        # Records are written as completions are taken: a replay behind a completion of its slot is loaded
        # (and reads its record) only after that completion was taken.
        m.d.comb += [
            rcw.addr.eq(self.i.payload.slot),
            rcw.data.eq(self.i.payload),
            rcw.en.eq(take & ~self.i.payload.replay),
            rcr.addr.eq(src_slot),
            rcr.en.eq(1),
        ]
        rec = Signal(cd_layout)  # the replayed record, as it is summed: a group of one, a replay
        m.d.comb += [rec.eq(rcr.data), rec.g.eq(1), rec.replay.eq(1)]
        # A loaded record goes into the list on the next cycle (from ``nxt``), a replayed one on its fetch
        # cycle (from ``records``); the two never meet.
        push_r = Signal()
        m.d.sync += push_r.eq(load & ~src_replay)
        m.d.comb += [ckw.addr.eq(ck_wp), ckw.data.eq(Mux(push_r, nxt, rec)), ckw.en.eq(push_r | fetch)]
        m.d.sync += ck_wp.eq(ck_wp + (push_r | fetch))

        # The horizon: set by a dispatch to g * K - 1, else counting down to 0.
        cur_g1 = Signal(7)
        hq_dec = Signal(7)
        m.d.comb += [cur_g1.eq(cur.g - 1), hq_dec.eq(hq - ((hr == 0) & (hq != 0)))]
        with m.If(disp):
            m.d.sync += [hq.eq(cur_g1), hr.eq(K - 1), hqd.eq(cur_g1)]
        with m.Else():
            m.d.sync += [hq.eq(hq_dec), hqd.eq(hqd - ((hr == 1) & (hq != 0)))]
            with m.If(hr != 0):
                m.d.sync += hr.eq(hr - 1)
            with m.Elif(hq != 0):
                m.d.sync += hr.eq(K - 1)

        # Whether cur may dispatch on the next cycle (and whether that is its last beat), by case. A load
        # never meets a fetch (a fetch blocks dispatch, and cur is valid then); after a dispatch the ring is
        # not empty.
        rec_last = rec.nwords <= 1
        cur_last2 = left <= 1
        cur_wl2 = left == 1

        # With a group size of at least one: after a dispatch the horizon is cur.g - 1, so g > it is
        # g >= cur.g; otherwise "g * K > horizon" is "g > hqd".
        # Each comparison as the borrow of a subtraction (both sides below 128), which maps to a carry chain
        # where the synthesis otherwise builds a few levels of LUTs.
        def lt(a, b):
            return (a.as_unsigned() - b.as_unsigned())[7]

        def gt_hq(g):
            return lt(hqd, g)

        r_load = ~src_replay & Mux(
            disp, Mux(nxt_v, ~lt(nxt.g, cur.g), ~lt(ip.g, cur.g)), Mux(nxt_v, gt_hq(nxt.g), gt_hq(ip.g))
        )
        r_fetch = (hqd == 0) & ring_empty_hold
        r_disp = ~cur_last & ~cur.replay
        r_hold = cur_v & gt_hq(cur.g) & (~cur.replay | ring_empty_hold)
        # ``cont`` of the next cycle, as its register below gets it.
        cont_next = Signal()
        # Both outcomes formed apart (kept so), so that ``load``, the latest and most loaded net, comes in at
        # the last gate only.
        d_load, d_rest = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [
            d_load.eq(~cont_next & free_ok & r_load),
            d_rest.eq(~cont_next & free_ok & Mux(fetch, r_fetch, Mux(disp, r_disp, r_hold))),
        ]
        m.d.sync += disp.eq(Mux(load, d_load, d_rest))

        def base_addr(slot, rot=0):
            # Member 0 of a slot is in its buffer ``rot`` (the slot table's rotation after an eviction).
            # With fewer read frames than slots (external buffers staged on chip), slot s reads frame s mod F.
            if self.frames < S:
                slot = slot[: (self.frames - 1).bit_length()]
            return (slot * G * NW + rot * NW)[:aw]

        def base_sh(slot):
            return (slot * NW)[:shaw]

        m.d.sync += fetch.eq(load & src_replay)
        # The flags of the beat cur dispatches next, chosen like ``disp``: everything but a load formed apart.
        for flag, on_load, on_fetch, on_disp in (
            (cur_last, src_last, rec_last, cur_last2),
            (cur_wl, src_wl, rec.nwords == 1, cur_wl2),
            (cur_rel, src_rel, 0, (cur.g == 1) & cur_wl2 & ~cur.replay),
        ):
            rest = Signal(name=f"{flag.name}_rest", attrs={"keep": 1})
            m.d.comb += rest.eq(Mux(fetch, on_fetch, Mux(disp, on_disp, flag)))
            m.d.sync += flag.eq(Mux(load, on_load, rest))
        with m.If(load):
            m.d.sync += [
                cur_v.eq(1),
                cur.slot.eq(src_slot),
                cur.g.eq(src_g),
                left.eq(Mux(nxt_v, nxt.nwords, ip.nwords) - 1),
                cur.replay.eq(src_replay),
                cur.dtype.eq(Mux(nxt_v, nxt.desc.dtype, ip.desc.dtype)),
                cur.rot.eq(src_rot),
                cur_addr.eq(base_addr(src_slot, src_rot)),
                cur_sh.eq(base_sh(src_slot)),
            ]
        with m.Elif(fetch):
            m.d.sync += [
                cur.slot.eq(rec.slot),
                cur.g.eq(1),
                left.eq(rec.nwords - 1),
                cur.replay.eq(1),
                cur.dtype.eq(rec.desc.dtype),
                cur_addr.eq(base_addr(rec.slot)),
                cur_sh.eq(base_sh(rec.slot)),
            ]
        with m.Elif(disp):
            m.d.sync += [
                left.eq(left - 1),
                cur_addr.eq(cur_addr + 1),
                cur_sh.eq(cur_sh + 1),
            ]
        with m.If(disp & cur_last & ~load):
            m.d.sync += cur_v.eq(0)

        # Ring registers: R (read data arrives), Q (operands registered off the memories), the adder stages;
        # the last of them is O, the position back at issue.
        rv, rsb, racc, rfirst = Signal(), Signal(sb_layout), Signal(W), Signal()
        m.d.sync += [rv.eq(issue), rsb.eq(isb), racc.eq(acc), rfirst.eq(~cont)]

        # Q: the operands, so that the adders start from registers rather than from the memories' read
        # data (EBR clock-to-out, collision and shadow multiplexers). On a first pass a = x, b = -0.0.
        x = Mux(rsb.replay, shr.data, self.rd.data)
        # Each format's bank of lanes has operand registers of its own, placed beside it: one register per
        # bit reaching the three banks was the critical path of the W = 64 core on ECP5 (4 ns of routing
        # on one net, issue #11). Synthesis merges flip-flops with the same input, so the copies differ in
        # form: bank 1's are kept complemented, bank 2's first-pass choice reads a complemented copy of
        # ``rfirst``; each bank reads its own back in true polarity.
        rfirst_n = Signal(init=1)  # ~rfirst
        m.d.sync += rfirst_n.eq(cont)
        qa, qb = [], []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            neg_zero = Const(sum(1 << (k * fw + fw - 1) for k in range(W // fw)), W)
            first = ~rfirst_n if n % 3 == 2 else rfirst
            inv = n % 3 == 1
            a_r, b_r = Signal(W, name=f"qa{n}"), Signal(W, name=f"qb{n}")
            a_v, b_v = Mux(first, x, racc), Mux(first, neg_zero, x)
            m.d.sync += [a_r.eq(~a_v if inv else a_v), b_r.eq(~b_v if inv else b_v)]
            qa.append(~a_r if inv else a_r)
            qb.append(~b_r if inv else b_r)

        # Adders: every format's lanes see the same beat; the dtype picks one bank's result.
        results = []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            outs = []
            for k in range(W // fw):
                add = self.adder(fmt, self.stages)
                m.submodules[f"add_{n}_{k}"] = add
                m.d.comb += [
                    add.a.eq(qa[n][k * fw : (k + 1) * fw]),
                    add.b.eq(qb[n][k * fw : (k + 1) * fw]),
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
        for d in range(L):
            nv, nsb = Signal(name=f"ring_v{d}"), Signal(sb_layout, name=f"ring_sb{d}")
            m.d.sync += [nv.eq(sv), nsb.eq(ssb)]
            if d == L - 1:
                # ``cont`` of the next cycle is registered here from the stage before, alongside the last
                # stage, so that the dispatch decision sees it as a register.
                cont_pre = Signal()
                m.d.sync += cont_pre.eq(sv & (ssb.rem != 0))
                m.d.comb += cont_next.eq(cont_pre)
            sv, ssb = nv, nsb
        if L == 0:
            m.d.comb += cont_next.eq(sv & (ssb.rem != 0))
        m.d.sync += [
            osb.eq(ssb),
            cont.eq(cont_next),
            fin.eq(sv & (ssb.rem == 0)),
            o_rem.eq(ssb.rem - 1),
            o_rel.eq(~ssb.replay & (ssb.rem == 1) & ssb.wl),
            # Members follow each other NW beats apart, from buffer ``rot`` round to buffer ``rot - 1``.
            o_addr.eq(Mux(ssb.pos == G - 1, ssb.addr - (G - 1) * NW, ssb.addr + NW)),
            o_pos.eq(Mux(ssb.pos == G - 1, 0, ssb.pos + 1)),
            o_shw.eq(sv & (ssb.rem == 0) & ~ssb.replay),
        ]
        with m.Switch(osb.dtype):
            for n, res in enumerate(results):
                with m.Case(n):
                    m.d.comb += acc.eq(res)
        return m
