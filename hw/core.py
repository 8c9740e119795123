"""The aggregator core: the whole datapath of one site's FPGA, composed from one module per stage.

::

    i ─► FrameParser ─► HeaderParser ─► ScheduleTable ─► SlotTable ══ member buffers ══╗
         (frame entry)                                      │ completions (FIFO)      ║ rd
                                                            └──────────────► Reduce ◄─╝
    o ◄─ Fanout (frame entry) ◄─ ResultBuilder ◄────────────────────────────────┘
    ctl ─► Control: registers, schedule-table writes (bitmap, summation order), job entries (id, period,
           round-bank bits), counters (events from SlotTable)

``entry="frame"`` takes Ethernet frames and sends one RESULT frame per configured destination;
``entry="payload"`` takes bare UDP payloads (behind a vendor UDP stack) and sends one bare RESULT payload.
Both streams carry :func:`~wanreduce.hw.layouts.Beat` beats (``data``, ``bytes``, ``last``); the control
port is :class:`~wanreduce.hw.control.ControlSignature`. Latency and back-pressure of each stage are in
its module; ``docs/aggregator.md`` has the whole picture.
"""

from amaranth.hdl import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec import protocol
from .control import Control, ControlSignature
from .fanout import Fanout
from .frame_parser import FrameParser
from .header_parser import HeaderParser
from .layouts import Beat, Completion, PayloadBeat, check_width, payload_words
from .reduce import Reduce
from .result_builder import ResultBuilder
from .schedule_table import ScheduleTable
from .slot_table import SlotTable

__all__ = ["AggregatorCore"]


