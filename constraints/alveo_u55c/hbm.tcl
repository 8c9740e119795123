# The U55C's HBM for the external-buffer build (docs/extmem.md): sourced by create_project.tcl when
# wanreduce_axi.json says `"buffers": "external"`. Written against AMD PG276 (AXI HBM controller), PG065
# (clocking wizard), PG164 (processor system reset) and PG247 (SmartConnect); NOT run here (no Vivado):
# every IP property, pin and wrapper port name below must be checked against your Vivado's IP catalog.
#
# What it builds, as block design `wanreduce_hbm` (wrapper `wanreduce_hbm_wrapper`):
#
#   core port k (AXI4, W = 512 bits, core_clk) -> SmartConnect k (width 512 -> 256, core_clk -> hbm_clk,
#   AXI4 -> the controller's AXI3 bursts of at most 16 beats) -> HBM pseudo-channel port pc_k = k * 32/K
#
# * Clocks: hbm_ref_clk (the board's 100 MHz oscillator) feeds HBM_REF_CLK_0/1, the APB clock and a
#   clocking wizard making hbm_clk (450 MHz, the controller's AXI clock: PG276's maximum, so a 256-bit port
#   carries 14.4 GB/s, the pseudo-channel's rate). core_clk is the core's (the CMAC's 322 MHz).
# * Addresses: the core's ports emit `mem_addr_width` (A) bits from 0. With A <= 29 each port stays in its
#   own 512 MB pseudo-channel (the controller's switch off) and gets that channel's base added; with A > 29
#   (the 2^20-slot build: 8 GiB per port at K = 2) the global switch is on, port k's window is
#   k * 2^A .. (k + 1) * 2^A - 1 of the 16 GB, and K * 2^A must not exceed 16 GB.
# * The catastrophic-temperature flags of both stacks leave as `hbm_cattrip` (the board's HBM_CATTRIP pin,
#   which must go high to cut HBM power when the stacks overheat).
#
# It also writes two Verilog include files next to the project, which u55c_top.v includes when
# WANREDUCE_HBM is defined: wanreduce_hbm.vh (the wires and the wrapper's instance, with the base address
# added) and wanreduce_hbm_ports.vh (the aggregator's m_axi_mem<k>__* connections).

