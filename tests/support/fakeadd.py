"""Test scaffolding only: a stand-in for the adder lanes with the FAdd port contract.

It adds bit patterns as integers (and passes ``a`` through when ``b`` is the format's -0.0), which is
enough to check that the reduce engine reads, orders and routes every beat correctly, independently of
the floating-point arithmetic (checked against the golden model with the real lanes).
"""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

FORMATS = [
    SimpleNamespace(width=32, name="fp32"),
    SimpleNamespace(width=16, name="fp16"),
    SimpleNamespace(width=16, name="bf16"),
]


class FakeAdd(wiring.Component):
    def __init__(self, fmt, stages=None):
        self.fmt = fmt
        self.latency = 2 if stages is None else stages
        super().__init__({"a": In(fmt.width), "b": In(fmt.width), "en": In(1), "s": Out(fmt.width)})

    def elaborate(self, platform):
        m = Module()
        w = self.fmt.width
        s = Mux(self.b == 1 << (w - 1), self.a, self.a + self.b)[:w]
        for k in range(self.latency):
            t = Signal(w, name=f"p{k}")
            with m.If(self.en):
                m.d.sync += t.eq(s)
            s = t
        m.d.comb += self.s.eq(s)
        return m


def fake_adder(fmt, stages):
    return FakeAdd(fmt, stages)


def fake_reduce(contributions, dtype):
    """What the reduce engine computes with :class:`FakeAdd` lanes: the golden model's stand-in."""
    import numpy as np

    from wanreduce.host.protocol import bits_dtype
    from wanreduce.spec.protocol import DType

    dtype = DType(dtype)
    width = 8 * dtype.size
    neg_zero = 1 << (width - 1)
    acc = np.asarray(contributions[0], bits_dtype(dtype)).astype(np.uint64)
    for c in contributions[1:]:
        x = np.asarray(c, bits_dtype(dtype)).astype(np.uint64)
        acc = np.where(x == neg_zero, acc, (acc + x) & ((1 << width) - 1))
    return acc.astype(bits_dtype(dtype))
