"""The project rule 'no module over 500 lines' (docs/architecture.md, common rules): a module
that grows past it is split, not waved through (spec.py reached 502 lines in #12)."""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuplan"
MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_over_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500
