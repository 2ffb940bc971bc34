"""Training memory per GPU (L3): weights, gradients, optimizer state, activations, overhead.

Pure numpy. Every `Layout` field may be an array; all arrays broadcast together and the result
is a `MemoryBreakdown` of arrays in BYTES for the most loaded GPU. The model is scalar.

Conventions and sources (each formula is repeated beside its function):

- Model state per parameter (Rajbhandari et al. 2019, ZeRO, arXiv 1910.02054, section 3.1):
  mixed precision AdamW keeps 2 B half weights + 2 B half gradients + 12 B optimizer state
  (fp32 master copy, momentum, variance) = 16 B/param. fp32 training keeps no master copy
  (4 + 4 + 8 = 16 B/param). SGD with momentum: one fp32 buffer (+ fp32 master when mixed).
  Adafactor (Shazeer & Stern 2018, arXiv 1804.04235) without first moment: a factored second
  moment of rows + cols floats per matrix, the full second moment for vectors; the ratio of
  state elements to parameters is computed once per model (an approximation: per-stage shares
  are taken to be the model-wide ratio).
- FP8 follows NVIDIA Transformer Engine's default (without `fp8_model_init`): module weights stay
  in bf16 and each linear layer caches an fp8 copy of its weight for the step, so weights cost
  2 + 1 = 3 B/param; gradients are bf16 and the optimizer keeps an fp32 master copy. FP8
  activations are counted as bf16 (TE also keeps bf16 tensors for norms and activation functions;
  counting its fp8 GEMM inputs at 1 B would lower the estimate by up to ~30%).
- Gradient accumulation in fp32 (Megatron-LM's `main_grad` buffer, which its distributed
  optimizer keeps at 4 B/param for bf16 training: 6 + 12/d B/param in total): when precision is
  mixed and there is more than one micro-batch per step, gradients cost 4 B/param instead of 2;
  `gradients` keeps the half-precision 2 B and `grad_accum` the extra 2 B, sharded like the
  gradients. With one micro-batch the ZeRO paper's 2 + 2 + 12 = 16 B/param holds exactly.
- ZeRO (arXiv 1910.02054): stage 1 shards optimizer state, stage 2 also gradients, stage 3 (FSDP)
  also weights, over the data-parallel group, which with context parallelism is dp * cp (as in
  Megatron-LM, where CP ranks hold the same weights). Expert (MoE) parameters live on dp*cp/ep
  expert-data-parallel ranks, so their state is sharded over dp*cp/ep.
- ZeRO-3 gathers each layer's full (TP-sharded) weights before use; we count two gathered layers
  (the current one and one prefetched, FSDP's default) plus one layer of unsharded gradients
  before its reduce-scatter, plus the FSDP root unit (embeddings, final norm, LM head of this
  stage), which torchtitan keeps gathered between forward and backward. With a shard group of 1
  nothing is sharded or gathered (FSDP switches to NO_SHARD).
- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053): attention and MLP
  matrices are split by tp; embeddings and the LM head are vocabulary-parallel (/tp); norm and
  router weights are replicated. KV heads are split by tp, or replicated when tp > kv_heads.
  MoE expert weights are split by tp too (expert tensor parallel = tp).
- Pipeline parallelism: layers / pp per stage; the first stage holds the input embedding, the
  last stage the final norm and LM head (a tied embedding is copied onto the last stage when
  pp > 1, as Megatron-LM does). In a 1F1B schedule the first stage holds min(pp, m)
  micro-batches of activations, the last stage one (Narayanan et al. 2021, arXiv 2104.04473);
  interleaved with vpp chunks the first stage holds pp * (1 + (pp - 1) / (pp * vpp))
  micro-batches' worth of its layers (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.3).
  The most loaded GPU is the first or the last stage, whichever total is larger.
- Activations per layer: Korthikanti et al. 2022 (arXiv 2205.05198), section 4, generalised to
  GQA, SwiGLU, flash attention, dropout on/off and fp32; see `layer_activation_bytes`.
- CPU offload (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840): optimizer state and the fp32
  master copy move to the CPU (`offloaded`, not in `total`); half gradients stay on the GPU.
- Overhead: runtime_overhead_bytes (CUDA/ROCm context, NCCL buffers; a catalog constant) plus
  fragmentation * allocated bytes (caching-allocator slack).
- Biases, position embeddings and norm statistics (s*b floats) are ignored, as in the papers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..spec import ADAFACTOR, ADAMW, FP32, R_FULL, R_NONE, R_SELECTIVE, SGD, Layout, ModelSpec

__all__ = [
    "MemoryBreakdown",
    "memory_breakdown",
    "layer_activation_bytes",
    "layer_recompute_transient_bytes",
    "model_state_bytes_per_param",
    "adafactor_state_per_param",
    "logits_bytes",
    "inflight_microbatches",
    "stage_params",
]

# SwiGLU MLP tensors saved for backward, in units of s*b*ffn elements, for the unfused PyTorch
# form w2(silu(w1 x) * w3 x) (Hugging Face Llama, torchtitan): w1 x, silu(w1 x), w3 x, product.
# (Megatron-LM's fused bias-SwiGLU saves 3: the concatenated w1x|w3x and the product.)
SWIGLU_SAVED_FFN = 4
# GELU MLP: the GELU input and the fc2 input (Korthikanti et al. 2022, 4.1: 8sbh + 8sbh at 4h).
GELU_SAVED_FFN = 2


# --- model state -------------------------------------------------------------------------------
# Bytes per parameter by precision code (fp32, fp16, bf16, fp8).
# fp8: bf16 weight + the fp8 copy Transformer Engine caches
_WEIGHT_B = np.array([4.0, 2.0, 2.0, 3.0])
_GRAD_B = np.array([4.0, 2.0, 2.0, 2.0])
_MASTER_B = np.array([0.0, 4.0, 4.0, 4.0])  # fp32 master copy kept by the optimizer when mixed
_ACT_B = np.array([4.0, 2.0, 2.0, 2.0])  # activation element size (fp8 counted as bf16, see top)


def adafactor_state_per_param(model: ModelSpec) -> float:
    """Adafactor second-moment elements per parameter: (rows + cols) per matrix, n per vector.

    Shazeer & Stern 2018 (arXiv 1804.04235), section 3: a factored estimate keeps one row and one
    column accumulator per matrix; no first moment (beta1 = 0, the paper's default).
    """
    h, q, kv, d = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head, 0
    attn = (h + q) * 2 + (h + kv) * 2  # Wq, Wo, Wk, Wv
    mlp = model.mlp_matrices * (h + model.ffn)
    expert = model.mlp_matrices * (h + model.expert_ffn)
    norms = 2 * h
    dense_layers = model.layers - model.moe_layers
    moe_layer = attn + norms + (model.experts + model.shared_experts) * expert + (h + model.experts)
    emb = (model.vocab + h) * (1 if model.tied_embeddings else 2)
    state = dense_layers * (attn + mlp + norms) + model.moe_layers * moe_layer + emb + h + d
    return state / model.total_params()


def model_state_bytes_per_param(
    precision: Any, optimizer: Any, adafactor_state: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weight, gradient, optimizer) bytes per parameter, unsharded.

    ZeRO (arXiv 1910.02054) 3.1: mixed-precision Adam = 2 + 2 + 12 = 16 B/param.
    AdamW: master (4 when mixed) + m (4) + v (4); SGD: master + momentum (4);
    Adafactor: master + 4 * adafactor_state (see `adafactor_state_per_param`).
    """
    p = np.asarray(precision, dtype=np.intp)
    o = np.asarray(optimizer, dtype=np.intp)
    per_opt = np.array([0.0, 0.0, 0.0])
    per_opt[ADAMW], per_opt[SGD], per_opt[ADAFACTOR] = 8.0, 4.0, 4.0 * adafactor_state
    return _WEIGHT_B[p], _GRAD_B[p], _MASTER_B[p] + per_opt[o]


# --- parameters per GPU on a pipeline stage ---------------------------------------------------
@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage (TP-sharded, before ZeRO), split for sharding."""

    dense: Any  # replicated over dp*cp (attention, dense MLP, norms, router, embeddings)
    expert: Any  # replicated over dp*cp/ep (routed experts)
    unit: Any  # largest layer (a ZeRO-3 gather unit)
    root: Any  # embeddings / final norm / head on this stage (the FSDP root unit)
    dense_layers: Any
    moe_layers: Any


def _kv_width_per_rank(model: ModelSpec, tp: Any) -> Any:
    """KV heads per TP rank * head_dim: split by tp, or one replicated head when tp > kv_heads."""
    return model.d_head * np.maximum(model.kv_heads / tp, 1.0)


def stage_params(model: ModelSpec, layout: Layout, stage: str) -> StageParams:
    """Parameters per GPU on the 'first' or 'last' pipeline stage (Megatron-LM placement)."""
    tp, pp = np.asarray(layout.tp, float), np.asarray(layout.pp, float)
    ep = np.asarray(layout.ep, float)
    h, q = model.hidden, model.heads * model.d_head
    attn = 2 * h * q / tp + 2 * h * _kv_width_per_rank(model, tp)  # Wq, Wo split; Wk, Wv
    norms = model.norm_params_per_layer()  # replicated across TP
    mlp = model.dense_mlp_params() / tp
    experts = (model.experts / ep) * model.expert_params() / tp if model.is_moe else 0.0
    shared = model.shared_experts * model.expert_params() / tp if model.is_moe else 0.0
    router = h * model.experts if model.is_moe else 0.0
    lps = model.layers / pp
    if stage == "first":  # dense layers come first in MoE models
        n_moe = np.clip(lps - model.dense_layers, 0, lps) if model.is_moe else 0.0 * lps
    else:
        n_moe = np.minimum(lps, model.moe_layers)
    n_dense = lps - n_moe
    vh = model.vocab * h
    # embeddings are vocabulary-parallel (/tp); the final norm (h) sits with the LM head
    single = model.embedding_params() / tp + h  # pp == 1: embedding, head (once if tied), norm
    root = np.where(pp == 1, single, vh / tp + (h if stage == "last" else 0.0))
    dense = lps * (attn + norms) + n_dense * mlp + n_moe * (shared + router) + root
    unit = attn + norms + np.maximum(np.where(n_dense > 0, mlp, 0.0),
                                     np.where(n_moe > 0, experts + shared + router, 0.0))
    return StageParams(dense=dense, expert=n_moe * experts, unit=unit, root=root,
                       dense_layers=n_dense, moe_layers=n_moe)


# --- activations -------------------------------------------------------------------------------
def layer_activation_bytes(
    model: ModelSpec,
    *,
    seq_len: Any,
    micro_batch: Any,
    tp: Any = 1,
    cp: Any = 1,
    sp: Any = True,
    flash: Any = True,
    recompute: Any = R_NONE,
    precision: Any = 2,
    dropout: Any = False,
    moe: bool = False,
) -> Any:
    """Bytes one transformer layer keeps for backward, per micro-batch, per GPU.

    Korthikanti et al. 2022 (arXiv 2205.05198) eq. 1-4, fp16, MHA, GELU MLP of 4h, dropout on:
      none: s*b*h*(34 + 5*a*s/h); TP+SP: that / t; TP without SP: s*b*h*(10 + 24/t + 5as/(ht));
      selective (recompute core attention): 34*s*b*h/t; full: 2*s*b*h (/t with SP).
    Generalised, with e = bytes per element (4 fp32, 2 otherwise):
      replicated part (not split by TP unless SP): e*s*b*h*(2 norm inputs + QKV input + MLP
        input) + 1 B masks after attention-out and MLP when dropout (2*s*b*h);
      TP-split part: e*s*b*(q + 2*kv + q) for Q, K, V and the out-projection input
        (non-flash attention saves K and V repeated to all heads, as Megatron-LM and Hugging Face
        eager attention do; flash attention and selective recompute keep them compact), plus
        the MLP's saved tensors
        e*s*b*ffn*(2 GELU | 4 SwiGLU); MoE: k routed + shared experts' MLP tensors, their input
        copies, and the fp32 router probabilities (4*s*b*E);
      score part (non-flash, not selective/full): a*s^2*b*(e softmax + dropout: e output + 1 mask);
      flash keeps fp32 softmax statistics 4*a*s*b instead (Dao et al. 2022, arXiv 2205.14135).
    Context parallelism divides the sequence by cp (the score part keeps all keys: a*(s/cp)*s*b).
    """
    s, b = np.asarray(seq_len, float), np.asarray(micro_batch, float)
    t, c = np.asarray(tp, float), np.asarray(cp, float)
    e = _ACT_B[np.asarray(precision, dtype=np.intp)]
    drop = np.asarray(dropout, float)
    flash_ = np.asarray(flash, bool)
    rc = np.asarray(recompute)
    t_seq = np.where(np.asarray(sp, bool), t, 1.0)  # SP splits the replicated part too
    sb = s * b / c
    h, a, q = model.hidden, model.heads, model.heads * model.d_head
    replicated = sb * h * (4 * e + 2 * drop) / t_seq
    # K, V saved compact by flash attention and by selective recompute (the checkpointed core
    # attention receives them before Megatron-LM repeats them); repeated to all heads otherwise
    kv = np.where(flash_ | (rc == R_SELECTIVE), _kv_width_per_rank(model, t), q / t)
    attn = e * sb * (2 * q / t + 2 * kv)
    attn = attn + np.where(flash_, 4.0 * a * sb / t, 0.0)  # flash softmax statistics (fp32)
    score = np.where(flash_ | (rc != R_NONE), 0.0, a * sb * s * (e + drop * (e + 1)) / t)
    mlp = e * sb * _mlp_saved(model, moe) / t
    if moe:
        mlp = mlp + 4.0 * sb * model.experts  # router probabilities, fp32, replicated
    full = replicated + attn + score + mlp
    ckpt = e * sb * h / t_seq  # full recompute: only the layer input (sharded with SP)
    return np.where(rc == R_FULL, ckpt, full)


def _mlp_saved(model: ModelSpec, moe: bool) -> float:
    """Saved MLP elements per token: GELU 2*ffn, SwiGLU 4*ffn; MoE: (k + shared) experts."""
    per = SWIGLU_SAVED_FFN if model.mlp == "swiglu" else GELU_SAVED_FFN
    if not moe:
        return per * model.ffn
    k = model.experts_per_token + model.shared_experts
    return k * (per * model.expert_ffn + model.hidden)  # + each expert's input copy


def layer_recompute_transient_bytes(model: ModelSpec, *, recompute: Any, **kw: Any) -> Any:
    """Extra bytes alive while one layer is recomputed in backward (one micro-batch).

    full: the layer's complete activations minus its stored input (the input is reused);
    selective: the recomputed attention scores (non-flash only); none: nothing.
    """
    rc = np.asarray(recompute)
    none = layer_activation_bytes(model, recompute=R_NONE, **kw)
    sel = layer_activation_bytes(model, recompute=R_SELECTIVE, **kw)
    ckpt = layer_activation_bytes(model, recompute=R_FULL, **kw)
    return np.where(rc == R_FULL, none - ckpt, np.where(rc == R_SELECTIVE, none - sel, 0.0))


def inflight_microbatches(pp: Any, vpp: Any, microbatches: Any) -> Any:
    """Micro-batches of activations on the first stage.

    1F1B: min(pp, m) (Narayanan et al. 2021, arXiv 2104.04473, section 2.2.1);
    interleaved with vpp chunks: pp * (1 + (pp - 1) / (pp * vpp)) (Korthikanti et al. 2022,
    section 4.2.3), also capped at m.
    """
    pp, vpp = np.asarray(pp, float), np.asarray(vpp, float)
    held = np.where(vpp > 1, pp + (pp - 1) / vpp, pp)
    return np.maximum(np.minimum(held, microbatches), 1.0)


def logits_bytes(
    model: ModelSpec, *, seq_len: Any, micro_batch: Any, tp: Any = 1, cp: Any = 1,
    sp: Any = True, precision: Any = 2,
) -> tuple[Any, Any]:
    """(saved, transient) bytes of the output layer on the last stage, one micro-batch.

    saved: final-norm input and LM-head input e*s*b*h each (/t with SP) + fp32 log-softmax
      output kept by the loss, 4*s*b*V/t (Korthikanti et al. 2022, section 4.3: 4sbh/t*(1+V/h));
    transient: the logits in training precision e*s*b*V/t, alive with the loss buffer.
    """
    s, b = np.asarray(seq_len, float), np.asarray(micro_batch, float)
    t, c = np.asarray(tp, float), np.asarray(cp, float)
    e = _ACT_B[np.asarray(precision, dtype=np.intp)]
    t_seq = np.where(np.asarray(sp, bool), t, 1.0)
    sb = s * b / c
    saved = 2 * e * sb * model.hidden / t_seq + 4.0 * sb * model.vocab / t
    return saved, e * sb * model.vocab / t


# --- the breakdown -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded GPU; `total` is the sum of every field but `offloaded`."""

    weights: Any
    gradients: Any
    optimizer: Any
    activations: Any
    logits: Any
    gathered: Any
    grad_accum: Any
    overhead: Any
    offloaded: Any  # on the CPU, not in total
    total: Any
    stage: Any  # 0 = first pipeline stage is the most loaded, 1 = last

    def summary(self, unit: float = 1.0) -> dict[str, Any]:
        """JSON keys weights, gradients, optimizer, activations, other, total (parts sum to total).

        other = logits + gathered + grad_accum + overhead. Divide by `unit` (e.g. GiB); a
        single configuration gives Python floats.
        """
        other = self.logits + self.gathered + self.grad_accum + self.overhead
        parts = {"weights": self.weights, "gradients": self.gradients,
                 "optimizer": self.optimizer, "activations": self.activations,
                 "other": other, "total": self.total}
        return {k: _plain(np.asarray(v) / unit) for k, v in parts.items()}

    def parts(self) -> dict[str, Any]:
        """All on-GPU parts (every field that sums to total)."""
        skip = {"offloaded", "total", "stage"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def _plain(x: np.ndarray) -> Any:
    return float(x) if x.ndim == 0 else x


def _shard(zero: Any, stage: int, group: Any) -> Any:
    """ZeRO divisor: the group size when the ZeRO stage shards this state, else 1."""
    return np.where(np.asarray(zero) >= stage, group, 1.0)


def _stage_memory(model: ModelSpec, L: Layout, stage: str, *, runtime_overhead_bytes: float,
                  fragmentation: float, adafactor_state: float) -> dict[str, Any]:
    P = stage_params(model, L, stage)
    wb, gb, ob = model_state_bytes_per_param(L.precision, L.optimizer, adafactor_state)
    zero = np.asarray(L.zero)
    group = np.asarray(L.dp, float) * np.asarray(L.cp, float)
    egroup = group / np.asarray(L.ep, float)
    weights = wb * (P.dense / _shard(zero, 3, group) + P.expert / _shard(zero, 3, egroup))
    grad_params = P.dense / _shard(zero, 2, group) + P.expert / _shard(zero, 2, egroup)
    gradients = gb * grad_params
    opt = ob * (P.dense / _shard(zero, 1, group) + P.expert / _shard(zero, 1, egroup))
    offload = np.asarray(L.offload, bool)
    m = np.asarray(L.global_batch, float) / (np.asarray(L.dp, float) * np.asarray(L.micro_batch))
    mixed = np.asarray(L.precision) != FP32
    # accumulating over micro-batches in fp32 (Megatron-LM main_grad): 4 B instead of gb
    grad_accum = np.where(mixed & (m > 1), (4.0 - gb) * grad_params, 0.0)
    gathered = np.where((zero >= 3) & (group > 1), wb * (2 * P.unit + P.root) + gb * P.unit, 0.0)

    kw = dict(seq_len=L.seq_len, micro_batch=L.micro_batch, tp=L.tp, cp=L.cp, sp=L.sp,
              precision=L.precision)
    akw = dict(kw, flash=L.flash, dropout=L.dropout)
    dense_act = layer_activation_bytes(model, recompute=L.recompute, **akw)
    dense_tr = layer_recompute_transient_bytes(model, recompute=L.recompute, **akw)
    if model.is_moe:
        moe_act = layer_activation_bytes(model, recompute=L.recompute, moe=True, **akw)
        moe_tr = layer_recompute_transient_bytes(model, recompute=L.recompute, moe=True, **akw)
    else:
        moe_act = moe_tr = 0.0
    held = inflight_microbatches(L.pp, L.vpp, m) if stage == "first" else 1.0
    stored = held * (P.dense_layers * dense_act + P.moe_layers * moe_act)
    transient = np.maximum(np.where(P.dense_layers > 0, dense_tr, 0.0),
                           np.where(P.moe_layers > 0, moe_tr, 0.0))
    activations = stored + transient
    pp = np.asarray(L.pp)
    has_head = (pp == 1) | (stage == "last")
    saved, live = logits_bytes(model, **kw)
    logits = np.where(has_head, saved + live, 0.0)
    if stage == "first":  # embedding-output dropout mask, 1 B per element (sharded with SP)
        t_seq = np.where(np.asarray(L.sp, bool), L.tp, 1)
        mask = np.asarray(L.dropout, float) * L.seq_len * L.micro_batch * model.hidden
        activations = activations + held * mask / (t_seq * np.asarray(L.cp, float))
    on_gpu_opt = np.where(offload, 0.0, opt)
    allocated = weights + gradients + on_gpu_opt + activations + logits + gathered + grad_accum
    overhead = runtime_overhead_bytes + fragmentation * allocated
    return dict(weights=weights, gradients=gradients, optimizer=on_gpu_opt,
                activations=activations, logits=logits, gathered=gathered,
                grad_accum=grad_accum, overhead=overhead,
                offloaded=np.where(offload, opt, 0.0), total=allocated + overhead)


def memory_breakdown(
    model: ModelSpec,
    layout: Layout,
    *,
    runtime_overhead_bytes: float,
    fragmentation: float,
) -> MemoryBreakdown:
    """Per-GPU training memory of the most loaded GPU, for every configuration in `layout`.

    The first and last pipeline stages are both evaluated; for each configuration the one with
    the larger total is reported with its parts (they coincide when pp == 1).
    `runtime_overhead_bytes` and `fragmentation` are catalog constants with a source.
    """
    ada = adafactor_state_per_param(model)
    kw = dict(runtime_overhead_bytes=runtime_overhead_bytes, fragmentation=fragmentation,
              adafactor_state=ada)
    first = _stage_memory(model, layout, "first", **kw)
    last = _stage_memory(model, layout, "last", **kw)
    pick_last = last["total"] > first["total"]
    shape = np.broadcast(*(np.asarray(v) for v in (*first.values(), *last.values()))).shape
    out = {k: np.broadcast_to(np.where(pick_last, last[k], first[k]), shape) for k in first}
    return MemoryBreakdown(**out, stage=np.broadcast_to(pick_last.astype(np.int8), shape))
