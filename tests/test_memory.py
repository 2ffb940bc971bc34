"""Per-GPU training memory: literature cases, a published measurement, and invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuplan.errors import ConfigError
from gpuplan.estimators.memory import (
    adafactor_state_per_param,
    inflight_microbatches,
    layer_activation_bytes,
    memory_breakdown,
    model_state_bytes_per_param,
)
from gpuplan.spec import (
    ADAFACTOR,
    ADAMW,
    BF16,
    FP8,
    FP16,
    FP32,
    R_FULL,
    R_NONE,
    R_SELECTIVE,
    SGD,
    Layout,
    ModelSpec,
)
from gpuplan.units import GB, GiB

NO_OVERHEAD = dict(runtime_overhead_bytes=0.0, fragmentation=0.0)


def gpt(layers: int = 24, hidden: int = 1024, heads: int = 16, vocab: int = 51200,
        **kw: object) -> ModelSpec:
    return ModelSpec(id="t", name="t", layers=layers, hidden=hidden, heads=heads,
                     kv_heads=int(kw.pop("kv_heads", heads)), ffn=int(kw.pop("ffn", 4 * hidden)),
                     vocab=vocab, **kw)


LLAMA3_8B = ModelSpec(id="llama3-8b", name="Llama 3 8B", layers=32, hidden=4096, heads=32,
                      kv_heads=8, ffn=14336, vocab=128256, mlp="swiglu")


# --- Korthikanti et al. 2022 (arXiv 2205.05198), section 4 ------------------------------------
KORTHIKANTI = [  # (name, tp, sp, recompute, exact formula in bytes per layer)
    ("no parallelism: sbh(34 + 5as/h)", 1, True, R_NONE,
     lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    ("TP+SP: sbh(34 + 5as/h)/t", 8, True, R_NONE,
     lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h) / t),
    ("TP without SP: sbh(10 + 24/t + 5as/(ht))", 8, False, R_NONE,
     lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    ("selective recompute with TP+SP: 34sbh/t", 8, True, R_SELECTIVE,
     lambda s, b, h, a, t: 34 * s * b * h / t),
    ("full recompute: 2sbh", 1, True, R_FULL, lambda s, b, h, a, t: 2 * s * b * h),
    ("full recompute with TP+SP: 2sbh/t", 4, True, R_FULL, lambda s, b, h, a, t: 2 * s * b * h / t),
]


@pytest.mark.parametrize("name,tp,sp,rc,formula", KORTHIKANTI, ids=[k[0] for k in KORTHIKANTI])
@pytest.mark.parametrize("shape", [(2048, 1, 12288, 96), (2048, 4, 4096, 32), (512, 8, 1024, 16)])
def test_korthikanti_activation_formulas_exact(name, tp, sp, rc, formula, shape):
    """fp16, MHA, GELU MLP of 4h, no flash attention, dropout on (the paper's 34 includes the
    dropout masks): the per-layer function reproduces the paper's formulas to 1e-12 relative."""
    s, b, h, a = shape
    model = gpt(hidden=h, heads=a)
    got = layer_activation_bytes(model, seq_len=s, micro_batch=b, tp=tp, sp=sp, flash=False,
                                 recompute=rc, precision=FP16, dropout=True)
    assert float(got) == pytest.approx(formula(s, b, h, a, tp), rel=1e-12)


def test_dropout_off_and_flash_remove_their_terms():
    """Without dropout the paper's 34 becomes 32 (two 1-byte masks) and 5as/h becomes 2as/h;
    flash attention drops the a*s^2 term and keeps 4*a*s*b bytes of fp32 softmax statistics."""
    s, b, h, a = 2048, 2, 1024, 16
    model = gpt(hidden=h, heads=a)
    kw = dict(seq_len=s, micro_batch=b, precision=FP16, recompute=R_NONE)
    no_drop = layer_activation_bytes(model, flash=False, dropout=False, **kw)
    assert float(no_drop) == pytest.approx(s * b * h * (32 + 2 * a * s / h), rel=1e-12)
    flash = layer_activation_bytes(model, flash=True, dropout=False, **kw)
    assert float(flash) == pytest.approx(s * b * h * 32 + 4 * a * s * b, rel=1e-12)


