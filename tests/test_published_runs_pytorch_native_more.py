"""More PyTorch-native published runs (#12, validation only; docs/calibration.md, "More
PyTorch-native runs"): torchtitan's 2024 docs/performance.md (FSDP2 on 64 A100, Llama 3.1 405B
FSDP 16 x TP 8 on 128 Grand Teton H100) and KempnerForge's weak-scaling report (FSDP2 + TP 4 on
8-160 H200). Every row is hold-out; the figures each source prints beside its throughput (MFU,
step time) are recomputed here from the row's own columns, so a wrong sequence length, model
shape or batch in the CSV shows up as a mismatch."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpuplan.calibrate.releases import release_from_source
from gpuplan.validation import (
    calibration_set_reason,
    load_runs,
    run_spec,
    summary,
    validate_runs,
)

TORCHTITAN = "ttperfmd-"
KEMPNERFORGE = "kforge-"
A100_PEAK = 312e12  # torchtitan's get_peak_flops for A100 (train.py's MFU denominator)
H100_PEAK = 989e12  # its H100 SXM figure at 3faaa1a0d
# The issue #4 targets, judged out of sample (these rows are hold-outs).
MEDIAN_TARGET_PCT, WORST_TARGET_PCT = 10.0, 25.0


def _rows(prefix: str) -> list[dict[str, str]]:
    return [r for r in load_runs() if r["id"].startswith(prefix)]


@pytest.fixture(scope="module")
def results(cat):
    rows = _rows(TORCHTITAN) + _rows(KEMPNERFORGE)
    return {r.id: r for r in validate_runs(cat, rows, newest={})}


def test_rows_are_hold_out_sourced_and_parse(cat):
    """8 torchtitan rows (the BF16 405B one excluded: its figure was revised without a stated
    reason) and 6 KempnerForge rows; none in the calibration set, each naming its file at a
    pinned commit, its table row, and what it filled in."""
    tt, kf = _rows(TORCHTITAN), _rows(KEMPNERFORGE)
    assert (len(tt), len(kf)) == (8, 6)
    assert [r["id"] for r in tt + kf if r["status"] == "excluded"] == [
        "ttperfmd-llama31-405b-128-bf16"]
    for r in tt + kf:
        assert r["fit"] == "holdout" and calibration_set_reason(r) == "", r["id"]
        assert re.search(r"https://github\.com/\S+/blob/[0-9a-f]{40}/", r["source"]), r["id"]
        assert "row '" in r["source"] and r["defaults"].strip(), r["id"]
        assert r["release"] == release_from_source(r["source"]) == "", r["id"]
        rs = run_spec(cat, r)  # resolves GPU and model, checks tp*pp*dp*cp == gpus
        assert rs.layout.global_batch % (rs.layout.dp * rs.layout.micro_batch) == 0, r["id"]
    assert {r["stack"] for r in tt} == {"torchtitan"} and {r["stack"] for r in kf} == {"fsdp"}
    assert {r["gpu"] for r in kf} == {"h200"}  # the log's 'Detected GPU: NVIDIA H200' (SXM)
    assert {r["grad_reduce_dtype"] for r in kf} == {"fp32"}


def _palm_flops_per_token(layers, hidden, heads, kv_heads, ffn, vocab, seq, embedding=True):
    """torchtitan's count, written out: 6 N + 12 l h q t (train.py), N with both embedding
    tables when `embedding` (1ea476e9f) or without the input one (3faaa1a0d)."""
    q = hidden // heads
    layer = 2 * hidden * hidden + 2 * hidden * kv_heads * q + 3 * hidden * ffn + 2 * hidden
    n = layers * layer + hidden + vocab * hidden * (2 if embedding else 1)
    return 6 * n + 12 * layers * heads * q * seq


SHAPES = {"llama3-8b": (32, 4096, 32, 8, 14336, 128256), "llama3-70b": (80, 8192, 64, 8, 28672,
          128256), "llama2-13b": (40, 5120, 40, 40, 13824, 32000), "llama2-70b": (80, 8192, 64, 8,
          28672, 32000), "llama3-405b": (126, 16384, 128, 8, 53248, 128256)}
# the MFU column of docs/performance.md at 3faaa1a0d, beside each row's WPS
MFU_PCT = {"ttperfmd-llama3-8b-64xa100-bf16-op": 58.2, "ttperfmd-llama3-70b-64xa100-bf16-full":
           51.7, "ttperfmd-llama2-13b-64xa100-bf16-none": 61.1,
           "ttperfmd-llama2-13b-64xa100-bf16-op": 53.8, "ttperfmd-llama2-70b-64xa100-bf16-op": 50.8,
           "ttperfmd-llama2-70b-64xa100-bf16-full": 50.5, "ttperfmd-llama31-405b-128-fp8": 24.52,
           "ttperfmd-llama31-405b-128-bf16": 29.0}


def test_torchtitan_wps_agrees_with_the_tables_mfu(cat):
    """WPS x torchtitan's FLOPs per token / peak = the printed MFU, with the row's model and
    sequence length: within 0.3% (MFU printed to 0.1 point, <= 0.2% of 50%; WPS to 1 token,
    <= 0.15% of 331). The A100 rows count every parameter at 1ea476e9f; the 405B rows leave
    the input embedding out (3faaa1a0d) and the FP8 one divides by twice the BF16 peak."""
    for r in _rows(TORCHTITAN):
        a100 = r["gpu"] == "a100-80gb"
        fl = _palm_flops_per_token(*SHAPES[r["model"]], int(r["seq_len"]), embedding=a100)
        peak = A100_PEAK if a100 else H100_PEAK * (2 if r["precision"] == "fp8" else 1)
        mfu = float(r["published"]) * fl / peak * 100
        assert mfu == pytest.approx(MFU_PCT[r["id"]], rel=3e-3), r["id"]


# the README's 'Step s' column beside each row's tok/s (KempnerForge weak_scaling_160gpu)
STEP_S = {"kforge-13b-8xh200-tp4-bf16": 4.39, "kforge-13b-32xh200-tp4-bf16": 4.75,
          "kforge-13b-160xh200-tp4-bf16": 4.91, "kforge-70b-8xh200-tp4-bf16": 18.09,
          "kforge-70b-32xh200-tp4-bf16": 14.03, "kforge-70b-160xh200-tp4-bf16": 15.32}


def test_kempnerforge_tokens_per_step_are_the_rows_global_batch():
    """tok/s per GPU x GPUs x step time = global batch x sequence length (dp x micro-batch 4
    or 2 x 4 accumulation steps x 4,096): within 0.5% (step time printed to 0.01 s, <= 0.23%;
    the 160-GPU figures are means of two repeats)."""
    for r in _rows(KEMPNERFORGE):
        tokens = float(r["published"]) * int(r["gpus"]) * STEP_S[r["id"]]
        assert tokens == pytest.approx(int(r["global_batch"]) * int(r["seq_len"]), rel=5e-3)


def test_a100_fsdp_rows_meet_the_issue_targets(results):
    """The 6 FSDP-only A100 runs (hold-out), catalog constants: median |error| <= 10% and
    worst <= 25%, issue #4's targets (today 4.7% / 10.5%, predicted slow on 4 of 6)."""
    a100 = [r for i, r in results.items() if "xa100" in i]
    assert len(a100) == 6
    s = summary(a100)
    assert s["median_abs_error_pct"] <= MEDIAN_TARGET_PCT
    assert s["worst_abs_error_pct"] <= WORST_TARGET_PCT


