"""`gpuplan validate --finetune` (#15): every published fine-tuning run is predicted; the
targets of the issue are checked, and the ones missed are strict xfails that say by how much."""

from __future__ import annotations

import pytest

from gpuplan.validation_finetune import TARGETS, load_runs, summary, validate_finetune


@pytest.fixture(scope="module")
def ft_results(cat):
    return validate_finetune(cat)


def test_every_row_has_source_locator_and_config():
    rows = load_runs()
    assert len(rows) >= 5
    for r in rows:
        for key in ("source", "locator", "as_of", "model", "gpu", "method", "seq_len"):
            assert r[key].strip(), (r["id"], key)
        assert r["kind"] in TARGETS and float(r["measured"]) > 0


def test_predictions_are_finite_and_positive(ft_results):
    assert all(r.predicted > 0 and abs(r.error) < 10 for r in ft_results)


@pytest.mark.xfail(strict=True, reason="issue #15 target (MLPerf LoRA time within 20% median) "
                   "missed since the #12 communication terms and refit: 21.7% median "
                   "(H100 -20%, B200 -23%, both predicted too fast)")
def test_mlperf_lora_time_median_within_20_percent(ft_results):
    assert summary(ft_results)["time"]["median_abs_error"] <= 0.20


@pytest.mark.xfail(strict=True, reason="memory misses the 10% median target: +38..+74% "
                   "(torchtune measures with compiled, chunked cross-entropy and reports "
                   "allocated memory; we count fp32 logits, the runtime overhead and "
                   "fragmentation). Validation only, nothing fitted.")
def test_finetune_memory_median_within_10_percent(ft_results):
    assert summary(ft_results)["memory"]["median_abs_error"] <= 0.10


def test_cli_prints_each_run(run_cli):
    code, out, _ = run_cli("validate", "--finetune")
    assert code == 0
    for r in load_runs():
        assert r["id"] in out
    assert "median |error|" in out
