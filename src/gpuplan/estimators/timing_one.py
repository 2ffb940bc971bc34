"""Step time of ONE configuration in plain Python floats: the scalar fast path (L3).

`timing.step_time` is the one model and broadcasts over arrays; on a single configuration
numpy's per-operation overhead (about 1 us per operation on 0-d or one-element arrays, a few
hundred operations) dominates. `step_time_one` evaluates the same formulas, term for term and in
the same order, with Python floats and `math`, so one step time costs tens of microseconds.
It is not a second model: it cites `timing`, `comm`, `compute`, `shapes`, `recompute` and
`finetune` for every formula (the scalar primitives live in `shapes_one`) and takes its
constants from them, and tests/test_timing_one.py checks it against `timing.step_time` on
random configurations (uneven stages, vpp, HSDP shard groups, every recompute mode, offload
traffic, both schedules, fine-tuned models) to 1e-9 relative. A change to the model goes into
`timing` first; the agreement test then fails until this file follows.

`mirrors(...)` is the predicate of what the fast path evaluates itself: one configuration
(every field of the layout, hardware, efficiency and host traffic holds one value). Anything
else -- a grid -- goes to `timing.step_time`, so `step_time_one` never returns a different
answer; a feature added to `timing` that this file does not follow belongs in `mirrors`.
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import attrgetter
from typing import Any

import numpy as np

from ..spec import BF16, FP8, M_MOE, S_1F1B_A2A, S_DUALPIPE, ModelSpec, moe_dedup
from ..workload import finetune_of
from . import buffers as bufm
from . import comm, finetune
from . import shapes_one as s1
from .compute import (
    FWD_BWD,
    MOE_LOAD_IMBALANCE,
    OPTIMIZER_STEP_BYTES,
    Efficiency,
    attention_exp_factor,
)
from .recompute import OFFLOAD_OVERLAP, tp_gathers_repeated
from .shapes_one import div, mn, mx
from .timing import TimingBreakdown, step_time

INF = math.inf
_ACT_BYTES = (4.0, 2.0, 2.0, 2.0)  # shapes.ACT_BYTES
_EFF = ("matmul_max", "half_dim", "fp8_ratio", "memory_fraction", "layer_overhead_s",
        "attention_ratio", "tp_overlap", "fp8_cast", "fp8_tp_gather", "guess")
_LAYOUT = (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"),
           ("vpp", "vpp"), ("zero", "zero"), ("mb", "micro_batch"), ("gb", "global_batch"),
           ("seq", "seq_len"), ("first", "first_stage_layers"), ("last", "last_stage_layers"),
           ("sg", "shard_group"), ("rmods", "recompute_modules"), ("rk", "recompute_every"),
           ("rc", "recompute"), ("prec", "precision"), ("opt", "optimizer"),
           ("sched", "schedule"), ("stack", "stack"), ("disp", "moe_dispatcher"))
_HW = ("scale_up_domain", "scale_up_bytes_per_s", "scale_up_latency_s", "scale_out_bytes_per_s",
       "scale_out_latency_s", "memory_bandwidth_bytes_per_s", "peak_flops")
_LAYOUT_NAMES = tuple(n for _, n in _LAYOUT)
_HW_ALL = (*_HW, "host_bytes_per_s", "exp_per_s", "scale_out_dispatch_share",
           "fp8_gemm_any_layout")


_PLAIN = (int, float, bool)
_PLAIN_SET = frozenset(_PLAIN)
_FLOATS = frozenset((float,))
_layout_values = attrgetter(*_LAYOUT_NAMES)
_hw_values = attrgetter(*_HW_ALL)
_eff_values = attrgetter(*_EFF)


def _one(x: Any) -> bool:
    if type(x) in _PLAIN:
        return True
    if isinstance(x, np.ndarray):  # the attribute, not np.size's dispatch
        return x.size == 1
    return isinstance(x, (int, float)) or np.size(x) == 1


def _plain_values(layout: Any, hw: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The layout's and the hardware's fields when every one is a Python number already (a
    layout of Python ints, a `one_row` hardware): one pass, no per-field call; else None."""
    try:
        lv, hv = _layout_values(layout), _hw_values(hw)
    except AttributeError:  # a layout or hardware without some field: the general path
        return None
    return (lv, hv) if _PLAIN_SET.issuperset(map(type, (*lv, *hv))) else None