def test_gqa_swiglu_and_fp32_terms():
    """GQA (flash) saves K/V at kv width: 2*(q - kv)*s*b*e fewer bytes than MHA; SwiGLU saves
    4*ffn per token in the MLP instead of GELU's 2*ffn; fp32 doubles every bf16 term."""
    s, b = 1024, 2
    mha, gqa = gpt(hidden=1024, heads=16), gpt(hidden=1024, heads=16, kv_heads=4)
    kw = dict(seq_len=s, micro_batch=b, flash=True, precision=BF16)
    diff = layer_activation_bytes(mha, **kw) - layer_activation_bytes(gqa, **kw)
    assert float(diff) == pytest.approx(2 * (1024 - 256) * s * b * 2, rel=1e-12)
    swi = gpt(hidden=1024, heads=16, mlp="swiglu", ffn=4096)
    d2 = layer_activation_bytes(swi, **kw) - layer_activation_bytes(mha, **kw)
    assert float(d2) == pytest.approx(2 * 4096 * s * b * 2, rel=1e-12)
    nf = dict(seq_len=s, micro_batch=b, flash=False)
    ratio = layer_activation_bytes(mha, precision=FP32, **nf) / layer_activation_bytes(
        mha, precision=BF16, **nf)
    assert float(ratio) == pytest.approx(2.0, rel=1e-12)


# --- ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054) -----------------------------------------
def test_squared_relu_saves_two_ffn_tensors_as_gelu_does():
    """relu2 (Nemotron-4): the relu output (shared by relu's and the square's backward) and the
    fc2 input, 2*ffn per token, as for GELU (measured on an H200: see MLP_SAVED_FFN). Checked
    against the per-layer sum written out independently: norms/QKV/MLP inputs 4h, Q and the
    out-projection input 2q, compact K and V 2kv, the MLP 2*ffn, fp32 flash statistics 4a."""
    s, b, h, a, kv, ffn = 1024, 2, 1024, 16, 4, 3000
    relu2 = gpt(hidden=h, heads=a, kv_heads=kv, ffn=ffn, mlp="relu2")
    gelu = gpt(hidden=h, heads=a, kv_heads=kv, ffn=ffn, mlp="gelu")
    kw = dict(seq_len=s, micro_batch=b, flash=True, precision=BF16, dropout=False)
    got = float(layer_activation_bytes(relu2, **kw))
    d = h // a
    assert got == pytest.approx(2 * s * b * (4 * h + 2 * h + 2 * kv * d + 2 * ffn)
                                + 4 * a * s * b, rel=1e-12)
    assert got == float(layer_activation_bytes(gelu, **kw))
    swiglu = gpt(hidden=h, heads=a, kv_heads=kv, ffn=ffn, mlp="swiglu")
    assert float(layer_activation_bytes(swiglu, **kw)) - got == pytest.approx(2 * s * b * 2 * ffn,
                                                                              rel=1e-12)
    assert relu2.total_params() == gelu.total_params()  # 2 matrices: same weights and FLOPs


def test_mlp_type_is_checked_and_read_from_config_json(tmp_path):
    with pytest.raises(ConfigError, match="mlp must be one of 'gelu', 'relu2', 'swiglu'"):
        gpt(mlp="relu")
    from gpuplan.workload import model_from_hf_config

    cfg = {"num_hidden_layers": 32, "hidden_size": 6144, "num_attention_heads": 48,
           "num_key_value_heads": 8, "intermediate_size": 24576, "vocab_size": 256000}
    for act, mlp in (("relu2", "relu2"), ("squared_relu", "relu2"), ("gelu", "gelu"),
                     ("silu", "swiglu")):
        p = tmp_path / act / "config.json"
        p.parent.mkdir()
        p.write_text(json.dumps({**cfg, "hidden_act": act}))
        assert model_from_hf_config(p).mlp == mlp, act


