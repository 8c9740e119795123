"""Stream primitives the pipeline stages share: a skid buffer, first-match selection, balanced trees and
kept register copies.

* :class:`SkidBuffer`: a registered stream stage (``i.ready``, ``o.valid``, ``o.payload`` all flip-flops).
* :func:`first_match`: the first of ``(flag, value)`` pairs whose flag is set, as a tree of
  ``(any, value)`` pairs (log2 n multiplexers deep); :func:`priority_select`, the same choice as a chain
  from a default (one multiplexer per pair, for a handful of pairs).
* :func:`balanced_tree`: any associative operator folded pairwise, about log2 n levels deep instead of
  n - 1 (adder trees of checksums, OR trees); :func:`keep_and_tree`, an AND tree whose levels synthesis
  keeps.
* :func:`kept_copies`: the next value of a register kept as several flip-flops, some complemented: the
  synthesis merges flip-flops of one input but not a flip-flop and its complement, so each copy drives
  only its own sinks (a register of a few hundred loads otherwise puts one long net on the critical path).
* :func:`alike`: ports of one name on two components, one driving the other (a register file's outputs
  into the stage they configure, pins passed up through a wrapper).

The functions build expressions or statements only (:func:`kept_copies` the registers' next values, of
registers the caller owns): they add no pipeline stage, so their latency is 0 cycles, and they take no part
in back-pressure.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "SkidBuffer",
    "first_match",
    "lowest_index",
    "priority_select",
    "balanced_tree",
    "keep_and_tree",
    "kept_copies",
    "alike",
]


class SkidBuffer(wiring.Component):
    """A stream register with a second (skid) entry: ``i.ready``, ``o.valid`` and ``o.payload`` are register
    outputs, so nothing combinational runs through it in either direction.

    Latency 1 cycle; one beat per cycle under any pattern of ``o.ready``. Back-pressure: ``i.ready`` drops
    the cycle after a beat was taken while ``o`` was stalled (the skid entry full) and rises the cycle after
    ``o.ready`` drains it; at most two beats are inside.
    """

    def __init__(self, shape):
        self.payload_shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid = Signal(self.payload_shape, reset_less=True)
        skid_valid = Signal()
        out = Signal(self.payload_shape, reset_less=True)
        m.d.comb += [self.i.ready.eq(~skid_valid), self.o.payload.eq(out)]
        with m.If(self.o.ready | ~self.o.valid):
            with m.If(skid_valid):
                m.d.sync += [out.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Elif(self.i.valid):
                m.d.sync += [out.eq(self.i.payload), self.o.valid.eq(1)]
            with m.Else():
                m.d.sync += self.o.valid.eq(0)
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m


def balanced_tree(values, op):
    """``values`` folded with ``op`` (associative) as a balanced tree: neighbours paired level by level, an
    odd one out carried up, so about log2 n levels of ``op`` instead of a chain of n - 1."""
    values = list(values)
    if not values:
        raise ValueError("A tree needs at least one value to fold.")
    while len(values) > 1:
        values = [
            op(values[k], values[k + 1]) if k + 1 < len(values) else values[k]
            for k in range(0, len(values), 2)
        ]
    return values[0]


def keep_and_tree(m, terms, *, arity=4):
    """The AND of ``terms`` as a tree of ``arity``-input gates, each gate's output a ``keep``-marked signal
    of ``m``'s combinational domain: unmarked, the synthesis would merge the levels back into a chain of
    gates, one after another."""
    terms = list(terms)
    if not terms:
        raise ValueError("An AND tree needs at least one term.")
    while len(terms) > 1:
        level = []
        for k in range(0, len(terms), arity):
            t = Signal(attrs={"keep": 1})
            m.d.comb += t.eq(Cat(*terms[k : k + arity]).all())
            level.append(t)
        terms = level
    return terms[0]


def first_match(flags, values):
    """``(any, value)``: whether any of ``flags`` is set, and the value of the first (lowest index) that is
    (unspecified when none is). A tree of ``(any, value)`` pairs, log2 n multiplexers deep."""
    pairs = list(zip(flags, values, strict=True))
    if not pairs:
        raise ValueError("A first match needs at least one (flag, value) pair.")
    return balanced_tree(pairs, lambda a, b: (a[0] | b[0], Mux(a[0], a[1], b[1])))


def lowest_index(vector):
    """The index of the lowest set bit of ``vector`` (0 when none): :func:`first_match` of the bits and their
    indices."""
    width = max(1, (len(vector) - 1).bit_length())
    found, index = first_match(
        (vector[d] for d in range(len(vector))), (Const(d, width) for d in range(len(vector)))
    )
    return Mux(found, index, 0)


def priority_select(flags, values, default):
    """The value of the first (lowest index) of ``flags`` that is set, else ``default``: a chain of
    multiplexers from the last pair to the first (one per pair; for a few pairs, or where the first pairs
    must be the shortest paths)."""
    pairs = list(zip(flags, values, strict=True))
    out = default
    for flag, value in reversed(pairs):
        out = Mux(flag, value, out)
    return out


def kept_copies(copies, value):
    """Statements giving the flip-flops of ``copies`` the next ``value``: a list of ``(signal, inverted)``,
    a copy with ``inverted`` set taking the complement. ``value`` is a Python int or an Amaranth value.

    Why complements: synthesis merges flip-flops with the same input into one, so plain copies would end as
    one register driving every sink again; a flip-flop and its complement are not merged. Each copy is
    read in its true polarity by its own share of the sinks."""
    out = []
    for signal, inverted in copies:
        v = value
        if inverted:
            v = (~v & ((1 << len(signal)) - 1)) if isinstance(v, int) else ~v
        out.append(signal.eq(v))
    return out


def alike(dst, src, names, index=None):
    """``dst``'s ports driven by ``src``'s ports of the same ``names`` (element ``index`` of port arrays)."""
    if index is None:
        return [getattr(dst, name).eq(getattr(src, name)) for name in names]
    return [getattr(dst, name)[index].eq(getattr(src, name)[index]) for name in names]