class AggregatorCore(wiring.Component):
    """One site's aggregator.

    Build parameters (keyword-only): ``width`` W (64, 128, 256, 512), ``slots`` S (power of two),
    ``members`` G_max, ``slot_bytes`` C (bytes per member buffer), ``dests`` D (destination entries),
    ``jobs`` and ``rounds`` (schedule table capacity), ``entry`` ("frame" or "payload"), ``port`` (the
    UDP port's reset value), ``mod_stages`` (modulo pipeline), ``adder_stages`` (FAdd stages),
    ``queue_depth`` (completions waiting for the reduce engine). ``adder``/``formats`` replace the adder
    lanes in tests only.
    """

    def __init__(
        self,
        *,
        width,
        slots,
        members,
        slot_bytes,
        dests=2,
        jobs=4,
        rounds=64,
        entry="frame",
        port=protocol.UDP_PORT,
        mod_stages=4,
        adder_stages=None,
        queue_depth=4,
        adder=None,
        formats=None,
    ):
        if entry not in ("frame", "payload"):
            raise ValueError(f"The entry point must be 'frame' or 'payload', not {entry!r}.")
        check_width(width)
        if slot_bytes < 4 or slot_bytes % 4:
            raise ValueError(f"The slot size must be a positive multiple of 4 bytes, not {slot_bytes}.")
        self.width, self.slots, self.members, self.slot_bytes = width, slots, members, slot_bytes
        self.dests, self.jobs, self.rounds, self.entry, self.port = dests, jobs, rounds, entry, port
        self.words = payload_words(width, slot_bytes)
        self.slot_table = SlotTable(width=width, slots=slots, members=members, slot_bytes=slot_bytes)
        self.reduce = Reduce(
            width=width,
            slots=slots,
            members=members,
            words=self.words,
            stages=adder_stages,
            adder=adder,
            formats=formats,
        )
        self.schedule = ScheduleTable(
            width=width, members=members, slots=slots, jobs=jobs, rounds=rounds, mod_stages=mod_stages
        )
        self.queue_depth = queue_depth
        #: Bytes of reorder-buffer memory (S × G_max × words × W/8).
        self.slot_memory_bytes = slots * members * self.words * width // 8
        super().__init__(
            {
                "i": In(stream.Signature(Beat(width))),
                "o": Out(stream.Signature(Beat(width))),
                "ctl": In(ControlSignature()),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.width
        params = {
            "width": W,
            "slots": self.slots,
            "members": self.members,
            "slot_bytes": self.slot_bytes,
            "entry": 0 if self.entry == "frame" else 1,
        }
        m.submodules.control = ctl = Control(
            jobs=self.jobs,
            rounds=self.rounds,
            dests=self.dests,
            slots=self.slots,
            members=self.members,
            params=params,
            port=self.port,
        )
        wiring.connect(m, wiring.flipped(self.ctl), ctl.ctl)

        m.submodules.header = header = HeaderParser(width=W, slot_bytes=self.slot_bytes)
        if self.entry == "frame":
            m.submodules.frame = frame = FrameParser(width=W)
            m.d.comb += frame.port.eq(ctl.port)
            wiring.connect(m, wiring.flipped(self.i), frame.i)
            wiring.connect(m, frame.o, header.i)
        else:
            beat = PayloadBeat(W)
            m.d.comb += [
                header.i.valid.eq(self.i.valid),
                self.i.ready.eq(header.i.ready),
                header.i.payload.data.eq(self.i.payload.data),
                header.i.payload.bytes.eq(self.i.payload.bytes),
                header.i.payload.last.eq(self.i.payload.last),
                header.i.payload.drops.eq(0),
            ]
            assert header.i.payload.shape() == beat

        m.submodules.schedule = sched = self.schedule
        wiring.connect(m, header.o, sched.i)
        for j in range(self.jobs):
            m.d.comb += [
                sched.job_id[j].eq(ctl.job_id[j]),
                sched.job_period[j].eq(ctl.job_period[j]),
                sched.job_bank[j].eq(ctl.job_bank[j]),
            ]
        m.d.comb += [
            sched.sched_addr.eq(ctl.sched_addr),
            sched.sched_data.eq(ctl.sched_data),
            sched.sched_en.eq(ctl.sched_en),
        ]
        for k in range(self.members):
            m.d.comb += sched.sched_order[k].eq(ctl.sched_order[k])

        m.submodules.slots = slots = self.slot_table
        wiring.connect(m, sched.o, slots.i)
        m.d.comb += [
            ctl.ev_valid.eq(slots.ev_valid),
            ctl.ev_code.eq(slots.ev_code),
            ctl.ev_result.eq(slots.ev_result),
            ctl.ev_reemit.eq(slots.ev_reemit),
            ctl.ev_evict.eq(slots.ev_evict),
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
            red.i.payload.eq(queue.r_data),
            red.i.valid.eq(queue.r_rdy),
            queue.r_en.eq(red.i.ready),
            slots.release.eq(red.release),
            slots.release_slot.eq(red.release_slot),
            ctl.reduce_read.eq(red.read_strobe),
            ctl.reduce_active.eq(red.active),
        ]
        wiring.connect(m, red.rd, slots.rd)

        m.submodules.result = result = ResultBuilder(width=W, slots=self.slots)
        m.d.comb += result.rank.eq(ctl.rank)
        wiring.connect(m, red.o, result.i)

        if self.entry == "frame":
            max_payload = protocol.HEADER_BYTES + self.slot_bytes
            m.submodules.fanout = fan = Fanout(width=W, dests=self.dests, max_payload=max_payload)
            wiring.connect(m, result.o, fan.i)
            m.d.comb += [
                fan.mac.eq(ctl.mac),
                fan.ip.eq(ctl.ip),
                fan.port.eq(ctl.port),
                fan.ndest.eq(ctl.ndest),
            ]
            for d in range(self.dests):
                m.d.comb += [
                    fan.dest_mac[d].eq(ctl.dest_mac[d]),
                    fan.dest_ip[d].eq(ctl.dest_ip[d]),
                    fan.dest_port[d].eq(ctl.dest_port[d]),
                ]
            wiring.connect(m, fan.o, wiring.flipped(self.o))
        else:
            m.d.comb += [
                self.o.valid.eq(result.o.valid),
                result.o.ready.eq(self.o.ready),
                self.o.payload.data.eq(result.o.payload.data),
                self.o.payload.bytes.eq(result.o.payload.bytes),
                self.o.payload.last.eq(result.o.payload.last),
            ]
        m.d.comb += [
            ctl.in_beat.eq(self.i.valid & self.i.ready),
            ctl.out_beat.eq(self.o.valid & self.o.ready),
        ]
        return m
