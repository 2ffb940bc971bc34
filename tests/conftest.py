"""Shared test helpers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

from gpuplan.cli import main

# CI replays the same examples every run (no flaky failures from a new random draw); locally
# hypothesis explores freely and keeps what it finds in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_data(name: str) -> Path:
    """A reference file in ../shared/data; skips the test when that folder is absent."""
    path = SHARED / "data" / name
    if not path.exists():
        pytest.skip(f"reference data {name} not available (../shared/data is absent)")
    return path


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def run_json(run_cli):
    def run(*argv: str):
        code, out, err = run_cli(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    return run
