"""A stated Blackwell attention factor (issue #12): [efficiency.gb200] states `attention_scale`,
the fused attention kernel's share of GB200's BF16 peak over its share of H200's, and every
stack multiplies the family's (inherited) attention_ratio by it. Stated from NVIDIA's cuDNN
SDPA benchmark, never fitted; docs/calibration.md, "A stated Blackwell attention factor"."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.estimators.compute import Efficiency, attention_exp_factor, flops_per_token
from gpuplan.estimators.timing import step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.search.hardware import (
    efficiency_for,
    family_constants,
    hardware_for,
    stack_row,
    with_stack,
)
from gpuplan.spec import Layout
from gpuplan.validation import CALIBRATION_GRID, CALIBRATION_PLAN

# NVIDIA cudnn-frontend df73764adb98, benchmark/sdpa_benchmark_training/results/
# {h200,gb200}_919_only_cudnn/llama3.1_*.csv: cuDNN 9.19.1, 64 q / 8 kv heads, head dim 128,
# causal (top_left), batch 1, BF16; forward and backward ms at 2k, 4k, 8k, 16k tokens.
H200_MS = ((0.142, 0.464), (0.465, 1.450), (1.708, 5.083), (6.531, 19.002))
GB200_MS = ((0.066, 0.206), (0.206, 0.607), (0.688, 2.097), (2.606, 7.845))
# The same benchmark, cuDNN 9.22.0 (fb682ce, results/llama3.1/{gb200,gb300}/llama3.1_20260424_*):
# GB200 and GB300 (the same 2,500 TFLOP/s BF16 peak), batch 2, forward + backward ms.
GB200_922_MS = (0.514, 1.589, 5.524, 21.704)
GB300_922_MS = (0.456, 1.424, 5.017, 19.186)
H200_PEAK, GB200_PEAK = 989.0, 2500.0  # BF16 dense TFLOP/s (data/accelerators.toml)
BLACKWELL = ("gb200", "b200", "b300", "gb300")
ULTRA = ("b300", "gb300")
FUSED = {"matmul_scale": 1.0, "fp8_ratio": 1.0}


def _eff(values: dict) -> Efficiency:
    return Efficiency(**{k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()})


def test_the_factor_is_the_stated_derivation_and_carries_its_source(cat):
    """Same FLOPs on both parts, so each share of peak is 1 / (time x peak); the factor is the
    GB200 share over the H200 share, 0.88-0.97 from 2k to 16k tokens, stated as their mean to
    two decimals. Blackwell parts inherit it; every other family has none (1)."""
    ratios = [(1 / (sum(g) * GB200_PEAK)) / (1 / (sum(h) * H200_PEAK))
              for h, g in zip(H200_MS, GB200_MS, strict=True)]
    assert 0.87 < min(ratios) and max(ratios) < 0.97
    rows = cat.table("efficiency")
    scale = rows["gb200"]["attention_scale"]
    assert scale == pytest.approx(sum(ratios) / len(ratios), abs=0.005)
    assert "cudnn-frontend df73764adb98" in rows["gb200"]["source"]
    assert rows["gb200"]["as_of"]
    assert family_constants(cat, "b200")["attention_scale"] == scale
    for family in ("a100", "h100", "h200", "h20", "h100-pcie", "no-such-family"):
        assert family_constants(cat, family)["attention_scale"] == 1.0, family


def test_blackwell_ultra_chains_its_speedup_over_gb200(cat):
    """GB300 over GB200 at the same peak and cuDNN version: 1.10-1.13x (doubled exponential
    rate); chained with GB200's factor, 0.94 x 1.12 = 1.05 for both Blackwell Ultra parts."""
    speedup = [a / b for a, b in zip(GB200_922_MS, GB300_922_MS, strict=True)]
    assert 1.09 < min(speedup) and max(speedup) < 1.14
    rows = cat.table("efficiency")
    chained = rows["gb200"]["attention_scale"] * sum(speedup) / len(speedup)
    for family in ULTRA:
        assert rows[family]["attention_scale"] == pytest.approx(chained, abs=0.005), family
        assert "cudnn-frontend fb682ce" in rows[family]["source"], family
    for gpu in ("gb200", "gb300"):  # the same BF16 peak, so the time ratio is the share ratio
        assert cat.accelerator(gpu).peak_flops["bf16"] == GB200_PEAK * 1e12


