"""Estimators (L3): memory, compute, comm, timing, cost; pure numpy over arrays, no I/O."""
