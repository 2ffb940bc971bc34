"""What each software stack keeps, from its source (#11): torchtitan / FSDP2 under pipeline
parallelism, Transformer Engine's FP8 activations, Megatron's fused SwiGLU, FP8 primary
weights, a compiled loss, DualPipe; and two published recipes that ran and must fit."""

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators import buffers
from gpuplan.estimators.activations import layer_terms
from gpuplan.estimators.memory import memory_breakdown, stage_breakdowns
from gpuplan.estimators.shapes import pipeline_stages
from gpuplan.search.evaluate import memory_per_gpu, site_from_catalog
from gpuplan.spec import (
    BF16,
    FP8,
    R_MODULES,
    R_NONE,
    RECOMPUTE_MODULES,
    S_DUALPIPE,
    STACKS,
    Layout,
)
from gpuplan.units import GiB

MEGATRON, NEMO, TORCHTITAN, FSDP = (STACKS.index(s)
                                    for s in ("megatron", "nemo", "torchtitan", "fsdp"))
KW = dict(runtime_overhead_bytes=1.5 * GiB, fragmentation=0.1)
REL = 1e-12  # the comparisons below are exact in real arithmetic


@pytest.fixture(scope="module")
def llama8b():
    return load_catalog().model("llama3-8b")


def test_torchtitan_pp_keeps_the_stage_gathered_and_grads_unsharded(stacks, llama8b):
    """torchtitan under PP with FSDP: reshard_after_forward = False and the pipelining stage's
    no-sync backward keep the whole stage's bf16 parameters gathered and its gradients
    unsharded, upcast to the fp32 reduce dtype, for the step: 2 + 4 B per stage parameter.
    Plain FSDP2 (bf16 reduce) keeps bf16 gradients, 2 B. Megatron does not (2 layers)."""
    lay = Layout(pp=4, dp=8, zero=3, micro_batch=1, global_batch=64, seq_len=2048,
                 stack=np.array([TORCHTITAN, FSDP, MEGATRON]))
    first = pipeline_stages(llama8b, 1, 4, 1)[0]
    stage = float(first.total)  # the first rank's parameters (its layers and the embedding)
    st = stage_breakdowns(llama8b, lay, stacks=stacks, **KW)[0]
    assert float(st.gathered[0]) == pytest.approx(2 * stage, rel=REL)
    assert float(st.grad_accum[0]) == pytest.approx(4 * stage, rel=REL)
    assert float(st.gathered[1]) == pytest.approx(2 * stage, rel=REL)
    assert float(st.grad_accum[1]) == pytest.approx(2 * stage, rel=REL)
    two_layers = 2 * (2 * float(first.unit) + float(first.root))
    assert float(st.gathered[2]) == pytest.approx(two_layers, rel=REL)
    # without PP torchtitan gathers two layers and the root, as before
    flat = stage_breakdowns(llama8b, replace(lay, pp=1, stack=TORCHTITAN), stacks=stacks,
                            **KW)[0]
    one = pipeline_stages(llama8b, 1, 1, 1)[0]
    assert float(flat.gathered) == pytest.approx(2 * (2 * float(one.unit) + float(one.root)),
                                                 rel=REL)


def test_te_fp8_saves_fp8_gemm_inputs_torchao_does_not(llama8b):
    """Transformer Engine under FP8 saves the FP8 cast of each GEMM input (QKV, MLP, fc2 and
    out-projection inputs, 1 B) and flash attention keeps its own 16-bit output beside the
    out-projection's FP8 input; torchao saves the 16-bit inputs (nothing changes)."""
    h, q, f = llama8b.hidden, llama8b.heads * llama8b.d_head, llama8b.ffn
    kw = dict(seq_len=1, micro_batch=1, swiglu_saved=3.0)
    bf16 = float(layer_terms(llama8b, precision=BF16, fp8_input_bytes=1.0, **kw).none)
    te = float(layer_terms(llama8b, precision=FP8, fp8_input_bytes=1.0, **kw).none)
    ao = float(layer_terms(llama8b, precision=FP8, fp8_input_bytes=2.0, **kw).none)
    assert ao == pytest.approx(bf16, rel=REL)
    # 2h norm outputs, q out-projection input, ffn fc2 input at 1 B less; + 2q flash output
    assert bf16 - te == pytest.approx(2 * h + q + f - 2 * q, rel=REL)


def test_fused_swiglu_saves_three_ffn(llama8b):
    """Megatron's fused bias-SwiGLU saves w1x|w3x and fc2 its input: 3 ffn; unfused 4."""
    kw = dict(seq_len=1, micro_batch=1, precision=BF16)
    three = float(layer_terms(llama8b, swiglu_saved=3.0, **kw).none)
    four = float(layer_terms(llama8b, **kw).none)
    assert four - three == pytest.approx(2 * llama8b.ffn, rel=REL)


