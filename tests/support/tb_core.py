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

import cocotb
import numpy as np
from cocotb.triggers import with_timeout

from wanreduce.host import control
from wanreduce.host.golden import Destination
from wanreduce.sim.verify import traffic
from wanreduce.sim.verify.core_tb import CoreTB, counter_diff, expected_of
from wanreduce.sim.verilator import runner
from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats
from wanreduce.spec import regmap
from wanreduce.spec.core import CoreConfig

__all__ = ["CORE", "config_of", "golden_workload", "order_workload", "DESTS", "MAC", "IP"]

#: The small core the core's cocotb and harness tests build (at W = 64 or 512): its size does not matter to
#: them, and few slots and members make slot conflicts frequent.
CORE = CoreConfig(width=64, slots=4, members=4, chunk_bytes=64, dests=2, jobs=4, rounds=64, bypass_bytes=0)

DESTS = [
    Destination("02:00:00:00:00:0a", "10.1.0.1", 47001),
    Destination("01:00:5e:57:53:07", "239.87.83.7", 47000),
]
MAC, IP = "02:57:52:01:00:07", "10.87.83.7"


def config_of(params):
    """The core's configuration among a test's parameters (the pytest side passes its fields)."""
    return CoreConfig(**{name: params[name] for name in CORE.as_dict()})


def golden_workload(core, seed, n_packets, *, ordered=False, bank_bits=None):
    """The mixed workload of ``core_matches_golden`` for a core built with ``core``, from ``seed``:
    ``(rank, jobs, banks, packets, golden, expected)``, the golden model fed every packet and what it sent.
    The C++ harness's run of the same checks (``tests/sim/test_core_harness.py``) takes it from here too."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    frames = core.entry == "frame"
    jobs, packets = traffic.scenario(
        rng, core, rank=rank, n_packets=n_packets, frames=frames, ordered=ordered, bank_bits=bank_bits
    )
    banks = None if bank_bits is None else {j: bank_bits for j in jobs}
    golden = traffic.golden_of(
        core, rank=rank, jobs=jobs, mac=MAC, ip=IP, destinations=DESTS, bank_bits=banks
    )
    return rank, jobs, banks, packets, golden, expected_of(golden, packets, entry=core.entry)


def order_workload(core, seed):
    """The workload of ``core_sums_in_schedule_order`` (site rank 0): ``(jobs, banks, packets, golden,
    expected)``; AssertionError unless the golden model's three RESULTs differ.

    Ranks 1, 2, 3 summed as (1, 2, 3) and (3, 1, 2) in the two rounds of job 5 (round banks of half the
    slots) and as (2, 3, 1) in job 6. Lane k of the first three holds 1e8, -1e8 and 1 arranged so that only
    order k adds the 1 after the two large terms have cancelled; the other lanes are random."""
    jobs = {5: [[1, 2, 3], [3, 1, 2]], 6: [[2, 3, 1]]}
    banks = {5: (core.slots - 1).bit_length() - 1}
    rng = np.random.default_rng(seed)
    count = core.chunk_bytes // 4
    big, one = np.float32(1e8), np.float32(1.0)
    values = {r: rng.standard_normal(count).astype(np.float32) * np.float32(1e4) for r in (1, 2, 3)}
    for lane, (a, b, c) in enumerate([(big, -big, one), (one, big, -big), (-big, one, big)]):
        values[1][lane], values[2][lane], values[3][lane] = a, b, c
    packets = []
    for job, round_ in ((5, 0), (5, 1), (6, 0)):
        for src in (3, 1, 2):
            bits = values[src].view(np.uint32)
            payload = traffic.contrib(
                job=job, round=round_, chunk=0, src=src, group=7, dtype=0, elems_bits=bits
            )
            packets.append(traffic.frame_of(payload, src=src) if core.entry == "frame" else payload)
    golden = traffic.golden_of(core, rank=0, jobs=jobs, mac=MAC, ip=IP, destinations=DESTS, bank_bits=banks)
    expected = expected_of(golden, packets, entry=core.entry)
    sums = {bytes(e)[-4 * count :] for e in expected}
    assert golden.counters["results"] == 3 and len(sums) == 3, "the three orders should round differently"
    return jobs, banks, packets, golden, expected


@cocotb.test()
@cocotb.parametrize(idle=[0.0, 0.3], backpressure=[0.0, 0.5])
async def core_matches_golden(dut, idle, backpressure):
    p = runner.params()
    core = config_of(p)
    width = core.width
    seed = p["seed"] * 4 + int(idle > 0) * 2 + int(backpressure > 0)
    w = golden_workload(
        core, seed, p["n_packets"], ordered=p.get("ordered", False), bank_bits=p.get("bank_bits")
    )
    rank, jobs, banks, packets, golden, expected = w

    tb = CoreTB(dut, width=width, idle=idle, backpressure=backpressure, seed=seed)
    await tb.reset()
    writes = control.config_writes(
        rank=rank, jobs=jobs, destinations=DESTS, mac=MAC, ip=IP, core=core, bank_bits=banks
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
    assert counters == golden.counters, (
        f"counters differ from the golden model: {counter_diff(counters, golden)}"
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
    core = config_of(p)
    width = core.width
    jobs, banks, packets, golden, expected = order_workload(core, p["seed"])

    tb = CoreTB(dut, width=width, seed=p["seed"])
    await tb.reset()
    writes = control.config_writes(
        rank=0, jobs=jobs, destinations=DESTS, mac=MAC, ip=IP, core=core, bank_bits=banks
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