def _table_ok(table: Any) -> bool:
    """A per-precision peak table holding one row (or none)."""
    if table is None:
        return True
    if isinstance(table, np.ndarray):
        return table.size == table.shape[-1]
    return bool(np.size(table) == np.shape(table)[-1])


def mirrors(model: ModelSpec, layout: Any, hw: Any, eff: Any, host_traffic: Any = 0.0) -> bool:
    """True where `step_time_one` evaluates the configuration itself (and equals
    `timing.step_time` to 1e-9): every layout, hardware and efficiency field and the host
    traffic hold one value (a per-precision peak table holds one row)."""
    table = getattr(hw, "peak_flops_by_precision", None)
    if type(host_traffic) in _PLAIN and _plain_values(layout, hw) is not None \
            and _PLAIN_SET.issuperset(map(type, _eff_values(eff))):
        return _table_ok(table)  # Python numbers already: every field holds one value
    fields = (*map(getattr, repeat(layout), _LAYOUT_NAMES, repeat(0)),
              *map(getattr, repeat(eff), _EFF),
              *(getattr(hw, n) for n in _HW_ALL if hasattr(hw, n)))
    return (_one(host_traffic) and all(type(x) in _PLAIN or _one(x) for x in fields)
            and _table_ok(table))


def _f(x: Any) -> float:
    """One value as a Python float (a number, or an array holding one value)."""
    if type(x) is float:
        return x
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, np.ndarray) and x.size == 1:
        return float(x.item())
    return float(np.asarray(x).reshape(-1)[0])


_CODE_KEYS = ("rc", "prec", "opt", "sched", "stack", "disp")
_HW_KEYS = ("domain", "up", "a_up", "out", "a_out", "hbm", "peak_flops", "host_bw", "exp",
            "share", "any_layout")  # _HW_ALL's fields, in its order
_LAYOUT_KEYS = tuple(k for k, _ in _LAYOUT)


def _read(layout: Any, hw: Any, stacks: Any = None) -> dict[str, Any]:
    """timing._context for one configuration."""
    plain = _plain_values(layout, hw)
    if plain is not None:  # Python numbers: float() each
        c: dict[str, Any] = dict(zip(_LAYOUT_KEYS, map(float, plain[0]), strict=True))
        c.update(zip(_HW_KEYS, map(float, plain[1]), strict=True))
    else:
        c = {k: _f(getattr(layout, n, 0)) for k, n in _LAYOUT}
        c.update((k, _f(getattr(hw, n))) for k, n in zip(_HW_KEYS[:6], _HW, strict=False))
        c.update(host_bw=_f(getattr(hw, "host_bytes_per_s", math.nan)),
                 exp=_f(getattr(hw, "exp_per_s", INF)),
                 share=_f(getattr(hw, "scale_out_dispatch_share", math.nan)),
                 any_layout=_f(getattr(hw, "fp8_gemm_any_layout", 0.0)))
    for k in _CODE_KEYS:
        c[k] = int(c[k])
    c["m"] = c["gb"] / (c["dp"] * c["mb"])
    c["act"] = _ACT_BYTES[c["prec"]]
    table = getattr(hw, "peak_flops_by_precision", None)
    if table is not None:
        row = table if isinstance(table, np.ndarray) and table.ndim == 1 \
            else np.asarray(table, dtype=float).reshape(-1)
        c["peak"] = float(row[c["prec"]])
        c["peak16"] = float(row[BF16 if c["prec"] == FP8 else c["prec"]])
    else:
        p = c["peak_flops"] if plain is not None else _f(hw.peak_flops)
        c["peak"], c["peak16"] = p, (p / 2.0 if c["prec"] == FP8 else p)
    share = c["share"]
    c["logical"] = INF if share != share else share * c["out"]  # comm.dispatch_logical_bw
    c["out"] = c["out"] * comm.NET_EFFICIENCY
    c["full"] = s1.full_share(c["rc"], c["rk"])
    c["regathers"] = tp_gathers_repeated(c["rc"], c["stack"])
    sb = stacks if stacks is not None else bufm.LEGACY  # dp_comm.gather_bytes with
    z3 = c["prec"] == FP8 and bool(sb.fp8_primary_weights[c["stack"]])  # fp8_param_gathers
    ag = z3 and not (sb.fp8_transpose[c["stack"]] and c["any_layout"] > 0)  # not MXFP8
    c["ag_b"] = comm.FP8_ELEMENT_BYTES if ag else comm.PARAM_GATHER_BYTES
    c["z3_b"] = comm.FP8_ELEMENT_BYTES if z3 else comm.PARAM_GATHER_BYTES
    return c


