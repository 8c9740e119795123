"""The core with external member buffers through the C++ harness, its AXI4 ports answered by the harness's
memory model (``sim/verilator/axi_ram.h``: latency, back-pressure, read bursts of different IDs interleaved
and reordered, AXI rules checked): thousands of frames of ``tb_core``'s workload (jobs, rounds, chunks in
WAN order, duplicates, stale rounds, malformed packets), every RESULT byte and every counter against the
golden model; an error response drops the chunks of its slot and only those; the slot table's eviction
scenario under every late drop. W = 64 in ``make test`` (where these are the W = 64 checks of the external
core: the cocotb module, tests/sim/test_extmem_cocotb.py, runs W = 512 there); W = 512 (a longer build) is
marked slow. Each runs with the slot table's states in LUT RAM (``slot_states="lut"``, what these 4-slot
builds get by default) and in block memories (``"block"``, the 2^20-slot build's, forced on at 4 slots so
that slots are reused and busy all the time). The 2^20-slot core itself (slow) takes chunks spread over
its whole slot range."""

import numpy as np
import pytest

from tests.support import tb_core
from tests.support.quiet import unused_ok
from wanreduce.host import control
from wanreduce.sim.verify import traffic

pytestmark = pytest.mark.rtl

MEM_PORTS = 2
RUNS = [  # latency range, pause, reorder, input idles, output back-pressure
    ((1, 8), 0.0, False, 0.0, 0.0),
    ((1, 400), 0.0, True, 0.0, 0.0),
    ((1, 400), 0.4, True, 0.3, 0.5),
]


def _harness(width, states="lut"):
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.sim.verilator.agg_driver import build_key
    from wanreduce.sim.verilator.axi_harness import AxiHarness

    config = tb_core.CORE.replace(width=width)
    options = dict(buffers="external", mem_ports=MEM_PORTS, mem_addr_width=16, slot_states=states)
    with unused_ok():
        core = AggregatorCore(config, **options)
    assert core.slot_table.states == states
    return core, AxiHarness(core, top="agg_core_axi", key=build_key(config, options))


def _workload(seed, ordered):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    jobs, packets = traffic.scenario(
        rng, tb_core.CORE, rank=rank, n_packets=1500, frames=True, ordered=ordered
    )
    site = dict(rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS)
    golden = traffic.golden_of(tb_core.CORE, **site)
    expected = [out for p in packets for out in golden.feed_frame(p)]
    return site, golden, packets, expected


@pytest.mark.parametrize("states", ["lut", "block"])
@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_extmem_volume_matches_golden(width, states):
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core, h = _harness(width, states)
    for n, (latency, pause, reorder, idle, bp) in enumerate(RUNS):
        site, golden, packets, expected = _workload(100 * width + n, ordered=n > 0)
        out, st = h.run(
            packets_to_beats(packets, width),
            latency=latency,
            pause=pause,
            reorder=reorder,
            idle_prob=idle,
            backpressure_prob=bp,
            seed=n,
            mem_bytes=1 << 16,
            ctl_writes=control.config_writes(**site, core=core),
            ctl_reads=control.counter_reads(),
            drain_cycles=2 * latency[1] + 200,
        )
        got = beats_to_packets(out, width)
        counters = control.decode_counters(st.ctl_reads)
        assert counters == golden.counters, f"run {n}: counters differ from the golden model"
        assert got == expected, f"run {n}: {len(got)} RESULTs, the golden model sent {len(expected)}"
        assert golden.counters["results"] > 10, "the workload completed too few chunks to test much"
        assert st.mem_errors == st.mem_drops == 0
        assert all(p["ar"] and p["aw"] for p in st.ports), "a memory port was never used"


@pytest.mark.parametrize("states", ["lut", "block"])
def test_extmem_error_response_drops_the_chunk(states):
    """SLVERR on member 0 of slot 1 (port 1): that slot's chunks are dropped and counted, never summed."""
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core, h = _harness(64, states)
    site, golden, packets, expected = _workload(7, ordered=True)
    stride = core.ext["map"].stride_bytes
    out, st = h.run(
        packets_to_beats(packets, 64),
        latency=(1, 50),
        pause=0.2,
        reorder=True,
        seed=7,
        mem_bytes=1 << 16,
        bad=[(1, 0 * stride)],
        ctl_writes=control.config_writes(**site, core=core),
        ctl_reads=control.counter_reads(),
        drain_cycles=300,
    )
    got = beats_to_packets(out, 64)
    assert st.mem_errors > 0 and st.mem_drops > 0, "the error response was not counted"
    assert len(got) < len(expected), "every RESULT left although chunks were dropped"
    allowed = {bytes(e) for e in expected}
    assert all(bytes(g) in allowed for g in got), "a RESULT left that the golden model never sent"
    counters = control.decode_counters(st.ctl_reads)
    assert counters["results"] == golden.counters["results"], "the slot table's completions changed"


