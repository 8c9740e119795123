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

Latency: 1 cycle added by the ECP5 timing work (docs/vendor.md; the skid buffer at ``o``, so that the
consumer's ready reaches neither the output FIFO nor the dispatch decision). A completion accepted by an idle
engine has its first beat read on the next cycle; a beat's sum enters the output FIFO ``g * K`` cycles after
its first read (K = L + 2 per pass: issue, read register R, operand register Q, then the L adder stages, the
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

from types import SimpleNamespace

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
        # The sizes and signals the stages share, each set by the stage that makes it (under the name the
        # signal has in the Verilog).
        ctx = SimpleNamespace()
        ctx.W, ctx.G, ctx.NW, ctx.K = self.width, self.members, self.words, self.ring
        ctx.L = self.latency
        ctx.S = self.slots
        ctx.cd_layout = Completion(ctx.S)
        ctx.aw = len(self.rd.addr)

        self._output(m, ctx)
        self._memories(m, ctx)
        self._state(m, ctx)
        self._issue(m, ctx)
        self._load(m, ctx)
        self._dispatch(m, ctx)
        self._ring(m, ctx)
        return m

    def _output(self, m, ctx):
        """The output FIFO (with reservations) and the skid register behind it."""
        # Output FIFO with reservations.
        m.submodules.fifo = ctx.out = fifo.SyncFIFOBuffered(
            width=ResultWord(ctx.W, ctx.S).size, depth=self.fifo_depth
        )
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
        sk = Signal(ResultWord(ctx.W, ctx.S))
        ctx.pop = Signal()
        m.d.comb += [ctx.out.r_en.eq(room), ctx.pop.eq(ctx.out.r_rdy & room)]
        with m.If(sk_cap):
            m.d.sync += sk.eq(ctx.out.r_data)
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += [
                self.o.valid.eq(sk_v | ctx.pop),
                self.o.payload.eq(Mux(sk_v, sk, ctx.out.r_data)),
                sk_v.eq(0),
                room.eq(1),
                sk_cap.eq(1),
            ]
        with m.Else():
            m.d.sync += [
                sk_v.eq(sk_v | ctx.pop),
                room.eq(room & ~ctx.pop),
                sk_cap.eq(sk_cap & ~(ctx.out.r_rdy & sk_cap)),
            ]

    def _memories(self, m, ctx):
        """The shadow of each slot's sums and record, the list of unfinished chunks, the ring's layouts."""
        # The shadow: each slot's last sums and completion record, for re-emitting its RESULT. A replay is
        # a completion of group size 1 whose beat comes from here instead of member 0's buffer (adding -0.0
        # leaves a sum as it is); it starts only when the ring is empty, so that the sums it copies have all
        # been written.
        m.submodules.shadow = shadow = memory.Memory(shape=ctx.W, depth=ctx.S * ctx.NW, init=[])
        ctx.shw = shadow.write_port()
        ctx.shr = shadow.read_port(domain="sync")
        m.submodules.records = records = memory.Memory(shape=ctx.cd_layout, depth=ctx.S, init=[])
        ctx.rcw = records.write_port()
        ctx.rcr = records.read_port(domain="sync")
        ctx.shaw = len(ctx.shr.addr)

        # The completion records of the chunks loaded and not yet finished, in order: sums leave the ring in
        # the order their beats entered it, so the oldest is the record of the sum leaving, and only a few
        # bits of it have to travel round the ring.
        CD = 1 << (ctx.K + 1).bit_length()  # more than the K + 1 chunks that can be loaded and unfinished
        m.submodules.chunks = chunks = memory.Memory(shape=ctx.cd_layout, depth=CD, init=[])
        ctx.ckw = chunks.write_port()
        ctx.ckr = chunks.read_port(domain="comb")
        ctx.ck_wp = Signal(range(CD))
        ctx.ck_rp = Signal(range(CD))

        # What travels round the ring with a beat: the passes left after this one, whether it is the chunk's
        # last beat, its addresses (the next member's beat is ``NW`` further on), and what the ring needs of
        # its record.
        ctx.sb_layout = data.StructLayout(
            {
                "rem": 7,
                "wl": 1,
                "addr": ctx.aw,
                "pos": range(ctx.G),  # the buffer of the slot that ``addr`` is in
                "sh": ctx.shaw,
                "slot": range(ctx.S),
                "replay": 1,
                "dtype": 2,
            }
        )
        # The dispatcher's own copy of the fields it needs of the chunk being dispatched.
        ctx.cur_layout = data.StructLayout(
            {"slot": range(ctx.S), "g": 7, "replay": 1, "dtype": 2, "rot": range(ctx.G)}
        )

    def _state(self, m, ctx):
        """The input buffer, the dispatcher's registers and the ring position arriving at issue."""
        # Input: one completion may wait in ``nxt`` behind the chunk being dispatched, so that ``i.ready``
        # is a register (the dispatch decision never reaches the completion queue). A completion goes
        # straight into ``cur`` when ``cur`` is free or frees on this cycle, so an idle engine starts it on
        # the same cycle as without the buffer.
        ctx.nxt_v = Signal()
        # A copy of ``nxt_v`` for the load decision alone (``nxt_v`` drives the input's ready and the
        # choice of every field loaded), from its own previous value so that the synthesis keeps both.
        ctx.nxt_ld = Signal()
        ctx.nxt = Signal(ctx.cd_layout)
        ctx.take = Signal()
        m.d.comb += [self.i.ready.eq(~ctx.nxt_v), ctx.take.eq(self.i.valid & ~ctx.nxt_v)]
        # ``nxt`` takes every completion taken, even one that goes straight into ``cur``: on the cycle after
        # a load it holds the record just loaded (nothing is taken while it waits), which is where the
        # record list below copies it from. Its conditions are registered with it.
        n_last1, n_wl1, n_rel1 = Signal(), Signal(), Signal()
        ctx.n_last1, ctx.n_wl1, ctx.n_rel1 = n_last1, n_wl1, n_rel1

        # Dispatcher: the chunk whose beats are being started.
        ctx.cur_v = Signal()
        ctx.cur = Signal(ctx.cur_layout)
        # The beats of cur after the one it dispatches next (nwords - 1 - its index), counted down, so that
        # "the beat after next is the last" is a comparison of one register with a constant, not an adder.
        ctx.left = Signal(signed(18))
        ctx.fetch = Signal()  # the cycle after a replay was loaded: its record arrives from ``records``
        # The time left to the last beat started (a beat may start only if it finishes after it: its g * K
        # greater than that), kept as hq * K + hr with hr < K, so that "g * K > horizon" is "g > hq".
        ctx.hq = Signal(7)
        ctx.hr = Signal(range(ctx.K))
        # hq as the comparisons of this cycle see it (hq less one when hr has reached 0 and hq has not),
        # kept as a register of its own so that "g > horizon" is one carry chain from registers.
        ctx.hqd = Signal(7)
        # Registered conditions of the dispatcher, each taken from its candidates of the cycle before (load,
        # replay record, next beat, hold), so that the dispatch and the read address start from registers.
        # ``disp`` (below) is itself a register: "cur may dispatch" and "no ring position continues", both
        # known the cycle before, so the load decision and the dispatcher's enables start from registers.
        ctx.cur_last = Signal()  # left <= 0
        ctx.cur_wl = Signal()  # left == 0
        ctx.cur_rel = Signal()  # a dispatch now is the chunk's last read
        ctx.cur_addr = Signal(ctx.aw)  # member 0's beat of slot cur.slot that cur dispatches next
        ctx.cur_sh = Signal(ctx.shaw)  # that beat of slot cur.slot in the shadow
        ctx.in_ring = Signal(range(ctx.K + 1))
        ctx.ring_empty = Signal(init=1)
        ctx.ring_one = Signal()
        # Room in the output FIFO not yet reserved for a sum in the ring (depth - level - beats in flight),
        # kept as a counter of its own: a dispatch reserves a place, a beat read out of the FIFO frees one.
        ctx.free = Signal(range(self.fifo_depth + 1), init=self.fifo_depth)
        ctx.free_nz = Signal(init=self.fifo_depth != 0)
        ctx.free_is1 = Signal(init=self.fifo_depth == 1)

        # The ring position arriving at issue (O), with its decisions registered a cycle early.
        ctx.osb = Signal(ctx.sb_layout)
        ctx.cont = Signal()  # osb.rem != 0: the position goes round again
        ctx.fin = Signal()  # osb.rem == 0: its sum is done
        ctx.o_rem = Signal(7)  # osb.rem - 1
        ctx.o_rel = Signal()  # its next read is the chunk's last
        ctx.o_addr = Signal(
            ctx.aw
        )  # the next member's beat: osb.addr + NW, or back to the slot's first buffer
        ctx.o_pos = Signal(range(ctx.G))  # the buffer that beat is in
        ctx.o_shw = Signal()  # fin & ~osb.replay
        ctx.acc = Signal(ctx.W)  # the position's partial sum, off the adders' output registers

    def _issue(self, m, ctx):
        """Issue: the next read of the ring or the dispatcher, and finished sums into the FIFO."""
        # Issue.
        ctx.disp = Signal()  # cur dispatches a beat now: cur may dispatch and no ring position continues
        ctx.issue = ctx.cont | ctx.disp
        ctx.isb = Signal(ctx.sb_layout)
        with m.If(ctx.cont):
            m.d.comb += [
                ctx.isb.eq(ctx.osb),
                ctx.isb.rem.eq(ctx.o_rem),
                ctx.isb.addr.eq(ctx.o_addr),
                ctx.isb.pos.eq(ctx.o_pos),
            ]
        with m.Else():
            m.d.comb += [
                ctx.isb.rem.eq(ctx.cur.g - 1),
                ctx.isb.wl.eq(ctx.cur_wl),
                ctx.isb.addr.eq(ctx.cur_addr),
                ctx.isb.pos.eq(ctx.cur.rot),
                ctx.isb.sh.eq(ctx.cur_sh),
                ctx.isb.slot.eq(ctx.cur.slot),
                ctx.isb.replay.eq(ctx.cur.replay),
                ctx.isb.dtype.eq(ctx.cur.dtype),
            ]
        m.d.comb += [
            self.rd.addr.eq(ctx.isb.addr),
            self.rd.en.eq(1),
            # Only a replay reads the shadow, and a replay (a group of one) never goes round again.
            ctx.shr.addr.eq(ctx.cur_sh),
            ctx.shr.en.eq(1),
            self.read_strobe.eq((ctx.cont & ~ctx.osb.replay) | (ctx.disp & ~ctx.cur.replay)),
            self.release.eq((ctx.cont & ctx.o_rel) | (ctx.disp & ctx.cur_rel)),
            self.release_slot.eq(ctx.isb.slot),
            self.active.eq(ctx.cur_v | ~ctx.ring_empty),
        ]

        # Finished sums go to the FIFO, in the order they were started, with their chunk's record.
        word = Signal(ResultWord(ctx.W, ctx.S))
        m.d.comb += [
            ctx.ckr.addr.eq(ctx.ck_rp),
            word.data.eq(ctx.acc),
            word.last.eq(ctx.osb.wl),
            word.cd.eq(ctx.ckr.data),
            ctx.out.w_data.eq(word),
            ctx.out.w_en.eq(ctx.fin),
            ctx.shw.addr.eq(ctx.osb.sh),
            ctx.shw.data.eq(ctx.acc),
            ctx.shw.en.eq(ctx.o_shw),
        ]
        m.d.sync += ctx.ck_rp.eq(ctx.ck_rp + (ctx.fin & ctx.osb.wl))
        ctx.ring_empty_hold = Mux(
            ctx.fin, ctx.ring_one, ctx.ring_empty
        )  # the ring is empty next unless a beat starts
        m.d.sync += [
            ctx.in_ring.eq(ctx.in_ring + ctx.disp - ctx.fin),
            ctx.ring_empty.eq(~ctx.disp & ctx.ring_empty_hold),
            ctx.ring_one.eq(Mux(ctx.disp, ctx.ring_empty_hold, Mux(ctx.fin, ctx.in_ring == 2, ctx.ring_one))),
            ctx.free.eq(ctx.free - ctx.disp + ctx.pop),
            ctx.free_nz.eq(ctx.pop | Mux(ctx.disp, ~ctx.free_is1, ctx.free_nz)),
            ctx.free_is1.eq(
                Mux(
                    ctx.pop,
                    Mux(ctx.disp, ctx.free_is1, ~ctx.free_nz),
                    Mux(ctx.disp, ctx.free == 2, ctx.free_is1),
                )
            ),
        ]
        ctx.free_ok = ctx.pop | Mux(ctx.disp, ~ctx.free_is1, ctx.free_nz)  # free_nz of the next cycle

    def _load(self, m, ctx):
        """Loading the dispatcher from ``nxt`` or the input, and the completion records."""
        # Loading the dispatcher: from ``nxt`` if it holds one, else straight from the input; from registers.
        ctx.load = Signal()
        m.d.comb += ctx.load.eq((~ctx.cur_v | (ctx.disp & ctx.cur_last)) & (ctx.nxt_ld | self.i.valid))
        m.d.sync += ctx.nxt_ld.eq((ctx.nxt_ld | self.i.valid) & ~ctx.load)
        ctx.ip = self.i.payload
        with m.If(ctx.nxt_v):
            with m.If(ctx.load):
                m.d.sync += ctx.nxt_v.eq(0)
        with m.Elif(ctx.take):
            m.d.sync += [
                ctx.nxt_v.eq(~ctx.load),
                ctx.nxt.eq(ctx.ip),
                ctx.n_last1.eq(ctx.ip.nwords <= 1),
                ctx.n_wl1.eq(ctx.ip.nwords == 1),
                ctx.n_rel1.eq((ctx.ip.g == 1) & (ctx.ip.nwords == 1) & ~ctx.ip.replay),
            ]
        # What the dispatcher needs of the completion it loads, chosen after the comparisons.
        src_slot, src_g, src_replay = (Mux(ctx.nxt_v, ctx.nxt[f], ctx.ip[f]) for f in ("slot", "g", "replay"))
        ctx.src_slot, ctx.src_g, ctx.src_replay = src_slot, src_g, src_replay
        ctx.src_rot = Mux(ctx.nxt_v, ctx.nxt.rot, ctx.ip.rot)[: len(ctx.cur.rot)]
        ctx.src_last = Mux(ctx.nxt_v, ctx.n_last1, ctx.ip.nwords <= 1)
        ctx.src_wl = Mux(ctx.nxt_v, ctx.n_wl1, ctx.ip.nwords == 1)
        ctx.src_rel = Mux(ctx.nxt_v, ctx.n_rel1, (ctx.ip.g == 1) & (ctx.ip.nwords == 1) & ~ctx.ip.replay)

        # Records are written as completions are taken: a replay behind a completion of its slot is loaded
        # (and reads its record) only after that completion was taken.
        m.d.comb += [
            ctx.rcw.addr.eq(self.i.payload.slot),
            ctx.rcw.data.eq(self.i.payload),
            ctx.rcw.en.eq(ctx.take & ~self.i.payload.replay),
            ctx.rcr.addr.eq(ctx.src_slot),
            ctx.rcr.en.eq(1),
        ]
        ctx.rec = Signal(ctx.cd_layout)  # the replayed record, as it is summed: a group of one, a replay
        m.d.comb += [ctx.rec.eq(ctx.rcr.data), ctx.rec.g.eq(1), ctx.rec.replay.eq(1)]
        # A loaded record goes into the list on the next cycle (from ``nxt``), a replayed one on its fetch
        # cycle (from ``records``); the two never meet.
        push_r = Signal()
        m.d.sync += push_r.eq(ctx.load & ~ctx.src_replay)
        m.d.comb += [
            ctx.ckw.addr.eq(ctx.ck_wp),
            ctx.ckw.data.eq(Mux(push_r, ctx.nxt, ctx.rec)),
            ctx.ckw.en.eq(push_r | ctx.fetch),
        ]
        m.d.sync += ctx.ck_wp.eq(ctx.ck_wp + (push_r | ctx.fetch))

    def _dispatch(self, m, ctx):
        """The horizon and the dispatcher's registered conditions for the next cycle."""
        # The horizon: set by a dispatch to g * K - 1, else counting down to 0.
        cur_g1 = Signal(7)
        hq_dec = Signal(7)
        m.d.comb += [cur_g1.eq(ctx.cur.g - 1), hq_dec.eq(ctx.hq - ((ctx.hr == 0) & (ctx.hq != 0)))]
        with m.If(ctx.disp):
            m.d.sync += [ctx.hq.eq(cur_g1), ctx.hr.eq(ctx.K - 1), ctx.hqd.eq(cur_g1)]
        with m.Else():
            m.d.sync += [ctx.hq.eq(hq_dec), ctx.hqd.eq(ctx.hqd - ((ctx.hr == 1) & (ctx.hq != 0)))]
            with m.If(ctx.hr != 0):
                m.d.sync += ctx.hr.eq(ctx.hr - 1)
            with m.Elif(ctx.hq != 0):
                m.d.sync += ctx.hr.eq(ctx.K - 1)

        # Whether cur may dispatch on the next cycle (and whether that is its last beat), by case. A load
        # never meets a fetch (a fetch blocks dispatch, and cur is valid then); after a dispatch the ring is
        # not empty.
        rec_last = ctx.rec.nwords <= 1
        cur_last2 = ctx.left <= 1
        cur_wl2 = ctx.left == 1

        # With a group size of at least one: after a dispatch the horizon is cur.g - 1, so g > it is
        # g >= cur.g; otherwise "g * K > horizon" is "g > hqd".
        # Each comparison as the borrow of a subtraction (both sides below 128), which maps to a carry chain
        # where the synthesis otherwise builds a few levels of LUTs.
        def lt(a, b):
            return (a.as_unsigned() - b.as_unsigned())[7]

        def gt_hq(g):
            return lt(ctx.hqd, g)

        r_load = ~ctx.src_replay & Mux(
            ctx.disp,
            Mux(ctx.nxt_v, ~lt(ctx.nxt.g, ctx.cur.g), ~lt(ctx.ip.g, ctx.cur.g)),
            Mux(ctx.nxt_v, gt_hq(ctx.nxt.g), gt_hq(ctx.ip.g)),
        )
        r_fetch = (ctx.hqd == 0) & ctx.ring_empty_hold
        r_disp = ~ctx.cur_last & ~ctx.cur.replay
        r_hold = ctx.cur_v & gt_hq(ctx.cur.g) & (~ctx.cur.replay | ctx.ring_empty_hold)
        # ``cont`` of the next cycle, as its register below gets it.
        ctx.cont_next = Signal()
        # Both outcomes formed apart (kept so), so that ``load``, the latest and most loaded net, comes in at
        # the last gate only.
        d_load, d_rest = Signal(attrs={"keep": 1}), Signal(attrs={"keep": 1})
        m.d.comb += [
            d_load.eq(~ctx.cont_next & ctx.free_ok & r_load),
            d_rest.eq(~ctx.cont_next & ctx.free_ok & Mux(ctx.fetch, r_fetch, Mux(ctx.disp, r_disp, r_hold))),
        ]
        m.d.sync += ctx.disp.eq(Mux(ctx.load, d_load, d_rest))

        def base_addr(slot, rot=0):
            # Member 0 of a slot is in its buffer ``rot`` (the slot table's rotation after an eviction).
            # With fewer read frames than slots (external buffers staged on chip), slot s reads frame s mod F.
            if self.frames < ctx.S:
                slot = slot[: (self.frames - 1).bit_length()]
            return (slot * ctx.G * ctx.NW + rot * ctx.NW)[: ctx.aw]

        def base_sh(slot):
            return (slot * ctx.NW)[: ctx.shaw]

        m.d.sync += ctx.fetch.eq(ctx.load & ctx.src_replay)
        # The flags of the beat cur dispatches next, chosen like ``disp``: everything but a load formed apart.
        for flag, on_load, on_fetch, on_disp in (
            (ctx.cur_last, ctx.src_last, rec_last, cur_last2),
            (ctx.cur_wl, ctx.src_wl, ctx.rec.nwords == 1, cur_wl2),
            (ctx.cur_rel, ctx.src_rel, 0, (ctx.cur.g == 1) & cur_wl2 & ~ctx.cur.replay),
        ):
            rest = Signal(name=f"{flag.name}_rest", attrs={"keep": 1})
            m.d.comb += rest.eq(Mux(ctx.fetch, on_fetch, Mux(ctx.disp, on_disp, flag)))
            m.d.sync += flag.eq(Mux(ctx.load, on_load, rest))
        with m.If(ctx.load):
            m.d.sync += [
                ctx.cur_v.eq(1),
                ctx.cur.slot.eq(ctx.src_slot),
                ctx.cur.g.eq(ctx.src_g),
                ctx.left.eq(Mux(ctx.nxt_v, ctx.nxt.nwords, ctx.ip.nwords) - 1),
                ctx.cur.replay.eq(ctx.src_replay),
                ctx.cur.dtype.eq(Mux(ctx.nxt_v, ctx.nxt.desc.dtype, ctx.ip.desc.dtype)),
                ctx.cur.rot.eq(ctx.src_rot),
                ctx.cur_addr.eq(base_addr(ctx.src_slot, ctx.src_rot)),
                ctx.cur_sh.eq(base_sh(ctx.src_slot)),
            ]
        with m.Elif(ctx.fetch):
            m.d.sync += [
                ctx.cur.slot.eq(ctx.rec.slot),
                ctx.cur.g.eq(1),
                ctx.left.eq(ctx.rec.nwords - 1),
                ctx.cur.replay.eq(1),
                ctx.cur.dtype.eq(ctx.rec.desc.dtype),
                ctx.cur_addr.eq(base_addr(ctx.rec.slot)),
                ctx.cur_sh.eq(base_sh(ctx.rec.slot)),
            ]
        with m.Elif(ctx.disp):
            m.d.sync += [
                ctx.left.eq(ctx.left - 1),
                ctx.cur_addr.eq(ctx.cur_addr + 1),
                ctx.cur_sh.eq(ctx.cur_sh + 1),
            ]
        with m.If(ctx.disp & ctx.cur_last & ~ctx.load):
            m.d.sync += ctx.cur_v.eq(0)

    def _ring(self, m, ctx):
        """The ring: read data, operand registers, the adder lanes of every format, the sum back at issue."""
        # Ring registers: R (read data arrives), Q (operands registered off the memories), the adder stages;
        # the last of them is O, the position back at issue.
        rv, rsb, racc, rfirst = Signal(), Signal(ctx.sb_layout), Signal(ctx.W), Signal()
        m.d.sync += [rv.eq(ctx.issue), rsb.eq(ctx.isb), racc.eq(ctx.acc), rfirst.eq(~ctx.cont)]

        # Q: the operands, so that the adders start from registers rather than from the memories' read
        # data (EBR clock-to-out, collision and shadow multiplexers). On a first pass a = x, b = -0.0.
        x = Mux(rsb.replay, ctx.shr.data, self.rd.data)
        # Each format's bank of lanes has operand registers of its own, placed beside it: one register per
        # bit reaching the three banks was the critical path of the W = 64 core on ECP5 (4 ns of routing
        # on one net; docs/vendor.md). Synthesis merges flip-flops with the same input, so the copies differ
        # in form: bank 1's are kept complemented, bank 2's first-pass choice reads a complemented copy of
        # ``rfirst``; each bank reads its own back in true polarity.
        rfirst_n = Signal(init=1)  # ~rfirst
        m.d.sync += rfirst_n.eq(ctx.cont)
        qa, qb = [], []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            neg_zero = Const(sum(1 << (k * fw + fw - 1) for k in range(ctx.W // fw)), ctx.W)
            first = ~rfirst_n if n % 3 == 2 else rfirst
            inv = n % 3 == 1
            a_r, b_r = Signal(ctx.W, name=f"qa{n}"), Signal(ctx.W, name=f"qb{n}")
            a_v, b_v = Mux(first, x, racc), Mux(first, neg_zero, x)
            m.d.sync += [a_r.eq(~a_v if inv else a_v), b_r.eq(~b_v if inv else b_v)]
            qa.append(~a_r if inv else a_r)
            qb.append(~b_r if inv else b_r)

        # Adders: every format's lanes see the same beat; the dtype picks one bank's result.
        results = []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            outs = []
            for k in range(ctx.W // fw):
                add = self.adder(fmt, self.stages)
                m.submodules[f"add_{n}_{k}"] = add
                m.d.comb += [
                    add.a.eq(qa[n][k * fw : (k + 1) * fw]),
                    add.b.eq(qb[n][k * fw : (k + 1) * fw]),
                    add.en.eq(1),
                ]
                s = add.s
                for d in range(ctx.L - add.latency):
                    t = Signal(fw, name=f"add_{n}_{k}_d{d}")
                    m.d.sync += t.eq(s)
                    s = t
                outs.append(s)
            results.append(Cat(*outs))

        sv, ssb = rv, rsb
        for d in range(ctx.L):
            nv, nsb = Signal(name=f"ring_v{d}"), Signal(ctx.sb_layout, name=f"ring_sb{d}")
            m.d.sync += [nv.eq(sv), nsb.eq(ssb)]
            if d == ctx.L - 1:
                # ``cont`` of the next cycle is registered here from the stage before, alongside the last
                # stage, so that the dispatch decision sees it as a register.
                cont_pre = Signal()
                m.d.sync += cont_pre.eq(sv & (ssb.rem != 0))
                m.d.comb += ctx.cont_next.eq(cont_pre)
            sv, ssb = nv, nsb
        if ctx.L == 0:
            m.d.comb += ctx.cont_next.eq(sv & (ssb.rem != 0))
        m.d.sync += [
            ctx.osb.eq(ssb),
            ctx.cont.eq(ctx.cont_next),
            ctx.fin.eq(sv & (ssb.rem == 0)),
            ctx.o_rem.eq(ssb.rem - 1),
            ctx.o_rel.eq(~ssb.replay & (ssb.rem == 1) & ssb.wl),
            # Members follow each other NW beats apart, from buffer ``rot`` round to buffer ``rot - 1``.
            ctx.o_addr.eq(Mux(ssb.pos == ctx.G - 1, ssb.addr - (ctx.G - 1) * ctx.NW, ssb.addr + ctx.NW)),
            ctx.o_pos.eq(Mux(ssb.pos == ctx.G - 1, 0, ssb.pos + 1)),
            ctx.o_shw.eq(sv & (ssb.rem == 0) & ~ssb.replay),
        ]
        with m.Switch(ctx.osb.dtype):
            for n, res in enumerate(results):
                with m.Case(n):
                    m.d.comb += ctx.acc.eq(res)
