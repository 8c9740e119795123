"""The Ethernet board build's figures: nextpnr's per-net Fmax mapped to the receive and core clocks."""

from wanreduce.sim.synth.eth_flow import figures


def test_clock_nets_map_to_their_domains():
    # Net names as nextpnr reports them for the ECPIX-5 Ethernet top (synthesis names the PLL's CLKOP
    # net after one of its loads).
    fmax = {"$glbnet$board.bridge.clk": 90.0, "$glbnet$board.mac.rx_reset.async_ff_clk": 130.0}
    assert figures({"fmax_all": fmax}) == {
        "board_eth_rx_fmax_mhz": 130.0,
        "board_eth_tx_fmax_mhz": 90.0,
        "board_core_fmax_mhz": 90.0,
    }
    assert figures({"fmax_all": {"$glbnet$board.bridge.clk": 90.0}})["board_eth_rx_fmax_mhz"] is None
