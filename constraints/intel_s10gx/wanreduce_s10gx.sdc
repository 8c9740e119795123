# wanreduce on the Intel Stratix 10 GX FPGA Development Kit (1SG280HU2F50E2VG): the aggregator behind the
# Low Latency 100G Ethernet IP (H-tile) on the QSFP28 cage. Documented, not run here (no Quartus in CI).
#
# Clocks
#   clk_txmac (from the 100G IP's TX PLL, 390.625 MHz): the aggregator's `clk`; the IP's own SDC creates it
#             and derive_pll_clocks picks it up. RX uses clk_rxmac at the same rate; the top runs the
#             aggregator on clk_txmac and crosses RX with the IP's RX FIFO option (or a dual-clock FIFO).
#   clk_100   the kit's 100 MHz oscillator: management/AXI4-Lite (`axil_clk`).
#   refclk_qsfp  644.53125 MHz QSFP28 transceiver reference.

create_clock -name clk_100     -period 10.000 [get_ports clk_100]
create_clock -name refclk_qsfp -period 1.5515 [get_ports refclk_qsfp]
derive_pll_clocks -create_base_clocks
derive_clock_uncertainty

set core_clk [get_clocks -nowarn {*|clk_txmac *clk_txmac*}]
set axil_clk [get_clocks clk_100]

# The aggregator's only clock-domain crossing is its AXI4-Lite bridge: two Amaranth AsyncFIFOs (Gray-coded
# pointers through two-flop synchronisers named *_cdc|stage0/stage1). Bound the skew of the crossing paths
# to one period of the faster clock instead of timing them against either clock.
set_max_delay -from $core_clk -to $axil_clk 2.560
set_max_delay -from $axil_clk -to $core_clk 2.560
set_min_delay -from $core_clk -to $axil_clk -5.000
set_min_delay -from $axil_clk -to $core_clk -5.000
# The FIFOs' reset synchronisers take the other domain's reset asynchronously.
set_false_path -to [get_registers -nowarn {*|rst_cdc|stage0*}]

set_false_path -from [get_ports {cpu_resetn}]
set_false_path -to   [get_ports {user_led[*]}]
