"""In-line bypass: frames that are not this core's work leave unchanged on a second output stream.

An aggregator in the path between the WAN and a site's hosts sees everything addressed to the site: other
traffic, the RESULTs other roots multicast to the group, CONTRIBs for stripes another site aggregates. The
core forks its input: every beat goes to the frame parser and, at the same time, into this buffer. The
aggregation pipeline decides each frame (the slot table's packet event, in input order) and hands that
decision here as a **verdict**: forward (the frame is not this core's work, see ``docs/aggregator.md``) or
discard (the core consumed it, or dropped it as malformed). A forwarded frame is read out of the buffer
beat for beat as it came in, ``data``, ``bytes`` and ``last`` unchanged; a discarded one is skipped in one
cycle.

Capacity: frames of up to ``frame_bytes`` bytes (a whole number of beats), in a memory of that many beats
rounded up to a power of two, and at most ``frames`` frames between input and verdict. A frame longer than
``frame_bytes`` cannot be held whole: its first beats are stored, the rest accepted and not stored, and if its
verdict is forward it is lost and counted (``ev_overflow``), never sent truncated.

Latency: store and forward. A frame starts out of ``o`` two cycles after its verdict arrives (the
verdict comes a fixed number of cycles after the frame's last beat went in: the aggregation pipeline's
depth). Back-pressure: ``i.ready`` is low while the buffer has no room for the beat offered or, on a
frame's first beat, ``frames`` frames are already waiting; it depends only on the buffer's state, never
on ``i.valid``. ``o.ready`` may fall at any cycle: reads are issued only when the output FIFO has room,
so no beat is ever dropped. The verdict input has no ready: the frame limit guarantees it room.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import Beat, check_width

__all__ = ["BypassBuffer"]


class BypassBuffer(wiring.Component):
    """Parameters (keyword-only): ``width`` (bits per beat), ``frame_bytes`` (the longest frame forwarded),
    ``frames`` (frames between input and verdict, a power of two), ``out_depth`` (output FIFO beats).

    Ports: ``i`` (the core's input beats, :func:`Beat`), ``verdict_valid`` / ``verdict_forward`` (one
    verdict per input frame, in order, at most one per cycle), ``o`` (forwarded frames), ``ev_forward``
    (strobe: the last beat of a forwarded frame was read out) and ``ev_overflow`` (strobe: a frame to
    forward was longer than ``frame_bytes`` and is lost).
    """

    def __init__(self, *, width, frame_bytes, frames=16, out_depth=4):
        check_width(width)
        if frame_bytes < width // 8 or frame_bytes % (width // 8):
            raise ValueError(
                f"The bypass buffer holds whole beats of {width // 8} bytes, at least one, "
                f"not {frame_bytes} bytes."
            )
        if frames < 2 or frames & (frames - 1):
            raise ValueError(f"The frames in flight must be a power of two of at least 2, not {frames}.")
        if out_depth < 2:
            raise ValueError(f"The output FIFO needs at least 2 beats, not {out_depth}.")
        self.width, self.frame_bytes, self.frames, self.out_depth = width, frame_bytes, frames, out_depth
        #: Beats of the longest frame forwarded.
        self.cap = -(-frame_bytes // (width // 8))
        #: Beats of buffer memory (a power of two, so pointers wrap by themselves).
        self.depth = 1 << (self.cap - 1).bit_length()
        super().__init__(
            {
                "i": In(stream.Signature(Beat(width))),
                "verdict_valid": In(1),
                "verdict_forward": In(1),
                "o": Out(stream.Signature(Beat(width))),
                "ev_forward": Out(1),
                "ev_overflow": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W, N, F, CAP = self.width, self.depth, self.frames, self.cap
        abits = (N - 1).bit_length()

        m.submodules.mem = mem = memory.Memory(shape=Beat(W), depth=N, init=[])
        wport = mem.write_port()
        rport = mem.read_port(domain="sync")

        # Pointers carry one extra bit so that full and empty differ.
        wp = Signal(abits + 1)
        rp = Signal(abits + 1)
        used = Signal(abits + 1)
        m.d.comb += used.eq(wp - rp)
        inflight = Signal(range(F + 1))  # frames started and not yet read out or skipped
        inc = Signal()
        dec = Signal()
        m.d.sync += inflight.eq(inflight + inc - dec)

        desc_layout = data.StructLayout({"beats": range(CAP + 1), "over": 1})
        m.submodules.desc = desc = fifo.SyncFIFO(width=desc_layout.size, depth=F)
        m.submodules.verdicts = verdicts = fifo.SyncFIFO(width=1, depth=F)
        m.d.comb += [verdicts.w_data.eq(self.verdict_forward), verdicts.w_en.eq(self.verdict_valid)]

        # Write side.
        first = Signal(init=1)
        fbeats = Signal(range(CAP + 1))  # beats of this frame stored so far
        over = Signal()
        store = ~over & (fbeats < CAP)
        room = used != N
        m.d.comb += self.i.ready.eq((~first | (inflight < F)) & (~store | room))
        take = self.i.valid & self.i.ready
        m.d.comb += [
            wport.addr.eq(wp[:abits]),
            wport.data.eq(self.i.payload),
            wport.en.eq(take & store),
            inc.eq(take & first),
        ]
        d_in = Signal(desc_layout)
        m.d.comb += [
            d_in.beats.eq(fbeats + store),
            d_in.over.eq(over | ~store),
            desc.w_data.eq(d_in),
            desc.w_en.eq(take & self.i.payload.last),
        ]
        with m.If(take):
            with m.If(store):
                m.d.sync += wp.eq(wp + 1)
            with m.If(self.i.payload.last):
                m.d.sync += [first.eq(1), fbeats.eq(0), over.eq(0)]
            with m.Else():
                m.d.sync += [first.eq(0), fbeats.eq(fbeats + store), over.eq(over | ~store)]

        # Read side: take a frame's descriptor and verdict together; skip it, or send its beats.
        m.submodules.out = out = fifo.SyncFIFOBuffered(width=Beat(W).size, depth=self.out_depth)
        m.d.comb += [self.o.payload.eq(out.r_data), self.o.valid.eq(out.r_rdy), out.r_en.eq(self.o.ready)]
        d_out = desc_layout(desc.r_data)
        remaining = Signal(range(CAP + 1))
        sending = Signal()
        pending = Signal()  # a read issued last cycle: its beat goes into the output FIFO now
        credit = out.level + pending < self.out_depth
        issue = sending & credit
        m.d.comb += [rport.addr.eq(rp[:abits]), rport.en.eq(1)]
        m.d.sync += pending.eq(issue)
        m.d.comb += [out.w_data.eq(rport.data), out.w_en.eq(pending)]

        pick = ~sending & desc.r_rdy & verdicts.r_rdy
        forward = verdicts.r_data[0]
        with m.If(pick):
            m.d.comb += [desc.r_en.eq(1), verdicts.r_en.eq(1)]
            with m.If(forward & ~d_out.over & (d_out.beats != 0)):
                m.d.sync += [sending.eq(1), remaining.eq(d_out.beats)]
            with m.Else():
                m.d.sync += rp.eq(rp + d_out.beats)
                m.d.comb += [dec.eq(1), self.ev_overflow.eq(forward & d_out.over)]
        with m.If(issue):
            m.d.sync += [rp.eq(rp + 1), remaining.eq(remaining - 1)]
            with m.If(remaining == 1):
                m.d.sync += sending.eq(0)
                m.d.comb += [dec.eq(1), self.ev_forward.eq(1)]
        return m