def test_nemo_fp8_primary_weights(stacks, llama8b):
    """Megatron-Bridge FP8 recipes keep FP8 primary weights (fp8_param_gather): 1 B weight +
    1 B transpose; Megatron-LM's default keeps the bf16 weight and 2 B of FP8 copies. Both only
    for the decoder layers: the root (untied embedding and LM head, final norm) is no Transformer
    Engine module and stays bf16 with no copies (Megatron-LM gpt_model.py)."""
    lay = Layout(dp=1, precision=FP8, stack=np.array([NEMO, MEGATRON]))
    bd = memory_breakdown(llama8b, lay, stacks=stacks, **KW)
    n = llama8b.total_params()
    root = 2 * llama8b.vocab * llama8b.hidden + llama8b.hidden
    assert float(bd.weights[0]) == pytest.approx(n - root + 2 * root, rel=REL)
    assert float(bd.fp8_weights[0]) == pytest.approx(n - root, rel=REL)
    assert float(bd.weights[1] + bd.fp8_weights[1]) == pytest.approx(4 * (n - root) + 2 * root,
                                                                     rel=REL)


def test_compiled_loss_saves_bf16_logits_only(stacks, llama8b):
    """torchtitan's loss compiled: the 16-bit logits (saved) and their gradient, 2 + 2 B per
    logit, instead of the fp32 log-softmax, the 16-bit logits and the fp32 upcast, 4 + 2 + 4."""
    lay = Layout(dp=8, zero=3, global_batch=8, seq_len=4096, stack=TORCHTITAN)
    eager = memory_breakdown(llama8b, lay, stacks=stacks, **KW).logits
    compiled = memory_breakdown(llama8b, lay, stacks=stacks.with_compiled_loss(), **KW).logits
    assert float(eager - compiled) == pytest.approx(6.0 * 4096 * llama8b.vocab, rel=REL)


def test_inplace_loss_keeps_the_bf16_logits_only(stacks, llama8b):
    """Transformer Engine's parallel_cross_entropy writes the gradient into the 16-bit logits
    and keeps only them: 2 B per logit, against a compiled loss's 2 + 2 (logits, gradient) and
    Megatron's native 4 + 2 (fp32 log-softmax, 16-bit logits)."""
    lay = Layout(dp=8, zero=1, global_batch=8, seq_len=4096, stack=MEGATRON)
    native = memory_breakdown(llama8b, lay, stacks=stacks, **KW).logits
    compiled = memory_breakdown(llama8b, lay, stacks=stacks.with_compiled_loss(), **KW).logits
    inplace = memory_breakdown(llama8b, lay, stacks=stacks.with_inplace_loss(), **KW).logits
    logits = 4096 * llama8b.vocab
    assert float(native - inplace) == pytest.approx(4.0 * logits, rel=REL)
    assert float(compiled - inplace) == pytest.approx(2.0 * logits, rel=REL)


def test_dualpipe_doubles_state_and_holds_pp_plus_one(stacks, llama8b):
    """DualPipe (DeepSeek-V3 report, Table 2): parameter 2x (weights, gradients; the optimizer
    state of the two copies is kept once), activation PP + 1."""
    lay = Layout(pp=4, dp=2, zero=1, global_batch=64, seq_len=2048, stack=MEGATRON,
                 precision=BF16, recompute=R_NONE)
    one = stage_breakdowns(llama8b, lay, stacks=stacks, **KW)[0]  # the first rank
    dual = stage_breakdowns(llama8b, replace(lay, schedule=S_DUALPIPE), stacks=stacks, **KW)[0]
    assert float(dual.optimizer) == pytest.approx(float(one.optimizer), rel=REL)
    for part in ("weights", "gradients", "grad_accum"):
        assert float(getattr(dual, part)) == pytest.approx(2 * float(getattr(one, part)),
                                                          rel=REL)
    # pp + 1 micro-batches in flight against 1F1B's pp on the first rank
    assert float(dual.activations) > float(one.activations)


def _fits(model: str, gpus: int, site_stacks, gpu: str = "h100-sxm",
          **layout) -> tuple[float, float]:
    """(predicted device total, the GPU's memory) in GiB for one published layout."""
    cat = load_catalog()
    site = replace(site_from_catalog(cat), stack_buffers=site_stacks(cat))
    lay = Layout(**layout)
    m = cat.model(model)
    lay.check(m, gpus)
    mem = memory_per_gpu(m, lay, site)
    return float(mem.total) / GiB, cat.accelerator(gpu).memory_bytes / GiB


