"""Reduce engine: every beat of every completed chunk summed over its members in rank order, sums leaving
in chunk and beat order even when group sizes change, one release per chunk, under output back-pressure.

The adder lanes are the integer stand-in of ``fakeadd`` (the floating-point lanes are checked in the core
tests against the golden model); what is checked here is which beats meet in which order."""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

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
