// Alveo U55C top: QSFP0 100G CMAC (AXI4-Stream, 512 bits at 322.265625 MHz) <-> wanreduce_axi, registers
// over a JTAG-to-AXI4-Lite master at 100 MHz. Written for create_project.tcl; documented, not run here.
//
//   QSFP0 -> cmac.rx_axis ------------------------------> agg.s_axis   (tuser = the CMAC's bad-FCS flag)
//   QSFP0 <- cmac.tx_axis <- tx_fifo (packet mode) <---- agg.m_axis
//   jtag_axi (init_clk) --------------------------------> agg.s_axil  (axil_clk = init_clk)
//
// The CMAC's RX AXI4-Stream has no tready: the aggregator must keep up, which it does at one beat per
// cycle (its receive FIFO holds two frames). The CMAC's TX must not see a gap inside a frame, which the
// aggregator does not promise, so its output goes through a store-and-forward (packet mode) FIFO.
// The port list of cmac_usplus follows its instantiation template (PG203); status outputs not used here
// are left open.
//
// With WANREDUCE_HBM defined (create_project.tcl does it for an external-buffer build, docs/extmem.md), the
// aggregator's AXI4 memory ports go to the HBM through the block design hbm.tcl builds; its two include
// files, written into the project folder, hold the wires, that design's instance and the port connections.
`default_nettype none
module u55c_top (
    input  wire       clk_100mhz_p, clk_100mhz_n,
    input  wire       qsfp0_refclk_p, qsfp0_refclk_n,
    input  wire [3:0] qsfp0_rx_p, qsfp0_rx_n,
    output wire [3:0] qsfp0_tx_p, qsfp0_tx_n,
    input  wire       reset_btn,
    output wire       hbm_cattrip,
    output wire [1:0] qsfp0_led
);
`ifndef WANREDUCE_HBM
    assign hbm_cattrip = 1'b0;   // no HBM in use: keep it powered