def test_nvidia_llama31_405b_recipe_fits():
    """NVIDIA's Llama 3.1 405B FP8 benchmark on 1024 H100 80GB (Megatron-Bridge
    src/megatron/bridge/perf_recipes/llama/h100/llama31.py
    llama31_405b_pretrain_1024gpu_h100_fp8cs_config at 067f987df: TP 8, PP 8, VP 8, CP 2,
    MBS 1, GBS 1536, seq 8192, no recompute (recompute_granularity None in the base recipe),
    distributed optimizer, FP8 current scaling with fp8_param_gather, grad_reduce_in_fp32 =
    False from _perf_precision) ran and is published (performance-summary.md): it must fit.
    It came out at 104 GiB before the TE FP8 activations, fused SwiGLU and FP8 primary
    weights were modelled."""
    total, cap = _fits("llama3-405b", 1024,
                       lambda cat: buffers.from_table(cat.table("memory")).with_grad_reduce(
                           "bf16"),
                       tp=8, pp=8, vpp=8, cp=2, dp=8, zero=1, micro_batch=1, global_batch=1536,
                       seq_len=8192, precision=FP8, recompute=R_NONE, stack=NEMO)
    assert total <= cap
    # the recipes' default fp32 gradient buffer needs more; with the caching allocator margin
    # measured from published logs (0.14, docs/calibration.md) it would no longer fit (81.0 GiB)
    total32, _ = _fits("llama3-405b", 1024,
                       lambda cat: buffers.from_table(cat.table("memory")),
                       tp=8, pp=8, vpp=8, cp=2, dp=8, zero=1, micro_batch=1, global_batch=1536,
                       seq_len=8192, precision=FP8, recompute=R_NONE, stack=NEMO)
    assert total < total32


DEEPSEEK_MODS = ("layernorm", "moe_act", "mla_up_proj")


def _deepseek(mods=DEEPSEEK_MODS, moments="bf16", cache="fp8", ema="host"):
    """DeepSeek-V3's published layout (arXiv 2412.19437, section 3.2 and 3.3): 61 layers, PP 16
    with DualPipe, EP 64 across 8 nodes, ZeRO-1 over DP 128, FP8, 2,048 H800 80GB, seq 4096,
    batch 15,360 sequences (the final batch size, section 4.2), with the memory savings of
    sections 3.2.3 and 3.3.3 as gpuplan's options: all RMSNorms and the MLA up-projections
    recomputed (recompute modules layernorm + mla_up_proj), the MoE SwiGLU output recomputed
    from its cached input (moe_act), the FP8 activation cache, BF16 AdamW moments and the
    EMA in host memory. (predicted device total, the GPU's memory) in GiB."""
    bits = sum(1 << RECOMPUTE_MODULES.index(m) for m in mods)

    def site_stacks(cat):
        return (buffers.from_table(cat.table("memory")).with_moments(moments)
                .with_activation_cache(cache).with_ema(ema))
    return _fits("deepseek-v3", 2048, site_stacks, gpu="h800", tp=1, pp=16, ep=64, dp=128,
                 zero=1, micro_batch=1, global_batch=15360, seq_len=4096, precision=FP8,
                 recompute=R_MODULES, recompute_modules=bits, stack=MEGATRON,
                 schedule=S_DUALPIPE)


def test_deepseek_v3_published_layout_figure():
    """81.5 GiB of the H800's 79.65 with the caching allocator margin measured from published
    logs (0.14, docs/calibration.md 'Allocator margin from published reserved/allocated logs');
    78.7 GiB (1.0 GiB to spare) with the 0.10 judgement before it. It came out at 138, then 107
    GiB before the options below existed (134.5 GiB with MLA's own activation widths and moe_act
    dropping the SwiGLU output alone, #11)."""
    total, cap = _deepseek()
    # the figure the docstring states, within 0.5 GiB: a change of the model that moves it
    # must say so here (and in docs)
    assert total == pytest.approx(81.50, abs=0.5)


@pytest.mark.xfail(strict=True, reason="DeepSeek-V3's published layout trained, so it must fit; "
                   "with the measured caching allocator margin (0.14) it is predicted at 81.5 "
                   "GiB of 79.65 (78.7 with the 0.10 judgement)")
def test_deepseek_v3_published_layout_fits():
    """It trained, so it must fit (#11 done-when)."""
    total, cap = _deepseek()
    assert total <= cap


def test_deepseek_v3_each_saving():
    """What each option saves on the published layout, GiB (all others on; allocator margin
    included, 0.14 of the tensors): mla_up_proj 38.2 (Q, K, V of every MLA layer, 128 heads x
    (192 + 192 + 128) 16-bit values per token), the FP8 activation cache 18.2 (MoE SwiGLU inputs
    2 x 2048 x 9 experts at 1 B not 2, the attention output at 1.5 B without flash's own 16-bit
    copy), BF16 moments 1.53 (4 of AdamW's 12 B per parameter of the ZeRO-1 shard), the EMA in
    host memory 1.53 against an EMA on the GPU (nothing against no EMA). Tolerance 0.05 GiB: the
    figures are rounded to 0.01 GiB or better here."""
    total, _ = _deepseek()
    saved = {"mla_up_proj": _deepseek(mods=("layernorm", "moe_act"))[0] - total,
             "fp8 cache": _deepseek(cache="stack")[0] - total,
             "bf16 moments": _deepseek(moments="fp32")[0] - total,
             "ema host vs gpu": _deepseek(ema="gpu")[0] - total,
             "ema host vs none": _deepseek(ema="none")[0] - total}
    want = {"mla_up_proj": 38.15, "fp8 cache": 18.17, "bf16 moments": 1.53,
            "ema host vs gpu": 1.53, "ema host vs none": 0.0}
    for k, v in want.items():
        assert saved[k] == pytest.approx(v, abs=0.05), k
