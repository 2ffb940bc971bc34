"""Compute: FLOPs per token by component and the time to execute them (L3, pure numpy).

FLOP convention (stated once, used everywhere):

* A matrix multiply of a token's ``k``-vector by a ``k x n`` weight is ``2 k n`` FLOPs forward;
  the backward pass costs twice the forward (input and weight gradients), so forward + backward
  is ``3 x`` the forward (Kaplan et al. 2020, arXiv 2001.08361, section 2.1).
* Attention scores ``QK^T`` and the weighted sum ``AV`` are counted over the *whole* ``s x s``
  matrix, not the causal half: ``2 * 2 * s * (heads * d_head)`` forward per token per layer.
  This is the PaLM convention (Chowdhery et al. 2022, arXiv 2204.02311, appendix B:
  ``6N + 12 L H Q T``) and also what the Megatron-LM 2021 formula counts (Narayanan et al.
  2021, arXiv 2104.04473, eq. 3: the ``s / 6h`` term). Causal kernels skip about half of that
  work but run below GEMM efficiency; the calibrated attention_ratio absorbs both.
* The input embedding is a lookup (0 FLOPs); the LM head is a ``hidden x vocab`` GEMM. So
  ``model`` = ``6 N' + 12 L (H Q) s`` with ``N'`` the matmul parameters touched per token
  (MoE: routed top-k + shared experts + router) including the LM head, excluding the input
  embedding, norms and biases.
* ``model`` is MFU's numerator (no recompute); ``recompute_extra`` adds the forward FLOPs that
  selective (attention core, Korthikanti et al. 2022, arXiv 2205.05198) or full recompute
  repeat, which HFU counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import FP8, R_OP, R_SELECTIVE, ModelSpec
from .recompute import full_share, is_op, mla_up_fwd_flops, module_bits, op_recompute_fwd_flops

# Backward = 2 x forward (Kaplan et al. 2020, section 2.1).
FWD_BWD = 3.0


@dataclass(frozen=True, kw_only=True)
class FlopsBreakdown:
    """Forward + backward FLOPs per token, by component (each may be an array over seq_len).

    Components are whole-model sums (all layers). ``forward_layers`` is the forward FLOPs of the
    transformer layers alone (what full recompute repeats); ``attention_core_fwd`` the forward
    FLOPs of scores and values (what selective recompute repeats).
    """

    qkv: Any
    attention: Any  # scores + values, PaLM convention (full s x s)
    out_proj: Any
    mlp: Any  # dense MLPs + active experts (routed top-k and shared)
    router: Any
    lm_head: Any
    layers: int
    # forward FLOPs per token, all layers, that the finer recompute modes repeat
    # (`estimators/recompute.py`): op-SAC's unsaved matmuls, Megatron-LM's mlp and moe modules
    op_fwd: Any = 0.0
    dense_mlp_fwd: Any = 0.0
    moe_fwd: Any = 0.0
    mla_up_fwd: Any = 0.0  # MLA's up-projections (the mla_up_proj module)

    @property
    def model(self) -> Any:
        """PaLM-convention model FLOPs per token (MFU numerator)."""
        return self.qkv + self.attention + self.out_proj + self.mlp + self.router + self.lm_head

    @property
    def per_layer(self) -> Any:
        """Average forward + backward FLOPs per token of one transformer layer (no LM head)."""
        return (self.model - self.lm_head) / self.layers

    @property
    def attention_core_fwd(self) -> Any:
        return self.attention / FWD_BWD

    @property
    def forward_layers(self) -> Any:
        return (self.model - self.lm_head) / FWD_BWD

    def _core_share(self, recompute: Any, modules: Any, every: Any) -> Any:
        """Share of the attention core's forward that recompute repeats."""
        r = np.asarray(recompute)
        share = full_share(r, every) + (r == R_SELECTIVE)
        return share + module_bits(r, modules)["core_attn"] if np.any(r >= R_OP) else share

    def recompute_extra(self, recompute: Any, modules: Any = 1, every: Any = 1) -> Any:
        """Forward FLOPs per token repeated by recompute (`spec.RECOMPUTE` codes): full a
        share 1/every of the layers' forward; selective and the core_attn module the
        attention core; op the matmuls op-SAC does not save; the mlp and moe modules those
        layers' MLP forward; mla_up_proj MLA's up-projections (layernorm and moe_act repeat
        no GEMM)."""
        r = np.asarray(recompute)
        out = (full_share(r, every) * self.forward_layers
               + (r == R_SELECTIVE) * self.attention_core_fwd)
        if not np.any(r >= R_OP):  # the original three modes (most of a plan's grid)
            return out
        mb = module_bits(r, modules)
        return (out + mb["core_attn"] * self.attention_core_fwd + is_op(r) * self.op_fwd
                + mb["mlp"] * self.dense_mlp_fwd + mb["moe"] * self.moe_fwd
                + mb["mla_up_proj"] * self.mla_up_fwd)

    def attention_executed(self, recompute: Any, modules: Any = 1, every: Any = 1) -> Any:
        """Attention-core FLOPs per token the hardware executes (recompute repeats the forward
        for selective, core_attn and the fully checkpointed layers)."""
        return self.attention + self._core_share(recompute, modules, every) \
            * self.attention_core_fwd

    def hardware(self, recompute: Any, modules: Any = 1, every: Any = 1) -> Any:
        """FLOPs per token the hardware executes (HFU numerator)."""
        return self.model + self.recompute_extra(recompute, modules, every)


