# Create the Vivado project of wanreduce on an Alveo U55C: generated Verilog + CMAC + XDC.
#
#   wanreduce verilog --bypass-bytes 0 -o build/verilog   # W=512, the AXI top wanreduce_axi, one port
#   vivado -mode batch -source constraints/alveo_u55c/create_project.tcl -tclargs build/verilog build/vivado
#
# The external-buffer build (docs/extmem.md), its member buffers in the card's HBM:
#
#   wanreduce verilog --bypass-bytes 0 --buffers external --mem-ports 2 --slots 1048576 \
#       --mem-addr-width 33 --mem-id-width 6 -o build/verilog
#
# is recognised from wanreduce_axi.json; hbm.tcl then adds the HBM controller, its clocking and one
# SmartConnect per memory port, and u55c_top.v connects them (WANREDUCE_HBM).
#
# Then `launch_runs impl_1 -to_step write_bitstream` in the project, or open it in the GUI. Documented, not
# run in this repository's CI (Vivado is not installed there). Tested parameter names are those of
# cmac_usplus 3.1, axis_data_fifo 2.0 and jtag_axi 1.2; check them against your Vivado's IP catalog.

set here     [file dirname [file normalize [info script]]]
set vdir     [file normalize [expr {$argc > 0 ? [lindex $argv 0] : "build/verilog"}]]
set projdir  [file normalize [expr {$argc > 1 ? [lindex $argv 1] : "build/vivado_u55c"}]]
set part     xcu55c-fsvh2892-2L-e

if {![file exists $vdir/wanreduce_axi.v]} {
    error "no $vdir/wanreduce_axi.v: run `wanreduce verilog --bypass-bytes 0 -o $vdir` first"
}

create_project wanreduce_u55c $projdir -part $part -force
catch {set_property board_part xilinx.com:au55c:part0:1.0 [current_project]}

add_files -norecurse [list $vdir/wanreduce_axi.v $here/u55c_top.v]
add_files -fileset constrs_1 -norecurse $here/wanreduce_u55c.xdc
set_property top u55c_top [current_fileset]

# External member buffers: the build's memory ports, address and ID widths from its JSON.
set fp [open $vdir/wanreduce_axi.json]
set json [read $fp]
close $fp
if {[regexp {"buffers":\s*"external"} $json]} {
    if {![regexp {"mem_ports":\s*(\d+)} $json -> mem_ports]
        || ![regexp {"m_axi_mem0__awaddr":\s*\{\s*"dir":\s*"output",\s*"bits":\s*(\d+)} $json -> mem_addr]
        || ![regexp {"m_axi_mem0__awid":\s*\{\s*"dir":\s*"output",\s*"bits":\s*(\d+)} $json -> mem_id]} {
        error "$vdir/wanreduce_axi.json names external buffers but not their ports: rerun `wanreduce verilog`"
    }
    source $here/hbm.tcl
    wanreduce_hbm $projdir $mem_ports $mem_addr $mem_id
}

# 100G Ethernet subsystem on QSFP0 (GT quad 130, 161.1328125 MHz reference), AXI4-Stream user interface,
# RS-FEC, shared logic in the core (it instantiates the reference clock buffer).
create_ip -name cmac_usplus -vendor xilinx.com -library ip -module_name cmac_usplus_0
set_property -dict [list \
    CONFIG.CMAC_CAUI4_MODE {1} \
    CONFIG.NUM_LANES {4x25} \
    CONFIG.GT_REF_CLK_FREQ {161.1328125} \
    CONFIG.GT_DRP_CLK {100} \
    CONFIG.USER_INTERFACE {AXIS} \
    CONFIG.TX_FLOW_CONTROL {0} \
    CONFIG.RX_FLOW_CONTROL {0} \
    CONFIG.INCLUDE_RS_FEC {1} \
    CONFIG.ENABLE_AXI_INTERFACE {0} \
    CONFIG.INCLUDE_SHARED_LOGIC {2} \
    CONFIG.CMAC_CORE_SELECT {CMACE4_X0Y3} \
    CONFIG.GT_GROUP_SELECT {X0Y24~X0Y27} \
] [get_ips cmac_usplus_0]

# TX store-and-forward FIFO: the CMAC must not run dry inside a frame.
create_ip -name axis_data_fifo -vendor xilinx.com -library ip -module_name axis_data_fifo_0
set_property -dict [list \
    CONFIG.TDATA_NUM_BYTES {64} CONFIG.HAS_TKEEP {1} CONFIG.HAS_TLAST {1} \
    CONFIG.FIFO_DEPTH {64} CONFIG.FIFO_MODE {2} CONFIG.IS_ACLK_ASYNC {0} \
] [get_ips axis_data_fifo_0]

# Registers from the hardware manager: an AXI4-Lite master over JTAG.
create_ip -name jtag_axi -vendor xilinx.com -library ip -module_name jtag_axi_0
set_property -dict [list CONFIG.PROTOCOL {2}] [get_ips jtag_axi_0]

generate_target all [get_ips]
synth_ip [get_ips]

# The core's reorder buffer (S x G_max x C bytes) is inferred memory; at the default 612 KiB Vivado picks
# URAM for the member buffers when they are deep enough, BRAM otherwise.
set_property STEPS.SYNTH_DESIGN.ARGS.FLATTEN_HIERARCHY rebuilt [get_runs synth_1]
set_property STEPS.SYNTH_DESIGN.ARGS.RETIMING true [get_runs synth_1]
puts "Project in $projdir: launch_runs impl_1 -to_step write_bitstream -jobs 8"
