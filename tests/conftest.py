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

@pytest.fixture(scope="session")
def cat():
    """The package catalog the validation tests share (modules may define their own `cat`)."""
    from gpuplan.catalog import load_catalog

    return load_catalog()


@pytest.fixture(scope="session")
def stacks(cat):
    """Each software stack's buffers as the package catalog gives them (data/memory.toml)."""
    from gpuplan.estimators import buffers

    return buffers.from_table(cat.table("memory"))


@pytest.fixture(scope="session")
def results(cat):
    """Every published run predicted once for the whole session (validation and figures)."""
    from gpuplan.validation import validate_runs

    return validate_runs(cat)


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


GOLDEN = Path(__file__).resolve().parent / "golden"


def golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/NAME exactly. After an intended change, regenerate with
    `GPUPLAN_REGEN_GOLDEN=1 python -m pytest tests` and review the diff."""
    path = GOLDEN / name
    if os.environ.get("GPUPLAN_REGEN_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {name}; run GPUPLAN_REGEN_GOLDEN=1 python -m pytest"
    assert text == path.read_text(), f"output differs from tests/golden/{name}"
