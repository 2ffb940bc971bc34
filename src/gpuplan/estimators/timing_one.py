"""Step time of ONE configuration in plain Python floats: the scalar fast path (L3).

`timing.step_time` is the one model and broadcasts over arrays; on a single configuration
numpy's per-operation overhead (about 1 us per operation on 0-d or one-element arrays, a few
hundred operations) dominates. `step_time_one` evaluates the same formulas, term for term and in
the same order, with Python floats and `math`, so one `estimate` costs tens of microseconds.
It is not a second model: it cites `timing`, `comm`, `compute` and `shapes` for every formula
and takes its constants from them, and tests/test_timing_one.py checks it against
`timing.step_time` on random configurations to 1e-9 relative. A change to the model goes into
`timing` first; the agreement test then fails until this file follows.

IEEE semantics as numpy's: x / 0 is inf (nan for 0 / 0), min/max propagate nan.
"""

from __future__ import annotations

import math
from typing import Any

from ..spec import BF16, FP8, R_FULL, R_NONE, R_SELECTIVE, S_DUALPIPE, ModelSpec
from . import comm
from .compute import (
    FWD_BWD,
    LOGITS_BYTES_PER_VOCAB,
    MOE_LOAD_IMBALANCE,
    OPTIMIZER_STEP_BYTES,
    ROUTER_BYTES_PER_EXPERT,
    Efficiency,
    _attention_dims,
)
from .timing import TimingBreakdown

INF, NAN = math.inf, math.nan
_ACT_BYTES = (4.0, 2.0, 2.0, 2.0)  # shapes.ACT_BYTES


def _div(a: float, b: float) -> float:
    if b == 0.0:
        return NAN if a == 0.0 or a != a else math.copysign(INF, a)
    return a / b


def _min(a: float, b: float) -> float:
    return NAN if a != a or b != b else (a if a <= b else b)


def _max(a: float, b: float) -> float:
    return NAN if a != a or b != b else (a if a >= b else b)


def _clip(x: float, lo: float, hi: float) -> float:
    return _min(_max(x, lo), hi)


# --- comm.py primitives, one value each ------------------------------------------------------


def _transfer(share: float, nbytes: float, bw: float) -> float:
    return _div(share * nbytes, bw) if share > 0 else 0.0


def _ring_ar(nbytes: float, n: float, bw: float, a: float) -> float:
    s = max(n - 1.0, 0.0)
    return _transfer(2.0 * s / n, nbytes, bw) + 2.0 * s * a


def _rs(nbytes: float, n: float, bw: float, a: float) -> float:
    s = max(n - 1.0, 0.0)
    return _transfer(s / n, nbytes, bw) + s * a


def _hier_ar(nbytes: float, n: float, k: float, bi: float, ai: float, bo: float,
             ao: float) -> float:
    k = _clip(k, 1.0, n)
    return 2.0 * _rs(nbytes, k, bi, ai) + _ring_ar(nbytes / k, n / k, bo, ao)


def _hier_rs(nbytes: float, n: float, k: float, bi: float, ai: float, bo: float,
             ao: float) -> float:
    k = _clip(k, 1.0, n)
    return _rs(nbytes, k, bi, ai) + _rs(nbytes / k, n / k, bo, ao)


def _hier_a2a(nbytes: float, n: float, k: float, bi: float, ai: float, bo: float,
              ao: float) -> float:
    k = _clip(k, 1.0, n)
    inner = _transfer((k - 1.0) / n, nbytes, bi)
    outer = _transfer((n - k) / n, nbytes, bo)
    return _max(inner, outer) + (k - 1.0) * ai + (n - k) * ao


def _p2p(nbytes: float, bw: float, a: float) -> float:
    return _div(nbytes, bw) + a


def _inside(stride: float, n: float, domain: float) -> float:
    return _clip(math.floor(domain / stride), 1.0, n)


# --- shapes.stages / sharded_params ------------------------------------------------------------


def _stages(model: ModelSpec, tp: float, pp: float, ep: float
            ) -> tuple[tuple[float, float], tuple[float, float]]:
    """(dense, expert) parameters per GPU of the first and the last stage (shapes.stages)."""
    h = model.hidden
    if model.is_mla:
        attn = model.attention_params_per_layer() / tp + model.norm_params_per_layer()
    else:
        q = model.heads * model.d_head
        kvw = model.d_head * max(model.kv_heads / tp, 1.0)
        attn = 2 * h * q / tp + 2 * h * kvw + model.norm_params_per_layer()
    mlp = model.dense_mlp_params() / tp
    lps = model.layers / pp
    single = model.embedding_params() / tp + h
    emb = model.vocab * h / tp
    roots = (single, single) if pp == 1 else (emb, emb + h)
    if not model.is_moe:
        return (lps * (attn + mlp) + roots[0], 0.0), (lps * (attn + mlp) + roots[1], 0.0)
    experts = (model.experts / ep) * model.expert_params() / tp
    other = model.shared_experts * model.expert_params() / tp + h * model.experts
    n_moe = (_clip(lps - model.dense_layers, 0, lps), _min(lps, model.moe_layers))
    out = []
    for nm, r in zip(n_moe, roots, strict=True):
        nd = lps - nm
        out.append((lps * attn + nd * mlp + nm * other + r, nm * experts))
    return out[0], out[1]