proc wanreduce_hbm {projdir K A I} {
    if {[lsearch {1 2 4 8} $K] < 0} { error "the HBM flow takes 1, 2, 4 or 8 memory ports, not $K" }
    if {$K * (1 << $A) > (1 << 34)} {
        error "$K ports of 2^$A bytes need more than the U55C's 16 GB of HBM (--mem-addr-width)"
    }
    set switch [expr {$A > 29}]
    set step [expr {32 / $K}]

    create_bd_design wanreduce_hbm
    create_bd_port -dir I -type clk -freq_hz 322265625 core_clk
    create_bd_port -dir I -type rst core_resetn
    set_property CONFIG.POLARITY ACTIVE_LOW [get_bd_ports core_resetn]
    create_bd_port -dir I -type clk -freq_hz 100000000 hbm_ref_clk
    create_bd_port -dir O hbm_cattrip

    set ck [create_bd_cell -type ip -vlnv xilinx.com:ip:clk_wiz clk_hbm]
    set_property -dict [list CONFIG.PRIM_IN_FREQ {100.000} CONFIG.CLKOUT1_REQUESTED_OUT_FREQ {450.000} \
        CONFIG.USE_RESET {false} CONFIG.USE_LOCKED {true}] $ck
    connect_bd_net [get_bd_ports hbm_ref_clk] [get_bd_pins clk_hbm/clk_in1]
    set rs [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst_hbm]
    connect_bd_net [get_bd_pins clk_hbm/clk_out1] [get_bd_pins rst_hbm/slowest_sync_clk]
    connect_bd_net [get_bd_pins clk_hbm/locked] [get_bd_pins rst_hbm/dcm_locked]
    connect_bd_net [get_bd_ports core_resetn] [get_bd_pins rst_hbm/ext_reset_in]
    set ra [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst_apb]
    connect_bd_net [get_bd_ports hbm_ref_clk] [get_bd_pins rst_apb/slowest_sync_clk]
    connect_bd_net [get_bd_ports core_resetn] [get_bd_pins rst_apb/ext_reset_in]

    # The controller: both 8 GB stacks, 100 MHz references, APB left to its defaults (no user access), the
    # pseudo-channel ports used enabled and the rest off, their memory controllers on.
    set hbm [create_bd_cell -type ip -vlnv xilinx.com:ip:hbm hbm]
    set props [list CONFIG.USER_HBM_DENSITY {16GB} CONFIG.USER_HBM_STACK {2} CONFIG.USER_APB_EN {false} \
        CONFIG.USER_HBM_REF_CLK_0 {100} CONFIG.USER_HBM_REF_CLK_1 {100} CONFIG.USER_AXI_CLK_FREQ {450} \
        CONFIG.USER_SWITCH_ENABLE_00 [expr {$switch ? "TRUE" : "FALSE"}] \
        CONFIG.USER_SWITCH_ENABLE_01 [expr {$switch ? "TRUE" : "FALSE"}]]
    for {set pc 0} {$pc < 32} {incr pc} {
        set on [expr {$pc % $step == 0 ? "true" : "false"}]
        lappend props CONFIG.USER_SAXI_[format %02d $pc] $on
    }
    for {set mc 0} {$mc < 16} {incr mc} {
        lappend props CONFIG.USER_MC_ENABLE_[format %02d $mc] TRUE
    }
    set_property -dict $props $hbm
    foreach s {0 1} {
        connect_bd_net [get_bd_ports hbm_ref_clk] [get_bd_pins hbm/HBM_REF_CLK_$s]
        connect_bd_net [get_bd_ports hbm_ref_clk] [get_bd_pins hbm/APB_${s}_PCLK]
        connect_bd_net [get_bd_pins rst_apb/peripheral_aresetn] [get_bd_pins hbm/APB_${s}_PRESET_N]
    }
    set cat [create_bd_cell -type ip -vlnv xilinx.com:ip:util_vector_logic cattrip_or]
    set_property -dict [list CONFIG.C_SIZE {1} CONFIG.C_OPERATION {or}] $cat
    connect_bd_net [get_bd_pins hbm/DRAM_0_STAT_CATTRIP] [get_bd_pins cattrip_or/Op1]
    connect_bd_net [get_bd_pins hbm/DRAM_1_STAT_CATTRIP] [get_bd_pins cattrip_or/Op2]
    connect_bd_net [get_bd_pins cattrip_or/Res] [get_bd_ports hbm_cattrip]

    for {set k 0} {$k < $K} {incr k} {
        set pc [format %02d [expr {$k * $step}]]
        set port [create_bd_intf_port -mode Slave -vlnv xilinx.com:interface:aximm_rtl:1.0 S_AXI_MEM$k]
        set_property -dict [list CONFIG.PROTOCOL {AXI4} CONFIG.DATA_WIDTH {512} CONFIG.ADDR_WIDTH {34} \
            CONFIG.ID_WIDTH $I CONFIG.HAS_BURST {1} CONFIG.HAS_LOCK {0} CONFIG.HAS_CACHE {0} \
            CONFIG.HAS_PROT {0} CONFIG.HAS_QOS {0} CONFIG.HAS_REGION {0} CONFIG.HAS_WSTRB {1} \
            CONFIG.HAS_BRESP {1} CONFIG.HAS_RRESP {1} CONFIG.FREQ_HZ {322265625}] $port
        set sc [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect sc$k]
        set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {1} CONFIG.NUM_CLKS {2}] $sc
        connect_bd_intf_net $port [get_bd_intf_pins sc$k/S00_AXI]
        # The pseudo-channel's port: SAXI_<pc>_8HI on 8-high stacks (the U55C's), SAXI_<pc> otherwise.
        set saxi [get_bd_intf_pins -quiet hbm/SAXI_${pc}_8HI]
        if {$saxi eq ""} { set saxi [get_bd_intf_pins hbm/SAXI_${pc}] }
        connect_bd_intf_net [get_bd_intf_pins sc$k/M00_AXI] $saxi
        connect_bd_net [get_bd_ports core_clk] [get_bd_pins sc$k/aclk]
        connect_bd_net [get_bd_pins clk_hbm/clk_out1] [get_bd_pins sc$k/aclk1]
        connect_bd_net [get_bd_ports core_resetn] [get_bd_pins sc$k/aresetn]
        connect_bd_net [get_bd_pins clk_hbm/clk_out1] [get_bd_pins hbm/AXI_${pc}_ACLK]
        connect_bd_net [get_bd_pins rst_hbm/peripheral_aresetn] [get_bd_pins hbm/AXI_${pc}_ARESET_N]
    }
    set busif {}
    for {set k 0} {$k < $K} {incr k} { lappend busif S_AXI_MEM$k }
    set_property CONFIG.ASSOCIATED_BUSIF [join $busif :] [get_bd_ports core_clk]
    # Each port sees every pseudo-channel its window covers: its own (switch off) or all of them (on).
    assign_bd_address
    validate_bd_design
    save_bd_design
    set bd [get_files wanreduce_hbm.bd]
    generate_target all $bd
    add_files -norecurse [make_wrapper -files $bd -top]

    # The include files u55c_top.v reads (WANREDUCE_HBM).
    set fields {awid I out awaddr A out awlen 8 out awsize 3 out awburst 2 out awvalid 1 out awready 1 in
        wdata 512 out wstrb 64 out wlast 1 out wvalid 1 out wready 1 in bid I in bresp 2 in bvalid 1 in
        bready 1 out arid I out araddr A out arlen 8 out arsize 3 out arburst 2 out arvalid 1 out
        arready 1 in rid I in rdata 512 in rresp 2 in rlast 1 in rvalid 1 in rready 1 out}
    set inst "// Written by constraints/alveo_u55c/hbm.tcl: $K ports, $A address bits, $I ID bits.\n"
    set conn "// Written by constraints/alveo_u55c/hbm.tcl.\n"
    set wrap "    wanreduce_hbm_wrapper hbm (\n        .core_clk(core_clk), .core_resetn(~rst_core),"
    append wrap " .hbm_ref_clk(init_clk), .hbm_cattrip(hbm_cattrip_hbm)"
    append inst "    wire hbm_cattrip_hbm;\n"
    for {set k 0} {$k < $K} {incr k} {
        set base [expr {$switch ? $k << $A : ($k * $step) << 29}]
        foreach {f w dir} $fields {
            set bits [expr {$w eq "I" ? $I : ($w eq "A" ? $A : $w)}]
            append inst "    wire \[[expr {$bits - 1}]:0\] mem${k}_$f;\n"
            append conn "        , .m_axi_mem${k}__$f\(mem${k}_$f\)\n"
            if {$f eq "awaddr" || $f eq "araddr"} {
                append wrap ",\n        .S_AXI_MEM${k}_$f\(34'h[format %09x $base] | mem${k}_$f\)"
            } else {
                append wrap ",\n        .S_AXI_MEM${k}_$f\(mem${k}_$f\)"
            }
        }
    }
    append inst "$wrap\n    );\n"
    foreach {name text} [list wanreduce_hbm.vh $inst wanreduce_hbm_ports.vh $conn] {
        set f [open $projdir/$name w]
        puts -nonewline $f $text
        close $f
    }
    set_property include_dirs [list $projdir] [current_fileset]
    set_property verilog_define {WANREDUCE_HBM} [current_fileset]
}
