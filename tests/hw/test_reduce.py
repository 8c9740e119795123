"""Reduce engine: every beat of every completed chunk summed over its members in rank order, sums leaving
in chunk and beat order even when group sizes change, one release per chunk, under output back-pressure.

The adder lanes are the integer stand-in of ``fakeadd`` (the floating-point lanes are checked in the core
tests against the golden model); what is checked here is which beats meet in which order."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from tests.support.fakeadd import FORMATS, fake_adder, fake_reduce
from tests.support.streamsim import run_stream
from wanreduce.hw.layouts import Completion
from wanreduce.hw.reduce import Reduce

W, S, G, NW = 64, 4, 4, 3


class Top(wiring.Component):
    def __init__(self, init):
        self.red = Reduce(width=W, slots=S, members=G, words=NW, adder=fake_adder, formats=FORMATS)
        self.init = init
        super().__init__(
            {
                "i": In(stream.Signature(Completion(S))),
                "o": Out(stream.Signature(data.StructLayout({"data": W, "last": 1, "slot": range(S)}))),
                "release": Out(1),
                "release_slot": Out(range(S)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.red = red = self.red
        m.submodules.mem = mem = memory.Memory(shape=W, depth=S * G * NW, init=self.init)
        wiring.connect(m, red.rd, mem.read_port())
        wiring.connect(m, wiring.flipped(self.i), red.i)
        m.d.comb += [
            self.o.valid.eq(red.o.valid),
            red.o.ready.eq(self.o.ready),
            self.o.payload.data.eq(red.o.payload.data),
            self.o.payload.last.eq(red.o.payload.last),
            self.o.payload.slot.eq(red.o.payload.cd.slot),
            self.release.eq(red.release),
            self.release_slot.eq(red.release_slot),
        ]
        return m


def _lanes(word, dtype):
    width = 32 if dtype == 0 else 16
    return [(word >> (k * width)) & ((1 << width) - 1) for k in range(W // width)]


@pytest.mark.parametrize("backpressure", [0.0, 0.5])
def test_rank_order_sums(backpressure):
    rng = np.random.default_rng(int(backpressure * 10))
    init = [int(rng.integers(0, 1 << 62)) | int(rng.integers(0, 4)) << 62 for _ in range(S * G * NW)]
    chunks = []
    for k in range(14):
        g = int(rng.integers(1, G + 1)) if k % 4 else G - (k // 4) % G  # group sizes go up and down
        chunks.append(
            {
                "slot": k % S,
                "g": g,
                "nwords": int(rng.integers(1, NW + 1)),
                "desc": {"dtype": k % 3, "chunk": k},
                "bitmap": (1 << g) - 1,
            }
        )
    dut = Top(init)
    releases = []

    def watch(ctx):
        if ctx.get(dut.release):
            releases.append(ctx.get(dut.release_slot))

    out = run_stream(dut, chunks, backpressure=backpressure, seed=3, extra=watch)
    want = []
    for c in chunks:
        for w in range(c["nwords"]):
            words = [init[(c["slot"] * G + m) * NW + w] for m in range(c["g"])]
            width = 32 if c["desc"]["dtype"] == 0 else 16
            dt = np.uint32 if width == 32 else np.uint16
            lanes = [np.array(_lanes(x, c["desc"]["dtype"]), dt) for x in words]
            total = fake_reduce(lanes, c["desc"]["dtype"])
            want.append(
                (
                    sum(int(v) << (k * width) for k, v in enumerate(total)),
                    int(w == c["nwords"] - 1),
                    c["slot"],
                )
            )
    got = [(int(o.data), int(o.last), int(o.slot)) for o in out]
    assert got == want
    assert releases == [c["slot"] for c in chunks]


def _trace(dut, comps, cycles, *, hold=()):
    """Offer ``comps`` one after the other; return the cycles each was accepted on, and per cycle the output
    (valid, data, last, slot) and the read strobe."""
    took, trace = [], []

    async def tb(ctx):
        pend = list(comps)
        for c in range(cycles):
            ctx.set(dut.o.ready, c not in hold)
            offer = bool(pend)
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, pend[0])
            if offer and ctx.get(dut.i.ready):
                took.append(c)
            valid = ctx.get(dut.o.valid)
            p = ctx.get(dut.o.payload)
            trace.append(
                (
                    valid,
                    int(p.data) if valid else None,
                    int(p.last) if valid else None,
                    int(p.slot) if valid else None,
                    ctx.get(dut.red.read_strobe),
                    ctx.get(dut.release),
                )
            )
            await ctx.tick()
            if took and took[-1] == c:
                pend.pop(0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return took, trace


def _chunk(slot, g, nwords, chunk, replay=0):
    return {
        "slot": slot,
        "g": g,
        "nwords": nwords,
        "desc": {"dtype": 0, "chunk": chunk},
        "bitmap": (1 << g) - 1,
        "replay": replay,
    }


def test_latency_and_one_completion_ahead():
    """An idle engine reads the first beat on the cycle after it accepted the completion and the sum leaves
    ``g * K`` cycles later plus three (the output FIFO's two and the skid buffer's one, the cycle the timing
    work added). While that
    chunk is being read the engine already takes the next completion (``i.ready`` is a register, one
    completion waits inside), and then no more until the first chunk has been dispatched."""
    dut = Top([k * 0x1234567 for k in range(S * G * NW)])
    K = dut.red.ring
    assert K == 2 + 2  # the fake adders' two stages
    g, nw = 3, 2
    took, trace = _trace(dut, [_chunk(1, g, nw, 0), _chunk(2, 1, 1, 1), _chunk(3, 1, 1, 2)], 80)
    t0 = took[0]
    reads = [c for c, r in enumerate(trace) if r[4]]
    assert reads[:2] == [t0 + 1, t0 + 2]  # beat 0 and 1 of member 0, back to back
    assert len(reads) == g * nw + 2
    outs = [c for c, r in enumerate(trace) if r[0]]
    assert outs[0] == t0 + 1 + g * K + 3
    assert took[1] == t0 + 1  # taken while chunk 0 is still being read
    # Chunk 0's last beat is dispatched at t0 + 2, so chunk 1 is dispatched next and chunk 2 taken then.
    assert took[2] == t0 + 3
    assert [r[1:4] for r in trace if r[0]] == [
        (sum(k * 0x1234567 for k in (s * G * NW + m * NW + w for m in range(gg))), int(w == n - 1), s)
        for s, gg, n in ((1, g, nw), (2, 1, 1), (3, 1, 1))
        for w in range(n)
    ]


def test_replay_reemits_the_last_result():
    """A replay sends the slot's last sums again, as they were (from the shadow), in order behind the chunks
    ahead of it, with the record of the chunk (its ``last`` flags and slot), and releases nothing; output
    back-pressure in between holds the beats without losing or repeating one."""
    init = [k * 0x10003 for k in range(S * G * NW)]  # small: the lane sums never wrap
    dut = Top(init)
    comps = [
        _chunk(2, 3, NW, 7),
        _chunk(1, 2, 2, 8),
        _chunk(2, 1, 1, 0, replay=1),
        _chunk(1, 1, 1, 0, replay=1),
    ]
    hold = set(range(20, 40))
    took, trace = _trace(dut, comps, 200, hold=hold)
    assert len(took) == 4
    want = [
        (sum(init[(s * G + m) * NW + w] for m in range(g)), int(w == n - 1), s)
        for s, g, n in ((2, 3, NW), (1, 2, 2))
        for w in range(n)
    ]
    # With ``o.ready`` low a beat stays on ``o``: count each beat on the cycle it is taken.
    beats = [r[1:4] for c, r in enumerate(trace) if r[0] and c not in hold]
    assert beats == want + want
    assert sum(r[4] for r in trace) == 3 * NW + 2 * 2  # replays read no member buffer
    assert sum(r[5] for r in trace) == 2  # one release per chunk, none for a replay
