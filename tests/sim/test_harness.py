"""The C++ stream harness on a tiny DUT: no beat lost or duplicated under idles and back-pressure,
wide (VlWide) and narrow (scalar) payloads, and the control port's writes and reads."""

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from wanreduce.sim.verilator.harness import Harness, HarnessTimeout, from_beats, to_beats

pytestmark = pytest.mark.rtl


class HalfAdder(wiring.Component):
    """Output = (low half + high half + offset) mod 2**half, through a two-entry skid-free pipeline.

    The offset comes from a control register (address 3) so that the control port is exercised; address 5
    reads back the number of beats accepted.
    """

    def __init__(self, width):
        self.half = width // 2
        super().__init__(
            {
                "i": In(stream.Signature(width)),
                "o": Out(stream.Signature(self.half)),
                "ctl": Out(
                    wiring.Signature(
                        {
                            "addr": In(16),
                            "wdata": In(32),
                            "we": In(1),
                            "re": In(1),
                            "rdata": Out(32),
                        }
                    )
                ),
            }
        )

    def elaborate(self, platform):
        m = Module()
        h = self.half
        offset = Signal(32)
        count = Signal(32)
        with m.If(self.ctl.we & (self.ctl.addr == 3)):
            m.d.sync += offset.eq(self.ctl.wdata)
        # Reads answer two cycles after re, like the core's control port: address and strobe are registered
        # first, and rdata holds meanwhile.
        re_q = Signal()
        addr_q = Signal(16)
        m.d.sync += [re_q.eq(self.ctl.re), addr_q.eq(self.ctl.addr)]
        with m.If(re_q):
            with m.Switch(addr_q):
                with m.Case(3):
                    m.d.sync += self.ctl.rdata.eq(offset)
                with m.Case(5):
                    m.d.sync += self.ctl.rdata.eq(count)
                with m.Default():
                    m.d.sync += self.ctl.rdata.eq(0xDEADBEEF)
        # Two register stages, both stalled together when the output is blocked.
        v1 = Signal()
        p1 = Signal(h)
        advance = self.o.ready | ~self.o.valid
        m.d.comb += self.i.ready.eq(advance)
        with m.If(advance):
            m.d.sync += [
                v1.eq(self.i.valid),
                p1.eq(self.i.payload[:h] + self.i.payload[h:] + offset),
                self.o.valid.eq(v1),
                self.o.payload.eq(p1),
            ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += count.eq(count + 1)
        return m


class Passthrough(wiring.Component):
    """A stream register with no control port (the harness must work without one)."""

    i: In(stream.Signature(12))
    o: Out(stream.Signature(12))

    def elaborate(self, platform):
        m = Module()
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        return m


@pytest.fixture(scope="module", params=[64, 520], ids=["w64", "w520"])
def half_adder(request):
    return request.param, Harness(HalfAdder(request.param), top=f"half_adder_{request.param}")


def _expected(values, width, offset):
    h = width // 2
    mask = (1 << h) - 1
    return [((v & mask) + (v >> h) + offset) & mask for v in values]


@pytest.mark.parametrize("idle,bp", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.6), (0.4, 0.4)])
def test_no_beat_lost_or_duplicated(half_adder, idle, bp):
    width, h = half_adder
    rng = np.random.default_rng(1234 + width)
    n = 3000
    values = [int.from_bytes(rng.bytes(width // 8), "little") for _ in range(n)]
    offset = int(rng.integers(0, 2**32))
    out, stats = h.run(
        to_beats(values, width),
        idle_prob=idle,
        backpressure_prob=bp,
        seed=7,
        ctl_writes=[(3, offset)],
        ctl_reads=[3, 5, 9],
        stamps=True,
    )
    assert stats.in_beats == n and stats.out_beats == n and not stats.timed_out
    assert from_beats(out) == _expected(values, width, offset)
    assert stats.ctl_reads == [offset, n, 0xDEADBEEF]
    # Two register stages: each beat leaves at least two cycles after it entered, in order.
    assert (stats.out_cycles >= stats.in_cycles + 2).all()
    assert (np.diff(stats.out_cycles.astype(np.int64)) > 0).all()
    if idle == 0 and bp == 0:
        assert stats.cycles < n + 100
    if bp > 0:
        # Back-pressure really happened: the run took noticeably longer than one beat per cycle.
        assert stats.last_out > n * 1.3


def test_same_seed_same_timing(half_adder):
    width, h = half_adder
    beats = to_beats(range(500), width)
    a = h.run(beats, idle_prob=0.3, backpressure_prob=0.3, seed=3, stamps=True)[1]
    b = h.run(beats, idle_prob=0.3, backpressure_prob=0.3, seed=3, stamps=True)[1]
    c = h.run(beats, idle_prob=0.3, backpressure_prob=0.3, seed=4, stamps=True)[1]
    assert (a.out_cycles == b.out_cycles).all()
    assert not np.array_equal(a.out_cycles, c.out_cycles)


def test_scalar_ports_and_no_control():
    h = Harness(Passthrough(), top="passthrough12")
    assert not h.has_ctl and h.in_bytes == 2
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, size=(2000, 2), dtype=np.uint8)
    out, stats = h.run(raw, idle_prob=0.2, backpressure_prob=0.2, seed=1)
    # Bits above the 12-bit width are dropped on the way in.
    expect = raw.copy()
    expect[:, 1] &= 0x0F
    assert np.array_equal(out, expect)
    with pytest.raises(ValueError, match="no control port"):
        h.run(raw[:1], ctl_reads=[1])
    with pytest.raises(ValueError, match="shape"):
        h.run(raw[:, :1])


def test_timeout_is_reported():
    h = Harness(Passthrough(), top="passthrough12")
    with pytest.raises(HarnessTimeout) as err:
        h.run(to_beats(range(1000), 12), backpressure_prob=0.9, seed=2, max_cycles=500)
    assert err.value.stats.in_beats < 1000
    out, stats = h.run(
        to_beats(range(1000), 12), backpressure_prob=0.9, seed=2, max_cycles=500, allow_timeout=True
    )
    assert stats.timed_out and len(out) == stats.out_beats


class TracedPassthrough(wiring.Component):
    """A stream register that reports each accepted beat's value on a trace port, and refuses input for
    ``hold`` cycles after every beat whose value is a multiple of 7 (a known worst stall)."""

    i: In(stream.Signature(12))
    o: Out(stream.Signature(12))
    trace: Out(wiring.Signature({"valid": Out(1), "payload": Out(12)}))

    def __init__(self, hold):
        self.hold = hold
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        wait = Signal(range(self.hold + 1))
        free = (self.o.ready | ~self.o.valid) & (wait == 0)
        m.d.comb += [
            self.i.ready.eq(free),
            self.trace.valid.eq(self.i.valid & free),
            self.trace.payload.eq(self.i.payload),
        ]
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & free):
            m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(1)]
            with m.If(self.i.payload % 7 == 0):
                m.d.sync += wait.eq(self.hold)
        return m


def test_trace_and_stalls():
    h = Harness(TracedPassthrough(hold=9), top="traced_passthrough12")
    assert h.has_trace
    values = list(range(1, 400))
    out, stats = h.run(to_beats(values, 12), idle_prob=0.0, seed=1)
    assert from_beats(out) == values
    # One trace event per accepted beat, in order, on increasing cycles.
    assert stats.trace.tolist() == values
    assert (np.diff(stats.trace_cycles.astype(np.int64)) > 0).all()
    # Every multiple of 7 holds the input off for exactly `hold` cycles with the next beat waiting.
    assert stats.max_stall == 9
    assert stats.stall_cycles == 9 * sum(1 for v in values[:-1] if v % 7 == 0)
    # Output back-pressure adds stalls of its own; the longest grows.
    _, slow = h.run(to_beats(values, 12), backpressure_prob=0.7, seed=2)
    assert slow.max_stall > 9 and slow.stall_cycles > stats.stall_cycles
    # A DUT without a trace port reports none.
    assert Harness(Passthrough(), top="passthrough12").run(to_beats([1], 12))[1].trace is None