def _attention_dims(model: ModelSpec) -> tuple[int, int]:
    """(query/key width, value width) summed over heads; MLA has its own head sizes."""
    if getattr(model, "kv_lora_rank", 0):
        qk = model.heads * (model.d_head + getattr(model, "rope_head_dim", 0))
        v = model.heads * (getattr(model, "v_head_dim", 0) or model.d_head)
        return qk, v
    return model.heads * model.d_head, model.heads * model.d_head


def flops_per_token(model: ModelSpec, seq_len: Any) -> FlopsBreakdown:
    """Forward + backward FLOPs per token of a decoder, per component (PaLM convention)."""
    # one configuration's float stays a Python float (the scalar fast path; the same IEEE
    # arithmetic), anything else an array
    s = seq_len if type(seq_len) is float else np.asarray(seq_len, dtype=float)
    L, h = model.layers, model.hidden
    q_width, v_width = _attention_dims(model)
    attn_params = model.attention_params_per_layer()
    out_params = v_width * h
    # QKV (or MLA's down/up projections) = attention weights other than the output projection.
    qkv = FWD_BWD * 2.0 * L * (attn_params - out_params)
    out_proj = FWD_BWD * 2.0 * L * out_params
    # QK^T: 2 s q_width; AV: 2 s v_width (PaLM appendix B counts 2 x 2 s H Q forward).
    attention = FWD_BWD * L * 2.0 * s * (q_width + v_width)
    dense_layers = L - model.moe_layers
    mlp = FWD_BWD * 2.0 * dense_layers * model.dense_mlp_params()
    router = 0.0
    if model.is_moe:
        active = model.experts_per_token + model.shared_experts
        mlp = mlp + FWD_BWD * 2.0 * model.moe_layers * active * model.expert_params()
        router = FWD_BWD * 2.0 * model.moe_layers * h * model.experts
    lm_head = FWD_BWD * 2.0 * h * model.vocab
    dense_fwd = 2.0 * dense_layers * model.dense_mlp_params()
    return FlopsBreakdown(qkv=qkv + 0 * s, attention=attention, out_proj=out_proj + 0 * s,
                          mlp=mlp + 0 * s, router=router + 0 * s, lm_head=lm_head + 0 * s,
                          layers=L, op_fwd=op_recompute_fwd_flops(model) + 0 * s,
                          dense_mlp_fwd=dense_fwd + 0 * s,
                          moe_fwd=(mlp + router) / FWD_BWD - dense_fwd + 0 * s,
                          mla_up_fwd=mla_up_fwd_flops(model) + 0 * s)


