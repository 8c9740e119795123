"""The gigabit RGMII MAC on Verilator, driven on its pins by cocotbext-eth's PHY model (the testbench and
its independent expectations are ``wanreduce.sim.verify.eth_tb``). One build serves the three runs."""

import json

import pytest

from wanreduce.sim.verify.cocotb_build import PORTS_ONLY
from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl


@pytest.fixture(scope="module")
def mac_build():
    from wanreduce.sim.verify import eth_tb

    text = eth_tb.stable_verilog("wanreduce.sim.verify.eth_tb:mac_design", top=eth_tb.TOP)
    return runner.build(text, top=eth_tb.TOP, build_args=PORTS_ONLY)


@pytest.mark.parametrize("case", ["mac_receives", "mac_transmits"])
def test_mac(mac_build, case):
    runner.run(
        mac_build,
        top=mac_build.top,
        module="wanreduce.sim.verify.eth_tb",
        testcase=case,
        params={"width": 64, "seed": 1},
    )


@pytest.mark.slow  # the bench module measures it (sim/bench/eth.py)
def test_mac_line_rate(mac_build, tmp_path):
    out = tmp_path / "rate.json"
    runner.run(
        mac_build,
        top=mac_build.top,
        module="wanreduce.sim.verify.eth_tb",
        testcase="mac_line_rate",
        params={"width": 64, "seed": 1, "frames": 8, "out": str(out)},
    )
    rate = json.loads(out.read_text())
    assert rate["eth_rx_line_rate_fraction"] >= 0.99
    assert rate["eth_tx_line_rate_fraction"] >= 0.99
