"""The aggregator core: the whole datapath of one site's FPGA, composed from one module per stage.

::

    i ─► FrameParser ─► HeaderParser ─► ScheduleTable ─► SlotTable ══ member buffers ══╗
         (frame entry)                                      │ completions (FIFO)      ║ rd
                                                            └──────────────► Reduce ◄─╝
    o ◄─ Fanout (frame entry) ◄─ ResultBuilder ◄────────────────────────────────┘
    ctl ─► Control: registers, schedule-table writes (bitmap, summation order, root stripe, RESULT group),
           job entries (id, period, round-bank bits), counters (events from SlotTable)

With ``bypass_bytes`` > 0 the core sits in line: its input is forked into a :class:`BypassBuffer` as well,
and every frame that is not this core's work (``wanreduce.spec.protocol.forwarded``: not wanreduce, a
RESULT, a CONTRIB outside this site's root stripe) leaves unchanged on the second output ``bypass`` once
the slot table has decided it, while everything else is consumed or dropped as before. ``REG_BYPASS``
turns forwarding off (then those frames are dropped and counted by their codes).

    i ─┬─► FrameParser ─► ... ─► SlotTable ── packet event: verdict ──┐
       └─► BypassBuffer ◄──────────────────────────────────────────┘ ─► bypass

``entry="frame"`` takes Ethernet frames and sends one RESULT frame per configured destination;
``entry="payload"`` takes bare UDP payloads (behind a vendor UDP stack) and sends one bare RESULT payload.
Both streams carry :func:`~wanreduce.hw.layouts.Beat` beats (``data``, ``bytes``, ``last``); the control
port is :class:`~wanreduce.hw.control.ControlSignature`. Latency and back-pressure of each stage are in
its module; ``docs/aggregator.md`` has the whole picture.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from ..spec.core import CoreConfig
from .bypass import BypassBuffer
from .control import Control, ControlSignature
from .extmem import AXI4Signature, BurstWriter, ExtMemMap, MemPrefetch, axi4_fields, check_wait_depth
from .fanout import Fanout
from .frame_parser import FrameParser
from .header_parser import HeaderParser
from .layouts import Beat, Completion, PayloadBeat
from .reduce import Reduce
from .result_builder import ResultBuilder
from .schedule_table import SCHEDULE_WRITE, ScheduleTable
from .slot_table import SlotTable
from .stream import alike

__all__ = ["AggregatorCore"]


class AggregatorCore(wiring.Component):
    """One site's aggregator.

    ``config`` (a :class:`~wanreduce.spec.core.CoreConfig`) holds the build parameters every layer shares:
    W, S, G_max, the chunk bytes C of a member buffer, D, the schedule table's jobs and rounds, the entry
    point, the bypass port's longest frame (0: no bypass port, every frame not taken is dropped) and the
    modulo pipeline's stages. The keywords are the options of this build alone: ``port`` (the UDP port's
    reset value), ``adder_stages`` (FAdd stages), ``queue_depth`` (completions waiting for the reduce
    engine) and ``bypass_frames`` (frames between input and verdict: 64 covers one-beat frames back to back
    over the ~32 cycles from input to the slot table's verdict). ``adder``/``formats`` replace the adder
    lanes in tests only. ``slot_states``: how the slot table keeps its per-slot states, ``"lut"`` or
    ``"block"`` (:class:`~wanreduce.hw.slot_table.SlotTable`; None: block memories from 4,096 slots on).
    ``buffers="external"`` (docs/extmem.md) puts the member buffers behind ``mem_ports`` AXI4 ports;
    ``mem_frames`` (chunks read at once) and ``mem_wait_depth`` (completed chunks waiting for their writes'
    responses) must each cover the memory's latency in chunk intervals (docs/extmem.md, "Sizing for the
    memory's latency").
    """

    def __init__(
        self,
        config,
        /,
        *,
        port=protocol.UDP_PORT,
        adder_stages=None,
        queue_depth=4,
        bypass_frames=64,
        adder=None,
        formats=None,
        buffers="internal",
        mem_ports=1,
        mem_addr_width=34,
        mem_id_width=None,
        mem_frames=16,
        mem_wait_depth=16,
        slot_states=None,
    ):
        if buffers not in ("internal", "external"):
            raise ValueError(f"The member buffers must be 'internal' or 'external', not {buffers!r}.")
        self.config = c = _checked(config)
        self.width, self.slots, self.members, self.chunk_bytes = c.width, c.slots, c.members, c.chunk_bytes
        self.dests, self.jobs, self.rounds, self.entry, self.port = c.dests, c.jobs, c.rounds, c.entry, port
        self.words = c.words
        self.buffers = buffers
        # The geometry the slot table, the reduce engine and the schedule table are each built for.
        shape = {"width": c.width, "slots": c.slots, "members": c.members}
        self.slot_table = SlotTable(**shape, slot_bytes=c.chunk_bytes, buffers=buffers, states=slot_states)
        self.ext = None
        if buffers == "external":
            self.ext = _external(
                c,
                ports=mem_ports,
                addr_width=mem_addr_width,
                id_width=mem_id_width,
                frames=mem_frames,
                wait_depth=mem_wait_depth,
            )
        frames = self.ext["frames"] if self.ext else None
        self.reduce = Reduce(
            **shape, frames=frames, words=c.words, stages=adder_stages, adder=adder, formats=formats
        )
        self.schedule = ScheduleTable(**shape, jobs=c.jobs, rounds=c.rounds, mod_stages=c.mod_stages)
        self.queue_depth = queue_depth
        if c.bypass_bytes and c.entry != "frame":
            raise ValueError("A bypass port needs the frame entry point: bare payloads are all wanreduce.")
        self.bypass_bytes, self.bypass_frames = c.bypass_bytes, bypass_frames
        self.bypass_buffer = None
        if c.bypass_bytes:
            self.bypass_buffer = BypassBuffer(width=c.width, frame_bytes=c.bypass_bytes, frames=bypass_frames)
        #: Bytes of reorder-buffer memory (S × G_max × words × W/8).
        self.slot_memory_bytes = c.slots * c.members * c.words * c.width // 8
        ports = {
            "i": In(stream.Signature(Beat(c.width))),
            "o": Out(stream.Signature(Beat(c.width))),
            "ctl": In(ControlSignature()),
        }
        if self.bypass_buffer is not None:
            ports["bypass"] = Out(stream.Signature(Beat(c.width)))
        if self.ext:
            mm = self.ext["map"]
            for k in range(mm.ports):
                ports[f"mem{k}"] = Out(
                    AXI4Signature(data_width=c.width, addr_width=mm.addr_width, id_width=self.ext["id_width"])
                )
            ports["mem_errors"] = Out(32)
            ports["mem_drops"] = Out(32)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        W = self.width
        params = {
            "width": W,
            "slots": self.slots,
            "members": self.members,
            "chunk_bytes": self.chunk_bytes,
            "entry": 0 if self.entry == "frame" else 1,
            "bypass_bytes": self.bypass_bytes,
        }
        capacities = {n: getattr(self.config, n) for n in ("jobs", "rounds", "dests", "slots", "members")}
        m.submodules.control = ctl = Control(
            **capacities,
            params=params,
            port=self.port,
            bypass=self.bypass_buffer is not None,
        )
        wiring.connect(m, wiring.flipped(self.ctl), ctl.ctl)

        m.submodules.header = header = HeaderParser(width=W, slot_bytes=self.chunk_bytes)
        if self.entry == "frame":
            m.submodules.frame = frame = FrameParser(width=W)
            m.d.comb += frame.port.eq(ctl.port)
            if self.bypass_buffer is None:
                wiring.connect(m, wiring.flipped(self.i), frame.i)
            else:
                # The fork: a beat moves when both sides take it. The bypass buffer's ready depends on its
                # own state only, so neither side's valid waits on the other side's ready through a loop.
                m.submodules.bypass = byp = self.bypass_buffer
                m.d.comb += [
                    frame.i.payload.eq(self.i.payload),
                    byp.i.payload.eq(self.i.payload),
                    frame.i.valid.eq(self.i.valid & byp.i.ready),
                    byp.i.valid.eq(self.i.valid & frame.i.ready),
                    self.i.ready.eq(frame.i.ready & byp.i.ready),
                ]
                wiring.connect(m, byp.o, wiring.flipped(self.bypass))
            wiring.connect(m, frame.o, header.i)
        else:
            beat = PayloadBeat(W)
            m.d.comb += [*_beats_into(self.i, header.i), header.i.payload.drops.eq(0)]
            assert header.i.payload.shape() == beat

        m.submodules.schedule = sched = self.schedule
        wiring.connect(m, header.o, sched.i)
        for j in range(self.jobs):
            m.d.comb += alike(sched, ctl, ("job_id", "job_period", "job_bank"), j)
        m.d.comb += alike(sched, ctl, [name for name in SCHEDULE_WRITE if name != "sched_order"])
        for k in range(self.members):
            m.d.comb += alike(sched, ctl, ["sched_order"], k)

        m.submodules.slots = slots = self.slot_table
        if self.ext:
            # The writer's room holds the slot table's input, so every beat it stores has a place.
            m.submodules.writer = writer = BurstWriter(mem_map=self.ext["map"])
            m.d.comb += [
                slots.i.payload.eq(sched.o.payload),
                slots.i.valid.eq(sched.o.valid & writer.room),
                sched.o.ready.eq(slots.i.ready & writer.room),
            ]
            m.d.comb += alike(writer, slots, ("wr_en", "wr_end", "wr_slot", "wr_member", "wr_data"))
        else:
            wiring.connect(m, sched.o, slots.i)
        m.d.comb += alike(ctl, slots, ("ev_valid", "ev_code", "ev_result", "ev_reemit", "ev_evict"))
        if self.bypass_buffer is not None:
            # The verdict of each frame, in input order: forward what is not this core's work.
            code = slots.ev_code
            forward = Signal()
            m.d.comb += forward.eq(
                ctl.bypass_en
                & (
                    Cat(*[code == int(c) for c in sorted(protocol.BYPASS_CODES)]).any()
                    | ((code == protocol.Drop.UNEXPECTED_SRC) & slots.ev_foreign)
                )
            )
            m.d.comb += [
                byp.verdict_valid.eq(slots.ev_valid),
                byp.verdict_forward.eq(forward),
                ctl.ev_bypass.eq(slots.ev_valid & forward),
                ctl.ev_forwarded.eq(byp.ev_forward),
                ctl.ev_overflow.eq(byp.ev_overflow),
            ]

        # Completed chunks and re-emit requests wait here for the reduce engine, in input order.
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(
            width=Completion(self.slots).size, depth=self.queue_depth
        )
        m.submodules.reduce = red = self.reduce
        m.d.comb += [
            queue.w_data.eq(slots.done.payload),
            queue.w_en.eq(slots.done.valid),
            slots.done.ready.eq(queue.w_rdy),
        ]
        if not self.ext:
            m.d.comb += [
                *_fifo_into(queue, red.i),
                slots.release.eq(red.release),
                slots.release_slot.eq(red.release_slot),
            ]
        m.d.comb += [
            ctl.reduce_read.eq(red.read_strobe),
            ctl.reduce_active.eq(red.active),
        ]
        if self.ext:
            self._connect_external(m, queue, slots, red, writer)
        else:
            wiring.connect(m, red.rd, slots.rd)

        m.submodules.result = result = ResultBuilder(width=W, slots=self.slots)
        m.d.comb += result.rank.eq(ctl.rank)
        wiring.connect(m, red.o, result.i)

        if self.entry == "frame":
            max_payload = protocol.HEADER_BYTES + self.chunk_bytes
            m.submodules.fanout = fan = Fanout(width=W, dests=self.dests, max_payload=max_payload)
            wiring.connect(m, result.o, fan.i)
            m.d.comb += alike(fan, ctl, ("mac", "ip", "port", "ndest"))
            for d in range(self.dests):
                m.d.comb += alike(fan, ctl, ("dest_mac", "dest_ip", "dest_port"), d)
            wiring.connect(m, fan.o, wiring.flipped(self.o))
        else:
            m.d.comb += _beats_into(result.o, self.o)
        m.d.comb += [
            ctl.in_beat.eq(self.i.valid & self.i.ready),
            ctl.out_beat.eq(self.o.valid & self.o.ready),
        ]
        return m

    def _connect_external(self, m, queue, slots, red, writer):
        """Completions through the prefetcher (external member buffers read into on-chip frames)."""
        mm = self.ext["map"]
        m.submodules.prefetch = pre = MemPrefetch(
            mem_map=mm,
            frames=self.ext["frames"],
            id_width=self.ext["id_width"],
            wait_depth=self.ext["wait_depth"],
        )
        m.d.comb += [
            *_fifo_into(queue, pre.i),
            *alike(pre, writer, ("closed", "retired")),
            pre.werr.eq(writer.err),
            pre.werr_slot.eq(writer.err_slot),
            pre.freed.eq(red.release),
            pre.freed_slot.eq(red.release_slot),
            *alike(slots, pre, ("release", "release_slot")),
            self.mem_errors.eq(pre.errors),
            self.mem_drops.eq(pre.drops),
        ]
        wiring.connect(m, pre.o, red.i)
        wiring.connect(m, red.rd, pre.rd)
        for k in range(mm.ports):
            port = getattr(self, f"mem{k}")
            for name, (_, direction) in axi4_fields(data_width=1, addr_width=1, id_width=1).items():
                side = getattr(writer if name.startswith(("aw", "w", "b")) else pre, f"mem{k}")
                if direction == "out":
                    m.d.comb += getattr(port, name).eq(getattr(side, name))
                else:
                    m.d.comb += getattr(side, name).eq(getattr(port, name))


def _fifo_into(queue, dst):
    """The read side of FIFO ``queue`` driving stream ``dst``."""
    return [dst.payload.eq(queue.r_data), dst.valid.eq(queue.r_rdy), queue.r_en.eq(dst.ready)]


def _beats_into(src, dst):
    """Stream ``src`` driving stream ``dst``: the handshake and the :func:`~wanreduce.hw.layouts.Beat`
    fields (``dst``'s payload may have more, which the caller drives)."""
    return [
        dst.valid.eq(src.valid),
        src.ready.eq(dst.ready),
        *(dst.payload[name].eq(src.payload[name]) for name in ("data", "bytes", "last")),
    ]


def _checked(config):
    """``config`` when it is a ``CoreConfig`` (``ValueError`` otherwise)."""
    if not isinstance(config, CoreConfig):
        raise ValueError(f"The core's configuration must be a CoreConfig, not {type(config).__name__}.")
    return config


def _external(config, *, ports, addr_width, id_width, frames, wait_depth):
    """The external build's memory map, read frames, ID width and stage A's depth, checked
    (``ValueError``)."""
    members = config.members
    if frames < 1 or frames & (frames - 1):
        raise ValueError(f"The read frames must be a power of two, not {frames}.")
    check_wait_depth(wait_depth)
    frames = min(frames, config.slots)
    mm = ExtMemMap(
        width=config.width,
        slots=config.slots,
        members=members,
        words=config.words,
        ports=ports,
        addr_width=addr_width,
    )
    need = max(1, (frames * (1 << (members - 1).bit_length()) - 1).bit_length())
    if id_width is None:
        id_width = need
    elif not 1 <= id_width <= 32:
        raise ValueError(f"The AXI ID width must be in 1..32, not {id_width}.")
    while frames > 1 and need > id_width:
        frames //= 2
        need -= 1
    if need > id_width:
        raise ValueError(f"An AXI ID of {id_width} bits cannot name the {members} member reads of one chunk.")
    return {"map": mm, "frames": frames, "id_width": id_width, "wait_depth": wait_depth}
