"""The Ethernet board top end to end on Verilator: RGMII pins driven by cocotbext-eth's PHY model,
control over the UART, RESULTs byte for byte against the golden model (``wanreduce.sim.verify.eth_board_tb``).

One build of the board top (DDR cell models, a small core) serves the module: the end-to-end run (UART
answers, configuration, the workload with the MAC's error cases, counters), in ``make test``, and
``wanreduce board`` over a pseudo-terminal, in ``make test-all``. The build keeps only the top's ports
public (``wanreduce.sim.verify.cocotb_build.PORTS_ONLY``), which makes it cheap enough for ``make test``.
The two-port in-line board is a second build and stays in ``make test-all`` too."""

import json

import pytest

from wanreduce.sim.verilator import runner

pytestmark = pytest.mark.rtl


@pytest.fixture(scope="module")
def board_build():
    from wanreduce.sim.verify import eth_board_tb

    return eth_board_tb.board_build()


def test_board_end_to_end(board_build):
    runner.run(
        board_build,
        top=board_build.top,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase="board_end_to_end",
        params={"seed": 3, "n_packets": 80},
    )


SCHEDULE = {
    "version": 2,
    "sites": ["AMS", "BAR", "FRA", "LAX", "LON", "NYC"],
    "rounds": [{"groups": [[0, 2, 4], [1, 3, 5]]}, {"groups": [[0, 1], [2, 3], [4, 5]]}],
    "params": {"chunk_bytes": 64, "memory_bytes": 4 * 3 * 64},
    "metrics": {},
}


@pytest.mark.slow  # the end-to-end run already covers the UART; this adds the CLI's ~800 bytes over it
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


@pytest.mark.slow  # a second board build (two MACs, a core with a bypass port)
def test_inline_board_end_to_end():
    """The two-port in-line board: WAN into the core, RESULTs and the bypass out of the LAN port."""
    from wanreduce.sim.verify import eth_board_tb

    build = eth_board_tb.board_build("inline_design", eth_board_tb.INLINE_TOP)
    runner.run(
        build,
        top=build.top,
        module="wanreduce.sim.verify.eth_board_tb",
        testcase="inline_end_to_end",
        params={"seed": 5, "n_packets": 60},
    )
