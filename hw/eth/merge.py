"""Frame-level merge of beat streams onto one port: whole frames, never interleaved beats."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..layouts import Beat, check_width

__all__ = ["FrameMerge"]


class FrameMerge(wiring.Component):
    """``n`` streams of :func:`Beat` frames (``i0`` .. ``i{n-1}``) onto ``o``, a frame at a time.

    Between frames the next input with a beat waiting is chosen, taking turns from the one after the input
    last served, so no input waits more than ``n - 1`` frames. Latency: none (combinational from the
    chosen input to ``o``). Back-pressure: ``o.ready`` reaches the chosen input only; the others wait.
    """

    def __init__(self, *, width, n=2):
        check_width(width)
        if n < 2:
            raise ValueError(f"A frame merge needs at least two inputs, not {n}.")
        self.width, self.n = width, n
        ports = {f"i{k}": In(stream.Signature(Beat(width))) for k in range(n)}
        ports["o"] = Out(stream.Signature(Beat(width)))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        n = self.n
        inputs = [getattr(self, f"i{k}") for k in range(n)]
        busy = Signal()  # inside a frame of input ``sel``
        sel = Signal(range(n))
        last = Signal(range(n), init=n - 1)  # the input served last
        # Between frames: the first input with a beat, counting from the one after ``last``.
        pick = Signal(range(n))
        found = Signal()
        for off in reversed(range(1, n + 1)):
            for k in range(n):
                with m.If((last == (k - off) % n) & inputs[k].valid):
                    m.d.comb += [pick.eq(k), found.eq(1)]
        cur = Signal(range(n))
        m.d.comb += cur.eq(sel)
        with m.If(~busy):
            m.d.comb += cur.eq(pick)
        for k, port in enumerate(inputs):
            with m.If(cur == k):
                m.d.comb += [
                    self.o.payload.eq(port.payload),
                    self.o.valid.eq(port.valid & (busy | found)),
                    port.ready.eq(self.o.ready & (busy | found)),
                ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [sel.eq(cur), busy.eq(~self.o.payload.last), last.eq(cur)]
        return m