# --- achievable efficiency ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Achievable-efficiency parameters per candidate (arrays broadcast with the layout).

    matmul_max: fraction of dense peak reached by large GEMMs at BF16/FP16.
    half_dim: per-GPU GEMM width (hidden / tp) at which half of matmul_max is reached.
    fp8_ratio: efficiency at FP8 relative to BF16 (FP8 GEMMs reach a smaller share of their
      doubled peak; casts and scaling add work).
    memory_fraction: share of HBM bandwidth that memory-bound kernels reach.
    layer_overhead_s: fixed time per transformer layer per micro-batch (forward + backward)
      that does not shrink with the work: kernel launches, tails, synchronization.
    attention_ratio: efficiency of the attention core (QK^T, softmax, AV; flash attention)
      relative to the GEMMs, in PaLM-counted FLOPs. FlashAttention-2 reaches 50-73% of A100
      peak (Dao 2023, arXiv 2307.08691) but about 35% of H100 peak (Shah et al. 2024,
      FlashAttention-3, arXiv 2407.08608), so the ratio differs by family. Attention runs in
      16 bits in FP8 recipes (Transformer Engine keeps it in BF16), so it gets no FP8 speed-up.
    tp_overlap: share of the step's compute that can hide tensor-parallel collectives
      (catalog: efficiency.toml tp_overlap; 0 = none hidden).
    fp8_cast: 1.0 where the stack's FP8 casts, amax and transposes are counted as HBM traffic
      (`fp8_cast_bytes`, torchao tensorwise) instead of folded into fp8_ratio (0.0).
    fp8_tp_gather: 1.0 where the stack's TP all-gathers move float8 under FP8.
    guess: True where the family had no calibration data (the default row is a guess).
    """

    matmul_max: Any
    half_dim: Any
    fp8_ratio: Any
    memory_fraction: Any
    layer_overhead_s: Any = 0.0
    attention_ratio: Any = 1.0
    tp_overlap: Any = 0.0
    fp8_cast: Any = 0.0
    fp8_tp_gather: Any = 0.0
    guess: Any = False


def matmul_efficiency(eff: Efficiency, gemm_dim: Any, precision: Any) -> Any:
    """Saturating efficiency e_max * d / (d + d_half) of GEMMs whose width per GPU is d.

    Small shards (hidden / tp) leave tensor cores under-occupied; the Michaelis-Menten-like
    form is our choice (smooth, monotone, two parameters), fitted per family in
    docs/calibration.md.
    """
    d = np.asarray(gemm_dim, dtype=float)
    base = np.asarray(eff.matmul_max) * d / (d + np.asarray(eff.half_dim))
    return np.where(np.asarray(precision) == FP8, base * np.asarray(eff.fp8_ratio), base)


def compute_time(flops: Any, peak_flops: Any, efficiency: Any) -> Any:
    """Seconds to execute `flops` at dense peak x achievable efficiency."""
    return np.asarray(flops) / (np.asarray(peak_flops) * np.asarray(efficiency))


# --- softmax exponentials of the attention core ------------------------------------------------
#
# Flash attention evaluates one exponential per score element in the forward (the softmax of
# QK^T) and one more in the backward, which recomputes P = exp(S - LSE) instead of storing it
# (Dao 2023, arXiv 2307.08691, algorithms 1 and 2); selective or full recompute repeats the
# forward's. The exponentials run on the special-function units (MUFU.EX2), whose rate did not
# grow with the tensor cores: H100 SXM5 has 989 TFLOP/s of 16-bit matmul "but only 3.9 TFLOPS
# of special functions such as exponential", so at head width 128 the exponentials take 50% of
# the matmul cycles (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, section 3.1); B200
# and GB200 double the matmul rate at 5 T exponentials/s, and Blackwell Ultra (B300, GB300)
# doubles the SFU rate to 10.7 T/s (NVIDIA, "Inside NVIDIA Blackwell Ultra", 2025-08, table 2;
# catalog field exp_tera_per_s). Per score element the forward takes 2 (q + v width) / heads
# matmul FLOPs (4 d_head for multi-head attention), the backward twice that.
#
# The kernels overlap the two pipes: FlashAttention-3 runs one warpgroup's softmax under
# another's GEMMs (ping-pong, section 3.1), FlashAttention-4 pipelines the same way on
# Blackwell (Zadouri et al., FlashAttention-4, Dao-AILab/flash-attention assets/fa4_paper.pdf:
# "asymmetric hardware scaling"; its software-emulated exp2 offloads the SFUs further). So
# each pass takes the time of its binding pipe, max(matmul FLOPs / peak, exponentials / SFU
# rate), at the attention core's achieved efficiency (our reading: one achieved fraction for
# the kernel, whichever pipe binds). The forward is SFU-bound below d_head = peak / (4 x rate):
# 63 on H100, 112 on B200, 125 on GB200, 53 on B300, 58 on GB300; the backward below half
# that.


def attention_exp_factor(model: ModelSpec, attention: Any, executed: Any, peak16: Any,
                         exp_per_s: Any) -> Any:
    """Attention-core time over its matmul time (>= 1): each pass (forward, with recompute's
    repeats, and backward) takes max(matmul, exponential) time. `attention`: PaLM-counted
    forward + backward attention FLOPs (FlopsBreakdown.attention), `executed` the same with
    recompute (attention_executed); exp_per_s inf (no catalog figure) gives 1."""
    q_width, v_width = _attention_dims(model)
    # exponential time / matmul time of one forward pass (the backward has half of it)
    r = peak16 * model.heads / (2.0 * (q_width + v_width)) / exp_per_s
    # Python floats stay floats (the scalar fast path), anything else broadcasts
    big = max if type(r) is float else np.maximum
    fwd = attention / FWD_BWD + (executed - attention)
    bwd = attention * (FWD_BWD - 1.0) / FWD_BWD
    return (fwd * big(1.0, r) + bwd * big(1.0, r / 2.0)) / executed


# --- memory-bound kernels ----------------------------------------------------------------------

# Bytes of HBM traffic per token per layer of the elementwise kernels, in units of
# (activation bytes per element). Forward, with fused kernels: two norms (read + write h each),
# two residual adds (read 2h, write h), the activation (read 1 or 2 x ffn, write ffn), dropout
# off; MoE layers add the token routing traffic of `moe_routing_elems_per_token`.
# Backward moves about twice the forward. Our count (memory_fraction is an assumption).
def elementwise_bytes_per_token_layer(model: ModelSpec, act_bytes: Any, ep: Any = 1) -> Any:
    h = model.hidden
    ffn = model.expert_ffn * (model.experts_per_token + model.shared_experts) \
        if model.is_moe else model.ffn
    act_in = 2 if model.mlp == "swiglu" else 1
    fwd_elems: Any = 2 * 2 * h + 2 * 3 * h + (act_in + 1) * ffn
    a = np.asarray(act_bytes, dtype=float)
    fwd_bytes = fwd_elems * a
    if model.is_moe:  # averaged over all layers: only moe_layers of them route tokens
        share = model.moe_layers / model.layers
        fwd_bytes = fwd_bytes + share * (moe_routing_elems_per_token(model, ep) * a
                                         + ROUTER_BYTES_PER_EXPERT * model.experts)
    return FWD_BWD * fwd_bytes


# --- FP8 casts of a torchao tensorwise stack (docs/calibration.md, "PyTorch-native FP8") -----
#
# HBM bytes per element of one cast in torchao's float8 dynamic tensorwise recipe, as torchao's
# own roofline counts them (torchao 6243040, torchao/testing/float8/roofline_utils.py,
# get_tensor_memory_traffic_ovhd_s, unfused): a GEMM input or output gradient: amax (read 2),
# then read bf16 and write float8 row- and column-major (2 + 1 + 1); a weight: amax (2), a
# forward cast (2 + 1) and a backward cast (2 + 1). Full recompute repeats a weight's amax and
# forward cast (2 + 2 + 1).
FP8_CAST_BYTES_OPERAND = 6.0
FP8_CAST_BYTES_WEIGHT = 8.0
FP8_RECAST_BYTES_WEIGHT = 5.0


def fp8_cast_elems_per_token_layer(model: ModelSpec, tp: Any, gathered: Any
                                   ) -> tuple[Any, Any]:
    """(forward, backward) elements cast per token per layer, summed over the TP group:
    GEMM inputs 2 h r + q + f (attention input once for q, k, v; output-projection input; MLP
    input once; down-projection input) and output gradients q + 2 kv + a f + 2 h r, with
    q = heads x d_head, kv = kv_heads x d_head, f the MLP width (as the elementwise count),
    a = 2 for SwiGLU, and r = 1 where inputs are cast before their float8 all-gather
    (`gathered`) or tp = 1, else tp (each rank casts the gathered copy)."""
    h, q = model.hidden, model.heads * model.d_head
    kv = model.kv_heads * model.d_head
    f = model.expert_ffn * (model.experts_per_token + model.shared_experts) \
        if model.is_moe else model.ffn
    a = 2 if model.mlp == "swiglu" else 1
    r = np.where(np.asarray(gathered) > 0, 1.0, np.asarray(tp, dtype=float))
    return 2 * h * r + q + f, q + 2 * kv + a * f + 2 * h * r


def fp8_weight_elems_per_layer(model: ModelSpec, tp: Any, ep: Any) -> Any:
    """Linear-weight elements one rank casts per layer: attention + dense MLP over tp; in MoE
    layers (averaged over all layers, as the elementwise count) the shared experts and the
    rank's experts / ep routed ones."""
    share = model.moe_layers / model.layers if model.is_moe else 0.0
    experts = (model.shared_experts + model.experts / np.asarray(ep, dtype=float)) \
        * model.expert_params() if model.is_moe else 0.0
    mlp = (1.0 - share) * model.dense_mlp_params() + share * experts
    return (model.attention_params_per_layer() + mlp) / np.asarray(tp, dtype=float)


