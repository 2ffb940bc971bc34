"""The project rules 'no module over 500 lines' and 'no function over 60 lines' (STYLE, the
architecture notes): a module or function that grows past them is split, not waved through
(spec.py reached 502 lines and `estimate`'s flag registration 101 in #11/#12)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gpuplan"
MODULES = sorted(SRC.rglob("*.py"))
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60  # from `def` to the last line of the body, docstring included


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_over_500_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_function_over_60_lines(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    long = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES}
    assert not long, long
