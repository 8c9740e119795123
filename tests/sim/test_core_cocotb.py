"""The aggregator core on Verilator (cocotb) against the golden aggregator, at W = 64 and 512.

Each run is four cocotb tests (idle gaps on/off × output back-pressure on/off) over a host-model workload
of 160 packets: several jobs, rounds and chunks in random WAN order, duplicates, stale rounds,
senders ahead of the window and every kind of malformed frame or payload. The frame-entry runs give the
groups as summation orders that are not ascending and put the jobs' rounds in round banks smaller than the
slot table (bank bits 1 and 0 of log2 S = 2); the payload-entry run keeps ascending orders and the reset
banks (slot = chunk mod S). Each run also checks that three orders of the same group give the three
different RESULTs the golden model computes. The testbench is ``tests.support.tb_core``; every RESULT is
compared byte for byte and every counter exactly.

``make test`` runs the W = 512 build here; the W = 64 runs' checks, with the same workloads, it runs through
the C++ harness on the fuzzer's builds of the same core size (``tests/sim/test_core_harness.py``), so these
two Verilated builds are in ``make test-all``.
"""

import pytest

from tests.support import tb_core
from tests.support.quiet import unused_ok
from wanreduce.sim.verify.cocotb_build import PORTS_ONLY
from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl


def _core(config):
    """The core of ``config`` and its cache key."""
    from wanreduce.hw.core import AggregatorCore
    from wanreduce.sim.verilator.agg_driver import build_key

    with unused_ok():
        return AggregatorCore(config), build_key(config, {})


@pytest.mark.parametrize(
    "width,entry,ordered,bank_bits",
    [
        # make test runs these checks at W = 64 through the harness (module docstring).
        pytest.param(64, "frame", True, 1, marks=pytest.mark.slow),
        (512, "frame", True, 0),
        pytest.param(64, "payload", False, None, marks=pytest.mark.slow),
    ],
)
def test_core_matches_golden(width, entry, ordered, bank_bits):
    config = tb_core.CORE.replace(width=width, entry=entry)
    params = {"n_packets": 160, "seed": width, "ordered": ordered, "bank_bits": bank_bits, **config.as_dict()}
    core, key = _core(config)
    runner.run(
        core,
        top=f"agg_core_{entry}",
        module="tests.support.tb_core",
        params=params,
        key=key,
        build_args=PORTS_ONLY,
    )
