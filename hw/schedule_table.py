"""Schedule table: for this site's rank, the expected set of ranks of every (job, round mod P).

Latency: ``mod_stages + 3`` cycles, all of them plain register stages that advance together. Stage 0 finds
the packet's job among ``jobs`` entries (job id and period P, 0 = entry unused); the next ``mod_stages``
stages compute ``round mod P`` by restoring division, ``32 / mod_stages`` bits per stage (P is any value
from 1 to ``rounds``, so no power-of-two shortcut applies); then the table memory (``jobs * rounds``
entries of 64 bits, written through the control port) is read, and the last stage derives
``unexpected_src`` (code 21) and the sender's member index ``popcount(expected & ((1 << src) - 1))``.

Back-pressure: all stages advance when the output register is empty or taken (``i.ready`` follows
``o.ready`` combinationally); one beat per cycle.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .layouts import ParsedBeat, ScheduledBeat

__all__ = ["ScheduleTable"]


class ScheduleTable(wiring.Component):
    """Expected-set lookup.

    Parameters: ``width`` (bits per beat), ``members`` (G_max), ``jobs`` and ``rounds`` (table capacity,
    powers of two), ``mod_stages`` (pipeline stages of the modulo; divides 32).
    Ports: ``i`` (:func:`ParsedBeat`), ``o`` (:func:`ScheduledBeat`), the job entries ``job_id`` /
    ``job_period``, and the table's write port ``sched_addr`` / ``sched_data`` / ``sched_en``.
    """

    def __init__(self, *, width, members, jobs=4, rounds=64, mod_stages=4):
        if jobs < 1 or jobs & (jobs - 1) or rounds < 1 or rounds & (rounds - 1):
            raise ValueError("The job and round capacities of the schedule table must be powers of two.")
        if rounds > 128:
            raise ValueError(f"The schedule table holds at most 128 rounds per job, not {rounds}.")
        if mod_stages not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"The modulo pipeline needs a number of stages dividing 32, not {mod_stages}.")
        self.width, self.members, self.jobs, self.rounds = width, members, jobs, rounds
        self.mod_stages = mod_stages
        self.latency = mod_stages + 3
        super().__init__({
            "i": In(stream.Signature(ParsedBeat(width))),
            "o": Out(stream.Signature(ScheduledBeat(width, members))),
            "job_id": In(16).array(jobs), "job_period": In(range(rounds + 1)).array(jobs),
            "sched_addr": In(range(jobs * rounds)), "sched_data": In(64), "sched_en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        J, R = self.jobs, self.rounds
        rbits = 8  # remainder register: holds 2 * (P - 1) + 1 < 256

        m.submodules.table = table = memory.Memory(shape=64, depth=J * R, init=[])
        wp = table.write_port()
        rp = table.read_port(domain="sync")
        m.d.comb += [wp.addr.eq(self.sched_addr), wp.data.eq(self.sched_data), wp.en.eq(self.sched_en)]

        ctx_layout = data.StructLayout({
            "beat": ParsedBeat(self.width), "jidx": range(J), "hit": 1, "period": range(R + 1), "rem": rbits,
        })
        en = ~self.o.valid | self.o.ready
        m.d.comb += self.i.ready.eq(en)

        # Stage 0: which job entry.
        ctx0 = Signal(ctx_layout)
        v0 = Signal()
        desc = self.i.payload.desc
        hit, jidx, period = Const(0), Const(0, range(J)), Const(0, range(R + 1))
        for j in reversed(range(J)):
            match = (self.job_id[j] == desc.job) & (self.job_period[j] != 0)
            hit = match | hit
            jidx = Mux(match, j, jidx)
            period = Mux(match, self.job_period[j], period)
        with m.If(en):
            m.d.sync += [v0.eq(self.i.valid), ctx0.beat.eq(self.i.payload), ctx0.hit.eq(hit),
                         ctx0.jidx.eq(jidx), ctx0.period.eq(period), ctx0.rem.eq(0)]

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
            v, ctx = Signal(name=f"mod{s}_valid"), Signal(ctx_layout, name=f"mod{s}")
            with m.If(en):
                m.d.sync += [v.eq(prev_v), ctx.eq(prev), ctx.rem.eq(rem)]
            prev_v, prev = v, ctx

        # Table read; the read port's register is this stage's data register.
        vt, ctxt = Signal(), Signal(ctx_layout)
        m.d.comb += [rp.addr.eq(Cat(prev.rem[:(R - 1).bit_length()], prev.jidx) if R > 1 else prev.jidx),
                     rp.en.eq(en)]
        with m.If(en):
            m.d.sync += [vt.eq(prev_v), ctxt.eq(prev)]

        expected = Signal(64)
        m.d.comb += expected.eq(Mux(ctxt.hit, rp.data, 0))
        src = ctxt.beat.desc.src
        below = Signal(64)
        m.d.comb += below.eq(expected & ((Const(1, 65) << src) - 1)[:64])
        midx = Signal(7)
        m.d.comb += midx.eq(sum(below[k] for k in range(64)))
        unexpected = ~expected.bit_select(src, 1)

        ob = self.o.payload
        with m.If(en):
            m.d.sync += [
                self.o.valid.eq(vt),
                ob.data.eq(ctxt.beat.data), ob.bytes.eq(ctxt.beat.bytes), ob.last.eq(ctxt.beat.last),
                ob.pw.eq(ctxt.beat.pw), ob.hc.eq(ctxt.beat.hc), ob.desc.eq(ctxt.beat.desc),
                ob.drops.eq(ctxt.beat.drops | (unexpected << protocol.Drop.UNEXPECTED_SRC)),
                ob.expected.eq(expected), ob.midx.eq(midx),
            ]
        return m
