"""Verilator options of the cocotb builds whose testbenches drive and read only the top module's ports."""

__all__ = ["PORTS_ONLY"]

#: cocotb's runner makes every signal of every module accessible (``--public-flat-rw``): for a whole core
#: that nearly triples the C++ Verilator writes and stops it optimising across the design, while these
#: testbenches touch only the top's ports, so only the top module stays public (depth 1: cocotb finds its
#: root handle there). One C++ file, not a dozen: at -O0 each file's share of parsing the runtime headers
#: costs more than compiling files in parallel wins on two busy cores.
PORTS_ONLY = (
    "--no-public-flat-rw",
    "--public-depth",
    "1",
    "--output-split",
    "0",
    "--output-split-cfuncs",
    "0",
)
