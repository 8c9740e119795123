"""Layouts: header offsets come from the protocol module, the precedence encoder picks the lowest code."""

from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from wanreduce.host.protocol import HEADER_DTYPE
from wanreduce.hw.layouts import HEADER_FIELD_OFFSETS, header_words, lowest_drop, payload_words
from wanreduce.spec.protocol import Drop


def test_header_offsets_match_numpy_layout():
    for name, (offset, size) in HEADER_FIELD_OFFSETS.items():
        dt, off = HEADER_DTYPE.fields[name][:2]
        assert (offset, size) == (off, dt.itemsize)


def test_buffer_geometry():
    assert (header_words(64), payload_words(64, 1024)) == (4, 128)
    assert (header_words(512), payload_words(512, 1024)) == (0, 17)


def test_lowest_drop():
    cases = [0, 1 << 25, (1 << 22) | (1 << 9), (1 << 8) | (1 << 1) | (1 << 24), (1 << 21) | (1 << 17)]
    results = []
    m = Module()
    vector, code = Signal(32), Signal(5)
    m.d.comb += code.eq(lowest_drop(vector))

    async def tb(ctx):
        for c in cases:
            ctx.set(vector, c)
            results.append(ctx.get(code))

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    assert results == [0, Drop.SLOT_MISMATCH, Drop.SHORT_HEADER, Drop.TRUNCATED, Drop.BAD_LENGTH]
