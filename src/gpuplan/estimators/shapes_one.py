"""Scalar mirrors of `shapes`, `compute` (FLOPs) and `comm` primitives for ONE configuration
(L3 helper of `timing_one`, Python floats only).

Each function names the vectorized function it mirrors; the formulas, their order of
operations and their sources are those of that function (tests/test_timing_one.py checks the
composition against `timing.step_time` to 1e-9). IEEE semantics as numpy's: x / 0 is +-inf
(nan for 0 / 0), min/max propagate nan (`scalars.div`, `mn`, `mx`, `clip`; `stage_layers`,
shared with `memory_one`, lives in `scalars` too).
"""

from __future__ import annotations

import math
from typing import Any

from ..spec import (
    FP8,
    M_CORE_ATTN,
    M_MLA_UP_PROJ,
    M_MLP,
    M_MOE,
    R_FULL,
    R_MODULES,
    R_OP,
    R_SELECTIVE,
    ModelSpec,
)
from .compute import (
    FP8_CAST_BYTES_OPERAND,
    FP8_CAST_BYTES_WEIGHT,
    FP8_RECAST_BYTES_WEIGHT,
    FWD_BWD,
    LOGITS_BYTES_PER_VOCAB,
    ROUTER_BYTES_PER_EXPERT,
    flops_per_token,
)
from .scalars import clip, div, mn, mx, stage_layers  # noqa: F401 (timing_one reads them here)

INF, NAN = math.inf, math.nan


# --- comm.py primitives -------------------------------------------------------------------------


def transfer(share: float, nbytes: float, bw: float) -> float:
    """comm._transfer_s."""
    return div(share * nbytes, bw) if share > 0 else 0.0


def ring_ar(nbytes: float, n: float, bw: float, a: float) -> float:
    s = max(n - 1.0, 0.0)
    return transfer(2.0 * s / n, nbytes, bw) + 2.0 * s * a


def rs(nbytes: float, n: float, bw: float, a: float) -> float:
    s = max(n - 1.0, 0.0)
    return transfer(s / n, nbytes, bw) + s * a


def hier_ar(nbytes: float, n: float, k: float, bi: float, ai: float, bo: float,
            ao: float) -> float:
    """comm.hierarchical_allreduce_s."""
    k = clip(k, 1.0, n)
    return 2.0 * rs(nbytes, k, bi, ai) + ring_ar(nbytes / k, n / k, bo, ao)


def hier_rs(nbytes: float, n: float, k: float, bi: float, ai: float, bo: float,
            ao: float) -> float:
    """comm.hierarchical_rs_s."""
    k = clip(k, 1.0, n)
    return rs(nbytes, k, bi, ai) + rs(nbytes / k, n / k, bo, ao)


def p2p(nbytes: float, bw: float, a: float) -> float:
    return div(nbytes, bw) + a


def inside(stride: float, n: float, domain: float) -> float:
    """comm.ranks_inside."""
    return clip(float(math.floor(div(domain, stride))), 1.0, n)


# --- shapes.py ----------------------------------------------------------------------------------


def stage_params(model: ModelSpec, tp: float, pp: float, ep: float, n: tuple[float, ...]
                 ) -> list[tuple[float, float]]:
    """(dense, expert) parameters per GPU of the ranks whose layers are `n`
    (shapes.pipeline_stages)."""
    h = model.hidden
    if model.is_mla:
        attn = model.attention_params_per_layer() / tp + model.norm_params_per_layer()
    else:
        q = model.heads * model.d_head
        kvw = model.d_head * max(model.kv_heads / tp, 1.0)
        attn = 2 * h * q / tp + 2 * h * kvw + model.norm_params_per_layer()
    mlp = model.dense_mlp_params() / tp
    single = model.embedding_params() / tp + h
    emb = model.vocab * h / tp
    roots = (single, 0.0, single) if pp == 1 else (emb, 0.0, emb + h)
    if not model.is_moe:
        return [(lay * (attn + mlp) + r, 0.0) for lay, r in zip(n, roots, strict=True)]
    experts = (model.experts / ep) * model.expert_params() / tp
    other = model.shared_experts * model.expert_params() / tp + h * model.experts
    out = []
    for lay, a, r in zip(n, (0.0, n[0], model.layers - n[2]), roots, strict=True):
        nm = lay - clip(model.dense_layers - a, 0, lay)
        nd = lay - nm
        out.append((lay * attn + nd * mlp + nm * other + r, nm * experts))
    return out


def sharded(p: tuple[float, float], dp: float, cp: float, ep: float, on: bool,
            group: float) -> float:
    """shapes.sharded_params (HSDP shard group `group` when > 0)."""
    if not on:
        return p[0] / 1.0 + p[1] / 1.0
    g = group if group > 0 else dp * cp
    return p[0] / g + p[1] / max(g / ep, 1.0)


