"""The Ethernet board top end to end on Verilator: RGMII pins driven by cocotbext-eth's PHY model,
control over the UART, RESULTs byte for byte against the golden model (``wanreduce.sim.verify.eth_board_tb``).
One build serves both runs. Marked slow: the board top's build (the whole core with the MAC) alone takes
about 2.5 minutes on two busy cores, beyond what ``make test`` may add; ``make test-all`` runs it, and
``make test`` keeps the MAC's own tests (tests/hw/test_eth_mac.py)."""

import json

import pytest

from wanreduce.sim.verilator import runner

pytestmark = [pytest.mark.rtl, pytest.mark.slow]


@pytest.fixture(scope="module")
def board_build():
    from wanreduce.sim.verify import eth_board_tb, eth_tb

    text = eth_tb.stable_verilog("wanreduce.sim.verify.eth_board_tb:board_design", top=eth_board_tb.TOP)
    return runner.build(text, top=eth_board_tb.TOP)


@pytest.mark.parametrize("case", ["board_end_to_end", "board_uart_answers"])
def test_board(board_build, case):
    runner.run(
        board_build,
        top=board_build.top,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase=case,
        params={"seed": 3, "n_packets": 80},
    )


SCHEDULE = {
    "version": 2,
    "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC"],
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5]]}, {"groups": [[0, 1], [2, 3], [4, 5]]}],
    "params": {"chunk_bytes": 64, "memory_bytes": 4 * 3 * 64},
    "metrics": {},
}


def test_board_cli_over_a_pty(board_build, tmp_path):
    """``wanreduce board`` configures the Verilated board top through a pseudo-terminal."""
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(SCHEDULE))
    runner.run(
        board_build,
        top=board_build.top,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase="board_cli_over_pty",
        params={"schedule": str(path), "rank": 4},
    )


def test_inline_board_end_to_end():
    """The two-port in-line board: WAN into the core, RESULTs and the bypass out of the LAN port."""
    from wanreduce.sim.verify import eth_board_tb, eth_tb

    text = eth_tb.stable_verilog(
        "wanreduce.sim.verify.eth_board_tb:inline_design", top=eth_board_tb.INLINE_TOP
    )
    runner.run(
        text,
        top=eth_board_tb.INLINE_TOP,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase="inline_end_to_end",
        params={"seed": 5, "n_packets": 60},
    )