def fp8_cast_bytes(model: ModelSpec, tokens: Any, tp: Any, ep: Any, microbatches: Any,
                   layers: Any, full: Any, eff: Efficiency, precision: Any) -> Any:
    """HBM bytes one rank moves per step casting to float8 where `precision` is FP8 and the
    stack counts its casts (eff.fp8_cast; torchao tensorwise), else 0: the operands of
    `tokens` tokens (the TP group's, per step) over `layers` layers, their forward casts
    repeated on the `full` recomputed share, and the layers' weights once per micro-batch."""
    fwd, bwd = fp8_cast_elems_per_token_layer(model, tp, eff.fp8_tp_gather)
    per_token = FP8_CAST_BYTES_OPERAND * (fwd * (1.0 + full) + bwd)
    weight = FP8_CAST_BYTES_WEIGHT + FP8_RECAST_BYTES_WEIGHT * np.asarray(full)
    nbytes = (np.asarray(tokens) / np.asarray(tp) * per_token * layers
              + fp8_weight_elems_per_layer(model, tp, ep) * layers * weight * microbatches)
    return np.where((np.asarray(precision) == FP8) & (np.asarray(eff.fp8_cast) > 0), nbytes, 0.0)


# --- MoE layer: token routing and the grouped expert GEMMs ------------------------------------
#
# Megatron-Core's all-to-all token dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
# MoEAlltoAllTokenDispatcher, with moe_utils.permute / sort_chunks_by_idxs / unpermute), per
# token of one MoE layer, forward:
#   router      logits (fp32) for all E experts, softmax, top-k: write 4E bytes, read + write
#               8E, read 4E = 16 E bytes (our count; ROUTER_BYTES_PER_EXPERT);
#   permute     gather the token into k expert-ordered copies: read k h, write k h;
#   all-to-all  dispatch (communication, estimators/comm.py);
#   sort        with several local experts on an EP rank, the chunks received from each rank
#               are re-ordered expert-major (sort_chunks_by_idxs): read + write k h, and the
#               inverse before the combine all-to-all: read + write k h again;
#   unpermute   weight the k expert outputs by their probabilities and sum them back into the
#               token's slot: read k h, write h.
# So 3 k h + h elements, plus 4 k h when the rank holds several experts and ep > 1. Backward
# moves about twice that (FWD_BWD). MegaBlocks (Gale et al. 2022, arXiv 2211.15841, section 5)
# counts the same gather/scatter pair around its block-sparse expert GEMMs.
ROUTER_BYTES_PER_EXPERT = 16.0