def _sharded(p: tuple[float, float], dp: float, cp: float, ep: float, zero: float) -> float:
    if zero >= 1:
        return p[0] / (dp * cp) + p[1] / (dp * cp / ep)
    return p[0] + p[1]


# --- compute.py ----------------------------------------------------------------------------


def _flops(model: ModelSpec, s: float) -> tuple[float, float, float]:
    """(model FLOPs, attention FLOPs, LM head FLOPs) per token (compute.flops_per_token)."""
    L, h = model.layers, model.hidden
    q_width, v_width = _attention_dims(model)
    out_params = v_width * h
    qkv = FWD_BWD * 2.0 * L * (model.attention_params_per_layer() - out_params)
    out_proj = FWD_BWD * 2.0 * L * out_params
    attention = FWD_BWD * L * 2.0 * s * (q_width + v_width)
    mlp = FWD_BWD * 2.0 * (L - model.moe_layers) * model.dense_mlp_params()
    router = 0.0
    if model.is_moe:
        active = model.experts_per_token + model.shared_experts
        mlp = mlp + FWD_BWD * 2.0 * model.moe_layers * active * model.expert_params()
        router = FWD_BWD * 2.0 * model.moe_layers * h * model.experts
    lm_head = FWD_BWD * 2.0 * h * model.vocab
    return qkv + attention + out_proj + mlp + router + lm_head, attention, lm_head


def _mm_eff(eff: Efficiency, d: float, prec: int) -> float:
    base = eff.matmul_max * d / (d + eff.half_dim)
    return base * eff.fp8_ratio if prec == FP8 else base


def _elementwise(model: ModelSpec, a: float, ep: float) -> float:
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


# --- timing.py, one configuration ------------------------------------------------------------


def _f(x: Any) -> float:
    """One value as a Python float (a number, or an array holding one value)."""
    return float(x) if isinstance(x, (int, float)) else float(x.item())


def _read(layout: Any, hw: Any) -> dict[str, Any]:
    c = {k: _f(getattr(layout, n)) for k, n in (
        ("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vpp", "vpp"),
        ("zero", "zero"), ("mb", "micro_batch"), ("gb", "global_batch"), ("seq", "seq_len"))}
    c["rc"], c["prec"] = int(_f(layout.recompute)), int(_f(layout.precision))
    c["opt"], c["sched"] = int(_f(layout.optimizer)), int(_f(getattr(layout, "schedule", 0)))
    c["m"] = c["gb"] / (c["dp"] * c["mb"])
    c["act"] = _ACT_BYTES[c["prec"]]
    table = getattr(hw, "peak_flops_by_precision", None)
    if table is not None:
        row = table.reshape(-1)
        c["peak"], c["peak16"] = float(row[c["prec"]]), float(row[BF16 if c["prec"] == FP8
                                                                   else c["prec"]])
    else:
        p = _f(hw.peak_flops)
        c["peak"], c["peak16"] = p, (p / 2.0 if c["prec"] == FP8 else p)
    for k, n in (("domain", "scale_up_domain"), ("up", "scale_up_bytes_per_s"),
                 ("a_up", "scale_up_latency_s"), ("a_out", "scale_out_latency_s"),
                 ("hbm", "memory_bandwidth_bytes_per_s")):
        c[k] = _f(getattr(hw, n))
    c["out"] = _f(hw.scale_out_bytes_per_s) * comm.NET_EFFICIENCY
    return c


def _link(c: dict[str, Any], span: float) -> tuple[float, float]:
    return (c["up"], c["a_up"]) if span <= c["domain"] else (c["out"], c["a_out"])


