"""cocotb drivers of the aggregator core's ports and the golden-model checks that the core, board and
external-memory testbenches share.

:class:`CoreTB` drives a bare core's ports: reset, control-port writes and reads, the input stream with
random idle cycles, the output stream under random back-pressure. :func:`expected_of` is what the golden
model of a core's build (:func:`wanreduce.sim.verify.traffic.golden_of`) sends for a workload,
:func:`counter_diff` the counters that differ from it.
"""

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

__all__ = ["CoreTB", "expected_of", "counter_diff"]


class CoreTB:
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


def expected_of(golden, packets, *, entry="frame"):
    """What ``golden`` sends for ``packets`` (frames, or bare UDP payloads for ``entry="payload"``)."""
    feed = golden.feed_frame if entry == "frame" else golden.feed_payload
    out = []
    for pkt in packets:
        out += feed(pkt)
    return out


def counter_diff(counters, golden):
    """``{name: (core, golden model)}`` of every counter that differs (empty when all agree)."""
    return {k: (v, golden.counters[k]) for k, v in counters.items() if v != golden.counters[k]}