def _link(c: dict[str, Any], span: float) -> tuple[float, float]:
    return (c["up"], c["a_up"]) if span <= c["domain"] else (c["out"], c["a_out"])


def _slowest(model: ModelSpec, c: dict[str, Any], layer: float, head: float
             ) -> tuple[float, float, tuple[float, float, float]]:
    """timing.slowest_stage: (layers, head 1.0/0.0) of the busiest stage, and the stages."""
    n = s1.stage_layers(model.layers, c["pp"], c["vpp"], c["first"], c["last"])
    front = mx(n[0], n[1])
    if n[2] * layer + head >= front * layer:
        return n[2], 1.0, n
    return front, 0.0, n


def _compute_parts(model: ModelSpec, c: dict[str, Any], eff: Efficiency) -> dict[str, Any]:
    """timing._compute_parts."""
    L, h, rc = model.layers, model.hidden, c["rc"]
    fl = s1.flops(model, c["seq"])
    tokens_gpu = c["gb"] * c["seq"] / (c["dp"] * c["cp"])
    layer_hw = (fl["model"] + s1.recompute_extra(fl, rc, c["rmods"], c["rk"])
                - fl["lm_head"]) / L
    lps, head, n = _slowest(model, c, layer_hw, fl["lm_head"])
    stage_flops = tokens_gpu / c["tp"] * (layer_hw * lps + fl["lm_head"] * head)
    per_layer_tokens = tokens_gpu / c["tp"] * lps / L
    routed = 0.0
    if model.is_moe:  # timing._expert_flops
        routed = FWD_BWD * 2.0 * model.moe_layers * model.experts_per_token \
            * model.expert_params()
        routed = routed * (1.0 + (c["full"] + s1.module_bit(rc, c["rmods"], M_MOE)) / 3.0)
    expert = per_layer_tokens * routed / stage_flops
    at_exec = s1.attention_executed(fl, rc, c["rmods"], c["rk"])
    attn = per_layer_tokens * at_exec / stage_flops
    head16 = tokens_gpu / c["tp"] * fl["lm_head"] * head / stage_flops  # 16-bit LM head
    eff_mm = s1.mm_eff(eff, h / c["tp"], c["prec"])
    eff16 = s1.mm_eff(eff, h / c["tp"], BF16)
    rows = c["seq"] * c["mb"] / c["cp"] / c["tp"]
    if model.is_moe:
        rows = rows * model.experts_per_token * c["ep"] / model.experts
    eff_ex = s1.mm_eff(eff, mn(rows, min(model.hidden, model.expert_ffn)), c["prec"])
    eff_at = eff16 * eff.attention_ratio
    compute_s = (div(stage_flops * (1 - expert - attn - head16), c["peak"] * eff_mm)
                 + div(stage_flops * head16, c["peak16"] * eff16)
                 + div(stage_flops * expert * MOE_LOAD_IMBALANCE, c["peak"] * eff_ex)
                 + div(stage_flops * attn * attention_exp_factor(
                     model, fl["attention"], at_exec, c["peak16"], c["exp"]), c["peak16"] * eff_at))
    per_token = s1.elementwise(model, c["act"], c["ep"]) * lps + s1.logits_bytes(model) * head
    repeat = 1.0 + c["full"] / 3.0
    bw = c["hbm"] * eff.memory_fraction
    casts = (s1.fp8_casts(model, tokens_gpu, c, lps, eff.fp8_tp_gather)
             if c["prec"] == FP8 and eff.fp8_cast > 0 else 0.0)
    memory_s = (tokens_gpu / c["tp"] * per_token * repeat + casts) / bw
    placed = s1.stage_params(model, c["tp"], c["pp"], c["ep"], n)
    opt = [s1.sharded(q, c["dp"], c["cp"], c["ep"], c["zero"] >= 1, c["sg"]) for q in placed]
    totals = [d + e for d, e in placed]
    best = 0  # dp_comm.busiest_split: the first stage of the most parameters
    for i in (1, 2):
        if totals[i] > totals[best]:
            best = i
    return dict(compute_s=compute_s, memory_s=memory_s, split=placed[best],
                overhead_s=eff.layer_overhead_s * lps * c["m"] * repeat,
                optimizer_s=mx(mx(opt[0], opt[1]), opt[2]) * OPTIMIZER_STEP_BYTES[c["opt"]] / bw,
                params=mx(mx(totals[0], totals[1]), totals[2]), fl=fl, eff_mm=eff_mm, lps=lps)


