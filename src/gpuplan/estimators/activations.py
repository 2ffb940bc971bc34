"""Activation bytes of one transformer layer and the micro-batches a pipeline rank holds (L3).

The per-layer terms `memory.py` composes into the per-GPU breakdown: what each layer keeps for
backward under each recompute mode (formulas in `layer_activation_bytes`; the modes themselves
in `recompute.py`), what recomputing one layer holds while it runs, and how many micro-batches
of activations a pipeline rank keeps alive. Pure numpy over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import FP8, R_NONE, ModelSpec
from .buffers import ACT_E5M6_BYTES
from .recompute import op_bytes, stored_bytes, transient_bytes
from .shapes import act_element_bytes, kv_width_per_rank, tokens_per_rank

__all__ = ["MLP_SAVED_FFN", "attention_widths", "mla_terms", "gemm_input_bytes",
           "layer_activation_bytes", "layer_recompute_transient_bytes", "inflight_microbatches"]

# SwiGLU MLP tensors saved for backward, in units of s*b*ffn elements, for the unfused PyTorch
# form w2(silu(w1 x) * w3 x) (Hugging Face Llama, torchtitan): w1 x, silu(w1 x), w3 x, product.
# (Megatron-LM's fused bias-SwiGLU saves 3: the concatenated w1x|w3x and the product.)
SWIGLU_SAVED_FFN = 4
# GELU MLP: the GELU input and the fc2 input (Korthikanti et al. 2022, 4.1: 8sbh + 8sbh at 4h).
GELU_SAVED_FFN = 2
# Squared-ReLU MLP fc2(relu(fc1 x)^2) (Nemotron-4; Megatron-LM `--squared-relu`:
# megatron/core/activations.py squared_relu = torch.pow(F.relu(x), 2) under jit_fuser, run
# unfused by core/transformer/mlp.py, whose bias-activation fusion covers only gelu and swiglu):
# relu saves its OUTPUT, not the fc1 output (PyTorch tools/autograd/derivatives.yaml: relu's
# backward is threshold_backward(grad, result, 0)); pow(., 2) saves its input, the same relu
# output (one tensor); fc2 saves its input, the squared output. So 2, as for GELU. Measured on
# an H200 (torch 2.11, bf16, 4096 tokens x ffn 8192): 2.0 x tokens*ffn*2 B kept after the
# forward, eager, torch.jit.script and torch.compile alike, and 2.0 for GELU.
RELU2_SAVED_FFN = 2
MLP_SAVED_FFN = {"gelu": GELU_SAVED_FFN, "relu2": RELU2_SAVED_FFN, "swiglu": SWIGLU_SAVED_FFN}



# --- activations -------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerTerms:
    """Stored bytes per layer and micro-batch by recompute mode (`recompute.py`)."""

    none: Any
    selective: Any
    full: Any  # the checkpointed layer input
    op: Any  # torchtitan per-op selective checkpointing
    norm_out: Any  # the norm outputs (QKV and MLP inputs; MLA: + the normed latents' f copy)
    mlp: Any  # the MLP's saved tensors (MoE: experts and router): dropped by mlp / moe
    act_out: Any  # the experts' activation-function outputs (fc2 inputs): dropped by moe_act
    mla_up: Any = 0.0  # MLA's up-projection outputs (Q, K, V) net of what the checkpoint keeps
    mla_norm: Any = 0.0  # the normed latents the up-projection checkpoint keeps beyond f


def attention_widths(model: ModelSpec) -> tuple[int, int]:
    """(query width, value width) summed over heads: heads * d_head twice for ordinary
    attention; MLA (DeepSeek-V2, arXiv 2405.04434, section 2.1) heads * (d_head + rope) and
    heads * v_head_dim."""
    if model.is_mla:
        return (model.heads * (model.d_head + model.rope_head_dim),
                model.heads * (model.v_head_dim or model.d_head))
    return model.heads * model.d_head, model.heads * model.d_head


def layer_terms(model: ModelSpec, *, seq_len: Any, micro_batch: Any, tp: Any = 1, cp: Any = 1,
                sp: Any = True, flash: Any = True, precision: Any = 2, dropout: Any = False,
                moe: bool = False, fp8_input_bytes: Any = None,
                swiglu_saved: Any = SWIGLU_SAVED_FFN, fp8_cache: Any = False) -> LayerTerms:
    """The terms of `layer_activation_bytes` (formulas documented there). `fp8_input_bytes`,
    `swiglu_saved` and `fp8_cache` are the stack's (`buffers.StackBuffers`; None / 4 / False:
    the 16-bit inputs, the unfused SwiGLU, no DeepSeek-V3 low-precision cache)."""
    t = np.asarray(tp)
    e = act_element_bytes(precision)
    f = gemm_input_bytes(precision, fp8_input_bytes)
    cache: Any = False  # no DeepSeek-V3 cache anywhere (most of a plan's grid): skip its terms
    if np.any(fp8_cache):
        cache = np.asarray(fp8_cache, bool) & (np.asarray(precision) == FP8)
        f = np.where(cache, 1.0, f)
    drop = np.asarray(dropout)
    flash_ = np.asarray(flash, bool)
    t_seq = np.where(np.asarray(sp, bool), t, 1)  # SP splits the replicated part too
    sb = tokens_per_rank(seq_len, micro_batch, cp)
    esb = e * sb
    h, a = model.hidden, model.heads
    qw, vw = attention_widths(model)
    fsb = f * sb  # a GEMM input saved for the weight gradient (FP8 under Transformer Engine)
    # norm inputs (2) in e, the norm outputs = QKV and MLP inputs (2) in f; 1-byte dropout
    # masks after attention-out and MLP
    replicated = (esb * (2 * h) + fsb * (2 * h) + drop * (2 * h) * sb) / t_seq
    # the out-projection input: f, or DeepSeek-V3's E5M6 tensor, shared with attention's
    # backward (so flash attention keeps no 16-bit output of its own beside it)
    if cache is False:
        q_out = (esb * qw + fsb * vw) / t  # Q and the out-projection input
        # flash attention keeps its own 16-bit output when the out-projection saved an FP8 cast
        flash_out = np.where(f < e, esb, 0.0) * vw / t
    else:
        q_out = (esb * qw + np.where(cache, ACT_E5M6_BYTES, f) * sb * vw) / t
        flash_out = np.where((f < e) & ~cache, esb, 0.0) * vw / t
    if model.is_mla:  # K (with the rotary part) and V of every head, split by tp
        kv_rep = kv_compact = esb * (qw + vw) / t
    else:
        kv_rep = esb * (2 * qw) / t  # non-flash: K, V repeated to all heads
        kv_compact = esb * 2 * kv_width_per_rank(model, t)
    stats = sb * (4.0 * a) / t  # flash attention: fp32 log-sum-exp per query and head
    # a*s^2*b: softmax output e, with dropout its output e and a 1-byte mask
    score = sb * np.asarray(seq_len) * a * (e + drop * (e + 1)) / t
    swi_in = np.where(cache, 1.0, e) if moe else e  # DeepSeek-V3: MoE SwiGLU inputs in FP8
    swi_in = None if cache is False else swi_in
    mlp = sb * _mlp_saved(model, moe, e, f, swiglu_saved, swi_in) / t
    act_out = sb * _act_out(model, e, f, swiglu_saved) / t if moe else 0.0 * esb
    if moe:
        mlp = mlp + 4.0 * sb * model.experts  # router probabilities, fp32, replicated
    common = replicated + q_out + mlp
    mla_up = mla_norm = 0.0
    lat = model.q_lora_rank + model.kv_lora_rank if model.is_mla else 0
    if model.is_mla:  # the latents (`mla_terms`)
        common = common + (esb + fsb) * lat / t_seq
        mla_up, mla_norm = mla_terms(model, esb=esb, fsb=fsb, t=t, t_seq=t_seq, qw=qw, vw=vw)
    none = common + np.where(flash_, kv_compact + stats + flash_out, kv_rep + score)
    selective = common + kv_compact + flash_ * stats
    return LayerTerms(none=none, selective=selective, full=esb * h / t_seq,
                      op=op_bytes(model, esb, t, t_seq, stats, mlp, moe),
                      norm_out=fsb * (2 * h + lat) / t_seq, mlp=mlp, act_out=act_out,
                      mla_up=mla_up, mla_norm=mla_norm)


def mla_terms(model: ModelSpec, *, esb: Any, fsb: Any, t: Any, t_seq: Any, qw: int, vw: int
              ) -> tuple[Any, Any]:
    """(mla_up, mla_norm) of a multi-head latent attention layer, bytes per micro-batch; (0, 0)
    for ordinary attention.

    Megatron-Core's MultiLatentAttention: the down-projections give the query and KV latents
    (q_lora_rank + kv_lora_rank = lat, and the shared rotary key); each latent passes an
    RMSNorm (which saves its input, e: in `layer_terms`' latents) and an up-projection (which
    saves the normed latent, a GEMM input, f; dropped with the other norm outputs by the
    layernorm module). `mla_up_proj` (recompute_up_proj) runs the up-projections and RoPE
    under CheckpointWithoutOutput: Q, K and V (e each) are discarded after the attention
    core's forward and rebuilt before its backward; the checkpoint keeps its inputs, the
    rotary key (e) and the normed latents in e (`mla_up` is net of them: the normed latents'
    e - f is `mla_norm`). With layernorm as well the latent RMSNorms are recomputed too, as
    DeepSeek-V3 does ("all RMSNorm operations and MLA up-projections", arXiv 2412.19437,
    section 3.2.3), and only the raw latents stay: `recompute.stored_bytes` then drops
    `mla_norm` too. The latents are not split by tp (the down-projections are replicated),
    only by sequence parallelism; without a query latent (q_lora_rank 0) Q is rebuilt from
    the layer's norm output.
    """
    if not model.is_mla:
        return 0.0 * esb, 0.0 * esb
    lat = model.q_lora_rank + model.kv_lora_rank
    mla_norm = (esb - fsb) * lat / t_seq
    return esb * (2 * qw + vw) / t - esb * model.rope_head_dim / t_seq - mla_norm, mla_norm


def gemm_input_bytes(precision: Any, fp8_input_bytes: Any = None) -> Any:
    """Bytes per element of a GEMM input saved for the weight gradient: the activation
    precision's, or under FP8 the stack's `fp8_input_bytes` (Transformer Engine saves the FP8
    cast of the input, 1 B: transformer_engine/pytorch/module/linear.py, ctx saves inputmat
    after the cast; torchao's Float8Linear saves the 16-bit input, 2)."""
    e = act_element_bytes(precision)
    if fp8_input_bytes is None:
        return e
    return np.where(np.asarray(precision) == FP8, fp8_input_bytes, e)


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
    recompute_modules: Any = 1,
    recompute_every: Any = 1,
) -> Any:
    """Bytes one transformer layer keeps for backward, per micro-batch, per GPU.

    Modes beyond none/selective/full: `estimators/recompute.py`.
    Korthikanti et al. 2022 (arXiv 2205.05198) eq. 1-4, fp16, MHA, GELU MLP of 4h, dropout on:
      none: s*b*h*(34 + 5*a*s/h); TP+SP: that / t; TP without SP: s*b*h*(10 + 24/t + 5as/(ht));
      selective (recompute core attention): 34*s*b*h/t; full: 2*s*b*h (/t with SP).
    Generalised, with e = bytes per element (4 fp32, 2 otherwise):
      replicated part (not split by TP unless SP): e*s*b*h*(2 norm inputs + QKV input + MLP
        input) + 1 B masks after attention-out and MLP when dropout (2*s*b*h);
      TP-split part: e*s*b*(q + 2*kv + q) for Q, K, V and the out-projection input
        (non-flash attention saves K and V repeated to all heads, as Megatron-LM and Hugging Face
        eager attention do; flash attention and selective recompute keep them compact: the
        checkpointed core attention receives them before Megatron-LM repeats them), plus the
        MLP's saved tensors e*s*b*ffn*(2 GELU | 2 squared ReLU | 4 SwiGLU); MoE: k routed +
        shared experts' MLP tensors, their input copies, and the fp32 router probabilities
        (4*s*b*E);
      score part (non-flash, no recompute): a*s^2*b*(e softmax + dropout: e output + 1 mask);
      flash keeps fp32 softmax statistics 4*a*s*b instead (Dao et al. 2022, arXiv 2205.14135).
    Context parallelism divides the sequence by cp (the score part keeps all keys: a*(s/cp)*s*b).
    By stack (`layer_terms`' fp8_input_bytes, swiglu_saved; memory.py passes the stack's): under
    FP8 the GEMM inputs (QKV and MLP inputs, out-projection and fc2 inputs, expert input copies)
    cost fp8_input_bytes each, and flash attention then keeps its own 16-bit output beside the
    out-projection's FP8 input; SwiGLU saves swiglu_saved ffn tensors (3 fused, 4 unfused).
    Multi-head latent attention (DeepSeek-V2/V3): Q and K are heads*(d_head + rope) wide, V and
    the out-projection input heads*v_head_dim (`attention_widths`), plus the latents
    (`mla_terms`). DeepSeek-V3's low-precision cache (`fp8_cache`, arXiv 2412.19437 section
    3.3.3): every GEMM input in FP8, the out-projection input in E5M6 (1.5 B) shared with the
    attention backward, the MoE SwiGLU inputs in FP8.
    """
    acts = layer_terms(model, seq_len=seq_len, micro_batch=micro_batch, tp=tp, cp=cp, sp=sp,
                       flash=flash, precision=precision, dropout=dropout, moe=moe)
    return stored_bytes(acts, recompute, recompute_modules, recompute_every, moe)


