"""Estimators (L3): memory, compute, communication, timing and cost, pure numpy over arrays.

Named `estimators` (not `estimate`) so that `gpuplan.estimate` stays the public API's
one-configuration call.
"""