def _finetuned(model: ModelSpec, ft: Any, c: dict[str, Any], p: dict[str, Any]
               ) -> dict[str, Any]:
    """timing._finetuned (finetune.flops_ratios on Python floats)."""
    fl = p["fl"]
    model_r, hw_r = finetune.flops_ratios(model, ft, model_flops=fl["model"],
                                          attention=fl["attention"], lm_head=fl["lm_head"],
                                          recompute_extra=s1.recompute_extra(fl, c["rc"]))
    share = finetune.trainable_params(model, ft) / model.total_params()
    return dict(p, model_ratio=float(model_r), hw_ratio=float(hw_r),
                compute_s=p["compute_s"] * float(hw_r) * finetune.quant_slowdown(ft),
                optimizer_s=p["optimizer_s"] * share, params=p["params"] * share,
                split=(p["split"][0] * share, p["split"][1] * share))


def _none_chosen(experts: int, k: int, x: float) -> float:
    """comm._none_chosen."""
    p = 1.0
    for i in range(int(k)):
        p *= s1.clip((experts - x - i) / (experts - i), 0.0, 1.0)
    return p


def _dispatch(token_bytes: float, n: float, n_in: float, experts: int, k: int,
              c: dict[str, Any]) -> float:
    """comm.moe_dispatch_s (with comm.a2a_token_copies and comm.a2a_logical_copies)."""
    n_in = s1.clip(n_in, 1.0, n)
    logical = 0.0
    if not k or experts <= 0:
        inner = outer = 0.0
    elif not moe_dedup(c["disp"], c["stack"]):
        inner, outer = k * (n_in - 1.0) / n, k * (n - n_in) / n
    else:
        domains = n / n_in
        hit = 1.0 - _none_chosen(experts, k, experts * n_in / n)
        outer = (domains - 1.0) * hit
        inner = domains * (n_in - 1.0) * (1.0 - _none_chosen(experts, k, experts / n))
        logical = domains * hit if domains > 1.0 else 0.0
    t = mx(mx(s1.transfer(inner, token_bytes, c["up"]),
              s1.transfer(outer, token_bytes, c["out"])),
           s1.transfer(logical, token_bytes, c["logical"]))
    lat = (n_in - 1.0) * c["a_up"] + (n / n_in - 1.0) * c["a_out"] if n > 1 else 0.0
    return t + lat


