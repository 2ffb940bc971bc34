"""The softmax exponentials of the attention core on the special-function units (issue #12):
`compute.attention_exp_factor` and the catalog's `exp_tera_per_s`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators.compute import attention_exp_factor, flops_per_token
from gpuplan.estimators.timing import step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.search.hardware import efficiency_for, hardware_for
from gpuplan.search.power import power_limited
from gpuplan.spec import BF16, FP8, PRECISIONS, R_NONE, R_SELECTIVE, STACKS, Layout
from gpuplan.validation import load_runs, run_spec


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _narrow(cat):
    """Llama 3 8B with 64 heads of width 64 (GQA 8): the same FLOPs, twice the scores."""
    return replace(cat.model("llama3-8b"), heads=64, kv_heads=8)


def _factor(model, seq, recompute, peak16, rate):
    fl = flops_per_token(model, float(seq))
    return attention_exp_factor(model, fl.attention, fl.attention_executed(recompute), peak16,
                                rate)


def test_factor_by_hand_where_the_exponentials_bind(cat):
    """Independent count, d_head 64 on GB200 (2,500 TFLOP/s, 5 T exp/s): per score element
    and pass the forward does 4 x 64 = 256 matmul FLOPs and one exponential, so the forward's
    exponentials take r = 2.5e15 / 256 / 5e12 = 1.953 x its matmul time; the backward (512
    FLOPs, one exponential) r / 2 < 1, matmul-bound. Forward is 1/3 of the PaLM count (2/3
    with selective recompute's repeat, 1/2 of the executed FLOPs)."""
    model = _narrow(cat)
    assert model.d_head == 64
    r = 2.5e15 / 256.0 / 5e12
    assert _factor(model, 8192, R_NONE, 2.5e15, 5e12) == pytest.approx(r / 3 + 2 / 3, rel=1e-12)
    assert _factor(model, 8192, R_SELECTIVE, 2.5e15, 5e12) == pytest.approx(
        (2 * r + 2) / 4, rel=1e-12)
    assert _factor(model, 8192, R_NONE, 2.5e15, float("inf")) == 1.0


def test_flashattention3_ratio_on_h100_does_not_bind(cat):
    """FlashAttention-3 (Shah et al. 2024, section 3.1): at head width 128 the forward has 512x
    more matmul FLOPs than exponentials and, at 989 TFLOP/s against 3.9 T exponentials/s, the
    exponentials take ~50% of the matmul cycles -- hidden by the overlap, so no slow-down."""
    model = cat.model("llama3-8b")
    h100 = cat.accelerator("h100-sxm")
    fl = flops_per_token(model, 8192.0)
    per_element = fl.attention / 3.0 / (model.layers * model.heads * 8192.0)
    assert per_element == pytest.approx(512.0, rel=1e-12)
    assert h100.peak_flops["bf16"] / per_element / h100.exp_per_s == pytest.approx(0.5, rel=0.01)
    assert _factor(model, 8192, R_NONE, h100.peak_flops["bf16"], h100.exp_per_s) == 1.0


@pytest.mark.parametrize(("gpu", "width"), [("h100-sxm", 63.4), ("b200", 112.5),
                                            ("gb200", 125.0), ("gb300", 58.4), ("b300", 52.6)])
def test_forward_binds_below_peak_over_four_rates(cat, gpu, width):
    """The forward is SFU-bound below d_head = peak16 / (4 x rate) (0.1% rounding of the
    stated widths)."""
    acc = cat.accelerator(gpu)
    assert acc.peak_flops["bf16"] / (4.0 * acc.exp_per_s) == pytest.approx(width, rel=1e-3)


def test_catalog_rates_blackwell_ultra_doubles_blackwell(cat):
    """NVIDIA's Blackwell Ultra table: 10.7 T exponentials/s against Blackwell's 5; parts
    without a published figure carry none (and get no exponential bound)."""
    rate = {g: cat.accelerator(g).exp_per_s for g in ("h100-sxm", "b200", "gb200", "b300",
                                                     "gb300", "a100-80gb")}
    assert rate["gb300"] == rate["b300"] == pytest.approx(10.7e12)
    assert rate["gb200"] == rate["b200"] == pytest.approx(5.0e12)
    assert rate["h100-sxm"] == pytest.approx(3.9e12)
    assert rate["a100-80gb"] is None
    assert np.isinf(hardware_for(cat, "a100-80gb", precision="bf16").exp_per_s).all()


def test_the_bound_binds_on_no_published_run(cat):
    """Every run of the validation set has head widths at which the tensor cores, not the
    SFUs, bind (d_head >= 128; MLA 192 + 128): the term moves none of them, so it cannot
    explain GB300's speed over GB200 (docs/calibration.md)."""
    binding = []
    for row in load_runs():
        if row["status"] != "known":
            continue
        rs = run_spec(cat, row)
        acc = cat.accelerator(rs.gpu)
        if acc.exp_per_s and _factor(rs.model, rs.layout.seq_len, rs.layout.recompute,
                                     acc.peak_flops["bf16"], acc.exp_per_s) > 1.0:
            binding.append(rs.row["id"])
    assert binding == []


def _case(cat, gpu, model, prec, **kw):
    hw = hardware_for(cat, gpu, precision=PRECISIONS[prec])
    lay = Layout(**{"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64,
                    "seq_len": 8192, "precision": prec, **kw})
    m = model if not isinstance(model, str) else cat.model(model)
    return m, lay, hw, efficiency_for(cat, hw.family)


@pytest.mark.parametrize("gpu", ["h100-sxm", "gb200", "gb300", "b200"])
@pytest.mark.parametrize("recompute", [R_NONE, R_SELECTIVE])
def test_a_faster_exponential_rate_never_slows_a_step(cat, gpu, recompute):
    m, lay, hw, eff = _case(cat, gpu, _narrow(cat), BF16, recompute=recompute)
    steps = [float(step_time(m, lay, replace(hw, exp_per_s=np.asarray([r])), eff).step_s[0])
             for r in (1e12, 4e12, 1e13, 4e13, np.inf)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))
    assert steps[0] > steps[-1]  # at 1e12 exponentials/s the bound binds


