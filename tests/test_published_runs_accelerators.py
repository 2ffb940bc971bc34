"""Published runs on AMD, Intel Gaudi and Huawei Ascend accelerators (#12, validation only):
MLPerf Training (MI350X / MI355X Llama 3.1 8B, Gaudi 2 GPT-3 175B) and the MindSpeed-LLM
README table on Ascend 910B (docs/calibration.md, "AMD, Intel Gaudi and Huawei Ascend").

None of these families has a fit run: every row is predicted with the guessed
`[efficiency.default]` and must be reported as a guess. No accuracy is asserted for them; the
one bound below (a factor of 2) guards the units and conventions the rows were typed with
(per-device vs per-cluster tokens, module vs die counts), and the issue's accuracy target is a
strict xfail that states today's figures.
"""

from __future__ import annotations

import math
import re

import pytest

from gpuplan.search.hardware import pair_is_guess
from gpuplan.validation import (
    calibration_set_reason,
    load_runs,
    run_spec,
    summary,
    validate_runs,
)

PREFIXES = ("mlperf51-mi355x-", "mlperf51-mi350x-", "mlperf31-gaudi2-", "mlperf40-gaudi2-",
            "mindspeed-910b-")
FAMILIES = {"mi355x": 2, "gaudi2": 3, "ascend910b": 9}  # family -> rows


def _rows() -> list[dict[str, str]]:
    return [r for r in load_runs() if r["id"].startswith(PREFIXES)]


@pytest.fixture(scope="module")
def mine(cat):
    return {r.id: r for r in validate_runs(cat, _rows(), newest={})}


def test_rows_are_hold_out_known_sourced_and_parse(cat):
    """14 known hold-out rows (13 added in #12 and the MI355X row before them), each with a
    URL and a file-or-table locator, on a family no fit run calibrates; the two runs of the
    public list name it (public_id) and nothing else is in the calibration set."""
    rows = _rows()
    assert len(rows) == sum(FAMILIES.values()) == 14
    for r in rows:
        rs = run_spec(cat, r)  # parses: model, layout (tp*pp*dp*cp = gpus), accelerator
        assert (r["status"], r["fit"]) == ("known", "holdout"), r["id"]
        assert "https://github.com/" in r["source"], r["id"]
        assert re.search(r"\.(txt|sh|md)\b", r["source"]), r["id"]
        assert r["defaults"].strip() and r["notes"].strip(), r["id"]
        assert calibration_set_reason(r) == ("public list" if r["public_id"] else ""), r["id"]
        assert rs.family in FAMILIES, r["id"]
    assert {r["public_id"] for r in rows if r["public_id"]} == {
        "mlperf51-llama8b-mi355x", "mlperf51-llama8b-mi350x", "mlperf40-gpt3-gaudi2-1024"}
    fams = [run_spec(cat, r).family for r in rows]
    assert {f: fams.count(f) for f in FAMILIES} == FAMILIES


def test_every_family_and_stack_is_reported_as_a_guess(cat, mine):
    """No fit run on these families, under any stack (megatron for MLPerf's NeMo/Megatron
    submissions and MindSpeed, deepspeed for Habana's Megatron-DeepSpeed): `validate` flags
    every one of them as predicted with guessed constants."""
    for r in _rows():
        rs = run_spec(cat, r)
        assert pair_is_guess(cat, rs.family, rs.stack), r["id"]
        assert mine[r["id"]].efficiency_guess, r["id"]
    assert {run_spec(cat, r).stack for r in _rows()} == {"megatron", "deepspeed"}


def test_mlperf_gaudi_figures_are_the_stated_log_arithmetic():
    """Gaudi 2 GPT-3 rows: published tokens/s per accelerator = the notes' median tokens/s
    of the eval-to-eval intervals / accelerators (rounded to 0.1), each interval 12 steps of
    2048 x 2048 tokens; the step time stated is 2048 x 2048 / that rate (to 0.01 s)."""
    rows = [r for r in _rows() if "gaudi2" in r["id"]]
    assert len(rows) == 3
    for r in rows:
        m = re.search(r"= ([\d,]+) tokens/s over (\d+) Gaudi 2 = ([\d.]+) per accelerator; "
                      r"step time ([\d.]+) s", r["notes"])
        assert m, r["id"]
        rate, n = float(m[1].replace(",", "")), int(m[2])
        assert n == int(r["gpus"]) and "50,331,648 tokens" in r["notes"]
        assert float(r["published"]) == pytest.approx(rate / n, abs=0.06)
        assert float(m[4]) == pytest.approx(2048 * 2048 / rate, abs=0.01)
        assert int(r["global_batch"]) == 2048 and int(r["seq_len"]) == 2048