def test_the_assumed_a100_network_does_not_move_those_errors(cat):
    """The A100 cluster's NIC is not stated (200 Gb/s per GPU assumed): from 100 to 800 Gb/s
    no error moves by 0.5 point (FSDP over 64 GPUs with 8 per node sends 1/8 of each gather
    over the NIC, and the model hides it behind 2.8-27 s steps)."""
    rows = [r for r in _rows(TORCHTITAN) if r["gpu"] == "a100-80gb"]
    errs = [[x.error_pct for x in validate_runs(cat, [{**r, "nic_gbit_per_gpu": nic}
                                                      for r in rows], newest={})]
            for nic in ("100", "200", "800")]
    assert np.max(np.abs(np.ptp(np.array(errs), axis=0))) < 0.5


@pytest.mark.xfail(strict=True, reason=(
    "not met: the KempnerForge 70B rows on H200 (TP 4, blocking DTensor TP) are predicted "
    "+33.4% to +71.0% too fast (70B on 8 GPUs memory-bound per its README; the 13B rows -8.2% "
    "to +2.9%), Llama 3.1 405B FSDP 16 x TP 8 FP8 (async TP) +13.7% (docs/calibration.md, "
    "'More PyTorch-native runs' and 'Blocking tensor-parallel collectives')"))
def test_tensor_parallel_rows_meet_the_worst_target(results):
    """The 7 known runs with TP > 1 under the issue's 25% worst target."""
    tp = [r for r in results.values() if r.status == "known" and ("tp4" in r.id or "405b" in r.id)]
    assert len(tp) == 7
    assert summary(tp)["worst_abs_error_pct"] <= WORST_TARGET_PCT