def moe_routing_elems_per_token(model: ModelSpec, ep: Any = 1) -> Any:
    """Forward elements moved per token by permute, chunk sort and unpermute in one MoE layer."""
    if not model.is_moe:
        return 0.0
    k, h = model.experts_per_token, model.hidden
    ep = np.asarray(ep, dtype=float)
    sorts = np.where((ep > 1) & (model.experts / ep > 1), 4.0, 0.0)
    return (3.0 + sorts) * k * h + h


def expert_gemm_rows(model: ModelSpec, tokens_per_microbatch: Any, ep: Any) -> Any:
    """Rows M of each local expert's GEMM per micro-batch under balanced routing.

    Each of the ep ranks of an expert-parallel group routes its T tokens (per micro-batch) to
    k experts; the E experts are spread E/ep per rank, so each expert receives
    M = T k ep / E token copies: the grouped GEMM of MegaBlocks (Gale et al. 2022,
    arXiv 2211.15841, section 3) and Megatron-Core's GroupedMLP with one M per expert.
    Expert tensor parallelism is taken as 1 (what the Megatron-Bridge MoE recipes set), so
    with tp > 1 each rank routes its sequence-parallel shard, T = mb * s / (cp * tp).
    Balanced is what the validation runs measure (Megatron-Bridge force-balances routing in its
    MoE benchmarks, docs/performance-summary.md); real routing makes the busiest expert's M
    larger (MOE_LOAD_IMBALANCE).
    """
    if not model.is_moe:
        return np.asarray(tokens_per_microbatch, dtype=float)
    t = np.asarray(tokens_per_microbatch, dtype=float)
    return t * model.experts_per_token * np.asarray(ep, dtype=float) / model.experts


