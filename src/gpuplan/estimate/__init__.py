"""Estimate layer (see DESIGN.md)."""
