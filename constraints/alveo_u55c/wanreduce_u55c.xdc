# wanreduce on an Alveo U55C (xcu55c-fsvh2892-2L-e): the aggregator behind the CMAC on QSFP0.
# Used by create_project.tcl with u55c_top.v; documented, not run in this repository's CI (no Vivado here).
#
# Clocks
#   core_clk  the CMAC's TX user clock (gt_txusrclk2), 322.265625 MHz: the aggregator's `clk`. The CMAC IP's
#             own XDC creates it as a generated clock of the GT; nothing to create here.
#   init_clk  100 MHz board oscillator (clk_100mhz_0): CMAC init/DRP clock and the AXI4-Lite clock
#             (`axil_clk`), driving the JTAG-to-AXI master that reaches the registers.
#   qsfp0_refclk  161.1328125 MHz GT reference of QSFP0 (the CMAC IP places the GT quad).

# ---- pins ---------------------------------------------------------------------------------------------
set_property -dict {PACKAGE_PIN BK10 IOSTANDARD LVDS} [get_ports clk_100mhz_p]
set_property -dict {PACKAGE_PIN BL10 IOSTANDARD LVDS} [get_ports clk_100mhz_n]
set_property -dict {PACKAGE_PIN AD42} [get_ports qsfp0_refclk_p]
set_property -dict {PACKAGE_PIN AD43} [get_ports qsfp0_refclk_n]
# Reset push button (active high) and the HBM catastrophic-temperature output, which must be driven low.
set_property -dict {PACKAGE_PIN BG45 IOSTANDARD LVCMOS18} [get_ports reset_btn]
set_property -dict {PACKAGE_PIN BE45 IOSTANDARD LVCMOS18} [get_ports hbm_cattrip]
# QSFP0 activity / link LEDs.
set_property -dict {PACKAGE_PIN BL13 IOSTANDARD LVCMOS18 SLEW SLOW DRIVE 8} [get_ports {qsfp0_led[0]}]
set_property -dict {PACKAGE_PIN BK11 IOSTANDARD LVCMOS18 SLEW SLOW DRIVE 8} [get_ports {qsfp0_led[1]}]

create_clock -period 10.000 -name init_clk [get_ports clk_100mhz_p]
create_clock -period 6.206 -name qsfp0_refclk [get_ports qsfp0_refclk_p]

set_false_path -from [get_ports reset_btn]
set_false_path -to [get_ports {hbm_cattrip qsfp0_led[*]}]

# ---- the aggregator's clock-domain crossing --------------------------------------------------------
# Every path between `clk` (core) and `axil_clk` (AXI4-Lite) goes through the two amaranth.lib.fifo.AsyncFIFO
# of the AXI4-Lite bridge: Gray-coded pointers through two-flop synchronisers (`*_cdc/stage0`, `stage1`) and
# the FIFO's storage, read only after the pointer that covers it has crossed. So the crossings need a bound
# on their skew (one period of the faster clock), not a timing check against either clock.
set core_clk [get_clocks -of_objects [get_pins -hier -filter {NAME =~ */cmac/gt_txusrclk2}]]
set axil_clk [get_clocks init_clk]
set_max_delay -datapath_only -from $core_clk -to $axil_clk 3.103
set_max_delay -datapath_only -from $axil_clk -to $core_clk 3.103
set_property ASYNC_REG TRUE [get_cells -hier -filter {NAME =~ *agg/*_cdc/stage*_reg*}]
# The FIFOs' reset synchronisers (`rst_cdc`) take the other domain's reset asynchronously.
set_false_path -to [get_pins -hier -filter {NAME =~ *agg/*rst_cdc/*/PRE || NAME =~ *agg/*rst_cdc/*/CLR}]

# The aggregator's own reset: synchronised to `clk` in u55c_top.v (xpm_cdc_sync_rst), so only the
# synchroniser's input is asynchronous.
set_false_path -to [get_pins -hier -filter {NAME =~ *rst_core_sync/*syncstages_ff_reg[0]/D}]
set_false_path -to [get_pins -hier -filter {NAME =~ *rst_axil_sync/*syncstages_ff_reg[0]/D}]
