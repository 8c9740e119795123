"""Verification: co-simulation against the golden aggregator, traffic, fuzzing, proofs and the demo."""