`endif

    wire init_clk, init_clk_ibuf;
    IBUFDS ibuf_100 (.I(clk_100mhz_p), .IB(clk_100mhz_n), .O(init_clk_ibuf));
    BUFG bufg_100 (.I(init_clk_ibuf), .O(init_clk));

    // ---- 100G MAC -------------------------------------------------------------------------------------
    wire core_clk;                       // gt_txusrclk2, 322.265625 MHz
    wire usr_rx_reset, usr_tx_reset, stat_rx_aligned;
    wire         rx_tvalid, rx_tlast, rx_tuser;
    wire [511:0] rx_tdata;
    wire [63:0]  rx_tkeep;
    wire         tx_tvalid, tx_tready, tx_tlast;
    wire [511:0] tx_tdata;
    wire [63:0]  tx_tkeep;

    cmac_usplus_0 cmac (
        .gt_rxp_in(qsfp0_rx_p), .gt_rxn_in(qsfp0_rx_n), .gt_txp_out(qsfp0_tx_p), .gt_txn_out(qsfp0_tx_n),
        .gt_ref_clk_p(qsfp0_refclk_p), .gt_ref_clk_n(qsfp0_refclk_n),
        .gt_txusrclk2(core_clk), .gt_loopback_in(12'd0),
        .gtwiz_reset_tx_datapath(1'b0), .gtwiz_reset_rx_datapath(1'b0),
        .sys_reset(reset_btn), .init_clk(init_clk),
        .core_drp_reset(1'b0), .drp_clk(1'b0), .drp_addr(10'd0), .drp_di(16'd0), .drp_en(1'b0), .drp_we(1'b0),
        .rx_clk(core_clk), .core_rx_reset(1'b0), .core_tx_reset(1'b0),
        .usr_rx_reset(usr_rx_reset), .usr_tx_reset(usr_tx_reset),
        .rx_axis_tvalid(rx_tvalid), .rx_axis_tdata(rx_tdata), .rx_axis_tlast(rx_tlast),
        .rx_axis_tkeep(rx_tkeep), .rx_axis_tuser(rx_tuser),
        .tx_axis_tready(tx_tready), .tx_axis_tvalid(tx_tvalid), .tx_axis_tdata(tx_tdata),
        .tx_axis_tlast(tx_tlast), .tx_axis_tkeep(tx_tkeep), .tx_axis_tuser(1'b0),
        .tx_preamblein(56'd0),
        .ctl_rx_enable(1'b1), .ctl_rx_force_resync(1'b0), .ctl_rx_test_pattern(1'b0),
        // Standard bring-up: send remote-fault indication until the receiver is aligned, then enable TX.
        .ctl_tx_enable(stat_rx_aligned), .ctl_tx_send_rfi(~stat_rx_aligned), .ctl_tx_send_lfi(1'b0),
        .ctl_tx_send_idle(1'b0), .ctl_tx_test_pattern(1'b0),
        .ctl_rsfec_ieee_error_indication_mode(1'b0), .ctl_rx_rsfec_enable(1'b1),
        .ctl_rx_rsfec_enable_correction(1'b1), .ctl_rx_rsfec_enable_indication(1'b1),
        .ctl_tx_rsfec_enable(1'b1),
        .stat_rx_aligned(stat_rx_aligned)
    );
    assign qsfp0_led = {stat_rx_aligned, rx_tvalid};

    // ---- resets: each domain's reset synchronised to its clock --------------------------------------
    wire rst_core, rst_axil;
    xpm_cdc_sync_rst #(.DEST_SYNC_FF(4), .INIT(1)) rst_core_sync (
        .src_rst(usr_rx_reset | usr_tx_reset | reset_btn), .dest_clk(core_clk), .dest_rst(rst_core));
    xpm_cdc_sync_rst #(.DEST_SYNC_FF(4), .INIT(1)) rst_axil_sync (
        .src_rst(reset_btn), .dest_clk(init_clk), .dest_rst(rst_axil));

    // ---- registers: JTAG-to-AXI4-Lite master (Vivado hardware manager: create_hw_axi_txn) -------------
    wire [31:0] awaddr, araddr, wdata, rdata;
    wire [3:0]  wstrb;
    wire [1:0]  bresp, rresp;
    wire awvalid, awready, wvalid, wready, bvalid, bready, arvalid, arready, rvalid, rready;
    jtag_axi_0 jtag (
        .aclk(init_clk), .aresetn(~rst_axil),
        .m_axi_awaddr(awaddr), .m_axi_awprot(), .m_axi_awvalid(awvalid), .m_axi_awready(awready),
        .m_axi_wdata(wdata), .m_axi_wstrb(wstrb), .m_axi_wvalid(wvalid), .m_axi_wready(wready),
        .m_axi_bresp(bresp), .m_axi_bvalid(bvalid), .m_axi_bready(bready),
        .m_axi_araddr(araddr), .m_axi_arprot(), .m_axi_arvalid(arvalid), .m_axi_arready(arready),
        .m_axi_rdata(rdata), .m_axi_rresp(rresp), .m_axi_rvalid(rvalid), .m_axi_rready(rready)
    );

    // ---- the aggregator -------------------------------------------------------------------------------
    wire         agg_tvalid, agg_tready, agg_tlast, agg_tuser;
    wire [511:0] agg_tdata;
    wire [63:0]  agg_tkeep;
    wire         rx_tready_unused;
`ifdef WANREDUCE_HBM
`include "wanreduce_hbm.vh"
    assign hbm_cattrip = hbm_cattrip_hbm;
`endif
    wanreduce_axi agg (
        .clk(core_clk), .rst(rst_core), .axil_clk(init_clk), .axil_rst(rst_axil),
        .s_axis__tdata(rx_tdata), .s_axis__tkeep(rx_tkeep), .s_axis__tlast(rx_tlast),
        .s_axis__tuser(rx_tuser), .s_axis__tvalid(rx_tvalid), .s_axis__tready(rx_tready_unused),
        .m_axis__tdata(agg_tdata), .m_axis__tkeep(agg_tkeep), .m_axis__tlast(agg_tlast),
        .m_axis__tuser(agg_tuser), .m_axis__tvalid(agg_tvalid), .m_axis__tready(agg_tready),
        .s_axil__awaddr(awaddr[18:0]), .s_axil__awvalid(awvalid), .s_axil__awready(awready),
        .s_axil__wdata(wdata), .s_axil__wstrb(wstrb), .s_axil__wvalid(wvalid), .s_axil__wready(wready),
        .s_axil__bresp(bresp), .s_axil__bvalid(bvalid), .s_axil__bready(bready),
        .s_axil__araddr(araddr[18:0]), .s_axil__arvalid(arvalid), .s_axil__arready(arready),
        .s_axil__rdata(rdata), .s_axil__rresp(rresp), .s_axil__rvalid(rvalid), .s_axil__rready(rready)
`ifdef WANREDUCE_HBM
`include "wanreduce_hbm_ports.vh"
`endif
    );

    axis_data_fifo_0 tx_fifo (
        .s_axis_aresetn(~rst_core), .s_axis_aclk(core_clk),
        .s_axis_tvalid(agg_tvalid), .s_axis_tready(agg_tready), .s_axis_tdata(agg_tdata),
        .s_axis_tkeep(agg_tkeep), .s_axis_tlast(agg_tlast),
        .m_axis_tvalid(tx_tvalid), .m_axis_tready(tx_tready), .m_axis_tdata(tx_tdata),
        .m_axis_tkeep(tx_tkeep), .m_axis_tlast(tx_tlast)
    );
endmodule
`default_nettype wire