def test_mlperf_llama_figures_are_the_stated_log_arithmetic():
    """MI350X / MI355X rows: published = median tracked_stats samples/s x 8192 tokens / 8
    GPUs (to 2 tokens/s: the notes give samples/s to 0.01)."""
    for r in (r for r in _rows() if r["id"].startswith("mlperf51-")):
        sps = float(re.search(r"median tracked_stats throughput ([\d.]+) samples/s",
                              r["notes"])[1])
        assert float(r["published"]) == pytest.approx(sps * 8192 / 8, abs=0.006 * 1024)


def test_mindspeed_rows_match_their_table_row():
    """Each MindSpeed row's NPU count is its table row's cluster size ('4x8' = 32) and its
    published figure is the number the source names for that row; all cite one commit."""
    rows = [r for r in _rows() if r["id"].startswith("mindspeed-")]
    assert len(rows) == 9
    for r in rows:
        m = re.search(r"row [\w. ]+? (\d+)x8 (BF16|FP16) \((\d+)[;)]", r["source"])
        assert m, r["id"]
        assert int(r["gpus"]) == 8 * int(m[1]) and r["precision"] == m[2].lower()
        assert float(r["published"]) == float(m[3]), r["id"]
        assert "f5a4984a0269" in r["source"] and "tokens/s per NPU" in r["notes"]


def test_predictions_are_within_a_factor_of_two_of_the_published_figure(mine):
    """A units guard, not an accuracy claim: a per-cluster figure read as per-device (8x or
    more) or a die count read as a package count (2x) would break it. Today the widest row
    is Mixtral 8x7B at 32k tokens on 64 NPUs (+51%)."""
    for rid, r in mine.items():
        assert abs(math.log(r.predicted / r.published)) < math.log(2.0), rid


@pytest.mark.xfail(strict=True, reason=(
    "not met: on these 14 hold-out rows, all on guessed constants, the median absolute error "
    "is 16.0% and the worst 51.3% (Mixtral 8x7B, 32k tokens, Ascend 910B); per family "
    "mi355x 6.1% / 12.1%, gaudi2 17.8% / 19.3%, ascend910b 16.9% / 51.3% "
    "(docs/calibration.md, 'AMD, Intel Gaudi and Huawei Ascend')"))
def test_issue_target_on_the_accelerator_rows(mine):
    """The issue's target (median <= 10%, worst <= 25%), out of sample, on these rows."""
    s = summary(list(mine.values()), subset="holdout")
    assert s["sample"] == "out" and s["n"] == 14
    assert s["median_abs_error_pct"] <= 10.0 and s["worst_abs_error_pct"] <= 25.0


def test_mi350x_is_the_mi355x_part_at_its_lower_clock(cat):
    """MI350X: family mi355x (same CDNA 4 package); every dense peak is MI355X's x 2.2/2.4
    GHz (AMD's 2.3 PF BF16 and 4.6 PF FP8, to the 0.1% the rounded figures allow); the same
    288 GB HBM3E at 8 TB/s and the same Infinity Fabric; 1,000 W against 1,400 W."""
    a, b = cat.accelerator("mi350x"), cat.accelerator("mi355x")
    assert a.family == b.family == "mi355x"
    for p in ("bf16", "fp16", "fp8", "fp4"):
        assert a.peak_flops[p] == pytest.approx(b.peak_flops[p] * 2.2 / 2.4, rel=1e-3), p
    assert a.peak_flops["bf16"] == pytest.approx(2.3e15, rel=0.01)
    assert a.peak_flops["fp8"] == pytest.approx(4.6e15, rel=0.01)
    assert a.memory_bytes == b.memory_bytes
    assert a.memory_bandwidth_bytes_per_s == b.memory_bandwidth_bytes_per_s
    assert a.scale_up_bytes_per_s == b.scale_up_bytes_per_s
    assert (a.tdp_watts, b.tdp_watts) == (1000.0, 1400.0)