def _compute_parts(model: ModelSpec, c: dict[str, Any], eff: Efficiency) -> dict[str, float]:
    """timing._compute_parts."""
    L, h, rc = model.layers, model.hidden, c["rc"]
    fl_model, fl_attn, lm_head = _flops(model, c["seq"])
    repeat_fwd = (fl_model - lm_head) / FWD_BWD if rc == R_FULL else (
        fl_attn / FWD_BWD if rc == R_SELECTIVE else 0.0)
    tokens_gpu = c["gb"] * c["seq"] / (c["dp"] * c["cp"])
    lps = L / c["pp"]
    stage_flops = tokens_gpu / c["tp"] * ((fl_model + repeat_fwd - lm_head) / L * lps + lm_head)
    per_layer_tokens = tokens_gpu / c["tp"] / c["pp"]
    routed = 0.0
    if model.is_moe:
        routed = FWD_BWD * 2.0 * model.moe_layers * model.experts_per_token \
            * model.expert_params() * (4.0 / 3.0 if rc == R_FULL else 1.0)
    expert = per_layer_tokens * routed / stage_flops
    attn_exec = fl_attn + (0.0 if rc == R_NONE else fl_attn / FWD_BWD)
    attn = per_layer_tokens * attn_exec / stage_flops
    eff_mm = _mm_eff(eff, h / c["tp"], c["prec"])
    rows = c["seq"] * c["mb"] / c["cp"] / c["tp"]
    if model.is_moe:
        rows = rows * model.experts_per_token * c["ep"] / model.experts
    eff_ex = _mm_eff(eff, _min(rows, min(model.hidden, model.expert_ffn)), c["prec"])
    eff_at = _mm_eff(eff, h / c["tp"], BF16) * eff.attention_ratio
    compute_s = (_div(stage_flops * (1 - expert - attn), c["peak"] * eff_mm)
                 + _div(stage_flops * expert * MOE_LOAD_IMBALANCE, c["peak"] * eff_ex)
                 + _div(stage_flops * attn, c["peak16"] * eff_at))
    per_token = _elementwise(model, c["act"], c["ep"]) * lps + LOGITS_BYTES_PER_VOCAB * model.vocab
    repeat = 4.0 / 3.0 if rc == R_FULL else 1.0
    memory_s = tokens_gpu / c["tp"] * per_token * repeat / (c["hbm"] * eff.memory_fraction)
    first, last = _stages(model, c["tp"], c["pp"], c["ep"])
    opt = _max(*(_sharded(p, c["dp"], c["cp"], c["ep"], c["zero"]) for p in (first, last)))
    return dict(compute_s=compute_s, memory_s=memory_s,
                overhead_s=eff.layer_overhead_s * lps * c["m"] * repeat,
                optimizer_s=opt * OPTIMIZER_STEP_BYTES[c["opt"]] / (c["hbm"]
                                                                   * eff.memory_fraction),
                params=_max(sum(first), sum(last)), fl_model=fl_model, fl_attn=fl_attn,
                fl_hw=fl_model + repeat_fwd, eff_mm=eff_mm)


def _model_parallel(model: ModelSpec, c: dict[str, Any], p: dict[str, float],
                    tp_overlap: float) -> list[tuple[float, float]]:
    """timing._model_parallel_comm: [(total, hideable)] for tp, cp, ep, pp."""
    compute_s, full = p["compute_s"], c["rc"] == R_FULL
    lps, tpr = model.layers / c["pp"], c["seq"] * c["mb"] / c["cp"]
    act = c["act"] * tpr * model.hidden
    bw, a = _link(c, c["tp"])
    tp = _ring_ar(act, c["tp"], bw, a) * (4.0 + 2.0 * full) * lps * c["m"]
    tp_ov = tp_overlap if c["tp"] <= c["domain"] else comm.TP_CROSS_NODE_OVERLAP
    bw, a = _link(c, c["tp"] * c["cp"])
    kv = tpr * 2.0 * (model.d_head * max(model.kv_heads / c["tp"], 1.0)) * c["act"]
    cp = 3.0 * max(c["cp"] - 1.0, 0.0) * _p2p(kv, bw, a) * lps * c["m"]
    k = model.experts_per_token if model.is_moe else 0
    ep_in = _inside(c["tp"] * c["cp"], c["ep"], c["domain"])
    one = _hier_a2a(act / c["tp"] * k * MOE_LOAD_IMBALANCE, c["ep"], ep_in, c["up"], c["a_up"],
                    c["out"], c["a_out"])
    ep = 4.0 * one * (model.moe_layers / c["pp"]) * c["m"]
    bw, a = _link(c, c["tp"] * c["cp"] * c["dp"] * c["pp"])
    hops = 2.0 * c["vpp"] * c["m"] if c["pp"] > 1 else 0.0
    pp = hops * _p2p(act / c["tp"], bw, a)
    dual = c["sched"] == S_DUALPIPE
    pp_ov = comm.PP_OVERLAP_INTERLEAVED if (c["vpp"] > 1 or dual) else comm.PP_OVERLAP_1F1B
    ep_ov = comm.EP_OVERLAP_DUALPIPE if dual else comm.EP_OVERLAP
    return [(tp, tp_ov * compute_s),
            (cp, comm.CP_OVERLAP * compute_s * p["fl_attn"] / p["fl_model"]),
            (ep, ep_ov * compute_s), (pp, pp_ov * compute_s)]


