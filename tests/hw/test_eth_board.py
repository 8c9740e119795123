"""The Ethernet board top end to end on Verilator: RGMII pins driven by cocotbext-eth's PHY model,
control over the UART, RESULTs byte for byte against the golden model (``wanreduce.sim.verify.eth_board_tb``).
One build serves both runs. Marked slow: the board top's build (the whole core with the MAC) alone takes
about 2.5 minutes on two busy cores, beyond what ``make test`` may add; ``make test-all`` runs it, and
``make test`` keeps the MAC's own tests (tests/hw/test_eth_mac.py)."""

import pytest

from wanreduce.sim.verilator import runner

pytestmark = [pytest.mark.rtl, pytest.mark.slow]


@pytest.fixture(scope="module")
def board_build():
    from wanreduce.sim.verify import eth_board_tb

    return runner.build(eth_board_tb.board_design(), top=eth_board_tb.TOP)


@pytest.mark.parametrize("case", ["board_end_to_end", "board_uart_answers"])
def test_board(board_build, case):
    runner.run(
        board_build,
        top=board_build.top,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase=case,
        params={"seed": 3, "n_packets": 80},
    )