def test_the_factor_is_not_fitted():
    assert "attention_scale" not in CALIBRATION_GRID
    assert all("attention_scale" not in params for _, params, _ in CALIBRATION_PLAN)


@pytest.mark.parametrize("stack", ["megatron", "fsdp", "torchtitan"])
def test_every_stack_multiplies_attention_ratio_by_it(cat, stack):
    values = family_constants(cat, "gb200")
    out = with_stack(values, stack_row(cat, stack))
    assert float(out["attention_ratio"]) == pytest.approx(
        values["attention_ratio"] * values["attention_scale"], rel=1e-12)
    assert "attention_scale" not in out  # consumed, not an Efficiency field


def test_gb200_attention_time_by_hand(cat):
    """Independent check on one GB200 (no communication): Llama 3 8B at 8,192 tokens, head dim
    128, where the exponential term is 1 (forward exponentials 0.98x the matmul time). The
    attention core's time written out from its FLOPs (forward + backward = 3 x 2 x 2 s heads
    d_head per token per layer, full s x s) at peak x matmul_max x attention_ratio (half_dim
    0: no width penalty) grows by 1 / scale - 1 with the factor, and nothing else moves.
    Exact up to float rounding (1e-9)."""
    model = cat.model("llama3-8b")
    seq, batch = 8192, 2
    lay = Layout(global_batch=batch, micro_batch=1, seq_len=seq)
    hw = hardware_for(cat, "gb200", precision="bf16")
    fl = flops_per_token(model, float(seq))
    assert attention_exp_factor(model, fl.attention, fl.attention_executed(0),
                                float(hw.peak_flops[0]), float(hw.exp_per_s[0])) == 1.0
    values = family_constants(cat, "gb200")
    scale = values["attention_scale"]
    base = step_time(model, lay, hw, _eff(with_stack({**values, "attention_scale": 1.0},
                                                     FUSED)))
    scaled = step_time(model, lay, hw, _eff(with_stack(values, FUSED)))
    flops = batch * seq * model.layers * 3 * 2 * 2 * seq * model.heads * model.d_head
    assert values["half_dim"] == 0.0
    attention_s = flops / (float(hw.peak_flops[0]) * values["matmul_max"]
                           * values["attention_ratio"])
    assert float(scaled.step_s[0] - base.step_s[0]) == pytest.approx(
        attention_s * (1 / scale - 1), rel=1e-9, abs=1e-12)
    assert float(scaled.memory_s[0]) == float(base.memory_s[0])


@pytest.mark.parametrize("gpu", ["gb200", "b200", "gb300", "h100-sxm"])
def test_scalar_and_vectorized_paths_agree(cat, gpu):
    """The fast path takes the same Efficiency (the factor is folded into attention_ratio
    before either path runs): identical to 1e-12 relative."""
    model = cat.model("llama3-70b")
    hw = hardware_for(cat, gpu, precision="bf16")
    lay = Layout(tp=4, pp=2, dp=2, micro_batch=1, global_batch=32, seq_len=8192)
    eff = efficiency_for(cat, hw.family)
    one = step_time_one(model, lay, hw, eff)
    vec = step_time(model, lay, hw, eff)
    assert type(one.step_s) is float
    assert one.step_s == pytest.approx(float(vec.step_s[0]), rel=1e-12)
    assert one.compute_s == pytest.approx(float(vec.compute_s[0]), rel=1e-12)
