"""Reduce engine: sums a completed chunk's member buffers in ascending rank order through the adder lanes.

How it hides the adders' latency. The engine is a ring of ``K = L + 2`` pipeline positions (issue → read
register → ``L`` adder stages → accumulator register → issue again). Every position works on one beat
position ``w`` of one chunk: on its first pass it reads member 0's beat and adds ``-0.0`` (which leaves
every number as it is and turns NaN into the canonical NaN, as the golden model does); on pass ``m`` it
reads member ``m``'s beat and adds it to the partial sum that has just come around the ring, so the sum
is ``((x0 + x1) + x2) + ...`` with one rounding per addition, exactly the rank order. After ``g`` passes
the sum leaves the ring into the output FIFO and the position takes the next beat, of the same chunk or
of the next one. Because ``K`` positions are in flight at once, one member-buffer beat is read and one
addition is started every cycle, whatever ``L`` is, and for any chunk size: consecutive beats of a chunk
and beats of different chunks interleave freely. Beats leave the ring in the order they entered it: a new
beat is started only if it finishes after every beat already in the ring (``g * K`` greater than the
remaining time of the last one started), which only delays a chunk whose group is smaller than the one
before it.

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
output never interrupts a sum in flight; it just stops new beats from starting.
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

        sb_layout = data.StructLayout({"cd": Completion(self.slots), "w": 16, "m": 7})

        # Output FIFO with reservations.
        m.submodules.fifo = out = fifo.SyncFIFOBuffered(
            width=ResultWord(W, self.slots).size, depth=self.fifo_depth
        )
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy), out.r_en.eq(self.o.ready)]
        in_ring = Signal(range(K + 1))

        # Dispatcher: the chunk whose beats are being started.
        cur_v = Signal()
        cur = Signal(Completion(self.slots))
        cur_w = Signal(16)
        horizon = Signal(range(64 * K + 1))
        cur_gk = Signal(range(64 * K + 1))  # cur.g * K, registered with cur

        # The shadow: each slot's last sums and completion record, for re-emitting its RESULT. A replay is
        # a completion of group size 1 whose beat comes from here instead of member 0's buffer (adding -0.0
        # leaves a sum as it is); it starts only when the ring is empty, so that the sums it copies have all
        # been written.
        S = self.slots
        m.submodules.shadow = shadow = memory.Memory(shape=W, depth=S * NW, init=[])
        shw = shadow.write_port()
        shr = shadow.read_port(domain="sync")
        m.submodules.records = records = memory.Memory(shape=Completion(S), depth=S, init=[])
        rcw = records.write_port()
        rcr = records.read_port(domain="sync")
        fetch = Signal()  # the cycle after a replay was taken: its record arrives from ``records``

        # Ring registers: R (read data arrives), adder stages, O (accumulator back at issue).
        rv, rsb, racc = Signal(), Signal(sb_layout), Signal(W)
        ov, osb, oacc = Signal(), Signal(sb_layout), Signal(W)

        # Issue.
        cont = ov & (osb.m + 1 < osb.cd.g)
        fin = ov & (osb.m + 1 >= osb.cd.g)
        # Room in the output FIFO not yet reserved for a sum in the ring (depth - level - beats in flight),
        # kept as a counter of its own so that the dispatch condition starts from registers: a dispatch
        # reserves a place, a beat read out of the FIFO frees one (a finished sum takes its reserved place).
        free = Signal(range(self.fifo_depth + 1), init=self.fifo_depth)
        disp = ~cont & cur_v & ~fetch & (free != 0) & (cur_gk > horizon) & (~cur.replay | (in_ring == 0))
        issue = cont | disp
        isb = Signal(sb_layout)
        with m.If(cont):
            m.d.comb += [isb.eq(osb), isb.m.eq(osb.m + 1)]
        with m.Else():
            m.d.comb += [isb.cd.eq(cur), isb.w.eq(cur_w), isb.m.eq(0)]
        m.d.comb += [
            self.rd.addr.eq((isb.cd.slot * G + isb.m) * NW + isb.w),
            self.rd.en.eq(1),
            shr.addr.eq(isb.cd.slot * NW + isb.w),
            shr.en.eq(1),
            self.read_strobe.eq(issue & ~isb.cd.replay),
            self.release.eq(issue & ~isb.cd.replay & (isb.m + 1 == isb.cd.g) & (isb.w + 1 == isb.cd.nwords)),
            self.release_slot.eq(isb.cd.slot),
            self.active.eq(cur_v | (in_ring != 0)),
        ]
        m.d.sync += [rv.eq(issue), rsb.eq(isb), racc.eq(oacc)]

        # Finished sums go to the FIFO, in the order they were started.
        word = Signal(ResultWord(W, self.slots))
        m.d.comb += [
            word.data.eq(oacc),
            word.last.eq(osb.w + 1 == osb.cd.nwords),
            word.cd.eq(osb.cd),
            out.w_data.eq(word),
            out.w_en.eq(fin),
            shw.addr.eq(osb.cd.slot * NW + osb.w),
            shw.data.eq(oacc),
            shw.en.eq(fin & ~osb.cd.replay),
        ]
        m.d.sync += [
            in_ring.eq(in_ring + disp - fin),
            free.eq(free - disp + (out.r_en & out.r_rdy)),
        ]
        with m.If(disp):
            m.d.sync += horizon.eq(cur_gk - 1)
        with m.Elif(horizon != 0):
            m.d.sync += horizon.eq(horizon - 1)

        take_last = disp & (cur_w + 1 >= cur.nwords)
        m.d.comb += self.i.ready.eq(~cur_v | take_last)
        with m.If(disp):
            m.d.sync += cur_w.eq(cur_w + 1)
        with m.If(take_last):
            m.d.sync += cur_v.eq(0)
        take = self.i.valid & self.i.ready
        with m.If(take):
            m.d.sync += [cur_v.eq(1), cur.eq(self.i.payload), cur_w.eq(0), cur_gk.eq(self.i.payload.g * K)]
        m.d.comb += [
            rcw.addr.eq(self.i.payload.slot),
            rcw.data.eq(self.i.payload),
            rcw.en.eq(take & ~self.i.payload.replay),
            rcr.addr.eq(self.i.payload.slot),
            rcr.en.eq(take & self.i.payload.replay),
        ]
        m.d.sync += fetch.eq(take & self.i.payload.replay)
        with m.If(fetch):
            m.d.sync += [cur.eq(rcr.data), cur.g.eq(1), cur.replay.eq(1), cur_gk.eq(K)]

        # Adders: every format's lanes see the same beat; the dtype picks one bank's result.
        first = rsb.m == 0
        rdata = Mux(rsb.cd.replay, shr.data, self.rd.data)
        results = []
        for n, fmt in enumerate(self.formats):
            fw = fmt.width
            lanes = W // fw
            neg_zero = Const(1 << (fw - 1), fw)
            outs = []
            for k in range(lanes):
                add = self.adder(fmt, self.stages)
                m.submodules[f"add_{n}_{k}"] = add
                x, acc = rdata[k * fw : (k + 1) * fw], racc[k * fw : (k + 1) * fw]
                m.d.comb += [add.a.eq(Mux(first, x, acc)), add.b.eq(Mux(first, neg_zero, x)), add.en.eq(1)]
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
            sv, ssb = nv, nsb
        acc_next = Signal(W)
        with m.Switch(ssb.cd.desc.dtype):
            for n, res in enumerate(results):
                with m.Case(n):
                    m.d.comb += acc_next.eq(res)
        m.d.sync += [ov.eq(sv), osb.eq(ssb), oacc.eq(acc_next)]
        return m
