"""The attention kernel of a software stack (issue #12): a stack states `attention_kernel`
('fused': Transformer Engine's cuDNN fused attention; 'fa2': an Ampere-generation flash kernel)
and a family states `fa2_attention_ratio`, the fa2 kernel's speed relative to the fused one.
Stated from sources (data/efficiency.toml), never fitted; docs/calibration.md, "Attention kernel
of a stack"."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.estimators.compute import Efficiency
from gpuplan.estimators.timing import step_time
from gpuplan.search.hardware import (
    attention_kernel,
    family_constants,
    hardware_for,
    stack_row,
    with_stack,
)
from gpuplan.spec import Layout
from gpuplan.validation import CALIBRATION_GRID, CALIBRATION_PLAN, STACK_PLAN

FUSED = {"matmul_scale": 1.0, "fp8_ratio": 1.0}
FA2 = {**FUSED, "attention_kernel": "fa2"}

# FlashAttention-3 paper (arXiv 2407.08608), H100 SXM5, head dim 128, causal, sequence 2k, 4k,
# 8k, 16k: forward and backward TFLOP/s of FlashAttention-2 and cuDNN, as the figures print them.
FA2_FWD, FA2_BWD = (298, 319, 333, 335), (291, 310, 318, 322)
CUDNN_FWD, CUDNN_BWD = (484, 518, 529, 539), (465, 499, 518, 516)
BWD_FLOPS = 2.5  # FlashAttention's count: the backward is 2.5x the forward's FLOPs
TE_CUDNN_SPEEDUP_H100 = (1.5968, 1.5877)  # TE attention guide: head dim 128 2k; GQA 8k


def _eff(values: dict) -> Efficiency:
    return Efficiency(**{k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()})


def test_stacks_declare_their_attention_kernel(cat):
    """Megatron-Core (megatron, nemo) and deepspeed run the fused kernel. fsdp, torchtitan and
    torchtune run an fa2-class kernel on Hopper, but [stack.fsdp] keeps the fused default until
    the refit with it passes the coarse-MoE guard (docs/calibration.md)."""
    kernels = {s: attention_kernel(stack_row(cat, s))
               for s in ("megatron", "nemo", "deepspeed", "fsdp", "torchtitan", "torchtune")}
    assert kernels == dict.fromkeys(kernels, "fused")
    assert attention_kernel({}) == "fused" and attention_kernel(FA2) == "fa2"


def test_hopper_ratio_is_the_stated_derivation(cat):
    """Time of FA2 over cuDNN, forward + backward (backward 2.5x the forward FLOPs): 1.61-1.62x
    at every sequence length of the FA3 paper's figures, so 0.62 (two decimals) -- and within
    0.01 of Transformer Engine's own H100 measurements (1/1.60, 1/1.59). A100 1.0: Transformer
    Engine runs flash-attention itself on sm80. Hopper and Blackwell parts inherit h100's."""
    derived = [(1 / cf + BWD_FLOPS / cb) / (1 / ff + BWD_FLOPS / fb)
               for ff, fb, cf, cb in zip(FA2_FWD, FA2_BWD, CUDNN_FWD, CUDNN_BWD, strict=True)]
    eff = cat.table("efficiency")
    h100 = eff["h100"]["fa2_attention_ratio"]
    assert all(abs(h100 - d) < 0.005 for d in derived)  # 0.618-0.623: two decimals
    assert all(abs(h100 - 1 / s) < 0.01 for s in TE_CUDNN_SPEEDUP_H100)
    assert eff["a100"]["fa2_attention_ratio"] == 1.0
    for family in ("h200", "h20", "h100-pcie", "gb200", "b200", "b300", "gb300"):
        assert eff[family]["fa2_attention_ratio"] == h100, family
    assert family_constants(cat, "no-such-family")["fa2_attention_ratio"] == 1.0  # default row


def test_the_ratio_is_not_fitted():
    assert "fa2_attention_ratio" not in CALIBRATION_GRID
    assert all("fa2_attention_ratio" not in params for _, params, _ in CALIBRATION_PLAN)
    assert all("attention_kernel" not in params for _, params in STACK_PLAN)


@pytest.mark.parametrize("family, gpu", [("h100", "h100-sxm"), ("a100", "a100-80gb")])
def test_fa2_attention_time_is_the_fused_time_over_the_ratio(cat, family, gpu):
    """Independent check on one GPU (no communication to hide): the attention core's time,
    written out from its FLOPs (full s x s, forward + backward = 3 x 2 x 2 s heads d_head per
    token per layer) at peak x matmul_max x attention_ratio (h100 and a100 saturate at these
    widths: half_dim 0 and 4096 / (4096 + 100)), grows by 1 / ratio - 1 under fa2 and nothing
    else moves. Exact up to float rounding (1e-9)."""
    model = cat.model("llama3-8b")
    seq, batch = 8192, 2
    lay = Layout(global_batch=batch, micro_batch=1, seq_len=seq)
    hw = hardware_for(cat, gpu, precision="bf16")
    values = family_constants(cat, family)
    ratio = values["fa2_attention_ratio"]
    fused = step_time(model, lay, hw, _eff(with_stack(values, FUSED)))
    fa2 = step_time(model, lay, hw, _eff(with_stack(values, FA2)))
    flops = batch * seq * model.layers * 3 * 2 * 2 * seq * model.heads * model.d_head
    width = model.hidden / (model.hidden + values["half_dim"])
    attention_s = flops / (hw.peak_flops[0] * values["matmul_max"] * width
                           * values["attention_ratio"])
    assert float(fa2.step_s[0] - fused.step_s[0]) == pytest.approx(
        attention_s * (1 / ratio - 1), rel=1e-9, abs=1e-12)
    assert float(fa2.memory_s[0]) == float(fused.memory_s[0])
    if family == "a100":
        assert float(fa2.step_s[0]) == float(fused.step_s[0])


@settings(max_examples=40, deadline=None)
@given(ratio=st.floats(0.1, 1.0), seqs=st.lists(st.sampled_from([1024, 2048, 4096, 8192, 16384,
                                                                 32768]), min_size=2,
                                                max_size=2, unique=True))
def test_an_fa2_stack_is_never_faster_and_loses_more_at_longer_sequences(cat, ratio, seqs):
    """Property: with a ratio <= 1 an fa2 stack is never faster than the fused one, and at the
    same tokens per step its slowdown grows with the sequence (the attention share grows).
    The ratio broadcasts like the fitted constants (the calibration passes grids)."""
    model = cat.model("llama3-8b")
    hw = hardware_for(cat, "h100-sxm", precision="bf16")
    values = {**family_constants(cat, "h100"), "fa2_attention_ratio": np.array([ratio, 1.0])}
    slow = []
    for seq in sorted(seqs):
        lay = Layout(global_batch=2 ** 16 // seq, micro_batch=1, seq_len=seq)
        t = step_time(model, lay, hw, _eff(with_stack(values, FA2))).step_s
        assert t[0] >= t[1] * (1 - 1e-12)
        slow.append(t[0] / t[1])
    assert slow[1] >= slow[0] * (1 - 1e-12)
