"""Store-and-forward frame buffer: a frame leaves only once all of it is in and it is good.

On the receive side it keeps frames the MAC found bad (FCS, runt, ...) from ever reaching the core; on
the transmit side it holds a frame until it is complete, so that the MAC never starts a frame it cannot
finish at line rate, whatever the core's output does meanwhile.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..layouts import Beat, check_width

__all__ = ["FrameBuffer", "StatusBeat"]


def StatusBeat(width, status_bits):
    """A :func:`Beat` with a ``status`` on its last beat: non-zero drops the frame."""
    return data.StructLayout(
        {"data": width, "bytes": range(width // 8 + 1), "last": 1, "status": status_bits}
    )


class FrameBuffer(wiring.Component):
    """Frames of :func:`StatusBeat` beats in, good frames out as :func:`Beat` beats, ``depth`` beats of
    block RAM (a power of two, at least two of the longest frame's beats plus one).

    A frame is written from its first beat and released (committed) at its last beat if that beat's
    ``status`` is 0; otherwise the write pointer goes back to the frame's start. A frame that alone fills
    the buffer is discarded up to its last beat. ``ev_valid``/``ev_status`` report each frame's end (for
    counters), ``ev_full`` a frame discarded for room. Latency: 3 cycles from a frame's last beat to its
    first beat out. Back-pressure: ``i.ready`` falls while the buffer is full of committed frames or of
    committed frames and a partial one; ``o`` waits on its consumer.
    """

    def __init__(self, *, width, depth, status_bits=1):
        check_width(width)
        if depth < 4 or depth & (depth - 1):
            raise ValueError(f"The frame buffer's depth must be a power of two of at least 4, not {depth}.")
        self.width, self.depth, self.status_bits = width, depth, status_bits
        super().__init__(
            {
                "i": In(stream.Signature(StatusBeat(width, status_bits))),
                "o": Out(stream.Signature(Beat(width))),
                "ev_valid": Out(1),
                "ev_status": Out(status_bits),
                "ev_full": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        beat = Beat(self.width)
        m.submodules.mem = mem = memory.Memory(shape=beat, depth=D, init=[], attrs={"ram_style": "block"})
        wp, rp = mem.write_port(), mem.read_port(domain="sync")
        w_ptr, f_ptr, c_ptr, r_ptr = (Signal(range(D), name=n) for n in ("w_ptr", "f_ptr", "c_ptr", "r_ptr"))
        discard = Signal()
        full = Signal()
        m.d.comb += full.eq((w_ptr + 1)[: len(w_ptr)] == r_ptr)

        # Write side.
        p = self.i.payload
        m.d.comb += [
            wp.addr.eq(w_ptr),
            wp.data.data.eq(p.data),
            wp.data.bytes.eq(p.bytes),
            wp.data.last.eq(p.last),
            self.i.ready.eq(discard | ~full | (r_ptr == f_ptr)),
        ]
        m.d.sync += [self.ev_valid.eq(0), self.ev_full.eq(0)]
        with m.If(self.i.valid & self.i.ready):
            with m.If(discard | (full & (r_ptr == f_ptr))):
                # Too long for the buffer: drop it to its end.
                m.d.sync += [w_ptr.eq(f_ptr), discard.eq(~p.last)]
                with m.If(~discard):
                    m.d.sync += self.ev_full.eq(1)
            with m.Else():
                m.d.comb += wp.en.eq(1)
                with m.If(p.last):
                    m.d.sync += [self.ev_valid.eq(1), self.ev_status.eq(p.status)]
                    with m.If(p.status == 0):
                        m.d.sync += [w_ptr.eq(w_ptr + 1), f_ptr.eq(w_ptr + 1), c_ptr.eq(w_ptr + 1)]
                    with m.Else():
                        m.d.sync += w_ptr.eq(f_ptr)
                with m.Else():
                    m.d.sync += w_ptr.eq(w_ptr + 1)

        # Read side: read ahead into an output register and a skid register (two beats in flight at most).
        occ = Signal(range(3))
        arr = Signal()
        out_v, out_d = Signal(), Signal(beat)
        sk_v, sk_d = Signal(), Signal(beat)
        consume = out_v & self.o.ready
        issue = Signal()
        m.d.comb += [
            issue.eq((r_ptr != c_ptr) & ((occ != 2) | consume)),
            rp.en.eq(issue),
            rp.addr.eq(r_ptr),
            self.o.valid.eq(out_v),
            self.o.payload.eq(out_d),
        ]
        m.d.sync += [
            r_ptr.eq(Mux(issue, r_ptr + 1, r_ptr)),
            occ.eq(occ + issue - consume),
            arr.eq(issue),
        ]
        with m.If(arr):
            m.d.sync += sk_d.eq(rp.data)
        with m.If(~out_v | self.o.ready):
            m.d.sync += [out_v.eq(sk_v | arr), out_d.eq(Mux(sk_v, sk_d, rp.data)), sk_v.eq(sk_v & arr)]
        with m.Else():
            m.d.sync += sk_v.eq(sk_v | arr)
        return m
