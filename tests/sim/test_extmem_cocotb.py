"""The core with external member buffers on Verilator (cocotb), its AXI4 ports answered by a memory
model with latency, back-pressure and reordering (``tests.support.tb_extmem``), against the golden model
at W = 64 and 512. ``make test`` runs, at W = 512, the latency and back-pressure sweep
(``extmem_matches_golden``: latencies 1..8 and 1..400, and 1..400 under stress) on 40 packets, with the
handshake checker on every port; ``make test-all`` adds the whole module (error responses, the eviction
scenario) at both widths. Both W = 512 runs share one build. At W = 64 the same checks run in
``make test`` through the C++ harness on the same core (tests/sim/test_extmem_harness.py: the sweep's
three latency runs on 1500 packets, the error response, the eviction scenario under every late drop, the
AXI rules checked by the harness's memory), so the W = 64 cocotb runs, a Verilated build of their own, are
in ``make test-all``. At W = 64 the module also runs with the slot table's states in block memories
(``slot_states="block"``, the 2^20-slot build's, forced on here so that its busy generations meet slots
reused at once), when slow."""

import pytest

from tests.support import tb_core
from tests.support.quiet import unused_ok
from wanreduce.sim.verify.cocotb_build import PORTS_ONLY
from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl

MEM_PORTS = 2


def _core(width, states="lut"):
    """The core and its cache key (the W = 512 conversion takes a quarter of a minute: done once, kept)."""
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.sim.verilator.agg_driver import build_key

    config = tb_core.CORE.replace(width=width)
    options = dict(buffers="external", mem_ports=MEM_PORTS, mem_addr_width=16, slot_states=states)
    with unused_ok():
        return AggregatorCore(config, **options), build_key(config, options)


@pytest.mark.parametrize(
    "width,bank_bits,n_packets,only,states",
    [
        # The harness runs these checks on this core in make test (module docstring).
        pytest.param(64, 1, 120, None, "lut", marks=pytest.mark.slow),
        pytest.param(64, 1, 200, None, "lut", marks=pytest.mark.slow),
        # Block slot states behind external memory: make test runs them through the C++ harness
        # (tests/sim/test_extmem_harness.py, latency sweeps and back-pressure); this third Verilator build
        # of the external core adds the cocotbext-axi memory to them, in make test-all.
        pytest.param(64, 1, 200, None, "block", marks=pytest.mark.slow),
        (512, 0, 40, "extmem_matches_golden", "lut"),
        pytest.param(512, 0, 200, None, "lut", marks=pytest.mark.slow),
    ],
    ids=["w64", "w64-long", "w64-block", "w512-sweep", "w512"],
)
def test_extmem_matches_golden(width, bank_bits, n_packets, only, states):
    core, key = _core(width, states)
    assert core.slot_table.states == states
    mm = core.ext["map"]
    params = {
        "n_packets": n_packets,
        "seed": width + 1,
        "ordered": True,
        "bank_bits": bank_bits,
        "mem_bytes": 1 << 16,
        "stride_bytes": mm.stride_bytes,
        # The eviction scenario: a real eviction and three late drops at W = 64, every late drop at W = 512.
        "evict_kinds": [None, "truncated", "udp_checksum", "count_short"] if width == 64 else None,
        "mem_ports": MEM_PORTS,
        **core.config.as_dict(),
    }
    # A filter, not ``testcase``: the runner anchors a test case's name at the end, and the sweep's runs are
    # named after their parameters.
    env = {"COCOTB_TEST_FILTER": only} if only else None
    runner.run(
        core,
        top="agg_core_extmem",
        module="tests.support.tb_extmem",
        params=params,
        extra_env=env,
        key=key,
        build_args=PORTS_ONLY,
    )