def _model_parallel(model: ModelSpec, c: dict[str, Any], p: dict[str, Any],
                    tp_overlap: float, fp8_tp_gather: float = 0.0) -> list[tuple[float, float]]:
    """timing._model_parallel_comm: [(total, hideable)] for tp, cp, ep, pp."""
    compute_s, lps, tpr = p["compute_s"], p["lps"], c["seq"] * c["mb"] / c["cp"]
    act = c["act"] * tpr * model.hidden
    bw, a = _link(c, c["tp"])
    g = comm.FP8_ELEMENT_BYTES / c["act"] if c["prec"] == FP8 and fp8_tp_gather > 0 else 1.0
    tp = ((s1.rs(act, c["tp"], bw, a) + s1.rs(act * g, c["tp"], bw, a)) * (4.0 + 2.0 * c["full"])
          + 2.0 * s1.rs(act * g, c["tp"], bw, a) * c["regathers"]) * lps * c["m"]
    tp_ov = tp_overlap if c["tp"] <= c["domain"] else comm.TP_CROSS_NODE_OVERLAP
    bw, a = _link(c, c["tp"] * c["cp"])
    kv = tpr * 2.0 * (model.d_head * max(model.kv_heads / c["tp"], 1.0)) * c["act"]
    cp = 3.0 * max(c["cp"] - 1.0, 0.0) * s1.p2p(kv, bw, a) * lps * c["m"]
    k = model.experts_per_token if model.is_moe else 0
    ep_in = s1.inside(c["tp"] * c["cp"], c["ep"], c["domain"])
    one = _dispatch(act / c["tp"] * MOE_LOAD_IMBALANCE, c["ep"], ep_in, model.experts, k, c)
    ep = 4.0 * one * (model.moe_layers * lps / model.layers) * c["m"]
    bw, a = _link(c, c["tp"] * c["cp"] * c["dp"] * c["pp"])
    hops = 2.0 * c["vpp"] * c["m"] if c["pp"] > 1 else 0.0
    pp = hops * s1.p2p(act / c["tp"], bw, a)
    dual = c["sched"] == S_DUALPIPE
    pp_ov = comm.PP_OVERLAP_INTERLEAVED if (c["vpp"] > 1 or dual) else comm.PP_OVERLAP_1F1B
    ep_ov = (comm.EP_OVERLAP_DUALPIPE if dual else comm.EP_OVERLAP_A2A * (1.0 - 1.0 / c["m"])
             if c["sched"] == S_1F1B_A2A else comm.EP_OVERLAP)
    fl = p["fl"]
    return [(tp, tp_ov * compute_s),
            (cp, comm.CP_OVERLAP * compute_s * fl["attention"] / fl["model"]),
            (ep, ep_ov * compute_s), (pp, pp_ov * compute_s)]


def _hsdp(c: dict[str, Any], params: float, links: tuple[float, ...]
          ) -> tuple[float, float, float]:
    """dp_comm.hsdp_comm with comm.hsdp_grad_sync_s and comm.zero3_gather_s."""
    ranks = c["dp"] * c["cp"]
    group = s1.clip(c["sg"], 1.0, ranks)
    n_in = s1.inside(c["tp"], group, c["domain"])
    r_in = s1.inside(c["tp"] * group, ranks / group, c["domain"])
    grads = params * comm.GRAD_REDUCE_BYTES
    rs = s1.hier_rs(grads, group, n_in, *links)
    ar = s1.hier_ar(grads / group, ranks / group, r_in, *links)
    ag = s1.hier_rs(params * c["ag_b"], group, n_in, *links)
    sync = rs + ar + (0.0 if c["zero"] >= 3 else ag)
    z3 = s1.hier_rs(params * c["z3_b"], group, n_in, *links)
    return sync, (2.0 * c["m"] * z3 if c["zero"] >= 3 else 0.0), rs


