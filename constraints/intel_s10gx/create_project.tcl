# Create the Quartus Prime Pro project of wanreduce on the Intel Stratix 10 GX FPGA Development Kit.
#
#   wanreduce verilog --bypass-bytes 0 -o build/verilog   # the end-point build: one 100G port
#   quartus_sh -t constraints/intel_s10gx/create_project.tcl build/verilog build/quartus_s10gx
#
# The Low Latency 100G Ethernet IP is generated once in Platform Designer / IP Catalog as `ll100g`
# (Stratix 10 H-tile, 100GE with RS-FEC, 512-bit "l8" Avalon-ST client interface, no flow control, RX
# and TX in the TX MAC clock domain) and its .ip file placed next to this script; the pin assignments come
# from the kit's golden-top .qsf (Intel's board test system), which this script sources if present as
# s10gx_pins.tcl. Documented, not run here (no Quartus in this repository's CI).

set here    [file dirname [file normalize [info script]]]
set vdir    [file normalize [expr {$argc > 0 ? [lindex $argv 0] : "build/verilog"}]]
set projdir [file normalize [expr {$argc > 1 ? [lindex $argv 1] : "build/quartus_s10gx"}]]
if {![file exists $vdir/wanreduce_axi.v]} {
    error "no $vdir/wanreduce_axi.v: run `wanreduce verilog --bypass-bytes 0 -o $vdir` first"
}
file mkdir $projdir
cd $projdir
project_new wanreduce_s10gx -overwrite
set_global_assignment -name FAMILY "Stratix 10"
set_global_assignment -name DEVICE 1SG280HU2F50E2VG
set_global_assignment -name TOP_LEVEL_ENTITY s10gx_top
set_global_assignment -name VERILOG_FILE $vdir/wanreduce_axi.v
set_global_assignment -name VERILOG_FILE $here/avst_axis.v
if {[file exists $here/s10gx_top.v]} { set_global_assignment -name VERILOG_FILE $here/s10gx_top.v }
if {[file exists $here/ll100g.ip]} { set_global_assignment -name IP_FILE $here/ll100g.ip }
set_global_assignment -name SDC_FILE $here/wanreduce_s10gx.sdc
# Amaranth's synchronisers are plain two-flop chains: let the fitter find them and keep them together.
set_global_assignment -name SYNCHRONIZER_IDENTIFICATION AUTO
set_global_assignment -name OPTIMIZATION_MODE "SUPERIOR PERFORMANCE"
if {[file exists $here/s10gx_pins.tcl]} { source $here/s10gx_pins.tcl }
project_close
puts "Project in $projdir: quartus_sh --flow compile wanreduce_s10gx"
