"""`gpuplan validate --memory` against data/memory_runs.csv (#11)."""

import json

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.cli import main
from gpuplan.validation_memory import load_memory_runs, memory_summary, validate_memory


@pytest.fixture(scope="module")
def results():
    return validate_memory(load_catalog())


def test_dataset_rows_are_complete():
    rows = load_memory_runs()
    assert len(rows) >= 15
    for r in rows:
        assert r["source"] and r["locator"] and r["kind"] in ("allocated", "reserved", "device")
        assert int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"]) == int(r["gpus"])


def test_cli_json_matches_library(results, capsys):
    assert main(["validate", "--memory", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in data["runs"]] == [r.id for r in results]
    assert data["n"] == memory_summary(results)["n"]


def test_cli_text_names_the_count(capsys):
    assert main(["validate", "--memory"]) == 0
    assert "runs that ran but are predicted not to fit:" in capsys.readouterr().out


def test_memory_median_error_target(results):
    """Issue #11 target: median |error| <= 8% over the memory dataset (out of sample)."""
    assert memory_summary(results)["median_abs_error_pct"] <= 8.0


def test_no_run_that_ran_predicted_not_to_fit(results):
    assert memory_summary(results)["ran_but_predicted_not_to_fit"] == []


def test_no_run_refused(results):
    assert memory_summary(results)["refused"] == []


def test_dataset_is_not_one_stack():
    """The memory dataset holds runs of at least three software stacks (#11: not torchtitan
    only): torchtitan's tables, Megatron-LM and DeepSpeed runs from FlagPerf."""
    assert len({r["stack"] for r in load_memory_runs()}) >= 3


def test_device_rows_compare_the_device_total(results):
    """A `device` row (nvidia-smi memory.used) is compared with the estimate's total:
    reserved + the runtime context, so it is the figure that decides `fits`."""
    device = [r for r in results if r.kind == "device"]
    assert device
    for r in device:
        assert r.predicted_gib == pytest.approx(r.total_gib, rel=1e-12)
