"""The Ethernet board builds' figures: nextpnr's per-net Fmax mapped to the receive, transmit and core
clock domains, each with the constraint it is held to."""

from wanreduce.cli import main
from wanreduce.sim.synth.eth_flow import figures

# Net names as nextpnr reports them (synthesis names a clock net after one of its loads): the core's
# net here carries a receive-side name, which only its constraint tells apart.
TWO_PORTS = {
    "$glbnet$board.wan_mac.rx_cdc.r_clk": {"achieved": 104.5, "constraint": 100},
    "$glbnet$board.wan_mac.rx_reset.async_ff_clk": {"achieved": 131.0, "constraint": 125},
    "$glbnet$board.lan_mac.rx_reset.async_ff_clk": {"achieved": 128.0, "constraint": 125},
    "$glbnet$board.lan_mac.tx_mac.clk": {"achieved": 140.0, "constraint": 125},
}


def test_clock_nets_map_to_their_domains():
    got = figures({"fmax_all": TWO_PORTS, "core_mhz": 100, "luts": 9, "ebr": 3, "seed": 2}, "board_inline")
    assert got == {
        "board_inline_eth_rx_fmax_mhz": 128.0,  # the slower of the two receive clocks
        "board_inline_eth_rx_target_mhz": 125,
        "board_inline_eth_tx_fmax_mhz": 140.0,
        "board_inline_eth_tx_target_mhz": 125,
        "board_inline_core_fmax_mhz": 104.5,
        "board_inline_core_target_mhz": 100,
        "board_inline_luts": 9,
        "board_inline_ebr": 3,
        "board_inline_eth_seed": 2,
    }


def test_one_port_names_and_a_missing_clock():
    fmax = {"$glbnet$board.bridge.clk": {"achieved": 101.0, "constraint": 100}}
    got = figures({"fmax_all": fmax, "core_mhz": 100, "luts": 1, "ebr": 2, "seed": 1})
    assert got["board_core_fmax_mhz"] == 101.0 and got["board_eth_luts"] == 1 and got["board_eth_ebr"] == 2
    assert got["board_eth_rx_fmax_mhz"] is None and got["board_eth_tx_target_mhz"] is None


def test_a_wrong_board_gets_one_line(capsys):
    assert main(["synth", "eth", "--board", "icebreaker"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "icebreaker" in err
