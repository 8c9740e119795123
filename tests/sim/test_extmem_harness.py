"""The core with external member buffers through the C++ harness, its AXI4 ports answered by the harness's
memory model (``sim/verilator/axi_ram.h``: latency, back-pressure, read bursts of different IDs interleaved
and reordered, AXI rules checked): thousands of frames of ``tb_core``'s workload (jobs, rounds, chunks in
WAN order, duplicates, stale rounds, malformed packets), every RESULT byte and every counter against the
golden model. W = 64 in ``make test``; W = 512 (a longer build) is marked slow."""

import warnings

import numpy as np
import pytest

from tests.support import tb_core
from wanreduce.host import control
from wanreduce.host.golden import GoldenAggregator
from wanreduce.sim.verify import traffic

pytestmark = pytest.mark.rtl

CONFIG = {"slots": 4, "members": 4, "slot_bytes": 64, "dests": 2, "jobs": 4, "rounds": 64, "mem_ports": 2}
RUNS = [  # latency range, pause, reorder, input idles, output back-pressure
    ((1, 8), 0.0, False, 0.0, 0.0),
    ((1, 400), 0.0, True, 0.0, 0.0),
    ((1, 400), 0.4, True, 0.3, 0.5),
]


def _harness(width):
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.sim.verilator.axi_harness import AxiHarness

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        core = AggregatorCore(width=width, entry="frame", buffers="external", mem_addr_width=16, **CONFIG)
    return core, AxiHarness(core, top="agg_core_axi", key=("AggregatorCore", width, sorted(CONFIG.items())))


def _workload(seed, ordered):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 8))
    jobs, packets = traffic.scenario(
        rng, rank=rank, slots=4, slot_bytes=64, members=4, n_packets=1500, frames=True, ordered=ordered
    )
    site = dict(rank=rank, jobs=jobs, mac=tb_core.MAC, ip=tb_core.IP, destinations=tb_core.DESTS)
    golden = GoldenAggregator(**site, slots=4, members=4, slot_bytes=64)
    expected = [out for p in packets for out in golden.feed_frame(p)]
    return site, golden, packets, expected


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_extmem_volume_matches_golden(width):
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core, h = _harness(width)
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


def test_extmem_error_response_drops_the_chunk():
    """SLVERR on member 0 of slot 1 (port 1): that slot's chunks are dropped and counted, never summed."""
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core, h = _harness(64)
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
        drain_cycles=300,
    )
    got = beats_to_packets(out, 64)
    assert st.mem_errors > 0 and st.mem_drops > 0, "the error response was not counted"
    assert len(got) < len(expected), "every RESULT left although chunks were dropped"
    allowed = {bytes(e) for e in expected}
    assert all(bytes(g) in allowed for g in got), "a RESULT left that the golden model never sent"
