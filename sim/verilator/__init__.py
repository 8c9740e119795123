"""The Verilator toolchain, the build cache, the cocotb runner and the C++ harnesses."""
