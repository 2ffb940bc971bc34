"""PyTorch-native published runs (#12, validation only): torchtitan's Grand Teton H100
benchmarks (docs/calibration.md, "PyTorch-native published runs"). They ran on an H100 SXM5
96GB HBM2e held to a 500 W power limit; the catalog has that part (`h100-sxm-hbm2e`) and
`validate` applies a row's `power_limit_watts` exactly as `estimate --power-limit-watts` does."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.errors import CatalogError
from gpuplan.search.power import power_factor, power_law
from gpuplan.validation import (
    _hardware,
    calibration_set_reason,
    load_runs,
    run_spec,
    validate_runs,
)

SOURCE = "ttgrandteton-"


def _rows():
    return [r for r in load_runs() if r["id"].startswith(SOURCE)]


def test_the_grand_teton_rows_are_validation_only_and_sourced():
    """12 known runs and 6 excluded ones (405B with PP: micro-batches and stage split not
    stated), all hold-out (#12: validation only; two are runs of the public list, named by
    public_id, the rest outside the calibration set); each names its file, its table row and
    the torchtitan commit, and the 500 W limit its source states."""
    rows = _rows()
    assert sorted(r["status"] for r in rows).count("known") == 12 and len(rows) == 18
    public = {r["id"]: r["public_id"] for r in rows if r["public_id"]}
    assert public == {"ttgrandteton-llama3-8b-128-fp8-2412": "tt-8b-128-fp8",
                      "ttgrandteton-llama31-405b-512-fp8-i1f1b-2412": "tt-405b-512-fp8"}
    for r in rows:
        assert r["fit"] == "holdout", r["id"]
        assert calibration_set_reason(r) == ("public list" if r["public_id"] else ""), r["id"]
        assert (r["gpu"], r["stack"], r["power_limit_watts"]) == (
            "h100-sxm-hbm2e", "torchtitan", "500"), r["id"]
        assert "https://github.com/pytorch/torchtitan/blob/main/benchmarks/" in r["source"]
        assert "table" in r["source"].lower() and "row '" in r["source"], r["id"]
        assert ("9dec370" in r["source"]) != ("820504e 2025-06-13" in r["source"]), r["id"]
        assert "500 W power limit" in r["notes"], r["id"]
    excluded = [r for r in rows if r["status"] == "excluded"]
    assert all(int(r["pp"]) == 8 and "not stated" in r["notes"] for r in excluded)


def test_the_catalog_part_is_the_sourced_hbm2e_h100(cat):
    """96 GB HBM2e at 2.4 TB/s (torchtitan's hardware section); the GH100 SXM5 dense peaks
    at the 700 W the part can be set to; H100's efficiency family."""
    gpu, sxm = cat.accelerator("h100-sxm-hbm2e"), cat.accelerator("h100-sxm")
    assert gpu.family == sxm.family == "h100"
    assert gpu.memory_bytes == pytest.approx(96 * 2**30, rel=1e-12)
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(2.4e12, rel=1e-12)
    assert gpu.tdp_watts == 700.0 and gpu.peak_flops == sxm.peak_flops


def test_power_limit_column_scales_the_peak_as_estimate_does(cat):
    """With the row's 500 W the peak FLOP/s are (500/700)^0.301 = 0.904 of the part's (family
    h100's sourced law, as `estimate --power-limit-watts` applies it), memory bandwidth
    unchanged; without it the same run is predicted faster."""
    row = next(r for r in _rows() if r["id"] == "ttgrandteton-llama3-8b-8-bf16-2412")
    free = {**row, "power_limit_watts": ""}
    held, full = _hardware(cat, run_spec(cat, row)), _hardware(cat, run_spec(cat, free))
    factor = power_factor(700.0, 500.0, power_law("h100").exponent)
    assert factor == pytest.approx(0.9036, abs=1e-4)
    assert np.allclose(held.peak_flops, full.peak_flops * factor, rtol=1e-12)
    assert np.allclose(held.memory_bandwidth_bytes_per_s, full.memory_bandwidth_bytes_per_s, rtol=0)
    slow, fast = validate_runs(cat, [row, free], newest={})
    assert slow.predicted < fast.predicted


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e300", "900", "abc", "500 W"])
def test_a_bad_power_limit_is_one_line_naming_the_run(cat, value):
    """Above 0 and at most the part's TDP (700 W here; a GPU cannot be set above it); anything
    else, text included, is one CatalogError line naming the run and the column."""
    row = next(r for r in _rows() if r["id"] == "ttgrandteton-llama3-8b-8-bf16-2412")
    with pytest.raises(CatalogError) as err:
        validate_runs(cat, [{**row, "power_limit_watts": value}], newest={})
    msg = str(err.value)
    assert "\n" not in msg and row["id"] in msg and "power_limit_watts" in msg
    assert f"got '{value}'" in msg and "700 W" in msg
