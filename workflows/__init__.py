"""Deterministic workflow code only: no I/O, no wall clock, no randomness outside `workflow.*`."""