def test_gb300_beats_gb200_only_where_the_exponentials_bind(cat):
    """Same peaks and constants (gb300 inherits gb200): at d_head 64 GB300's doubled SFU
    rate makes the step faster; at d_head 128 the two are identical."""
    for model, faster in ((_narrow(cat), True), (cat.model("llama3-8b"), False)):
        m, lay, hw200, eff = _case(cat, "gb200", model, FP8)
        _, _, hw300, _ = _case(cat, "gb300", model, FP8)
        t200 = float(step_time(m, lay, hw200, eff).step_s[0])
        t300 = float(step_time(m, lay, hw300, eff).step_s[0])
        assert (t300 < t200) if faster else (t300 == pytest.approx(t200, rel=1e-12))


@pytest.mark.parametrize("recompute", [R_NONE, R_SELECTIVE])
def test_fast_path_carries_the_exponential_bound(cat, recompute):
    m, lay, hw, eff = _case(cat, "gb200", _narrow(cat), BF16, recompute=recompute, tp=2,
                            dp=4, global_batch=32)
    one = step_time_one(m, lay, hw, eff)
    vec = step_time(m, lay, hw, eff)
    assert type(one.compute_s) is float
    assert one.compute_s == pytest.approx(float(vec.compute_s[0]), rel=1e-9)
    assert one.step_s == pytest.approx(float(vec.step_s[0]), rel=1e-9)


def test_power_limit_slows_the_sfus_with_the_clock(cat):
    gpu = cat.accelerator("gb300")
    hw = hardware_for(cat, "gb300", precision="bf16")
    limited = power_limited(hw, gpu, 700.0)
    f = float(limited.peak_flops[0] / hw.peak_flops[0])
    assert f < 1.0
    assert float(limited.exp_per_s[0]) == pytest.approx(float(hw.exp_per_s[0]) * f, rel=1e-12)


@pytest.mark.parametrize("gpu", ["h100-sxm", "gb200", "gb300", "b200"])
@pytest.mark.parametrize("model", ["llama3-8b", "llama3-70b", "deepseek-v3", "mixtral-8x7b"])
@pytest.mark.parametrize("stack", ["megatron", "fsdp"])  # fp8_ratio 1 and the fitted 0.66
def test_fp8_never_slower_than_bf16_for_the_same_layout(cat, gpu, model, stack):
    """Every catalog stack's fp8_ratio is at least 0.5 (FP8 GEMMs at 2x peak keep at least
    the BF16 rate), the attention core is 16-bit in both and activations stay 16-bit: so
    FP8 never makes a step slower."""
    moe = model in ("deepseek-v3", "mixtral-8x7b")
    kw = dict(tp=4, dp=16, ep=8 if moe else 1, stack=STACKS.index(stack))
    m, lay, hw, _ = _case(cat, gpu, model, BF16, **kw)
    eff = efficiency_for(cat, hw.family, stack=stack)
    bf16 = float(step_time(m, lay, hw, eff).step_s[0])
    m, lay8, hw8, _ = _case(cat, gpu, model, FP8, **kw)
    assert float(step_time(m, lay8, hw8, eff).step_s[0]) <= bf16
