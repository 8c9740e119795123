"""cocotb testbench of the core with external member buffers (``buffers="external"``) against the golden
aggregator, its AXI4 master ports answered by :class:`tests.support.axi_mem.LatentAxiRam`.

``extmem_matches_golden`` runs the workload of ``tests.support.tb_core`` (several jobs, rounds and chunks
in WAN order, duplicates, stale rounds, senders ahead of the window, malformed packets) three ways:
latencies of 1..8 cycles per burst, of 1..400, and of 1..400 under stress (idle input cycles, output
back-pressure, random pauses on every AXI channel); reads are answered out of order across IDs; every
RESULT byte and every counter must equal the golden model's, no memory error may be reported, and the
handshake checker watches every port. ``extmem_error_drops_chunk`` answers every access to one member
buffer with SLVERR: the chunks of that slot are dropped and counted, never summed, and every RESULT that
does leave is one the golden model sent. ``extmem_evict_drop`` runs the slot table's eviction scenario
(``traffic.evict_drop_scenario``) under the late drop codes the pytest side names (``evict_kinds``, default
all of them, and a real eviction).
"""

import cocotb
import numpy as np
from cocotb.triggers import with_timeout

from tests.support import tb_core
from wanreduce.host import control
from wanreduce.sim.verify import traffic
from wanreduce.sim.verify.axi_mem import LatentAxiRam, check_handshakes
from wanreduce.sim.verify.core_tb import CoreTB, counter_diff, expected_of
from wanreduce.sim.verilator import runner
from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats


def _workload(p, seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    bits = p.get("bank_bits")
    core = tb_core.config_of(p)
    jobs, packets = traffic.scenario(
        rng,
        core,
        rank=rank,
        n_packets=p["n_packets"],
        frames=True,
        ordered=p.get("ordered", False),
        bank_bits=bits,
    )
    banks = None if bits is None else {j: bits for j in jobs}
    site = dict(
        rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS, bank_bits=banks
    )
    golden = traffic.golden_of(core, **site)
    return golden, packets, expected_of(golden, packets), control.config_writes(core=core, **site)


def _evict_workload(p, kind):
    jobs, packets, rank = traffic.evict_drop_scenario(kind, frames=True, slots=p["slots"])
    site = dict(rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS)
    core = tb_core.config_of(p)
    golden = traffic.golden_of(core, **site)
    return golden, packets, expected_of(golden, packets), control.config_writes(core=core, **site)


async def _run(dut, p, seed, *, lat_hi, pause, idle, backpressure, bad=None, workload=None):
    golden, packets, expected, writes = workload or _workload(p, seed)
    tb = CoreTB(dut, width=p["width"], idle=idle, backpressure=backpressure, seed=seed)
    await tb.reset()
    rams = []
    for k in range(p["mem_ports"]):
        ram = LatentAxiRam(
            dut, f"mem{k}_", dut.clk, size=p["mem_bytes"], seed=seed * 8 + k, lat_hi=lat_hi, pause=pause
        )
        if bad is not None and bad[0] == k:
            ram.error(bad[1])
        rams.append(ram)
        cocotb.start_soon(check_handshakes(dut, f"mem{k}__", dut.clk, p["width"] // 8))
    for addr, data in writes:
        await tb.write(addr, data)
    cocotb.start_soon(tb.collect())
    beats = packets_to_beats(packets, p["width"])
    await with_timeout(tb.send(beats), 400 * len(beats) + 2_000_000, "ns")
    # Quiet for longer than a write and a read at the longest latency, back to back.
    await with_timeout(tb.quiet(max(1500, 4 * lat_hi + 500)), 5_000_000, "ns")
    got = beats_to_packets(np.array(tb.out_records).reshape(-1, tb.rec_bytes), p["width"])
    counters = control.decode_counters([await tb.read(a) for a in control.counter_reads()])
    return golden, expected, got, counters


@cocotb.test()
@cocotb.parametrize((("lat_hi", "stress"), [(8, False), (400, False), (400, True)]))
async def extmem_matches_golden(dut, lat_hi, stress):
    p = runner.params()
    seed = p["seed"] * 4 + int(lat_hi > 8) * 2 + int(stress)
    golden, expected, got, counters = await _run(
        dut,
        p,
        seed,
        lat_hi=lat_hi,
        pause=0.4 if stress else 0.0,
        idle=0.3 if stress else 0.0,
        backpressure=0.5 if stress else 0.0,
    )
    assert counters == golden.counters, (
        f"counters differ from the golden model: {counter_diff(counters, golden)}"
    )
    assert len(got) == len(expected), f"{len(got)} packets out, the golden model sent {len(expected)}"
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"output packet {n} differs from the golden model:\n{a.hex()}\n{b.hex()}"
    assert int(dut.mem_errors.value) == 0 and int(dut.mem_drops.value) == 0, "memory errors reported"
    assert golden.counters["results"] > 0, "the workload completed no chunk; it tests too little"
    dut._log.info(f"latency 1..{lat_hi}, stress {stress}: {len(got)} packets out, as the golden model")


@cocotb.test()
async def extmem_error_drops_chunk(dut):
    p = runner.params()
    seed = p["seed"] * 4 + 3
    # Member 0 of slot 1: port 1 mod K, address of (1 div K) * G_max * stride.
    k = 1 % p["mem_ports"]
    addr = (1 // p["mem_ports"]) * p["members"] * p["stride_bytes"]
    golden, expected, got, counters = await _run(
        dut, p, seed, lat_hi=50, pause=0.2, idle=0.0, backpressure=0.0, bad=(k, addr)
    )
    assert int(dut.mem_errors.value) > 0, "no error response was counted"
    assert int(dut.mem_drops.value) > 0, "no chunk was dropped"
    allowed = {bytes(e) for e in expected}
    for n, a in enumerate(got):
        assert bytes(a) in allowed, f"output packet {n} is none of the golden model's:\n{a.hex()}"
    assert len(got) < len(expected), "every RESULT left although chunks were dropped"
    assert counters["results"] == golden.counters["results"], "the slot table's completions changed"


@cocotb.test()
@cocotb.parametrize(kind=runner.params().get("evict_kinds") or [None, *traffic.LATE_DROPS["frame"]])
async def extmem_evict_drop(dut, kind):
    """A CONTRIB that would evict a live chunk and is dropped at its end leaves that chunk intact (the
    slot table's rotation, written to external memory): RESULTs and counters equal the golden model's."""
    p = runner.params()
    golden, expected, got, counters = await _run(
        dut, p, 7, lat_hi=200, pause=0.3, idle=0.0, backpressure=0.0, workload=_evict_workload(p, kind)
    )
    assert counters == golden.counters, f"{kind}: counters differ from the golden model"
    assert len(got) == len(expected), f"{kind}: {len(got)} packets out, the golden model sent {len(expected)}"
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, f"{kind}: output packet {n} differs from the golden model:\n{a.hex()}\n{b.hex()}"
