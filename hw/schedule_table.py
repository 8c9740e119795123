"""Schedule table: for this site's rank, the expected set, the summation order and the round bank of every
(job, round mod P).

Latency: ``mod_stages + 10`` cycles: ``mod_stages + 7`` register stages that never stall, then an output FIFO
(3: its memory is block RAM, read into an output register). The first stage registers the beat as it comes in;
stage 0 compares the packet's job with the ``jobs`` entries (job id, period P with 0 = entry unused, bank bits
b) and registers the matches; stage 1 takes the first match's period and bank; the next ``mod_stages`` stages
compute ``round mod P`` by restoring division, ``32 / mod_stages`` bits per stage (P is any value from 1 to
``rounds``, so no power-of-two shortcut applies); then the table memory (``jobs * rounds`` entries of the
64-bit expected bitmap and the summation order, ``members`` ranks of 6 bits with a valid bit each, written
through the control port) is read while the chunk's slot ``((round mod P) << b | chunk mod 2**b) mod S`` is
formed; the entry is registered as it leaves the memory (whose clock-to-out is most of a cycle on ECP5); the
stage after compares it with the packet (stripe bounds, the sender's bitmap bit, each rank of the order
against ``src``), and the last stage derives ``unexpected_src`` (code 21) and the sender's member index from
those registered results: the position of ``src`` in the summation order (the first position that holds it;
``members`` when none does, which the slot table never writes). Each stage is a few LUTs deep so that the
table closes timing beside the rest of the core (docs/vendor.md): 16 modulo stages (2 round bits each) is the
depth that does at W = 64 on ECP5.

Root aggregation: an entry also holds the chunk range ``root_lo ..= root_hi`` this site is the root of in
that round (its stripe; ``0 ..= 2**32 - 1`` in gather mode) and ``mdest``, the group address its RESULTs
are also multicast to (0 for none). A packet of a configured (job, round) whose chunk is outside the range
is marked ``foreign`` (not this core's work: the core's bypass forwards it) and gets an empty expected set,
so it is never stored (code 21 unless a lower code applies).

Back-pressure: the stages never stall (a common enable would reach thousands of flip-flops); they write
into an output FIFO of ``fifo_depth`` beats, and ``i.ready`` (a register) is high while the beats inside,
in the stages and in the FIFO, leave it room. One beat per cycle while ``o.ready`` keeps up.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .fifo import BlockFIFO
from .layouts import ParsedBeat, ScheduledBeat
from .stream import priority_select

__all__ = ["ScheduleTable", "BANK_BITS", "MOD_STAGES", "SCHEDULE_WRITE", "schedule_write_members"]

#: Width of a job entry's bank-bits register; any value of at least log2 S means "slot = chunk mod S".
BANK_BITS = 6
#: The depths the round-modulo pipeline can have: its 32 steps split evenly over the stages.
MOD_STAGES = (1, 2, 4, 8, 16, 32)


def schedule_write_members(flow, *, jobs, rounds, members):
    """The table's write port as component members, ``flow`` ``In`` on the table and ``Out`` on the register
    file that drives it: the entry's address, its bitmap word, the summation order (``members`` bytes), the
    root stripe ``lo``..``hi`` (inclusive), the multicast destinations and the write enable."""
    return {
        "sched_addr": flow(range(jobs * rounds)),
        "sched_data": flow(64),
        "sched_order": flow(8).array(members),
        "sched_lo": flow(32),
        "sched_hi": flow(32, init=0xFFFF_FFFF),
        "sched_mdest": flow(32),
        "sched_en": flow(1),
    }


#: The names of :func:`schedule_write_members`.
SCHEDULE_WRITE = tuple(schedule_write_members(In, jobs=1, rounds=1, members=1))


class ScheduleTable(wiring.Component):
    """Expected-set, summation-order and slot lookup.

    Parameters: ``width`` (bits per beat), ``members`` (G_max: ranks of the order kept per entry),
    ``slots`` (S, a power of two), ``jobs`` and ``rounds`` (table capacity, powers of two), ``mod_stages``
    (pipeline stages of the modulo; divides 32).
    Ports: ``i`` (:func:`ParsedBeat`), ``o`` (:func:`ScheduledBeat`), the job entries ``job_id`` /
    ``job_period`` / ``job_bank``, and the table's write port ``sched_addr`` / ``sched_data`` (bitmap) /
    ``sched_order`` (``members`` bytes: the rank in bits 5:0; a byte with bit 6 or 7 set, such as
    ``ORDER_NONE``, ends the order) / ``sched_lo`` / ``sched_hi`` (the root stripe, inclusive) /
    ``sched_mdest`` / ``sched_en``.
    """

    def __init__(self, *, width, members, slots, jobs=4, rounds=64, mod_stages=16):
        if jobs < 1 or jobs & (jobs - 1) or rounds < 1 or rounds & (rounds - 1):
            raise ValueError("The job and round capacities of the schedule table must be powers of two.")
        if rounds > 128:
            raise ValueError(f"The schedule table holds at most 128 rounds per job, not {rounds}.")
        if mod_stages not in MOD_STAGES:
            raise ValueError(f"The modulo pipeline needs a number of stages dividing 32, not {mod_stages}.")
        if not 1 <= members <= protocol.MAX_RANKS:
            raise ValueError(f"The members per slot must be in 1..{protocol.MAX_RANKS}, not {members}.")
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"The slot count must be a power of two, not {slots}.")
        self.width, self.members, self.slots, self.jobs, self.rounds = width, members, slots, jobs, rounds
        self.mod_stages = mod_stages
        #: Output FIFO depth: the beats in the stages plus room to keep one beat a cycle flowing.
        self.fifo_depth = 1 << (mod_stages + 11).bit_length()
        self.latency = mod_stages + 10
        super().__init__(
            {
                "i": In(stream.Signature(ParsedBeat(width))),
                "o": Out(stream.Signature(ScheduledBeat(width, members, slots))),
                "job_id": In(16).array(jobs),
                "job_period": In(range(rounds + 1)).array(jobs),
                "job_bank": In(BANK_BITS).array(jobs),
                **schedule_write_members(In, jobs=jobs, rounds=rounds, members=members),
            }
        )

    def elaborate(self, platform):
        m = Module()
        J, R, G, S = self.jobs, self.rounds, self.members, self.slots
        rbits = max(1, (2 * R - 1).bit_length())  # remainder register: holds 2 * (P - 1) + 1 < 2 * R
        sbits = (S - 1).bit_length()

        entry_layout = data.StructLayout(
            {"bitmap": 64, "rank": data.ArrayLayout(6, G), "valid": G, "lo": 32, "hi": 32, "mdest": 32}
        )
        m.submodules.table = table = memory.Memory(shape=entry_layout, depth=J * R, init=[])
        wp = table.write_port()
        rp = table.read_port(domain="sync")
        # A member is valid only if every member before it is: the order ends at the first "none" byte, so
        # shadow words left over from a longer order are never looked at.
        valid = Const(1)
        for k in range(G):
            valid = valid & (self.sched_order[k][6:] == 0)
            m.d.comb += [wp.data.rank[k].eq(self.sched_order[k][:6]), wp.data.valid[k].eq(valid)]
        m.d.comb += [
            wp.addr.eq(self.sched_addr),
            wp.data.bitmap.eq(self.sched_data),
            wp.data.lo.eq(self.sched_lo),
            wp.data.hi.eq(self.sched_hi),
            wp.data.mdest.eq(self.sched_mdest),
            wp.en.eq(self.sched_en),
        ]

        ctx_layout = data.StructLayout(
            {
                "beat": ParsedBeat(self.width),
                "jidx": range(J),
                "hit": 1,
                "period": range(R + 1),
                "rem": rbits,
                "bank": BANK_BITS,
                "slot": range(S),
            }
        )
        # Data registers have no reset (only the valid bits do): a reset reaching every flip-flop of a wide
        # pipeline is one more net of thousands of sinks.
        # The stages never stall: a stall would be one net enabling every register of every stage (thousands
        # of flip-flops: nextpnr routed it in 8.7 ns on ECP5). Beats go into an output FIFO instead, and the
        # input takes a beat only while the beats inside (in the stages and the FIFO) leave the FIFO's memory
        # room, counted in ``inflight``; ``i.ready`` is that count's comparison, registered.
        out_shape = ScheduledBeat(self.width, G, S)
        D = self.fifo_depth
        # The FIFO's memory is block RAM, read into registers (``BlockFIFO``): in LUT RAM its read address
        # reached every 4-bit cell of a 345-bit word spread over the die (8.8 ns of routing on one net).
        m.submodules.out_fifo = out_fifo = BlockFIFO(width=out_shape.size, depth=D)
        wiring.connect(m, wiring.flipped(self.o), out_fifo.o)
        fw_en, fw_data = out_fifo.w_en, out_fifo.w_data
        inflight = Signal(range(D + 1))
        ready = Signal(init=1)
        taken = self.i.valid & ready
        # A word leaves the count a cycle after it leaves the memory, so that ``o.ready`` does not reach
        # ``i.ready``; the count is then at most one high, which only makes the input more careful.
        left = Signal()
        m.d.sync += left.eq(out_fifo.r_en)
        after = Signal.like(inflight)
        m.d.comb += [after.eq(inflight + taken - left), self.i.ready.eq(ready)]
        m.d.sync += [inflight.eq(after), ready.eq(after < D)]

        # Stage 0: the job comparisons only, registered; stage 1 picks the first match (priority, so that
        # two entries with one job id behave as the lowest one alone).
        # (Stage "in" before them registers the beat as it comes, so that the comparisons start from a
        # register.)
        vin, beatin = Signal(), Signal(ParsedBeat(self.width), reset_less=True)
        m.d.sync += [vin.eq(taken), beatin.eq(self.i.payload)]
        v00, beat00 = Signal(), Signal(ParsedBeat(self.width), reset_less=True)
        match = Signal(J, reset_less=True)
        m.d.sync += [v00.eq(vin), beat00.eq(beatin)]
        for j in range(J):
            m.d.sync += match[j].eq((self.job_id[j] == beatin.desc.job) & (self.job_period[j] != 0))
        ctx0 = Signal(ctx_layout, reset_less=True)
        v0 = Signal()
        hit = Const(0)
        for j in reversed(range(J)):
            hit = match[j] | hit
        # The first matching job's entry (job ids are unique, so there is at most one).
        jidx = priority_select((match[j] for j in range(J)), range(J), Const(0, range(J)))
        period = priority_select((match[j] for j in range(J)), self.job_period, Const(0, range(R + 1)))
        bank = priority_select((match[j] for j in range(J)), self.job_bank, Const(0, BANK_BITS))
        m.d.sync += [
            v0.eq(v00),
            ctx0.beat.eq(beat00),
            ctx0.hit.eq(hit),
            ctx0.jidx.eq(jidx),
            ctx0.period.eq(period),
            ctx0.bank.eq(bank),
            ctx0.rem.eq(0),
        ]

        # Restoring division, most significant round bit first.
        per = 32 // self.mod_stages
        prev_v, prev = v0, ctx0
        for s in range(self.mod_stages):
            rem = prev.rem
            for b in reversed(range(32 - (s + 1) * per, 32 - s * per)):
                # A named signal per step keeps the expression a chain, not a tree that doubles each bit.
                shifted = Signal(rbits, name=f"mod{s}_b{b}")
                m.d.comb += shifted.eq(Cat(prev.beat.desc.round[b], rem))
                rem = Mux(shifted >= prev.period, shifted - prev.period, shifted)[:rbits]
            v, ctx = Signal(name=f"mod{s}_valid"), Signal(ctx_layout, name=f"mod{s}", reset_less=True)
            m.d.sync += [v.eq(prev_v), ctx.eq(prev), ctx.rem.eq(rem)]
            prev_v, prev = v, ctx

        # Table read (the read port's register is this stage's data register) and the round bank's slot:
        # bit k of the slot is chunk bit k below the bank bits, else remainder bit k - b. Without a job the
        # remainder is meaningless, but the result is still an index below S.
        vt, ctxt = Signal(), Signal(ctx_layout, reset_less=True)
        m.d.comb += [
            rp.addr.eq(Cat(prev.rem[: (R - 1).bit_length()], prev.jidx) if R > 1 else prev.jidx),
        ]
        slot = Signal(range(S))
        if sbits:
            banked = Signal(sbits)
            m.d.comb += banked.eq(prev.rem[:sbits] << prev.bank)
            m.d.comb += slot.eq(
                Cat(*[Mux(prev.bank > k, prev.beat.desc.chunk[k], banked[k]) for k in range(sbits)])
            )
        m.d.sync += [vt.eq(prev_v), ctxt.eq(prev), ctxt.slot.eq(slot)]

        vr, ctxr = Signal(), Signal(ctx_layout, reset_less=True)
        entry = Signal(entry_layout, reset_less=True)
        m.d.sync += [vr.eq(vt), ctxr.eq(ctxt), entry.eq(rp.data)]
        src = ctxr.beat.desc.src
        vc, ctxc = Signal(), Signal(ctx_layout, reset_less=True)
        # The 32-bit stripe bounds as 16-bit halves (two short carry chains instead of one long one) and the
        # sender's bitmap bit as the 16-bit word that holds it: both finished in the last stage.
        chunk = ctxr.beat.desc.chunk
        lt_h, eq_h, lt_l = (Signal(reset_less=True) for _ in range(3))
        gt_h, eq_hh, gt_l = (Signal(reset_less=True) for _ in range(3))
        sword = Signal(16, reset_less=True)
        holds = Signal(G, reset_less=True)  # holds[k]: position k of the order is src
        bitmap, mdest = Signal(64, reset_less=True), Signal(32, reset_less=True)
        m.d.sync += [
            vc.eq(vr),
            ctxc.eq(ctxr),
            lt_h.eq(chunk[16:] < entry.lo[16:]),
            eq_h.eq(chunk[16:] == entry.lo[16:]),
            lt_l.eq(chunk[:16] < entry.lo[:16]),
            gt_h.eq(chunk[16:] > entry.hi[16:]),
            eq_hh.eq(chunk[16:] == entry.hi[16:]),
            gt_l.eq(chunk[:16] > entry.hi[:16]),
            sword.eq(entry.bitmap.word_select(src[4:6], 16)),
            bitmap.eq(entry.bitmap),
            mdest.eq(entry.mdest),
        ]
        m.d.sync += [holds[k].eq(entry.valid[k] & (entry.rank[k] == src)) for k in range(G)]
        below = lt_h | (eq_h & lt_l)
        above = gt_h | (eq_hh & gt_l)
        sbit = sword.bit_select(ctxc.beat.desc.src[:4], 1)

        foreign = Signal()
        m.d.comb += foreign.eq(ctxc.hit & (below | above))
        expected = Signal(64)
        m.d.comb += expected.eq(Mux(ctxc.hit & ~foreign, bitmap, 0))
        # The first position holding src wins: an order of a multiple of four members has no "none" byte,
        # so the words after it may still hold ranks of a longer order written before (the driver only
        # writes the words it needs). A tree of (found, index) pairs keeps this log2(G_max) muxes deep.
        terms = [(holds[k], Const(k, range(G + 1))) for k in range(G)]
        while len(terms) > 1:
            terms = [
                (terms[n][0] | terms[n + 1][0], Mux(terms[n][0], terms[n][1], terms[n + 1][1]))
                if n + 1 < len(terms)
                else terms[n]
                for n in range(0, len(terms), 2)
            ]
        midx = Signal(range(G + 1))
        m.d.comb += midx.eq(Mux(terms[0][0], terms[0][1], G))
        unexpected = ~(ctxc.hit & ~foreign & sbit)

        ob = Signal(out_shape, reset_less=True)
        m.d.comb += fw_data.eq(ob)
        m.d.sync += [
            fw_en.eq(vc),
            ob.data.eq(ctxc.beat.data),
            ob.bytes.eq(ctxc.beat.bytes),
            ob.last.eq(ctxc.beat.last),
            ob.pw.eq(ctxc.beat.pw),
            ob.hc.eq(ctxc.beat.hc),
            ob.desc.eq(ctxc.beat.desc),
            ob.drops.eq(ctxc.beat.drops | (unexpected << protocol.Drop.UNEXPECTED_SRC)),
            ob.expected.eq(expected),
            ob.midx.eq(midx),
            ob.slot.eq(ctxc.slot),
            ob.foreign.eq(foreign),
            ob.mdest.eq(Mux(ctxc.hit, mdest, 0)),
        ]
        return m
