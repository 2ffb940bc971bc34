"""Calibration (L5): measurement harnesses that check the estimators against PyTorch.

Needs the optional `bench` extra (torch); torch is imported only inside the functions that use it.
"""
