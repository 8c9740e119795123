"""The stream primitives of ``wanreduce.hw.stream`` against Python models of their own.

SkidBuffer: beats out equal beats in, in order, under idle input and back-pressure; the stated latency (1
cycle) and rate (one beat a cycle); the output holds while stalled; at most two beats inside. The selection
and tree functions: every value against a direct Python computation, on random (seeded) inputs.
"""

import math
import operator
import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from wanreduce.hw.stream import (
    SkidBuffer,
    alike,
    balanced_tree,
    first_match,
    keep_and_tree,
    kept_copies,
    lowest_index,
    priority_select,
)


def _run(dut, tb, *, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("offer,ready", [(1.0, 1.0), (0.5, 1.0), (1.0, 0.4), (0.6, 0.3), (0.0, 1.0)])
def test_skid_buffer_against_queue(offer, ready):
    rng = random.Random(int(offer * 10) * 100 + int(ready * 10))
    dut = SkidBuffer(16)
    n = 0 if offer == 0.0 else 400
    words = [rng.getrandbits(16) for _ in range(n)]
    got, sent_at, out_at = [], [], []

    async def tb(ctx):
        sent = 0
        inside = 0
        held = None
        for cycle in range(12 * n + 50):
            if n and len(got) == n:
                break
            rdy = rng.random() < ready
            offering = sent < n and rng.random() < offer
            ctx.set(dut.o.ready, rdy)
            ctx.set(dut.i.valid, offering)
            if offering:
                ctx.set(dut.i.payload, words[sent])
            o_valid, i_ready = ctx.get(dut.o.valid), ctx.get(dut.i.ready)
            if not n:  # nothing offered: nothing comes out
                assert not o_valid
            if held is not None:  # a stalled beat stays, with its payload
                assert o_valid and ctx.get(dut.o.payload) == held
            assert i_ready == (inside < 2)  # refused only with two beats inside
            took = offering and i_ready
            gave = o_valid and rdy
            if gave:
                got.append(ctx.get(dut.o.payload))
                out_at.append(cycle)
            held = ctx.get(dut.o.payload) if o_valid and not rdy else None
            if took:
                sent_at.append(cycle)
                sent += 1
            inside += took - gave
            await ctx.tick()

    _run(dut, tb)
    assert got == words
    if offer == 1.0 and ready == 1.0:  # one beat a cycle, each out one cycle after it went in
        assert sent_at == list(range(n))
        assert [o - s for o, s in zip(out_at, sent_at, strict=True)] == [1] * n


def _comb(bits_in, make_out):
    """A module with input ``x`` of ``bits_in`` bits and output ``y`` driven by ``make_out(x)``."""
    m = Module()
    x = Signal(bits_in)
    out = make_out(x)
    y = Signal(len(out))
    m.d.comb += y.eq(out)
    return m, x, y


@pytest.mark.parametrize("width", [1, 5, 8, 13])
def test_lowest_index(width):
    rng = random.Random(width)
    m, x, y = _comb(width, lowest_index)
    vectors = sorted({0, (1 << width) - 1, *(rng.getrandbits(width) for _ in range(200))})

    async def tb(ctx):
        for v in vectors:
            ctx.set(x, v)
            want = (v & -v).bit_length() - 1 if v else 0
            assert ctx.get(y) == want, (v, want)

    _run(m, tb, clock=False)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8])
def test_first_match_and_priority_select(n):
    rng = random.Random(100 + n)
    values = [rng.getrandbits(8) for _ in range(n)]
    m = Module()
    flags = Signal(n)
    any_, first = Signal(), Signal(8)
    chain = Signal(8)
    found, value = first_match((flags[k] for k in range(n)), values)
    m.d.comb += [
        any_.eq(found),
        first.eq(value),
        chain.eq(priority_select((flags[k] for k in range(n)), values, 0xA5)),
    ]

    async def tb(ctx):
        for f in sorted({0, (1 << n) - 1, *(rng.getrandbits(n) for _ in range(100))}):
            ctx.set(flags, f)
            hits = [values[k] for k in range(n) if f >> k & 1]
            assert ctx.get(any_) == bool(hits)
            assert ctx.get(chain) == (hits[0] if hits else 0xA5)
            if hits:
                assert ctx.get(first) == hits[0]

    _run(m, tb, clock=False)


def test_first_match_refuses_empty_and_unequal():
    with pytest.raises(ValueError):
        first_match([], [])
    with pytest.raises(ValueError):
        first_match([Signal()], [1, 2])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17])
def test_balanced_tree_depth_and_value(n):
    rng = random.Random(200 + n)
    values = [rng.getrandbits(20) for _ in range(n)]
    assert balanced_tree(values, operator.add) == sum(values)
    # Depth: ceil(log2 n) levels of the operator, not n - 1.
    depth = balanced_tree([0] * n, lambda a, b: max(a, b) + 1)
    assert depth == math.ceil(math.log2(n))
    # Order: neighbours are combined in order (a non-commutative operator sees them left to right).
    assert balanced_tree([str(v) for v in range(n)], operator.add) == "".join(str(v) for v in range(n))
    with pytest.raises(ValueError):
        balanced_tree([], operator.add)


@pytest.mark.parametrize("n,arity", [(1, 4), (5, 4), (16, 4), (17, 2)])
def test_keep_and_tree(n, arity):
    rng = random.Random(300 + n)
    m = Module()
    x = Signal(n)
    y = keep_and_tree(m, (x[k] for k in range(n)), arity=arity)
    if n > 1:
        assert y.attrs.get("keep") == 1  # a kept gate, not an expression the synthesis may fold

    async def tb(ctx):
        for v in sorted({0, (1 << n) - 1, (1 << n) - 2, *(rng.getrandbits(n) for _ in range(100))}):
            ctx.set(x, v)
            assert ctx.get(y) == (v == (1 << n) - 1)

    with pytest.raises(ValueError):
        keep_and_tree(m, [])
    _run(m, tb, clock=False)


def test_kept_copies_follow_value():
    rng = random.Random(7)
    m = Module()
    v = Signal(3)
    true, inv = Signal(3), Signal(3, init=7)
    one, one_n = Signal(), Signal(init=1)
    load = Signal()
    m.d.sync += kept_copies([(true, False), (inv, True)], v)
    with m.If(load):
        m.d.sync += kept_copies([(one, False), (one_n, True)], 1)

    async def tb(ctx):
        assert (ctx.get(one), ctx.get(one_n)) == (0, 1)
        for _ in range(40):
            x = rng.getrandbits(3)
            ctx.set(v, x)
            await ctx.tick()
            assert ctx.get(true) == x and ctx.get(inv) == x ^ 7
        ctx.set(load, 1)
        await ctx.tick()
        assert (ctx.get(one), ctx.get(one_n)) == (1, 0)

    _run(m, tb)


def test_alike_drives_each_named_port_from_the_same_name():
    from types import SimpleNamespace

    src = SimpleNamespace(a=Signal(4), b=Signal(4), arr=[Signal(2), Signal(2)])
    dst = SimpleNamespace(a=Signal(4), b=Signal(4), arr=[Signal(2), Signal(2)])
    stmts = alike(dst, src, ("a", "b"))
    assert len(stmts) == 2
    for st, name in zip(stmts, "ab", strict=True):
        assert st.lhs is getattr(dst, name) and st.rhs is getattr(src, name)
    (st,) = alike(dst, src, ["arr"], 1)
    assert st.lhs is dst.arr[1] and st.rhs is src.arr[1]
