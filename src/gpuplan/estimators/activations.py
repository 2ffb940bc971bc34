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
from .recompute import op_bytes, stored_bytes, transient_bytes
from .shapes import act_element_bytes, kv_width_per_rank, tokens_per_rank

__all__ = ["MLP_SAVED_FFN", "gemm_input_bytes", "layer_activation_bytes",
           "layer_recompute_transient_bytes", "inflight_microbatches"]

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
    norm_out: Any  # the two norm outputs (QKV and MLP inputs): dropped by layernorm
    mlp: Any  # the MLP's saved tensors (MoE: experts and router): dropped by mlp / moe
    act_half: Any  # half of the expert tensors (the fc2 inputs): dropped by moe_act


def layer_terms(model: ModelSpec, *, seq_len: Any, micro_batch: Any, tp: Any = 1, cp: Any = 1,
                sp: Any = True, flash: Any = True, precision: Any = 2, dropout: Any = False,
                moe: bool = False, fp8_input_bytes: Any = None,
                swiglu_saved: Any = SWIGLU_SAVED_FFN) -> LayerTerms:
    """The terms of `layer_activation_bytes` (formulas documented there). `fp8_input_bytes`
    and `swiglu_saved` are the stack's (`buffers.StackBuffers`; None / 4: the 16-bit inputs
    and the unfused SwiGLU)."""
    t = np.asarray(tp)
    e = act_element_bytes(precision)
    f = gemm_input_bytes(precision, fp8_input_bytes)
    drop = np.asarray(dropout)
    flash_ = np.asarray(flash, bool)
    t_seq = np.where(np.asarray(sp, bool), t, 1)  # SP splits the replicated part too
    sb = tokens_per_rank(seq_len, micro_batch, cp)
    esb = e * sb
    h, a, q = model.hidden, model.heads, model.heads * model.d_head
    fsb = f * sb  # a GEMM input saved for the weight gradient (FP8 under Transformer Engine)
    # norm inputs (2) in e, the norm outputs = QKV and MLP inputs (2) in f; 1-byte dropout
    # masks after attention-out and MLP
    replicated = (esb * (2 * h) + fsb * (2 * h) + drop * (2 * h) * sb) / t_seq
    q_out = (esb + fsb) * q / t  # Q and the out-projection input
    kv_rep = esb * (2 * q) / t  # non-flash: K, V repeated to all heads
    # flash attention keeps its own 16-bit output when the out-projection saved an FP8 cast
    flash_out = np.where(f < e, esb, 0.0) * q / t
    kv_compact = esb * 2 * kv_width_per_rank(model, t)
    stats = sb * (4.0 * a) / t  # flash attention: fp32 log-sum-exp per query and head
    # a*s^2*b: softmax output e, with dropout its output e and a 1-byte mask
    score = sb * np.asarray(seq_len) * a * (e + drop * (e + 1)) / t
    mlp = sb * _mlp_saved(model, moe, e, f, swiglu_saved) / t
    act_half = mlp / 2.0 if moe else 0.0 * esb  # half of the expert tensors: moe_act drops
    if moe:
        mlp = mlp + 4.0 * sb * model.experts  # router probabilities, fp32, replicated
    common = replicated + q_out + mlp
    none = common + np.where(flash_, kv_compact + stats + flash_out, kv_rep + score)
    selective = common + kv_compact + flash_ * stats
    return LayerTerms(none=none, selective=selective, full=esb * h / t_seq,
                      op=op_bytes(model, esb, t, t_seq, stats, mlp, moe),
                      norm_out=fsb * (2 * h) / t_seq, mlp=mlp, act_half=act_half)


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
    """
    acts = layer_terms(model, seq_len=seq_len, micro_batch=micro_batch, tp=tp, cp=cp, sp=sp,
                       flash=flash, precision=precision, dropout=dropout, moe=moe)
    return stored_bytes(acts, recompute, recompute_modules, recompute_every, moe)


def _mlp_saved(model: ModelSpec, moe: bool, e: Any = 2.0, f: Any = 2.0,
               swiglu_saved: Any = SWIGLU_SAVED_FFN) -> Any:
    """Saved MLP bytes per token: GELU and squared ReLU 2*ffn, SwiGLU 4*ffn (unfused; the
    stack's `swiglu_saved`, 3 fused) elements (MLP_SAVED_FFN), of which the fc2 input (ffn) is
    a GEMM input at f bytes, the rest at e; MoE: (k + shared) experts, each with its input
    copy (a GEMM input, f)."""
    per = swiglu_saved if model.mlp == "swiglu" else MLP_SAVED_FFN[model.mlp]
    if not moe:
        return ((per - 1) * e + f) * model.ffn
    k = model.experts_per_token + model.shared_experts
    return k * (((per - 1) * e + f) * model.expert_ffn + f * model.hidden)


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