@pytest.mark.parametrize("states", ["lut", "block"])
def test_extmem_evict_drop(states):
    """The slot table's eviction scenario (``traffic.evict_drop_scenario``) with its rotation written to
    external memory: a CONTRIB that would evict a live chunk and fails a late rule (every late drop of the
    frame entry) leaves that chunk intact; a valid one really evicts. RESULTs and counters against the
    golden model, at latencies up to 200 cycles with pauses on every channel."""
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core, h = _harness(64, states)
    for kind in [None, *traffic.LATE_DROPS["frame"]]:
        jobs, packets, rank = traffic.evict_drop_scenario(kind, frames=True, slots=tb_core.CORE.slots)
        site = dict(rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS)
        golden = traffic.golden_of(tb_core.CORE, **site)
        expected = [out for p in packets for out in golden.feed_frame(p)]
        out, st = h.run(
            packets_to_beats(packets, 64),
            latency=(1, 200),
            pause=0.3,
            reorder=True,
            seed=7,
            mem_bytes=1 << 16,
            ctl_writes=control.config_writes(**site, core=core),
            ctl_reads=control.counter_reads(),
            drain_cycles=600,
        )
        assert control.decode_counters(st.ctl_reads) == golden.counters, f"{kind}: counters differ"
        assert beats_to_packets(out, 64) == expected, f"{kind}: RESULTs differ from the golden model's"
        assert st.mem_errors == st.mem_drops == 0, kind


@pytest.mark.slow
def test_extmem_million_slots():
    """S = 2^20 (block states, chosen by the slot count): 300 chunks of 4 contributions, each to its own
    slot, the slots far apart over the whole range (chunk numbers a large odd stride apart, so their low
    20 bits, the slot, differ in every bit); a few of them sent twice, for re-emits from slots far from the
    others; RESULTs and counters against the golden model, every member buffer read back once."""
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.hw.slot_table import BLOCK_STATES_FROM
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, build_key, packets_to_beats
    from wanreduce.sim.verilator.axi_harness import AxiHarness
    from wanreduce.spec.protocol import DType

    slots, members, width = 1 << 20, 4, 64
    config = tb_core.CORE.replace(width=width, slots=slots, members=members, dests=1)
    options = dict(buffers="external", mem_ports=MEM_PORTS, mem_addr_width=28)
    with unused_ok():
        core = AggregatorCore(config, **options)
    assert slots >= BLOCK_STATES_FROM and core.slot_table.states == "block"
    h = AxiHarness(core, top="agg_core_axi_1m", key=build_key(config, options))
    rng = np.random.default_rng(20)
    rank = 2
    jobs = {0: [(1 << members) - 1]}
    site = dict(rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS[:1])
    golden = traffic.golden_of(config, **site)
    chunks = [(k * 0x9E3B5) % slots for k in range(300)]
    assert len(set(chunks)) == len(chunks) and max(chunks) - min(chunks) > slots // 2
    frames = []
    for n, chunk in enumerate(chunks):
        for src in rng.permutation(members).tolist() + ([0] if n % 50 == 7 else []):
            elems = rng.integers(0, 1 << 30, 16, dtype=np.uint32)
            p = traffic.contrib(
                job=0, round=0, chunk=chunk, src=src, group=0, dtype=DType.FP32, elems_bits=elems
            )
            frames.append(traffic.frame_of(p, src=src, udp_checksum=False))
    expected = [out for f in frames for out in golden.feed_frame(f)]
    out, st = h.run(
        packets_to_beats(frames, width),
        latency=(1, 300),
        reorder=True,
        pause=0.2,
        seed=20,
        mem_bytes=core.ext["map"].port_bytes,
        ctl_writes=control.config_writes(**site, core=core),
        ctl_reads=control.counter_reads(),
        drain_cycles=1000,
        max_cycles=2 * slots + 200 * len(frames),
    )
    got = beats_to_packets(out, width)
    assert control.decode_counters(st.ctl_reads) == golden.counters
    assert got == expected and golden.counters["results"] == len(chunks)
    assert golden.counters["results_reemitted"] == 6
    assert sum(p["r"] for p in st.ports) == len(chunks) * members * core.words
