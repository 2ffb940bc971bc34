"""Recompute modes beyond none/selective/full (#11): torchtitan per-op selective checkpointing,
Megatron-LM --recompute-modules and full recompute of every k-th layer. Each term is checked
against a formula written out here from the frameworks' rules, and the ordering "coarser
recompute never raises memory" is a hypothesis property."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import ConfigError
from gpuplan.estimators.compute import flops_per_token
from gpuplan.estimators.memory import layer_activation_bytes, memory_breakdown
from gpuplan.export import megatron, torchtitan
from gpuplan.spec import (
    M_CORE_ATTN,
    M_LAYERNORM,
    M_MLP,
    M_MOE,
    M_MOE_ACT,
    R_FULL,
    R_MODULES,
    R_NONE,
    R_OP,
    R_SELECTIVE,
    RECOMPUTE,
    Layout,
    ModelSpec,
    modules_code,
)

OVERHEAD = dict(runtime_overhead_bytes=2.0**30, fragmentation=0.05)
REL = 1e-12  # float64 round-off only: the formulas below are the same sums in another order
LLAMA = ModelSpec(id="l", name="l", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                  vocab=128256, mlp="swiglu")
GPT = ModelSpec(id="g", name="g", layers=24, hidden=2048, heads=16, kv_heads=16, ffn=8192,
                vocab=50257, mlp="gelu")
MOE = ModelSpec(id="m", name="m", layers=16, hidden=2048, heads=16, kv_heads=4, ffn=8192,
                vocab=32000, mlp="swiglu", experts=8, experts_per_token=2, moe_ffn=1408)
S, B = 4096, 2
KW = dict(seq_len=S, micro_batch=B, tp=1, cp=1, sp=True, flash=True, precision=2)


def acts(model: ModelSpec, recompute: int, **kw) -> float:
    return float(layer_activation_bytes(model, recompute=recompute, **{**KW, **kw}))


def test_codes_stay_backward_compatible():
    assert RECOMPUTE[:3] == ("none", "selective", "full")
    assert (R_NONE, R_SELECTIVE, R_FULL, R_OP, R_MODULES) == (0, 1, 2, 3, 4)


def test_op_sac_keeps_every_other_matmul_output():
    """torchtitan op-SAC on a SwiGLU layer (matmuls wq wk wv wo w1 w3 w2; the 1st, 3rd, 5th
    and 7th saved): the layer input h, wq's q, wv's kv, w1's ffn, w2's h, the attention
    output q and its fp32 log-sum-exp (4 B per head and token), bf16 elsewhere."""
    h, q, kv, f, a = 4096, 4096, 8 * 128, 14336, 32
    expected = 2 * S * B * (h + q + kv + f + h + q) + 4 * a * S * B
    assert acts(LLAMA, R_OP) == pytest.approx(expected, rel=REL)
    # GELU layer: wq wk wv wo fc1 fc2 -> wq, wv, fc1 saved
    h, f, a = 2048, 8192, 16
    expected = 2 * S * B * (h + h + h + f + h) + 4 * a * S * B
    assert acts(GPT, R_OP) == pytest.approx(expected, rel=REL)


def test_op_sac_repeats_the_unsaved_matmuls():
    """Forward FLOPs per token op-SAC repeats: wk, wo and w3 (SwiGLU) in every layer,
    2 x inputs x outputs each."""
    h, q, kv, f = 4096, 4096, 8 * 128, 14336
    fl = flops_per_token(LLAMA, S)
    expected = LLAMA.layers * 2 * (h * kv + q * h + h * f)
    assert float(fl.recompute_extra(R_OP)) == pytest.approx(expected, rel=REL)
    assert float(fl.attention_executed(R_OP)) == pytest.approx(float(fl.attention), rel=REL)


def test_megatron_modules_drop_what_they_recompute():
    """layernorm: the two norm outputs, 2 x e s b h; mlp: SwiGLU's 4 x e s b ffn; core_attn:
    as selective (nothing more with flash attention)."""
    none = acts(LLAMA, R_NONE)
    ln = acts(LLAMA, R_MODULES, recompute_modules=M_LAYERNORM)
    assert none - ln == pytest.approx(2 * 2 * S * B * 4096, rel=REL)
    mlp = acts(LLAMA, R_MODULES, recompute_modules=M_MLP)
    assert none - mlp == pytest.approx(4 * 2 * S * B * 14336, rel=REL)
    core = acts(LLAMA, R_MODULES, recompute_modules=M_CORE_ATTN, flash=False)
    assert core == pytest.approx(acts(LLAMA, R_SELECTIVE, flash=False), rel=REL)


def test_moe_modules():
    """moe drops the experts' tensors and router probabilities (k experts x (4 ffn + h) bf16 +
    4 B x E); moe_act the activation function's outputs, silu(w1 x) and the product (the
    fc2 input) of the unfused SwiGLU: 2 of the 4 ffn tensors, not the input copies (#11)."""
    none = acts(MOE, R_NONE, moe=True)
    experts = 2 * S * B * 2 * (4 * 1408 + 2048)
    router = 4 * S * B * 8
    moe = acts(MOE, R_MODULES, moe=True, recompute_modules=M_MOE)
    assert none - moe == pytest.approx(experts + router, rel=REL)
    act = acts(MOE, R_MODULES, moe=True, recompute_modules=M_MOE_ACT)
    assert none - act == pytest.approx(2 * S * B * 2 * (2 * 1408), rel=REL)
    fl = flops_per_token(MOE, S)
    routed = 2 * MOE.moe_layers * (2 * 3 * 2048 * 1408 + 2048 * 8)
    assert float(fl.recompute_extra(R_MODULES, M_MOE)) == pytest.approx(routed, rel=REL)


def test_full_every_k_layers():
    """k = 2: half the layers keep their input only, half keep everything; half the forward
    repeated."""
    none, full = acts(LLAMA, R_NONE), acts(LLAMA, R_FULL)
    assert acts(LLAMA, R_FULL, recompute_every=2) == pytest.approx((none + full) / 2, rel=REL)
    fl = flops_per_token(LLAMA, S)
    assert float(fl.recompute_extra(R_FULL, every=2)) == pytest.approx(
        float(fl.forward_layers) / 2, rel=REL)


def total(model: ModelSpec, lay: Layout) -> float:
    return float(memory_breakdown(model, lay, **OVERHEAD).total)


@st.composite
def cases(draw: st.DrawFn) -> tuple[ModelSpec, Layout]:
    model = draw(st.sampled_from([LLAMA, GPT, MOE]))
    dp = draw(st.sampled_from([1, 2, 8]))
    mb = draw(st.sampled_from([1, 2]))
    lay = Layout(tp=draw(st.sampled_from([1, 2, 4])), pp=draw(st.sampled_from([1, 2, 4])),
                 dp=dp, zero=draw(st.integers(0, 3)), micro_batch=mb,
                 global_batch=mb * dp * draw(st.sampled_from([1, 4])),
                 seq_len=draw(st.sampled_from([1024, 4096])), sp=draw(st.booleans()),
                 flash=draw(st.booleans()), precision=draw(st.integers(1, 3)))
    return model, lay


MODULE_BITS = st.integers(1, 31)


@settings(max_examples=80, deadline=None)
@given(cases(), MODULE_BITS, MODULE_BITS, st.integers(1, 8))
def test_coarser_recompute_never_raises_memory(case, a, b, k):
    """More Megatron-LM modules never add memory; full recompute of every k-th layer (k up to
    the layers of a stage) lies between full and none and grows with k; op-SAC keeps no more
    than none. (Dense models do
    not take the moe modules.)"""
    model, lay = case
    if not model.is_moe:
        a, b = a & ~(M_MOE | M_MOE_ACT) or M_CORE_ATTN, b & ~(M_MOE | M_MOE_ACT) or M_CORE_ATTN
    at = lambda **kw: total(model, replace(lay, **kw))  # noqa: E731
    tol = 1 + 1e-9
    assert at(recompute=R_MODULES, recompute_modules=a | b) <= \
        at(recompute=R_MODULES, recompute_modules=a) * tol
    assert at(recompute=R_MODULES, recompute_modules=a) <= at(recompute=R_NONE) * tol
    full, none = at(recompute=R_FULL), at(recompute=R_NONE)
    # k at most the layers of a stage: the model checkpoints a share 1/k of them, and a
    # share below one layer would not pay for the layer recomputed in backward
    per_stage = model.layers // lay.pp
    k = min(k, per_stage - 1)
    mid, more = at(recompute=R_FULL, recompute_every=k), \
        at(recompute=R_FULL, recompute_every=k + 1)
    assert full <= mid * tol and mid <= more * tol and more <= none * tol
    assert at(recompute=R_OP) <= none * tol


def test_bad_module_and_every_are_one_line(run_cli):
    code, _, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm",
                           "--recompute-modules", "core_atn")
    assert code == 2 and err.count("\n") == 1 and "did you mean 'core_attn'" in err
    code, _, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm",
                           "--recompute-every", "2")
    assert code == 2 and err.count("\n") == 1 and "needs --recompute full" in err
    with pytest.raises(ConfigError, match="unknown recompute module"):
        modules_code("attention")


def test_exports_name_the_modes(run_json):
    r = run_json("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "8",
                 "--recompute-modules", "core_attn,layernorm")
    assert r["layout"]["recompute"] == "modules"
    assert r["layout"]["recompute_modules"] == ["core_attn", "layernorm"]
    rec = {**r, **r["layout"]}
    out = megatron.render(rec, source={})
    assert "--recompute-modules core_attn layernorm" in out
    r = run_json("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "8",
                 "--recompute", "full", "--recompute-every", "4")
    out = torchtitan.render({**r, **r["layout"]}, source={})
    assert 'mode = "selective"' in out and 'selective_ac_option = "4"' in out
    r = run_json("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "8",
                 "--recompute", "op")
    out = torchtitan.render({**r, **r["layout"]}, source={})
    assert 'selective_ac_option = "op"' in out
