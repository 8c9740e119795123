"""cocotb testbench of the aggregator core against the golden aggregator.

The pytest side (``tests/sim/test_core_cocotb.py``) builds :class:`~wanreduce.hw.core.AggregatorCore` and
passes its configuration through :func:`wanreduce.sim.verilator.runner.params`. Each test makes a
host-model workload
(:func:`wanreduce.sim.verify.traffic.scenario`: several jobs, rounds and chunks from G sites merged in
random WAN order, duplicates, stale rounds, senders ahead of the window, every kind of malformed packet),
loads the configuration through the control port, streams the packets in with random idle cycles while
the output sees random back-pressure, and checks every output packet byte for byte and every counter
against :class:`~wanreduce.host.golden.GoldenAggregator` fed the same packets in the same order. The
parameters ``ordered`` and ``bank_bits`` make the workload's groups summation orders that are not
ascending and its jobs use round banks (:func:`wanreduce.sim.verify.traffic.scenario`).

``core_sums_in_schedule_order`` feeds the same three contributions to three (job, round) entries that
list the same members in three orders, values chosen so that each order rounds differently: the three
RESULTs must differ and each must equal the golden model's, so the order loaded really is the order summed.
"""

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout

from wanreduce.host import control
from wanreduce.host.golden import Destination, GoldenAggregator
from wanreduce.sim.verify import traffic
from wanreduce.sim.verilator import runner
from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats
from wanreduce.spec import regmap

__all__ = ["TB"]

DESTS = [
    Destination("02:00:00:00:00:0a", "10.1.0.1", 47001),
    Destination("01:00:5e:57:53:07", "239.87.83.7", 47000),
]
MAC, IP = "02:57:52:01:00:07", "10.87.83.7"


class TB:
    """Drives the core: reset, control-port writes and reads, input with idle gaps, output with
    back-pressure. ``idle`` and ``backpressure`` are the per-cycle probabilities of each."""

    def __init__(self, dut, *, width, idle=0.0, backpressure=0.0, seed=0):
        self.dut, self.width = dut, width
        self.idle, self.backpressure = idle, backpressure
        self.rng = random.Random(seed)
        self.out_records = []
        self.rec_bytes = width // 8 + 1

    async def reset(self):
        d = self.dut
        cocotb.start_soon(Clock(d.clk, 10, unit="ns").start())
        d.rst.value = 1
        d.i__valid.value = 0
        d.o__ready.value = 0
        d.ctl__we.value = 0
        d.ctl__re.value = 0
        d.ctl__addr.value = 0
        d.ctl__wdata.value = 0
        await ClockCycles(d.clk, 4)
        d.rst.value = 0
        await RisingEdge(d.clk)

    async def write(self, addr, data):
        d = self.dut
        d.ctl__addr.value, d.ctl__wdata.value, d.ctl__we.value = addr, data, 1
        await RisingEdge(d.clk)
        d.ctl__we.value = 0

    async def read(self, addr):
        d = self.dut
        d.ctl__addr.value, d.ctl__re.value = addr, 1
        await RisingEdge(d.clk)
        d.ctl__re.value = 0
        await RisingEdge(d.clk)  # rdata is valid two cycles after re
        await ReadOnly()
        value = d.ctl__rdata.value.to_unsigned()
        await RisingEdge(d.clk)
        return value

    async def send(self, records):
        """Offer each record until it is taken: a beat moves at a rising edge where valid and ready were
        both high, so ready is sampled in the read-only phase just before the edge."""
        d = self.dut
        for rec in records:
            while self.idle and self.rng.random() < self.idle:
                d.i__valid.value = 0
                await RisingEdge(d.clk)
            d.i__payload.value = int.from_bytes(rec.tobytes(), "little")
            d.i__valid.value = 1
            while True:
                await ReadOnly()
                taken = bool(d.i__ready.value)
                await RisingEdge(d.clk)
                if taken:
                    break
        d.i__valid.value = 0

    async def collect(self):
        d = self.dut
        while True:
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            d.o__ready.value = int(ready)
            await ReadOnly()
            if ready and d.o__valid.value:
                value = d.o__payload.value.to_unsigned()
                self.out_records.append(np.frombuffer(value.to_bytes(self.rec_bytes, "little"), np.uint8))
            await RisingEdge(d.clk)

    async def quiet(self, cycles):
        """Wait until the output has been idle (no beat sent) for ``cycles`` cycles in a row."""
        idle = 0
        n = len(self.out_records)
        while idle < cycles:
            await RisingEdge(self.dut.clk)
            idle = idle + 1 if len(self.out_records) == n else 0
            n = len(self.out_records)


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.3], backpressure=[0.0, 0.5])
async def core_matches_golden(dut, idle, backpressure):
    p = runner.params()
    width, entry = p["width"], p["entry"]
    seed = p["seed"] * 4 + int(idle > 0) * 2 + int(backpressure > 0)
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    bits = p.get("bank_bits")
    jobs, packets = traffic.scenario(
        rng,
        rank=rank,
        slots=p["slots"],
        slot_bytes=p["slot_bytes"],
        members=p["members"],
        n_packets=p["n_packets"],
        frames=entry == "frame",
        ordered=p.get("ordered", False),
        bank_bits=bits,
    )
    banks = None if bits is None else {j: bits for j in jobs}
    golden = GoldenAggregator(
        rank=rank,
        jobs=jobs,
        slots=p["slots"],
        members=p["members"],
        slot_bytes=p["slot_bytes"],
        mac=MAC,
        ip=IP,
        destinations=DESTS,
        bank_bits=banks,
    )
    expected = []
    for pkt in packets:
        expected += golden.feed_frame(pkt) if entry == "frame" else golden.feed_payload(pkt)

    tb = TB(dut, width=width, idle=idle, backpressure=backpressure, seed=seed)
    await tb.reset()
    writes = control.config_writes(
        rank=rank,
        jobs=jobs,
        destinations=DESTS,
        mac=MAC,
        ip=IP,
        max_jobs=p["jobs"],
        rounds=p["rounds"],
        members=p["members"],
        max_dests=len(DESTS),
        slots=p["slots"],
        bank_bits=banks,
    )
    for addr, data in writes:
        await tb.write(addr, data)
    assert await tb.read(regmap.REG_ID) == regmap.ID_VALUE, "the control port does not answer"
    cocotb.start_soon(tb.collect())
    beats = packets_to_beats(packets, width)
    await with_timeout(tb.send(beats), 200 * len(beats) + 100_000, "ns")
    await with_timeout(tb.quiet(2000), 1_000_000, "ns")
    got = beats_to_packets(np.array(tb.out_records).reshape(-1, tb.rec_bytes), width)

    counters = control.decode_counters([await tb.read(a) for a in control.counter_reads()])
    assert counters == golden.counters, "counters differ from the golden model: " + str(
        {k: (v, golden.counters[k]) for k, v in counters.items() if v != golden.counters[k]}
    )
    assert len(got) == len(expected), f"{len(got)} packets out, the golden model sent {len(expected)}"
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"output packet {n} differs from the golden model:\n{a.hex()}\n{b.hex()}"
    dut._log.info(
        f"{len(packets)} packets in, {len(got)} out; counters "
        f"{ {k: v for k, v in golden.counters.items() if v} }"
    )
    assert golden.counters["results"] > 0, "the workload completed no chunk; it tests too little"


