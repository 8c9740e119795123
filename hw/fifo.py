"""A FIFO whose memory is block RAM and whose output comes from registers, for writers that count credits.

The library's ``SyncFIFOBuffered`` puts its memory's read data straight on ``o.payload`` and lets ``o.ready``
advance the read address. With the memory in LUT RAM that address reaches every 4-bit cell of a wide word,
spread over the die (8.8 ns of routing on one net at W = 64 on ECP5; docs/vendor.md); in block RAM the
consumer gets the RAM's clock-to-out, most of a cycle. Here the memory is block RAM (``ram_style``), read
ahead into an output register and a skid register behind it: at most two words are read and not yet taken, so
``o.ready`` enables those two registers and one read, nothing wider.

Latency: 3 cycles from ``w_en`` to ``o.valid`` (write, read, output register). One word per cycle in and
out while ``o.ready`` stays high.

Back-pressure: none on the write side. The writer keeps count of the words it has written and not yet seen
leave (``r_en``: a word left the memory; the one or two words in the output registers do not count) and
never writes more than ``depth`` of them; a write into a full memory is a fault of the writer.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BlockFIFO"]


class BlockFIFO(wiring.Component):
    """First-in first-out store of ``width``-bit words, ``depth`` (a power of two) in block RAM.

    Ports: ``w_en`` / ``w_data`` (write one word), ``o`` (the words, in order, from registers), ``r_en``
    (high in the cycle a word is read out of the memory: the writer's credit comes back).
    """

    def __init__(self, *, width, depth):
        if width < 1:
            raise ValueError(f"The FIFO's words need at least one bit, not {width}.")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"The FIFO's depth must be a power of two of at least 2, not {depth}.")
        self.width, self.depth = width, depth
        super().__init__(
            {
                "w_en": In(1),
                "w_data": In(width),
                "o": Out(stream.Signature(width)),
                "r_en": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        block = {"ram_style": "block"}
        m.submodules.mem = mem = memory.Memory(shape=self.width, depth=D, init=[], attrs=block)
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        w_ptr, r_ptr = Signal(range(D)), Signal(range(D))
        # Words in the memory, minus one: its sign bit is "empty", a register bit rather than a compare.
        count_m1 = Signal(range(-1, D), init=-1)
        occ = Signal(range(3))  # words read and not yet taken by ``o``
        arr_v = Signal()  # the read data holds a word read last cycle
        out_v, out_d = Signal(), Signal(self.width, reset_less=True)
        sk_v, sk_d = Signal(), Signal(self.width, reset_less=True)
        consume = out_v & self.o.ready
        issue = Signal()
        r_next = Signal.like(r_ptr)
        cm_same, cm_less = Signal.like(count_m1), Signal.like(count_m1)
        m.d.comb += [
            issue.eq(~count_m1[-1] & ((occ != 2) | consume)),
            r_next.eq(r_ptr + 1),
            cm_same.eq(count_m1 + self.w_en),
            cm_less.eq(count_m1 + self.w_en - 1),
            wp.en.eq(self.w_en),
            wp.addr.eq(w_ptr),
            wp.data.eq(self.w_data),
            rp.en.eq(issue),
            rp.addr.eq(r_ptr),
            self.r_en.eq(issue),
            self.o.valid.eq(out_v),
            self.o.payload.eq(out_d),
        ]
        m.d.sync += [
            w_ptr.eq(w_ptr + self.w_en),  # D is a power of two: the pointers wrap
            # Both outcomes worked out from registers; ``issue`` (which waits on ``o.ready``) only picks.
            r_ptr.eq(Mux(issue, r_next, r_ptr)),
            count_m1.eq(Mux(issue, cm_less, cm_same)),
            occ.eq(occ + issue - consume),
            arr_v.eq(issue),
        ]
        # A word read goes to the output register if that is free or frees now (from the skid register
        # first, which holds the older word), else to the skid register, which the credit keeps free then.
        with m.If(arr_v):
            m.d.sync += sk_d.eq(rp.data)
        with m.If(~out_v | self.o.ready):
            m.d.sync += [
                out_v.eq(sk_v | arr_v),
                out_d.eq(Mux(sk_v, sk_d, rp.data)),
                sk_v.eq(sk_v & arr_v),
            ]
        with m.Else():
            m.d.sync += sk_v.eq(sk_v | arr_v)
        return m
