// Avalon-ST (Intel Low Latency 100G Ethernet, 512-bit "l8" client interface) <-> AXI4-Stream of wanreduce_axi.
// Intel's client bus puts the first byte on the wire in data[511:504] and counts unused bytes of the last
// beat in `empty`; the aggregator wants the first byte in tdata[7:0] and a tkeep mask. The RX error flag
// becomes tuser (the aggregator drops and counts such frames). Combinational except the TX start-of-packet
// flag. Documented, not run here (no Quartus in this repository's CI).
`default_nettype none
module avst_axis #(parameter BYTES = 64, parameter EMPTY_BITS = 6) (
    input  wire                    clk, rst,
    // MAC RX (Avalon-ST source) -> aggregator s_axis
    input  wire [8*BYTES-1:0]      rx_data,
    input  wire [EMPTY_BITS-1:0]   rx_empty,
    input  wire                    rx_valid, rx_endofpacket,
    input  wire [5:0]              rx_error,
    output wire [8*BYTES-1:0]      s_tdata,
    output wire [BYTES-1:0]        s_tkeep,
    output wire                    s_tvalid, s_tlast, s_tuser,
    // aggregator m_axis -> MAC TX (Avalon-ST sink)
    input  wire [8*BYTES-1:0]      m_tdata,
    input  wire [BYTES-1:0]        m_tkeep,
    input  wire                    m_tvalid, m_tlast,
    output wire                    m_tready,
    output wire [8*BYTES-1:0]      tx_data,
    output wire [EMPTY_BITS-1:0]   tx_empty,
    output wire                    tx_valid, tx_startofpacket, tx_endofpacket,
    input  wire                    tx_ready
);
    genvar b;
    generate for (b = 0; b < BYTES; b = b + 1) begin : swap
        assign s_tdata[8*b +: 8]  = rx_data[8*(BYTES-1-b) +: 8];
        assign tx_data[8*(BYTES-1-b) +: 8] = m_tdata[8*b +: 8];
        // Bytes 0 .. BYTES-1-empty are valid on the last beat, all of them before it.
        assign s_tkeep[b] = !rx_endofpacket || (b < BYTES - rx_empty);
    end endgenerate
    assign s_tvalid = rx_valid;
    assign s_tlast  = rx_endofpacket;
    assign s_tuser  = |rx_error;

    // empty = BYTES - (number of kept bytes); tkeep is contiguous from bit 0, so count its ones.
    integer k;
    reg [EMPTY_BITS:0] kept;
    always @* begin
        kept = 0;
        for (k = 0; k < BYTES; k = k + 1) kept = kept + m_tkeep[k];
    end
    assign tx_empty = m_tlast ? BYTES - kept : 0;

    reg in_frame;
    always @(posedge clk)
        if (rst) in_frame <= 1'b0;
        else if (m_tvalid && tx_ready) in_frame <= !m_tlast;
    assign tx_valid = m_tvalid;
    assign tx_startofpacket = m_tvalid && !in_frame;
    assign tx_endofpacket = m_tlast;
    assign m_tready = tx_ready;
endmodule
`default_nettype wire
