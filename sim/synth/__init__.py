"""Verilog for vendor flows, and the open ECP5 and UltraScale+ synthesis flows (:mod:`wanreduce.sim`)."""