@cocotb.test()
async def core_sums_in_schedule_order(dut):
    p = runner.params()
    width, entry = p["width"], p["entry"]
    slots = p["slots"]
    # Ranks 1, 2, 3 summed as (1, 2, 3) and (3, 1, 2) in the two rounds of job 5 (round banks of half the
    # slots) and as (2, 3, 1) in job 6. Lane k of the first three holds 1e8, -1e8 and 1 arranged so that
    # only order k adds the 1 after the two large terms have cancelled; the other lanes are random.
    jobs = {5: [[1, 2, 3], [3, 1, 2]], 6: [[2, 3, 1]]}
    banks = {5: (slots - 1).bit_length() - 1}
    rng = np.random.default_rng(p["seed"])
    count = p["slot_bytes"] // 4
    big, one = np.float32(1e8), np.float32(1.0)
    values = {r: rng.standard_normal(count).astype(np.float32) * np.float32(1e4) for r in (1, 2, 3)}
    for lane, (a, b, c) in enumerate([(big, -big, one), (one, big, -big), (-big, one, big)]):
        values[1][lane], values[2][lane], values[3][lane] = a, b, c
    packets = []
    for job, round_ in ((5, 0), (5, 1), (6, 0)):
        for src in (3, 1, 2):
            payload = traffic.contrib(
                job=job,
                round=round_,
                chunk=0,
                src=src,
                group=7,
                dtype=0,
                elems_bits=values[src].view(np.uint32),
            )
            packets.append(traffic.frame_of(payload, src=src) if entry == "frame" else payload)
    golden = GoldenAggregator(
        rank=0,
        jobs=jobs,
        slots=slots,
        members=p["members"],
        slot_bytes=p["slot_bytes"],
        mac=MAC,
        ip=IP,
        destinations=DESTS,
        bank_bits=banks,
    )
    expected = []
    for pkt in packets:
        expected += golden.feed_frame(pkt) if entry == "frame" else golden.feed_payload(pkt)
    sums = {bytes(e)[-4 * count :] for e in expected}
    assert golden.counters["results"] == 3 and len(sums) == 3, "the three orders should round differently"

    tb = TB(dut, width=width, seed=p["seed"])
    await tb.reset()
    writes = control.config_writes(
        rank=0,
        jobs=jobs,
        destinations=DESTS,
        mac=MAC,
        ip=IP,
        max_jobs=p["jobs"],
        rounds=p["rounds"],
        members=p["members"],
        max_dests=len(DESTS),
        slots=slots,
        bank_bits=banks,
    )
    for addr, data in writes:
        await tb.write(addr, data)
    cocotb.start_soon(tb.collect())
    await with_timeout(tb.send(packets_to_beats(packets, width)), 1_000_000, "ns")
    await with_timeout(tb.quiet(500), 1_000_000, "ns")
    got = beats_to_packets(np.array(tb.out_records).reshape(-1, tb.rec_bytes), width)
    assert len(got) == len(expected), f"{len(got)} packets out, the golden model sent {len(expected)}"
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"RESULT {n} is not the sum in the schedule's order:\n{a.hex()}\n{b.hex()}"
