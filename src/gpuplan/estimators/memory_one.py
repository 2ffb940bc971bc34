"""Training memory of ONE configuration in plain Python floats: the scalar fast path (L3).

`memory.memory_breakdown` is the one model and broadcasts over arrays; on a single
configuration numpy's per-operation overhead (a few hundred operations on 0-d arrays, and the
selection of the most loaded stage) costs about a millisecond. `memory_breakdown_one` evaluates
the same formulas, term for term and in the same order, with Python floats, in tens of
microseconds. It is not a second model: every function names the vectorized function it
mirrors (`memory`, `activations`, `recompute`, `buffers`, `shapes`), the constants and the
pure-Python pieces (`model_state_bytes_per_param`'s tables, `activations._mlp_saved`,
`recompute.op_bytes`, `recompute.ACT_OFFLOAD_RESIDENT`, the [memory.STACK] buffers) are imported
from there, and a fine-tuned stage goes through `finetune.stage_parts` itself. The stack's
constants are `buffers.StackBuffers.pick`'s, every field (FP8 primary weights and GEMM inputs,
fused SwiGLU, compiled and chunked loss, torchtitan's whole-stage ZeRO-3 under PP, adapter
dtype, and the run's memory options: moments dtype, DeepSeek-V3's FP8 activation cache, the
parameter EMA); MLA layers and the mla_up_proj module follow `activations.mla_terms`; DualPipe
doubles `buffers._STATE_PARTS` as `buffers.dualpipe_copies` does.
tests/test_memory_one.py checks every field against `memory.memory_breakdown` on random
configurations (tp, pp, uneven stages, vpp, cp, ep, ZeRO, HSDP shard groups, every recompute
mode, offload, 1F1B and DualPipe, fine-tuning methods, precisions, optimizers, every stack,
compiled losses, SwiGLU/GELU/squared-ReLU MLPs) to 1e-9 relative. A change
to the memory model goes into `memory` first; that test then fails until this file follows.

`mirrors(layout)` is the predicate of what the fast path evaluates itself: one configuration
whose degrees are at least 1 and whose codes are in range. Anything else (a grid, a corner the
vectorized model answers with inf or nan) goes to `memory.memory_breakdown`.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

import numpy as np

from ..spec import (
    ADAFACTOR,
    ADAMW,
    FP8,
    FP32,
    M_CORE_ATTN,
    M_LAYERNORM,
    M_MLA_UP_PROJ,
    M_MLP,
    M_MOE,
    M_MOE_ACT,
    O_ACTIVATIONS,
    O_GRADS,
    O_OPTIMIZER,
    O_PARAMS,
    OPTIMIZERS,
    PRECISIONS,
    R_FULL,
    R_MODULES,
    R_OP,
    RECOMPUTE,
    S_DUALPIPE,
    SGD,
    STACKS,
    ModelSpec,
)
from ..workload import finetune_of
from . import buffers as bufm
from . import finetune
from .activations import LayerTerms, _act_out, _mlp_saved, attention_widths, mla_terms
from .buffers import ACT_E5M6_BYTES
from .memory import (
    _ALLOCATED,
    _GRAD_B,
    _MASTER_B,
    _WEIGHT_B,
    MemoryBreakdown,
    adafactor_state_per_param,
    memory_breakdown,
)
from .recompute import ACT_OFFLOAD_RESIDENT, op_bytes
from .scalars import mn, mx, pipeline_stages
from .shapes import ACT_BYTES, StageParams
from .state import EMA_BYTES

__all__ = ["memory_breakdown_one", "mirrors", "summary"]

_CODES = {"recompute": len(RECOMPUTE), "precision": len(PRECISIONS),
          "optimizer": len(OPTIMIZERS), "stack": len(STACKS)}


_PLAIN = (int, float, bool)  # not numpy's float64, a float subclass
_PLAIN_SET = frozenset(_PLAIN)


def _value(x: Any) -> Any:
    """One value as a Python number (a number, or an array holding one value)."""
    if type(x) in _PLAIN:
        return x
    a = np.asarray(x)
    if a.size != 1:
        raise ValueError(f"{a.size} values, not one")
    return a.reshape(-1)[0].item()


_GETTERS: dict[type, tuple[tuple[str, ...], Any]] = {}  # a dataclass -> its fields' reader


def _fields_of(record: Any) -> tuple[tuple[str, ...], Any]:
    """(field names, an attrgetter of them) of a dataclass record (a layout, the stacks'
    buffers), once per class: its fields read in one call."""
    kind = type(record)
    got = _GETTERS.get(kind)
    if got is None:
        names = tuple(record.__dataclass_fields__)
        got = _GETTERS[kind] = (names, attrgetter(*names))
    return got


def _read(layout: Any) -> dict[str, Any] | None:
    """The layout as Python numbers, or None where the fast path does not answer."""
    names, values = _fields_of(layout)
    try:
        v = values(layout)
        c = dict(zip(names, v if _PLAIN_SET.issuperset(map(type, v)) else map(_value, v),
                     strict=True))
        if min(c["tp"], c["pp"], c["dp"], c["cp"], c["ep"], c["vpp"], c["micro_batch"]) < 1:
            return None
        for k, n in _CODES.items():
            x = c[k]
            if not (0 <= x < n and x == int(x)):
                return None
            c[k] = int(x)
    except (ValueError, TypeError, OverflowError):  # several values, none, or not numbers
        return None
    return c


def mirrors(layout: Any) -> bool:
    """True where `memory_breakdown_one` evaluates the layout itself: every field holds one
    value, the degrees are at least 1 and the codes are in range."""
    return _read(layout) is not None


def memory_breakdown_one(model: ModelSpec, layout: Any, *, runtime_overhead_bytes: float,
                         fragmentation: float, stacks: bufm.StackBuffers | None = None
                         ) -> MemoryBreakdown:
    """`memory.memory_breakdown` of one configuration, as Python numbers (`stage` an int); a
    layout outside `mirrors` goes to `memory.memory_breakdown` itself (with numpy's floating
    point warnings silenced, as the search evaluates it)."""
    c = _read(layout)
    if c is None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return memory_breakdown(model, layout, runtime_overhead_bytes=runtime_overhead_bytes,
                                    fragmentation=fragmentation, stacks=stacks)
    dicts = _stage_dicts(model, layout, c, float(runtime_overhead_bytes), float(fragmentation),
                         stacks or bufm.LEGACY)
    pick = 0  # memory._block: np.argmax, ties (and a first nan) to the earlier stage
    for i in (1, 2):
        a, b = dicts[i]["total"], dicts[pick]["total"]
        if b == b and (a != a or a > b):
            pick = i
    return MemoryBreakdown(**dicts[pick], stage=pick)


_SUMMARY = ("weights", "gradients", "optimizer", "activations")


_summary_values = attrgetter(*_SUMMARY, "total")
_FLOATS = frozenset((float,))


def summary(mem: MemoryBreakdown, unit: float = 1.0, lines: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """`MemoryBreakdown.summary` of a breakdown of Python floats (`memory_breakdown_one`'s)
    without numpy: the same keys, `other` the sum of the buffer lines in their order; any other
    breakdown goes to `mem.summary(unit)`. `lines`: `mem.buffer_lines()`, when the caller has
    them already."""
    other = list((mem.buffer_lines() if lines is None else lines).values())
    values = _summary_values(mem)
    if not _FLOATS.issuperset(map(type, (*other, *values))):
        return mem.summary(unit)
    parts = dict(zip(_SUMMARY, values[:-1], strict=True))
    parts.update(other=sum(other), total=values[-1])
    if mem.tuned:
        parts.update(base_weights=mem.base_weights, adapter_weights=mem.adapter_weights,
                     adapter_optimizer=mem.adapter_optimizer)
    return {k: float(v) / unit for k, v in parts.items()}


# --- activations.py / recompute.py / buffers.py -------------------------------------------------


def _layer_terms(model: ModelSpec, c: dict[str, Any], sb_: dict[str, Any],
                 moe: bool = False) -> LayerTerms:
    """activations.layer_terms (with activations.gemm_input_bytes and mla_terms), the stack's
    fp8_input_bytes, swiglu_saved_ffn and fp8_act_cache from `sb_`
    (buffers.StackBuffers.pick)."""
    t, e = float(c["tp"]), float(ACT_BYTES[c["precision"]])
    cache = bool(sb_["fp8_act_cache"]) and c["precision"] == FP8
    f = 1.0 if cache else (float(sb_["fp8_input_bytes"]) if c["precision"] == FP8 else e)
    drop, flash = float(bool(c["dropout"])), bool(c["flash"])
    t_seq = t if c["sp"] else 1.0
    sb = float(c["seq_len"]) * float(c["micro_batch"]) / float(c["cp"])
    esb = e * sb
    h, a = model.hidden, model.heads
    qw, vw = attention_widths(model)
    fsb = f * sb
    replicated = (esb * (2 * h) + fsb * (2 * h) + drop * (2 * h) * sb) / t_seq
    osb = (ACT_E5M6_BYTES if cache else f) * sb
    q_out = (esb * qw + osb * vw) / t
    flash_out = (esb if f < e and not cache else 0.0) * vw / t
    if model.is_mla:
        kv_rep = kv_compact = esb * (qw + vw) / t
    else:
        kv_rep = esb * (2 * qw) / t
        kv_compact = esb * 2 * (model.d_head * max(model.kv_heads / t, 1.0))
    stats = sb * (4.0 * a) / t
    score = sb * float(c["seq_len"]) * a * (e + drop * (e + 1)) / t
    swi = float(sb_["swiglu_saved_ffn"])
    swi_in = (1.0 if cache else e) if moe else e
    mlp = sb * _mlp_saved(model, moe, e, f, swi, swi_in) / t
    act_out = sb * _act_out(model, e, f, swi) / t if moe else 0.0 * esb
    if moe:
        mlp = mlp + 4.0 * sb * model.experts
    lat = model.q_lora_rank + model.kv_lora_rank if model.is_mla else 0
    mla_up, mla_norm = mla_terms(model, esb=esb, fsb=fsb, t=t, t_seq=t_seq, qw=qw, vw=vw)
    common = replicated + q_out + mlp + (esb + fsb) * lat / t_seq
    none = common + (kv_compact + stats + flash_out if flash else kv_rep + score)
    selective = common + kv_compact + flash * stats
    return LayerTerms(none=none, selective=selective, full=esb * h / t_seq,
                      op=(op_bytes(model, esb, t, t_seq, stats, mlp, moe)  # read by op alone
                          if c["recompute"] == R_OP else math.nan),
                      norm_out=fsb * (2 * h + lat) / t_seq, mlp=mlp, act_out=act_out,
                      mla_up=mla_up, mla_norm=mla_norm)


def _stored(acts: LayerTerms, c: dict[str, Any], moe: bool = False) -> float:
    """recompute.stored_bytes."""
    rc = c["recompute"]
    if rc < R_FULL:
        return (acts.none, acts.selective)[rc]
    if rc == R_FULL:
        k = 1.0 / max(c["recompute_every"], 1)
        return k * acts.full + (1.0 - k) * acts.none
    if rc != R_MODULES:
        return acts.op
    mods = int(c["recompute_modules"])
    bit = {m: (mods & m) != 0 for m in (M_CORE_ATTN, M_MLP, M_MOE, M_MOE_ACT, M_LAYERNORM,
                                        M_MLA_UP_PROJ)}
    drop_mlp = bit[M_MOE] if moe else bit[M_MLP]
    return (acts.none - bit[M_CORE_ATTN] * (acts.none - acts.selective)
            - bit[M_LAYERNORM] * acts.norm_out - drop_mlp * acts.mlp
            - ((bit[M_MOE_ACT] and not drop_mlp) * acts.act_out if moe else 0.0)
            - bit[M_MLA_UP_PROJ] * acts.mla_up
            - (bit[M_MLA_UP_PROJ] and bit[M_LAYERNORM]) * acts.mla_norm)


def _transient(acts: LayerTerms, c: dict[str, Any], moe: bool = False) -> float:
    """recompute.transient_bytes."""
    rc = c["recompute"]
    if rc == R_MODULES:
        return acts.none - _stored(acts, c, moe)
    return (0.0, acts.none - acts.selective, acts.none - acts.full,
            mx(acts.none - acts.op, 0.0))[rc]


def _per_layer(model: ModelSpec, c: dict[str, Any], sb_: dict[str, Any]) -> dict[str, float]:
    """memory._per_layer (with buffers.logits_bytes and buffers.moe_token_bytes)."""
    dense = _layer_terms(model, c, sb_)
    out = dict(dense_stored=_stored(dense, c), dense_transient=_transient(dense, c))
    out.update(moe_stored=out["dense_stored"], moe_transient=out["dense_transient"])
    if model.is_moe:
        moe = _layer_terms(model, c, sb_, moe=True)
        out.update(moe_stored=_stored(moe, c, True), moe_transient=_transient(moe, c, True))
    t, e = float(c["tp"]), float(ACT_BYTES[c["precision"]])
    t_seq = t if c["sp"] else 1.0
    sb = float(c["seq_len"]) * float(c["micro_batch"]) / float(c["cp"])
    compiled = bool(sb_["compiled_loss"] or sb_["inplace_loss"])  # e-byte logits, no copy
    saved = 2 * model.hidden * e * sb / t_seq + ((e if compiled else 4.0) * model.vocab) * sb / t
    live = 0.0 if sb_["inplace_loss"] else (model.vocab * e) * sb / t  # gradient in place
    out.update(head=saved + live, loss_copy=0.0 if compiled else live * 4.0 / e,
               emb_mask=float(bool(c["dropout"])) * sb * model.hidden / t_seq,
               moe_tokens=sb / t_seq * (model.experts_per_token * model.hidden) * e)
    return out


# --- memory.py ----------------------------------------------------------------------------------


def _offload_state(c: dict[str, Any], m: float, *, weights: float, grads: float, accum: float,
                   opt: float, opt_grads: float, opt_weights: float) -> dict[str, float]:
    """recompute.offload_state (with recompute.host_traffic)."""
    off, zero = int(c["offload"]), c["zero"]
    if not off:  # nothing offloaded: the sums below are 0.0
        return dict(weights=weights, gradients=grads, optimizer=opt, grad_accum=accum,
                    offloaded=0.0, host_traffic=0.0)
    on_opt, on_params = (off & O_OPTIMIZER) != 0 and zero >= 0, (off & O_PARAMS) != 0 and zero >= 3
    on_grads = (off & O_GRADS) != 0 and zero >= 2
    traffic = ((2.0 * m * weights if on_params else 0.0)
               + (m * grads if on_grads else (opt_grads if on_opt else 0.0))
               + (opt_weights if on_opt and not on_params else 0.0))
    return dict(weights=0.0 if on_params else weights, gradients=0.0 if on_grads else grads,
                optimizer=0.0 if on_opt else opt, grad_accum=0.0 if on_grads else accum,
                offloaded=((opt if on_opt else 0.0) + (weights if on_params else 0.0)
                           + (grads + accum if on_grads else 0.0)),
                host_traffic=traffic)


def _state(P: StageParams, c: dict[str, Any], state_b: tuple[float, float, float], m: float,
           sb: dict[str, Any]) -> dict[str, float]:
    """memory._state (with buffers.grad_accum_bytes, grad_bucket_bytes and
    pp_unsharded_grad_bytes)."""
    wb, gb, ob = state_b
    zero, precision, sg = c["zero"], c["precision"], c["shard_group"]
    group = sg if sg > 0 else c["dp"] * c["cp"]
    egroup = max(group / c["ep"], 1.0)
    # shapes.sharded_params (with shapes.shard_group and expert_shard_group) at each ZeRO
    # stage: unsharded (/ 1.0) or over the shard group, each computed once
    whole, shard = P.dense / 1.0 + P.expert / 1.0, P.dense / group + P.expert / egroup
    n_grad, n_opt, n_w = (shard if zero >= 2 else whole), (shard if zero >= 1 else whole), \
        (shard if zero >= 3 else whole)
    fp8 = precision == FP8
    primary = fp8 and bool(sb["fp8_primary_weights"])
    # buffers.root_weight_bytes: the root stays 16-bit with no FP8 copy
    wroot, r_w = (wb - 1.0 if fp8 else wb), P.root / (group if zero >= 3 else 1.0)
    wb = 1.0 if primary else wb - fp8
    weights = wb * (n_w - r_w) + wroot * r_w
    # buffers.fp8_copy_bytes: the FP8 weight and its transpose, the transpose only if kept
    fp8_b = sb["fp8_weight_bytes"] if sb["fp8_transpose"] else min(sb["fp8_weight_bytes"], 1.0)
    on = precision != FP32 and (sb["main_grad_always"] or m > 1)  # buffers.grad_accum_bytes
    accum_b = max(sb["grad_reduce_bytes"] - gb, 0.0) if on else 0.0
    unit = P.unit - (0.0 if egroup > 1 else P.unit_expert)
    gather = zero >= 3 and group > 1
    layers = min(2.0, P.dense_layers + P.moe_layers)
    wider = sb["grad_reduce_bytes"] > gb  # buffers.grad_bucket_bytes, pp_unsharded_grad_bytes
    bucket_b = gb + (sb["grad_reduce_bytes"] if sb["reduce_copy"] and wider else 0.0)
    whole = gather and bool(sb["pp_unsharded_step"]) and c["pp"] > 1
    stage = P.dense + (P.expert if egroup > 1 else 0.0)
    accum = ((sb["grad_reduce_bytes"] if sb["reduce_copy"] and wider else gb) * stage if whole
             else accum_b * n_grad)
    st = _offload_state(c, m, weights=weights, grads=gb * n_grad, accum=accum, opt=ob * n_opt,
                        opt_grads=gb * n_opt, opt_weights=wb * n_opt)
    ema = EMA_BYTES * n_opt
    st["offloaded"] = st["offloaded"] + (ema if sb["ema"] == "host" else 0.0)
    return dict(**st, ema=ema if sb["ema"] == "gpu" else 0.0,
                gathered=(wb * (stage - P.root if whole else layers * unit) + wroot * P.root
                          if gather else 0.0),
                grad_bucket=bucket_b * unit if zero >= 2 and group > 1 else 0.0,
                fp8_weights=((fp8_b - primary) if fp8 else 0.0) * (n_w - r_w),
                zero3_saving=(wb * (P.dense + P.expert - P.root) + wroot * P.root - weights
                              if gather else 0.0))


def _stage_dicts(model: ModelSpec, layout: Any, c: dict[str, Any], runtime: float,
                 fragmentation: float, stacks: bufm.StackBuffers) -> list[dict[str, Any]]:
    """memory._stage_dicts: every part of the first, the last and the second rank."""
    ada = adafactor_state_per_param(model) if c["optimizer"] == ADAFACTOR else 0.0
    m = float(c["global_batch"]) / (float(c["dp"]) * float(c["micro_batch"]))
    names, values = _fields_of(stacks)
    s = c["stack"]
    sb = {k: v[s] for k, v in zip(names, values(stacks), strict=True)}
    state_b = _state_bytes(c["precision"], c["optimizer"], ada, float(sb["moment_bytes"]))
    acts = _per_layer(model, c, sb)
    ft = finetune_of(model)
    dual = c["schedule"] == S_DUALPIPE
    pp, vpp = float(c["pp"]), float(c["vpp"])
    placed = pipeline_stages(model, float(c["tp"]), pp, float(c["ep"]), vpp,
                             float(c["first_stage_layers"]), float(c["last_stage_layers"]))
    # the loss's fp32 tensors (saved log-softmax + copies) are one chunk's (buffers.py)
    head = acts["head"] + ((1.0 + sb["loss_fp32_copies"]) / sb["loss_chunks"] - 1.0) \
        * acts["loss_copy"]
    out = []
    for P, rank, emb, last in ((placed[0], 0.0, 1.0, pp == 1), (placed[2], pp - 1, 0.0, True),
                               (placed[1], 1.0, 0.0, False)):
        d: dict[str, Any] = _state(P, c, state_b, m, sb)
        if dual:  # buffers.dualpipe_copies: two stages' model state per rank
            d.update({k: d[k] * 2.0 for k in bufm._STATE_PARTS})
        dense_on, moe_on = P.dense_layers > 0, P.moe_layers > 0
        stored = P.dense_layers * acts["dense_stored"] + P.moe_layers * acts["moe_stored"]
        transient = mx(acts["dense_transient"] if dense_on else 0.0,
                       acts["moe_transient"] if moe_on else 0.0)
        if ft is not None:  # memory._stage_dicts: finetune.stage_parts, its own formulas
            ft_d, stored, transient = finetune.stage_parts(model, ft, P, layout, state_b,
                                                           stored, transient, emb == 1.0, sb)
            d.update({k: _value(v) for k, v in ft_d.items()})
            stored, transient = float(_value(stored)), float(_value(transient))
        d["moe_tokens"] = (acts["moe_tokens"] if moe_on else 0.0) * sb["moe_token_buffers"]
        if dual:  # buffers.dualpipe_inflight
            held = mx(mn(pp + 1.0, m), 1.0)
        else:  # activations.inflight_microbatches
            held = pp + (pp - 1 - 2 * rank) / vpp if vpp > 1 else pp - rank
            held = mx(mn(held, m), 1.0)
        kept = held * (stored + emb * acts["emb_mask"])
        d["logits"] = head if last else 0.0
        layer = mx(acts["dense_stored"] if dense_on else 0.0,
                   acts["moe_stored"] if moe_on else 0.0)
        nl, n = P.dense_layers + P.moe_layers, float(c["offload_layers"])
        chosen = stored * held * mn(n, nl) / mx(nl, 1.0) if n > 0 else kept
        _close(d, c, m, (kept, chosen), layer, stored * _share(n, nl), transient, runtime,
               fragmentation)
        out.append(d)
    return out


_WEIGHT_ONE, _GRAD_ONE, _MASTER_ONE = (tuple(float(x) for x in t)
                                        for t in (_WEIGHT_B, _GRAD_B, _MASTER_B))


def _state_bytes(precision: int, optimizer: int, adafactor_state: float, moment_bytes: float
                 ) -> tuple[float, float, float]:
    """memory.model_state_bytes_per_param of one configuration (its tables, Python floats)."""
    per_opt = {ADAMW: 2.0, SGD: 1.0, ADAFACTOR: adafactor_state}[optimizer]
    return (_WEIGHT_ONE[precision], _GRAD_ONE[precision],
            float(_MASTER_ONE[precision] + per_opt * moment_bytes))


def _share(n: Any, layers: float) -> float:
    """recompute.offload_share (`chosen` above: recompute.offloaded_layers_bytes)."""
    n = float(n)
    return mn(n, layers) / mx(layers, 1.0) if n > 0 else 1.0


def _close(d: dict[str, Any], c: dict[str, Any], m: float, kept_chosen: tuple[float, float],
           layer: float, stored: float, transient: float, runtime: float,
           fragmentation: float) -> None:
    """memory._stage_dicts' end: activation offload (`kept_chosen`: the kept bytes and those
    of the offloaded layers; `stored`: a micro-batch's offloaded bytes), the two phases'
    overlap (`loss_overlap`), then the allocator's and the runtime's lines and the totals."""
    kept, chosen = kept_chosen
    gone = (mn(chosen, kept - mn(ACT_OFFLOAD_RESIDENT * layer, kept))  # offloaded_activations
            if int(c["offload"]) & O_ACTIVATIONS else 0.0)
    d["activations"] = kept - gone + transient
    d["offloaded"] = d["offloaded"] + gone
    moves = gone > 0 or (float(c["offload_layers"]) > 0 and bool(int(c["offload"]) & O_ACTIVATIONS))
    d["host_traffic"] = d["host_traffic"] + (2.0 * m * stored if moves else 0.0)
    tensors = sum(map(d.__getitem__, _ALLOCATED))  # from 0, in _ALLOCATED's order
    d["loss_overlap"] = mn(d["logits"], transient)  # the two phases peak apart
    d["allocated"] = tensors - d["loss_overlap"]
    d["allocator_margin"] = fragmentation * tensors
    d["runtime_context"] = runtime
    d["reserved"] = tensors + d["allocator_margin"]
    d["overhead"] = d["runtime_context"] + d["allocator_margin"]
    d["total"] = d["reserved"] + d["runtime_context"]
