"""Scalar mirrors of `shapes` for ONE configuration, and numpy's IEEE semantics on Python
floats (L3 helper shared by the fast paths `timing_one` and `memory_one`; not an estimator).

Each function names the vectorized function it mirrors; the formulas and their order of
operations are those of that function (tests/test_timing_one.py and tests/test_memory_one.py
check the compositions against the vectorized models to 1e-9). IEEE semantics as numpy's:
x / 0 is +-inf (nan for 0 / 0), min/max propagate nan.
"""

from __future__ import annotations

import math

from ..spec import ModelSpec
from .shapes import StageParams

INF, NAN = math.inf, math.nan


def div(a: float, b: float) -> float:
    if b == 0.0:
        return NAN if a == 0.0 or a != a else math.copysign(INF, a)
    return a / b


def mn(a: float, b: float) -> float:
    return NAN if a != a or b != b else (a if a <= b else b)


def mx(a: float, b: float) -> float:
    return NAN if a != a or b != b else (a if a >= b else b)


def clip(x: float, lo: float, hi: float) -> float:
    return mn(mx(x, lo), hi)


def stage_layers(L: int, pp: float, vpp: float, first: float, last: float
                 ) -> tuple[float, float, float]:
    """shapes.stage_layers (first rank, busiest middle rank or 0 when pp < 3, last rank)."""
    if first > 0 or last > 0:  # shapes._explicit_split
        kf, kl = (1 if first > 0 else 0), (1 if last > 0 else 0)
        others = max(pp - kf - kl, 1)
        rest = L - first - last
        base, rem = rest // others, rest % others
        f = first if kf else base + (0 < rem)
        mid = base + (1 - kf < rem)
        la = last if kl else base + (others - 1 < rem)
    else:  # shapes._default_split
        S = max(pp * vpp, 1)
        if L % S == 0:
            f = mid = la = L // max(pp, 1)
        else:
            q, r = (L + 2) // S, (L + 2) % S
            u = [vpp * q + min(max(-((k - r) // pp), 0), vpp) for k in (0, 1, pp - 1)]
            one = 1 if pp == 1 else 0
            f, mid, la = u[0] - 1 - one, u[1], u[2] - 1 - one
    return float(f), (float(mid) if pp >= 3 else 0.0), float(la)


def attention_per_rank(model: ModelSpec, tp: float) -> float:
    """shapes._attention_per_rank."""
    if model.is_mla:
        return model.attention_params_per_layer() / tp + model.norm_params_per_layer()
    h, q = model.hidden, model.heads * model.d_head
    kvw = model.d_head * max(model.kv_heads / tp, 1.0)  # shapes.kv_width_per_rank
    return 2 * h * q / tp + 2 * h * kvw + model.norm_params_per_layer()


def pipeline_stages(model: ModelSpec, tp: float, pp: float, ep: float, vpp: float = 1.0,
                    first: float = 0.0, last: float = 0.0
                    ) -> tuple[StageParams, StageParams, StageParams]:
    """shapes.pipeline_stages: the first, the second (busiest middle) and the last rank, as
    StageParams of Python floats."""
    attn = attention_per_rank(model, tp)
    mlp = model.dense_mlp_params() / tp
    n = stage_layers(model.layers, pp, vpp, first, last)
    h = model.hidden
    single = model.embedding_params() / tp + h  # shapes._roots
    emb = model.vocab * h / tp
    roots = (single, 0.0, single) if pp == 1 else (emb, 0.0, emb + h)
    if not model.is_moe:
        unit = attn + mlp
        return (StageParams(n[0] * unit + roots[0], 0.0, unit, 0.0, roots[0], n[0], 0.0),
                StageParams(n[1] * unit + roots[1], 0.0, unit, 0.0, roots[1], n[1], 0.0),
                StageParams(n[2] * unit + roots[2], 0.0, unit, 0.0, roots[2], n[2], 0.0))
    experts = (model.experts / ep) * model.expert_params() / tp
    other = model.shared_experts * model.expert_params() / tp + model.hidden * model.experts
    out = []
    for lay, a, r in zip(n, (0.0, n[0], model.layers - n[2]), roots, strict=True):
        nm = lay - clip(model.dense_layers - a, 0, lay)  # dense layers come first
        nd = lay - nm
        moe_wins = nm > 0 and (nd == 0 or experts + other >= mlp)
        unit = attn + (experts + other if moe_wins else mlp)
        out.append(StageParams(dense=lay * attn + nd * mlp + nm * other + r, expert=nm * experts,
                               unit=unit, unit_expert=experts if moe_wins else 0.0, root=r,
                               dense_layers=nd, moe_layers=nm))
    return out[0], out[1], out[2]