def test_nemotron4_runs_are_typed_relu2():
    """Issue 16: Nemotron-4's MLP is squared ReLU (Parmar et al. 2024, arXiv 2402.16819, sec. 2)."""
    from gpuplan.validation import load_runs

    rows = [r for r in load_runs() if r["id"].startswith("nemotron4-")]
    assert len(rows) == 3 and {r["mlp"] for r in rows} == {"relu2"}
    assert not any("typed as gelu" in r["defaults"] for r in rows)


def test_zero_mixed_precision_adam_is_16_bytes_per_param():
    """Section 3.1: 2 (fp16 weights) + 2 (fp16 gradients) + 12 (fp32 master, momentum,
    variance) = 16 bytes per parameter. Exact."""
    w, g, o = model_state_bytes_per_param(FP16, ADAMW)
    assert (float(w), float(g), float(o)) == (2.0, 2.0, 12.0)
    assert float(w + g + o) == 16.0


@pytest.mark.parametrize("zero,paper_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_figure1_7_5b_on_64_gpus(zero, paper_gb):
    """Figure 1: Psi = 7.5B, Nd = 64, K = 12: baseline 120 GB, P_os 31.4, P_os+g 16.6,
    P_os+g+p 1.9 GB. Model-state bytes per GPU (weights + gradients + optimizer) from the full
    breakdown, scaled to Psi = 7.5e9, match within 0.05 GB (the paper rounds to 0.1 GB)."""
    model = gpt(layers=32, hidden=4096, heads=32, vocab=51200)
    lay = Layout(dp=64, zero=zero, micro_batch=1, global_batch=64, precision=FP16)
    bd = memory_breakdown(model, lay, **NO_OVERHEAD)
    per_param = float(bd.weights + bd.gradients + bd.optimizer) / model.total_params()
    assert per_param * 7.5e9 / GB == pytest.approx(paper_gb, abs=0.05)
    assert float(bd.grad_accum) == 0.0  # one micro-batch per step: no accumulation buffer


@pytest.mark.parametrize("d", [1, 8, 64])
def test_megatron_distributed_optimizer_bf16_is_6_plus_12_over_d(d):
    """Megatron-LM docs (distributed optimizer): bf16 params with fp32 main grads cost
    6 + 12/d bytes per parameter with the distributed optimizer (ZeRO-1) over d ranks, when
    gradients are accumulated over micro-batches. Exact."""
    model = gpt()
    lay = Layout(dp=d, zero=1, micro_batch=1, global_batch=4 * d, precision=BF16)
    bd = memory_breakdown(model, lay, **NO_OVERHEAD)
    state = float(bd.weights + bd.gradients + bd.grad_accum + bd.optimizer)
    assert state / model.total_params() == pytest.approx(6 + 12 / d, rel=1e-12)


def test_state_bytes_per_precision_and_optimizer():
    """fp32 AdamW 4+4+8 (no master copy); SGD momentum 4 (+4 master when mixed); FP8 per
    Transformer Engine: bf16 weight + fp8 copy (3), bf16 grad (2), fp32 master + moments (12)."""
    table = {(FP32, ADAMW): (4, 4, 8), (BF16, SGD): (2, 2, 8), (FP32, SGD): (4, 4, 4),
             (FP8, ADAMW): (3, 2, 12)}
    for (p, o), want in table.items():
        assert tuple(float(x) for x in model_state_bytes_per_param(p, o)) == want


def test_adafactor_factored_state_counted_per_matrix():
    """Adafactor (arXiv 1804.04235) keeps rows + cols floats per matrix: checked against an
    independent count for a one-layer model (Wq, Wk, Wv, Wo, two MLP matrices, two norms, two
    untied embeddings, final norm)."""
    m = gpt(layers=1, hidden=64, heads=4, vocab=100, ffn=256)
    state = 4 * (64 + 64) + 2 * (64 + 256) + 2 * 64 + 2 * (100 + 64) + 64
    assert adafactor_state_per_param(m) == pytest.approx(state / m.total_params(), rel=1e-12)
    w, g, o = model_state_bytes_per_param(BF16, ADAFACTOR, adafactor_state_per_param(m))
    assert float(o) == pytest.approx(4 + 4 * state / m.total_params(), rel=1e-12)


# --- pipeline, stages, offload, overhead ------------------------------------------------------
def test_inflight_microbatches_1f1b_and_interleaved():
    """1F1B: min(pp, m); interleaved: pp * (1 + (pp - 1)/(pp * vpp)) (Korthikanti 4.2.3)."""
    assert float(inflight_microbatches(4, 1, 32)) == 4
    assert float(inflight_microbatches(4, 1, 2)) == 2
    assert float(inflight_microbatches(1, 1, 32)) == 1
    assert float(inflight_microbatches(4, 2, 32)) == pytest.approx(4 * (1 + 3 / 8))


def test_most_loaded_stage_is_first_or_last():
    """A huge vocabulary puts the peak on the last stage (LM head + fp32 logits); many micro-batches
    in flight and a small vocabulary put it on the first. The reported total is the larger one."""
    base = dict(pp=4, micro_batch=1, global_batch=64, seq_len=4096, recompute=R_SELECTIVE)
    big_vocab = gpt(layers=8, hidden=1024, vocab=256000)
    small_vocab = gpt(layers=32, hidden=4096, heads=32, vocab=1000)
    assert int(memory_breakdown(big_vocab, Layout(**base), **NO_OVERHEAD).stage) == 1
    bd = memory_breakdown(small_vocab, Layout(**base), **NO_OVERHEAD)
    assert int(bd.stage) == 0 and float(bd.logits) == 0.0


def test_offload_moves_optimizer_to_cpu():
    """ZeRO-Offload: optimizer state + fp32 master on the CPU, half gradients stay on the GPU."""
    m = gpt()
    on = memory_breakdown(m, Layout(offload=True), **NO_OVERHEAD)
    off = memory_breakdown(m, Layout(offload=False), **NO_OVERHEAD)
    assert float(on.optimizer) == 0.0
    assert float(on.offloaded) == pytest.approx(float(off.optimizer), rel=1e-12)
    assert float(on.gradients) == float(off.gradients)
    assert float(off.total - on.total) == pytest.approx(float(off.optimizer), rel=1e-12)


def test_overhead_is_runtime_plus_fragmentation_of_allocated():
    m = gpt()
    bd = memory_breakdown(m, Layout(), runtime_overhead_bytes=3 * GiB, fragmentation=0.1)
    allocated = sum(float(v) for k, v in bd.parts().items() if k != "overhead")
    assert float(bd.overhead) == pytest.approx(3 * GiB + 0.1 * allocated, rel=1e-12)


def test_summary_parts_sum_to_total_in_gib():
    bd = memory_breakdown(LLAMA3_8B, Layout(dp=8, zero=3, micro_batch=2, global_batch=64,
                                            seq_len=8192), runtime_overhead_bytes=GiB,
                          fragmentation=0.05)
    s = bd.summary(GiB)
    assert set(s) == {"weights", "gradients", "optimizer", "activations", "other", "total"}
    assert all(isinstance(v, float) for v in s.values())
    parts = s["weights"] + s["gradients"] + s["optimizer"] + s["activations"] + s["other"]
    assert parts == pytest.approx(s["total"], rel=1e-12)


def test_zero3_can_cost_more_than_zero2_on_two_gpus():
    """Stated exception to monotonicity: ZeRO-3 on a shard group of 2 with a shallow model holds
    gathered layers and the root unit, more than the half of the weights it saves."""
    m = gpt(layers=2, hidden=1024, vocab=51200)
    z2 = memory_breakdown(m, Layout(dp=2, zero=2, global_batch=2), **NO_OVERHEAD)
    z3 = memory_breakdown(m, Layout(dp=2, zero=3, global_batch=2), **NO_OVERHEAD)
    assert float(z3.total) > float(z2.total)


# --- a published measurement ------------------------------------------------------------------
def test_torchtitan_llama3_8b_fsdp_peak_within_recompute_bounds():
    """torchtitan's Dec 2024 H100 benchmark (pytorch/torchtitan,
    benchmarks/llama3_h100_202412_torchtitan.md, Table 1, the FSDP row without compile or
    Float8): Llama 3.1 8B, FSDP on 8 GPUs, bf16, sequence 8192, local batch 2 (global 16),
    selective activation checkpointing: 82.4 GiB peak. torchtitan's op-level selective
    checkpointing (save matmul outputs, recompute every other one) is neither of our modes, so
    the tolerance is the bracket: the measurement must lie between our full-recompute and
    no-recompute totals (36.6 and 112.2 GiB with no overhead), and within 35% of their mean."""
    measured, dp, global_batch, seq = 82.4, 8, 16, 8192
    lay = Layout(dp=dp, zero=3, micro_batch=global_batch // dp, global_batch=global_batch,
                 seq_len=seq, precision=BF16, recompute=np.array([R_FULL, R_NONE]))
    lo, hi = np.asarray(memory_breakdown(LLAMA3_8B, lay, **NO_OVERHEAD).total) / GiB
    assert lo < measured < hi
    assert measured == pytest.approx((lo + hi) / 2, rel=0.35)


def _catalog_models() -> list[ModelSpec]:
    from gpuplan.catalog import load_catalog

    return list(load_catalog().models.values())


@pytest.mark.parametrize("model", _catalog_models(), ids=lambda m: m.id)
def test_single_gpu_weights_count_every_parameter_once(model):
    """Second count of the parameters: on one GPU (pp = tp = 1, no ZeRO) the stage placement
    (attention, MLP or experts, norms, embeddings, head, final norm) holds exactly
    ModelSpec.total_params(); with pp = 2 the two stages hold it plus the tied-embedding copy."""
    one = memory_breakdown(model, Layout(precision=FP32), **NO_OVERHEAD)
    assert float(one.weights) == 4 * model.total_params()
    from gpuplan.estimators.shapes import stages

    first, last = stages(model, 1, 2, 1)
    held = float(first.total + last.total)
    copy = model.vocab * model.hidden if model.tied_embeddings else 0
    assert held == model.total_params() + copy


def test_issue10_zero3_above_zero2_is_explained_by_its_fields():
    """Issue 10 item 5: Mixtral 8x7B, tp 2, pp 16 (2 layers per stage), dp 32, full recompute.
    ZeRO-3 must gather both of a stage's layers (the current one and the prefetched one), so
    sharding saves nothing at the peak and ZeRO-3 holds its shard on top: real, and the
    breakdown says why. gathered > zero3_saving, and the difference of the totals is exactly
    (1 + fragmentation) x (gathered - zero3_saving) (same stage, other parts equal; 1e-9)."""
    from gpuplan.catalog import load_catalog

    model = load_catalog().model("mixtral-8x7b")
    kw = dict(runtime_overhead_bytes=GiB, fragmentation=0.05)
    lay = Layout(tp=2, pp=16, dp=32, micro_batch=2, global_batch=512, seq_len=4096,
                 recompute=R_FULL)
    z2 = memory_breakdown(model, Layout(**{**lay.__dict__, "zero": 2}), **kw)
    z3 = memory_breakdown(model, Layout(**{**lay.__dict__, "zero": 3}), **kw)
    assert int(z2.stage) == int(z3.stage)
    assert float(z2.gathered) == float(z2.zero3_saving) == 0.0
    assert float(z3.gathered) > float(z3.zero3_saving) > 0
    excess = 1.05 * float(z3.gathered - z3.zero3_saving)
    assert float(z3.total - z2.total) == pytest.approx(excess, rel=1e-9)
    # what remains is the shard ZeRO-3 keeps beside the gathered copy: under 2% of the total
    assert 0 < float(z3.total - z2.total) < 0.02 * float(z2.total)


def test_zero3_prefetch_is_capped_by_the_stage_layers():
    """A stage of one layer has nothing to prefetch: ZeRO-3 gathers one layer, not two."""
    m = gpt(layers=8)
    one = memory_breakdown(m, Layout(pp=8, dp=4, zero=3, global_batch=4), **NO_OVERHEAD)
    two = memory_breakdown(m, Layout(pp=4, dp=4, zero=3, global_batch=4), **NO_OVERHEAD)
    layer = m.layer_params(False) * 2  # bf16 bytes of one layer (tp = 1)
    assert float(two.gathered - one.gathered) == pytest.approx(layer, rel=1e-12)