def expert_gemm_dim(model: ModelSpec, tokens_per_microbatch: Any, ep: Any) -> Any:
    """Smallest dimension of the expert GEMMs (M x hidden x expert ffn and back).

    A GEMM keeps the tensor cores busy only when all three dimensions fill whole tiles and
    enough tiles run per SM; the smallest dimension is what runs short first (CUTLASS tiles are
    64-256 wide per dimension; NVIDIA "Matrix Multiplication Background" user guide, sections
    on tile and wave quantization). The same saturating `matmul_efficiency` as dense GEMMs is
    applied to it, with the family's calibrated constants.
    """
    m = expert_gemm_rows(model, tokens_per_microbatch, ep)
    return np.minimum(m, min(model.hidden, model.expert_ffn))


# Expert load imbalance: the busiest expert's tokens over the mean. 1.0 = balanced routing,
# which is what every MoE run in data/published_runs.csv measured (Megatron-Bridge: "In MoE
# training benchmarks, we force-balance the token distribution among experts and all
# benchmarks are token-dropless", docs/performance-summary.md). No source we have quantifies
# the imbalance of aux-loss-balanced routing for a planning default, so none is assumed.
MOE_LOAD_IMBALANCE = 1.0


# Logits and cross-entropy per token, per vocabulary entry: write the 16-bit logits (2), read
# them and write FP32 (2 + 4), softmax read + write (8), backward read + write of the gradient
# (8) = 24 bytes (our count; Megatron-LM's fused vocab-parallel cross-entropy does about this).
LOGITS_BYTES_PER_VOCAB = 24.0


def logits_bytes_per_token(model: ModelSpec) -> float:
    return LOGITS_BYTES_PER_VOCAB * model.vocab


# Mixed-precision AdamW step per parameter: read fp32 grad (4), read + write fp32 master
# weight, m and v (3 x 8), write the 16-bit weight copy (2) = 30 bytes (our count).
ADAMW_STEP_BYTES_PER_PARAM = 30.0
# SGD with momentum: grad 4, master 8, momentum 8, copy 2 = 22; Adafactor roughly like SGD.
OPTIMIZER_STEP_BYTES = (ADAMW_STEP_BYTES_PER_PARAM, 22.0, 22.0)


def memory_bound_time(nbytes: Any, bandwidth_bytes_per_s: Any, memory_fraction: Any) -> Any:
    """Seconds to stream `nbytes` through HBM at the achievable share of its bandwidth."""
    return np.asarray(nbytes) / (np.asarray(bandwidth_bytes_per_s) * np.asarray(memory_fraction))