def _buckets(params: float, dp: float) -> float:
    """comm.dp_buckets."""
    return max(math.ceil(params / max(comm.DP_BUCKET_PARAMS, comm.DP_BUCKET_PARAMS_PER_RANK * dp)),
               1.0)


def _sync(c: dict[str, Any], params: float, ranks: float, n_in: float, b: float,
          links: tuple[float, ...]) -> tuple[float, float, float]:
    """dp_comm._sync (comm.dp_sync_parts_s and comm.zero3_gather_s)."""
    z = c["zero"]
    grads = params * comm.GRAD_REDUCE_BYTES / b
    reduce = b * (s1.hier_ar(grads, ranks, n_in, *links) if z == 0
                  else s1.hier_rs(grads, ranks, n_in, *links))
    gather = b * s1.hier_rs(params * c["ag_b"] / b, ranks, n_in, *links) if z in (1, 2) else 0.0
    ag = s1.hier_rs(params * c["z3_b"], ranks, n_in, *links)
    return reduce, gather, (2.0 * c["m"] * ag if z >= 3 else 0.0)


def _data_parallel(c: dict[str, Any], p: dict[str, Any]) -> list[tuple[float, float]]:
    """dp_comm.data_parallel_comm: [(total, hideable)] for reduce, param gather, ZeRO-3."""
    params, dp, z = p["params"], c["dp"], c["zero"]
    links = (c["up"], c["a_up"], c["out"], c["a_out"])
    ranks = dp * c["cp"]  # comm.dp_cp_group: dp x cp ranks at stride tp
    n_in = s1.inside(c["tp"], ranks, c["domain"])
    dense, expert = p["split"]
    own = c["ep"] > 1 and expert > 0  # experts in buffers of their own
    dense = dense if own else params
    b = _buckets(dense, dp)
    reduce, gather, gathers = _sync(c, dense, ranks, n_in, b, links)
    if own:  # dp_comm.expert_dp_group: max(dp cp / ep, 1) ranks at stride tp ep
        e_ranks = max(ranks / c["ep"], 1.0)
        e_b = _buckets(expert, dp)
        er, eg, egs = _sync(c, expert, e_ranks, s1.inside(c["tp"] * c["ep"], e_ranks,
                                                          c["domain"]), e_b, links)
        reduce, gather, gathers, b = reduce + er, gather + eg, gathers + egs, b + e_b
    rs_mb = reduce
    if 0 < c["sg"] < ranks:  # a group of all dp*cp ranks is plain ZeRO (dp_comm)
        reduce, gathers, rs_mb = _hsdp(c, params, links)
        gather = 0.0
    k = c["m"] if z >= 3 and c["pp"] <= 1 else 1.0  # dp_comm: ZeRO-3, every micro-batch
    reduce = reduce + (k - 1.0) * rs_mb
    per_mb, tail = p["compute_s"] / c["m"], 1.0 - 1.0 / (b * k)
    return [(reduce, mn(comm.DP_OVERLAP * per_mb * k * 2.0 / 3.0, reduce * tail)),
            (gather, mn(comm.DP_OVERLAP * per_mb / 3.0, gather * tail)),
            (gathers, comm.ZERO3_OVERLAP * p["compute_s"])]


def _offload(c: dict[str, Any], traffic: float, compute_s: float) -> tuple[float, float]:
    """timing._offload_comm."""
    t = div(traffic, c["host_bw"]) if traffic > 0 else 0.0
    return (INF if t != t else t), OFFLOAD_OVERLAP * compute_s


def _shared_overlap(comms: list[tuple[float, float]], budget: float) -> list[float]:
    """comm.shared_overlap."""
    hidden = [mn(t, cap) for t, cap in comms]
    total = sum(hidden)
    scale = budget / mx(total, 1e-300) if total > budget else 1.0
    return [t - h * scale for (t, _), h in zip(comms, hidden, strict=True)]


