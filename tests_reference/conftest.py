"""Checks against the reference files in ../shared/data (issue #16).

These tests compare the package's sourced data with independently gathered reference files that
are not part of the project. Run them where ../shared/data exists:
`python -m pytest tests_reference` (or point GPUPLAN_SHARED at the folder holding data/). The
main suite (`tests/`) does not need them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("GPUPLAN_SHARED")
              or Path(__file__).resolve().parents[1].parent / "shared")


def shared_data(name: str) -> Path:
    """A reference file in ../shared/data; fails (does not skip) when it is absent."""
    path = SHARED / "data" / name
    if not path.exists():
        pytest.fail(f"reference data {name} not found at {path}: these checks need ../shared/data")
    return path
