"""The core with external member buffers on Verilator (cocotb), its AXI4 ports answered by a memory
model with latency, back-pressure and reordering (``tests.support.tb_extmem``), against the golden model
at W = 64 and 512. ``make test`` runs every test at W = 64; at W = 512 the latency and back-pressure sweep
(``extmem_matches_golden``: latencies 1..8 and 1..400, and 1..400 under stress) on a shorter workload and
the whole module (error responses, the eviction scenario, 200 packets) are marked slow: the W = 512 build
alone takes minutes of ``make test``'s budget, and the C++ harness covers the same rules at volume
(tests/sim/test_extmem_harness.py). Both W = 512 runs share one build. At W = 64 the module runs with
the slot table's states in LUT RAM (these 4-slot builds' default), and with them in block memories
(``slot_states="block"``, the 2^20-slot build's, forced on here so that its busy generations meet slots
reused at once) the sweep on a shorter workload in ``make test``, the whole module when slow."""

import warnings

import pytest

from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl

CONFIG = {"slots": 4, "members": 4, "slot_bytes": 64, "dests": 2, "jobs": 4, "rounds": 64, "mem_ports": 2}


def _core(width, states="lut"):
    from wanreduce.hw.core import AggregatorCore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AggregatorCore(
            width=width, entry="frame", buffers="external", mem_addr_width=16, slot_states=states, **CONFIG
        )


@pytest.mark.parametrize(
    "width,bank_bits,n_packets,only,states",
    [
        (64, 1, 200, None, "lut"),
        (64, 1, 80, "extmem_matches_golden", "block"),
        pytest.param(64, 1, 200, None, "block", marks=pytest.mark.slow),
        pytest.param(512, 0, 80, "extmem_matches_golden", "lut", marks=pytest.mark.slow),
        pytest.param(512, 0, 200, None, "lut", marks=pytest.mark.slow),
    ],
    ids=["w64", "w64-block-sweep", "w64-block", "w512-sweep", "w512"],
)
def test_extmem_matches_golden(width, bank_bits, n_packets, only, states):
    core = _core(width, states)
    assert core.slot_table.states == states
    mm = core.ext["map"]
    params = {
        "width": width,
        "n_packets": n_packets,
        "seed": width + 1,
        "ordered": True,
        "bank_bits": bank_bits,
        "mem_bytes": 1 << 16,
        "stride_bytes": mm.stride_bytes,
        # The eviction scenario: a real eviction and three late drops in make test, every late drop when slow.
        "evict_kinds": [None, "truncated", "udp_checksum", "count_short"] if width == 64 else None,
        **CONFIG,
    }
    # A filter, not ``testcase``: the runner anchors a test case's name at the end, and the sweep's runs are
    # named after their parameters.
    env = {"COCOTB_TEST_FILTER": only} if only else None
    runner.run(core, top="agg_core_extmem", module="tests.support.tb_extmem", params=params, extra_env=env)