def _efficiency(eff: Any) -> Efficiency:
    if type(eff) is Efficiency and type(eff.guess) is bool \
            and _FLOATS.issuperset(map(type, _eff_values(eff)[:-1])):
        return eff  # Python numbers already (a one-row efficiency)
    v = {k: _f(getattr(eff, k)) for k in _EFF}
    return Efficiency(**{**v, "guess": bool(v["guess"])})


def step_time_one(model: ModelSpec, layout: Any, hw: Any, eff: Any,
                  host_traffic: Any = 0.0, stacks: Any = None) -> TimingBreakdown:
    """`timing.step_time` of one configuration, as Python numbers; a configuration outside
    `mirrors` goes to `timing.step_time` itself (its fields made Python numbers)."""
    if not mirrors(model, layout, hw, eff, host_traffic):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return step_time(model, layout, hw, eff, host_traffic, stacks)
    c, eff = _read(layout, hw, stacks), _efficiency(eff)
    p = _compute_parts(model, c, eff)
    ft = finetune_of(model)
    if ft is not None:
        p = _finetuned(model, ft, c, p)
    comms = (_model_parallel(model, c, p, eff.tp_overlap, eff.fp8_tp_gather)
             + _data_parallel(c, p)
             + [_offload(c, _f(host_traffic), p["compute_s"])])
    tp, cp, ep, pp, red, gat, z3, offload = _shared_overlap(comms, p["compute_s"])
    return _assemble(c, p, eff, (tp, cp, ep, pp, red + gat + z3, offload))


def _assemble(c: dict[str, Any], p: dict[str, Any], eff: Efficiency,
              exposed: tuple[float, ...]) -> TimingBreakdown:
    """The tail of timing.step_time: bubble, syncs, step, rates and the bottleneck."""
    tp, cp, ep, pp, dp_s, offload = exposed
    busy = p["compute_s"] + p["memory_s"] + p["overhead_s"] + tp + cp + ep
    dual = max(c["pp"] / 2.0 - 1.0, 0.0) * (2.0 / 3.0) / c["m"]
    bubble = (dual if c["sched"] == S_DUALPIPE else (c["pp"] - 1.0) / (c["m"] * c["vpp"])) * busy
    gpus = c["tp"] * c["pp"] * c["dp"] * c["cp"]
    sync = comm.STEP_SYNC_COLLECTIVES * (2.0 * math.log2(max(gpus, 1.0)) * _link(c, gpus)[1])
    overhead = p["overhead_s"] + sync
    step = busy + sync + p["optimizer_s"] + pp + dp_s + bubble + offload
    ok = math.isfinite(step) and step > 0
    step = step if ok else INF
    tps = c["gb"] * c["seq"] / step if ok else 0.0
    per_peak = div(tps, gpus * c["peak"])
    fl = p["fl"]
    hw_fl = fl["model"] + s1.recompute_extra(fl, c["rc"])
    parts = [p["compute_s"] + overhead, p["memory_s"] + p["optimizer_s"], tp, dp_s, bubble, pp,
             cp, ep]
    parts = [0.0 if x != x else x for x in parts]
    return TimingBreakdown(
        compute_s=p["compute_s"], memory_s=p["memory_s"], overhead_s=overhead,
        optimizer_s=p["optimizer_s"], tp_comm_s=tp, pp_comm_s=pp, dp_comm_s=dp_s, cp_comm_s=cp,
        ep_comm_s=ep, bubble_s=bubble, offload_s=offload, step_s=step, tokens_per_s=tps,
        mfu=fl["model"] * p.get("model_ratio", 1.0) * per_peak if ok else 0.0,
        hfu=hw_fl * p.get("hw_ratio", 1.0) * per_peak if ok else 0.0,
        bottleneck=parts.index(max(parts)), matmul_efficiency=p["eff_mm"],
        efficiency_guess=eff.guess)
