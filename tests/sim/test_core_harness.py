"""Volume check (``make bench`` territory, marked slow): the core at every width through the C++ harness,
thousands of host-model packets per run with idle gaps and output back-pressure, every RESULT and counter
against the golden aggregator. Run 0 of each build keeps ascending orders and the reset banks (slot = chunk
mod S); runs 1 and 2 give the groups as summation orders that are not ascending and put each job's rounds
in round banks of 2 and 4 of the 8 slots.

In ``make test`` (not slow): the checks of the core's W = 64 cocotb runs (``tests.support.tb_core``: the
mixed workload under idle gaps and output back-pressure on and off, byte for byte and every counter, and
three summation orders of one group giving the golden model's three different RESULTs), through the
harness on the fuzzer's W = 64 builds (``tests.support.cores.fuzz_core_sim``: the same 4 slots of 4 member
buffers of 64 bytes), which ``tests/sim/test_fuzz.py`` builds anyway; the cocotb runs at W = 64, a
Verilated build each, are in ``make test-all``."""

import numpy as np
import pytest

from tests.support import tb_core
from tests.support.cores import fuzz_core_sim
from tests.support.quiet import unused_ok
from wanreduce.host import control
from wanreduce.host.golden import Destination
from wanreduce.sim.verify import traffic
from wanreduce.spec import regmap
from wanreduce.spec.core import CoreConfig

pytestmark = pytest.mark.rtl

DESTS = [Destination("02:00:00:00:00:0a", "10.1.0.1", 47001), Destination("01:00:5e:57:53:07", "239.87.83.7")]
MAC, IP = "02:57:52:01:00:07", "10.87.83.7"
#: The core at every width and entry point: 8 slots of 5 member buffers of 128 bytes.
CORE = CoreConfig(slots=8, members=5, chunk_bytes=128, dests=2, bypass_bytes=0)


def _run(sim, packets, *, rank, jobs, bank_bits, seed):
    """Load the configuration through the control port, stream the packets, read the counters back."""
    from wanreduce.sim.verilator.agg_driver import beats_to_packets, packets_to_beats

    core = sim.core
    writes = control.config_writes(
        rank=rank,
        jobs=jobs,
        destinations=DESTS,
        mac=MAC,
        ip=IP,
        core=core,
        bank_bits=bank_bits,
    )
    beats = packets_to_beats(packets, sim.width)
    out, stats = sim.harness.run(
        beats,
        idle_prob=0.2 * seed,
        backpressure_prob=0.3 * seed,
        seed=seed,
        drain_cycles=4096,
        ctl_writes=writes,
        ctl_reads=control.counter_reads(),
        max_cycles=30_000 + 64 * len(beats),
    )
    assert not stats.timed_out
    assert len(stats.ctl_reads) == len(regmap.COUNTER_NAMES)
    return beats_to_packets(out, sim.width), control.decode_counters(stats.ctl_reads)


@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("entry", ["frame", "payload"])
def test_volume(width, entry):
    from wanreduce.sim.verilator.agg_driver import CoreSim

    with unused_ok():
        sim = CoreSim(CORE.replace(width=width, entry=entry))
    results = 0
    for seed, bits in enumerate([None, 1, 2]):
        rng = np.random.default_rng(1000 * width + seed)
        rank = int(rng.integers(0, 8))
        jobs, packets = traffic.scenario(
            rng,
            CORE,
            rank=rank,
            n_packets=2000,
            frames=entry == "frame",
            rounds=(40, 60),
            ordered=seed > 0,
            bank_bits=bits,
        )
        banks = None if bits is None else {j: bits for j in jobs}
        golden = traffic.golden_of(
            CORE, rank=rank, jobs=jobs, mac=MAC, ip=IP, destinations=DESTS, bank_bits=banks
        )
        want = []
        for p in packets:
            want += golden.feed_frame(p) if entry == "frame" else golden.feed_payload(p)
        got, counters = _run(sim, packets, rank=rank, jobs=jobs, bank_bits=banks, seed=seed)
        assert counters == golden.counters
        assert got == want
        assert golden.counters["results"] > 10
        results += golden.counters["results"]
    assert results > 50


#: Per entry point, the W = 64 cocotb run's workload parameters (``tests/sim/test_core_cocotb.py``).
COCOTB_RUNS = {"frame": {"ordered": True, "bank_bits": 1}, "payload": {"ordered": False, "bank_bits": None}}


@pytest.mark.parametrize("entry", ["frame", "payload"])
def test_cocotb_checks_on_the_fuzz_build(entry):
    with unused_ok():
        sim = fuzz_core_sim(entry)
    core, run = sim.config, COCOTB_RUNS[entry]
    c = tb_core.CORE
    assert (core.slots, core.members, core.chunk_bytes) == (c.slots, c.members, c.chunk_bytes)
    site = {"destinations": tb_core.DESTS, "mac": tb_core.MAC, "ip": tb_core.IP}
    for idle, backpressure in [(0.0, 0.0), (0.0, 0.5), (0.3, 0.0), (0.3, 0.5)]:
        seed = 64 * 4 + int(idle > 0) * 2 + int(backpressure > 0)
        rank, jobs, banks, packets, golden, expected = tb_core.golden_workload(core, seed, 160, **run)
        res = sim.run(
            packets, idle_prob=idle, backpressure_prob=backpressure, seed=seed, rank=rank, jobs=jobs,
            bank_bits=banks, **site,
        )  # fmt: skip
        assert res.counters == golden.counters, (idle, backpressure)
        assert res.packets == expected, (idle, backpressure)
        assert golden.counters["results"] > 0
    jobs, banks, packets, golden, expected = tb_core.order_workload(core, 64)
    res = sim.run(packets, seed=64, rank=0, jobs=jobs, bank_bits=banks, **site)
    assert res.packets == expected, "a RESULT is not the sum in the schedule's order"
