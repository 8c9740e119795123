"""The gateware layer: the aggregator core and its board tops in Amaranth 0.5.

Above :mod:`wanreduce.spec` only. :mod:`.core` wires the pipeline (:mod:`.frame_parser`,
:mod:`.header_parser`, :mod:`.schedule_table`, :mod:`.slot_table`, :mod:`.reduce` with the adder lanes of
:mod:`.fadd`, :mod:`.result_builder`, :mod:`.fanout`, :mod:`.bypass`) from one
:class:`wanreduce.spec.core.CoreConfig`; :mod:`.stream` and :mod:`.fifo` hold the stream and timing
primitives the stages share; :mod:`.extmem` puts the member buffers behind AXI4; :mod:`.axi`,
:mod:`.board` and :mod:`.eth` are the tops (AXI4-Lite control, the UART board, the RGMII Ethernet boards).
Each block states its latency and back-pressure in its docstring.
"""