def _mlp_saved(model: ModelSpec, moe: bool, e: Any = 2.0, f: Any = 2.0,
               swiglu_saved: Any = SWIGLU_SAVED_FFN, swi_in: Any = None) -> Any:
    """Saved MLP bytes per token: GELU and squared ReLU 2*ffn, SwiGLU 4*ffn (unfused; the
    stack's `swiglu_saved`, 3 fused) elements (MLP_SAVED_FFN), of which the fc2 input (ffn) is
    a GEMM input at f bytes, the rest at e; MoE: (k + shared) experts, each with its input
    copy (a GEMM input, f), the SwiGLU inputs w1 x and w3 x (2 ffn) at `swi_in` bytes (None:
    e; DeepSeek-V3's FP8 cache: 1)."""
    per = swiglu_saved if model.mlp == "swiglu" else MLP_SAVED_FFN[model.mlp]
    if not moe:
        return ((per - 1) * e + f) * model.ffn
    k = model.experts_per_token + model.shared_experts
    if model.mlp == "swiglu" and swi_in is not None:
        return k * ((2 * swi_in + (per - 3) * e + f) * model.expert_ffn + f * model.hidden)
    return k * (((per - 1) * e + f) * model.expert_ffn + f * model.hidden)


def _act_out(model: ModelSpec, e: Any = 2.0, f: Any = 2.0,
             swiglu_saved: Any = SWIGLU_SAVED_FFN) -> Any:
    """Bytes per token of the (k + shared) experts' activation-function outputs, what moe_act
    recomputes: the fc2 input (f) and, in the unfused SwiGLU, silu(w1 x) (e): fused SwiGLU 1
    of its 3 ffn tensors, unfused 2 of 4, GELU and squared ReLU 1 of 2 (the activation's
    input, or for squared ReLU the relu output, stays to recompute it from)."""
    extra = (swiglu_saved - 3) * e if model.mlp == "swiglu" else 0.0
    k = model.experts_per_token + model.shared_experts
    return k * (extra + f) * model.expert_ffn


def layer_recompute_transient_bytes(model: ModelSpec, *, recompute: Any,
                                    recompute_modules: Any = 1, recompute_every: Any = 1,
                                    **kw: Any) -> Any:
    """Extra bytes alive while one layer is recomputed in backward (one micro-batch)."""
    return transient_bytes(layer_terms(model, **kw), recompute, recompute_modules,
                           recompute_every, bool(kw.get("moe", False)))


def inflight_microbatches(pp: Any, vpp: Any, microbatches: Any, rank: Any = 0) -> Any:
    """Micro-batches of activations on pipeline rank `rank` (0 = the first stage).

    1F1B: min(pp - k, m) (Narayanan et al. 2021, arXiv 2104.04473, section 2.2.1);
    interleaved with vpp chunks: pp + (pp - 1 - 2k) / vpp (Megatron-LM's warm-up chunks + 1,
    over vpp; k = 0: Korthikanti et al. 2022, section 4.2.3), also capped at m.
    """
    pp, vpp, k = np.asarray(pp), np.asarray(vpp), np.asarray(rank)
    held = np.where(vpp > 1, pp + (pp - 1 - 2 * k) / vpp, pp - k)
    return np.maximum(np.minimum(held, microbatches), 1.0)