def _data_parallel(c: dict[str, Any], p: dict[str, float]) -> list[tuple[float, float]]:
    """timing._data_parallel_comm: [(total, hideable)] for reduce, param gather, ZeRO-3."""
    params, dp, z = p["params"], c["dp"], c["zero"]
    n_in = _inside(c["tp"] * c["cp"], dp, c["domain"])
    links = (n_in, c["up"], c["a_up"], c["out"], c["a_out"])
    b = max(math.ceil(params / max(comm.DP_BUCKET_PARAMS, comm.DP_BUCKET_PARAMS_PER_RANK * dp)),
            1.0)
    grads = params * comm.GRAD_REDUCE_BYTES / b
    weights = params * comm.PARAM_GATHER_BYTES / b
    reduce = b * (_hier_ar(grads, dp, *links) if z == 0 else _hier_rs(grads, dp, *links))
    gather = b * _hier_rs(weights, dp, *links) if z in (1, 2) else 0.0
    ag = _hier_rs(params * comm.PARAM_GATHER_BYTES, dp, *links)
    gathers = 2.0 * c["m"] * ag if z >= 3 else 0.0
    per_mb, tail = p["compute_s"] / c["m"], (b - 1.0) / b
    return [(reduce, _min(comm.DP_OVERLAP * per_mb * 2.0 / 3.0, reduce * tail)),
            (gather, _min(comm.DP_OVERLAP * per_mb / 3.0, gather * tail)),
            (gathers, comm.ZERO3_OVERLAP * p["compute_s"])]


def _shared_overlap(comms: list[tuple[float, float]], budget: float) -> list[float]:
    """comm.shared_overlap."""
    hidden = [_min(t, cap) for t, cap in comms]
    total = sum(hidden)
    scale = budget / _max(total, 1e-300) if total > budget else 1.0
    return [t - h * scale for (t, _), h in zip(comms, hidden, strict=True)]


def step_time_one(model: ModelSpec, layout: Any, hw: Any, eff: Efficiency) -> TimingBreakdown:
    """`timing.step_time` of one configuration (every field one value), as Python numbers."""
    c = _read(layout, hw)
    eff = Efficiency(**{k: _f(getattr(eff, k)) for k in (
        "matmul_max", "half_dim", "fp8_ratio", "memory_fraction", "layer_overhead_s",
        "attention_ratio", "tp_overlap")}, guess=bool(_f(eff.guess)))
    p = _compute_parts(model, c, eff)
    tp, cp, ep, pp, red, gat, z3 = _shared_overlap(
        _model_parallel(model, c, p, eff.tp_overlap) + _data_parallel(c, p), p["compute_s"])
    dp_s = red + gat + z3
    busy = p["compute_s"] + p["memory_s"] + p["overhead_s"] + tp + cp + ep
    dual = max(c["pp"] / 2.0 - 1.0, 0.0) * (2.0 / 3.0) / c["m"]
    bubble = (dual if c["sched"] == S_DUALPIPE else (c["pp"] - 1.0) / (c["m"] * c["vpp"])) * busy
    gpus = c["tp"] * c["pp"] * c["dp"] * c["cp"]
    sync = comm.STEP_SYNC_COLLECTIVES * 2.0 * math.log2(max(gpus, 1.0)) * _link(c, gpus)[1]
    overhead = p["overhead_s"] + sync
    step = busy + sync + p["optimizer_s"] + pp + dp_s + bubble
    ok = math.isfinite(step) and step > 0
    step = step if ok else INF
    tps = c["gb"] * c["seq"] / step if ok else 0.0
    per_peak = _div(tps, gpus * c["peak"])
    parts = [p["compute_s"] + overhead, p["memory_s"] + p["optimizer_s"], tp, dp_s, bubble, pp,
             cp, ep]
    parts = [0.0 if x != x else x for x in parts]
    return TimingBreakdown(
        compute_s=p["compute_s"], memory_s=p["memory_s"], overhead_s=overhead,
        optimizer_s=p["optimizer_s"], tp_comm_s=tp, pp_comm_s=pp, dp_comm_s=dp_s, cp_comm_s=cp,
        ep_comm_s=ep, bubble_s=bubble, step_s=step, tokens_per_s=tps,
        mfu=p["fl_model"] * per_peak if ok else 0.0, hfu=p["fl_hw"] * per_peak if ok else 0.0,
        bottleneck=parts.index(max(parts)), matmul_efficiency=p["eff_mm"],
        efficiency_guess=eff.guess)