# --- compute.py: FLOPs per token and recompute ------------------------------------------------


def flops(model: ModelSpec, s: float) -> dict[str, float]:
    """compute.flops_per_token's parts that timing reads, as Python floats."""
    fl = flops_per_token(model, s)
    return dict(model=float(fl.model), attention=float(fl.attention), lm_head=float(fl.lm_head),
                op_fwd=float(fl.op_fwd), dense_mlp_fwd=float(fl.dense_mlp_fwd),
                moe_fwd=float(fl.moe_fwd), mla_up_fwd=float(fl.mla_up_fwd))


def full_share(rc: int, every: float) -> float:
    """recompute.full_share."""
    return 1.0 / max(every, 1.0) if rc == R_FULL else 0.0


def module_bit(rc: int, mods: float, mask: int) -> bool:
    """recompute.module_bits[...] of one module."""
    return rc == R_MODULES and (int(mods) & mask) != 0


def recompute_extra(fl: dict[str, float], rc: int, mods: float = 1, every: float = 1) -> float:
    """FlopsBreakdown.recompute_extra."""
    core = fl["attention"] / FWD_BWD
    out = full_share(rc, every) * ((fl["model"] - fl["lm_head"]) / FWD_BWD) \
        + (rc == R_SELECTIVE) * core
    if rc < R_OP:
        return out
    return (out + module_bit(rc, mods, M_CORE_ATTN) * core + (rc == R_OP) * fl["op_fwd"]
            + module_bit(rc, mods, M_MLP) * fl["dense_mlp_fwd"]
            + module_bit(rc, mods, M_MOE) * fl["moe_fwd"]
            + module_bit(rc, mods, M_MLA_UP_PROJ) * fl["mla_up_fwd"])


def attention_executed(fl: dict[str, float], rc: int, mods: float, every: float) -> float:
    """FlopsBreakdown.attention_executed."""
    share = full_share(rc, every) + (rc == R_SELECTIVE)
    if rc >= R_OP:
        share = share + module_bit(rc, mods, M_CORE_ATTN)
    return fl["attention"] + share * (fl["attention"] / FWD_BWD)


def mm_eff(eff: Any, d: float, prec: int) -> float:
    """compute.matmul_efficiency."""
    base = eff.matmul_max * d / (d + eff.half_dim)
    return base * eff.fp8_ratio if prec == FP8 else base


def elementwise(model: ModelSpec, a: float, ep: float) -> float:
    """compute.elementwise_bytes_per_token_layer with moe_routing_elems_per_token."""
    h = model.hidden
    ffn = (model.expert_ffn * (model.experts_per_token + model.shared_experts)
           if model.is_moe else model.ffn)
    act_in = 2 if model.mlp == "swiglu" else 1
    fwd = (2 * 2 * h + 2 * 3 * h + (act_in + 1) * ffn) * a
    if model.is_moe:
        k = model.experts_per_token
        sorts = 4.0 if (ep > 1 and model.experts / ep > 1) else 0.0
        routing = (3.0 + sorts) * k * h + h
        fwd = fwd + model.moe_layers / model.layers * (
            routing * a + ROUTER_BYTES_PER_EXPERT * model.experts)
    return FWD_BWD * fwd


def fp8_casts(model: ModelSpec, tokens: float, c: dict[str, Any], layers: float,
              gathered: float) -> float:
    """compute.fp8_cast_bytes (with its two element counts) on Python floats."""
    tp, full = c["tp"], c["full"]
    h, q, kv = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head
    f = (model.expert_ffn * (model.experts_per_token + model.shared_experts)
         if model.is_moe else model.ffn)
    a = 2 if model.mlp == "swiglu" else 1
    r = 1.0 if gathered > 0 else tp
    fwd, bwd = 2 * h * r + q + f, q + 2 * kv + a * f + 2 * h * r
    per_token = FP8_CAST_BYTES_OPERAND * (fwd * (1.0 + full) + bwd)
    share = model.moe_layers / model.layers if model.is_moe else 0.0
    experts = ((model.shared_experts + model.experts / c["ep"]) * model.expert_params()
               if model.is_moe else 0.0)
    weights = (model.attention_params_per_layer() + (1.0 - share) * model.dense_mlp_params()
               + share * experts) / tp
    return (tokens / tp * per_token * layers
            + weights * layers * (FP8_CAST_BYTES_WEIGHT + FP8_RECAST_BYTES_WEIGHT * full)
            * c["m"])


def logits_bytes(model: ModelSpec) -> float:
    """compute.logits_bytes_per_token."""
    return LOGITS_BYTES_PER_VOCAB * model.vocab
