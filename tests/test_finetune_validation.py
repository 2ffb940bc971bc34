"""`gpuplan validate --finetune` (#15): every published fine-tuning run is predicted; the
targets of the issue are checked, and the ones missed are strict xfails that say by how much."""

from __future__ import annotations

import pytest

from gpuplan.validation_finetune import (
    MEMORY_KINDS,
    TARGETS,
    load_runs,
    summary,
    validate_finetune,
)


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


def test_mlperf_lora_time_median_within_20_percent(ft_results):
    """Issue #15 target, met: MLPerf Llama 2 70B LoRA time to train (evaluations on the clock,
    as MLPerf times them) within 20% median over the 6 runs (today 5%, worst 10%)."""
    s = summary(ft_results)["time"]
    assert s["runs"] >= 5 and s["median_abs_error"] <= 0.20


def test_mlperf_evaluations_are_on_the_clock(ft_results):
    """MLPerf's time includes ~5 evaluations of 173 sequences, forward only: about 0.47 of a
    trained sequence each (NVIDIA's v4.0 H100 log: 37.3 s per evaluation against 0.464 s per
    trained sample, 0.465), so 10-15% of the predicted time; without them every run would be
    predicted 10-15% faster."""
    for r in (r for r in ft_results if r.kind == "time"):
        assert 0.08 < r.eval_minutes / r.predicted < 0.16, r.id


def test_memory_rows_compare_the_measured_kind(ft_results):
    """Each memory row is compared with the figure its source reports: torchtune's active (=
    allocated) peak, Answer.AI's peak reserved (two rows: the allocated figures its text
    quotes). An allocated row gets no allocator margin and no CUDA context."""
    mem = {r.id: r for r in ft_results if r.kind == "memory"}
    assert len(mem) >= 10 and {r.memory_kind for r in mem.values()} <= set(MEMORY_KINDS)
    assert all(r.memory_kind == "allocated" for i, r in mem.items() if i.startswith("torchtune"))
    lora = [mem["answerai-llama2-7b-lora-c2048-b1"], mem["answerai-llama2-7b-lora-c2048-b4"]]
    assert [r.memory_kind for r in lora] == ["allocated", "reserved"]


def test_finetune_memory_median_within_10_percent(ft_results):
    """Issue #15 target, met: fine-tuning memory within 10% median over the 23 rows (today
    8.5%, worst 30%: torchtune +5% to +30%, Answer.AI -26% to +11%). The allocated peak holds
    max(loss phase, layer-backward working set), not their sum (memory.py's `loss_overlap`);
    before that rule the median was 11%; PEFT's adapters keep their own input copies and the
    frozen matmuls none (finetune.lora_activation_delta): 9.1% before. Validation only,
    nothing fitted."""
    s = summary(ft_results)["memory"]
    assert s["runs"] >= 20 and s["median_abs_error"] <= 0.10


def test_cli_prints_each_run(run_cli):
    code, out, _ = run_cli("validate", "--finetune")
    assert code == 0
    for r in load_runs():
        assert r["id"] in out
    assert "median |error|" in out
