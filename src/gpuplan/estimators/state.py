"""Model state of one pipeline stage's GPU: weights, gradients, optimizer state and the ZeRO
buffers (L3 helper of `memory`; the formulas are `stage_state`'s docstring's).

What does not depend on the stage -- the ZeRO shard groups and divisors, the precision's and
the stack's bytes per parameter, the offload masks -- is computed once per layout grid
(`shared`), not once per stage (`stage_state`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import FP8, FP32, Layout
from . import buffers as bufm
from .recompute import offload_masks, offload_parts
from .shapes import StageParams, expert_shard_group, params_over, shard_group

EMA_BYTES = 4.0  # a parameter EMA in fp32 (buffers.StackBuffers.ema)


def shared(L: Layout, wb: Any, gb: Any, ob: Any, m: Any, sb: dict[str, Any]) -> dict[str, Any]:
    """The stage-independent factors of `stage_state` of layouts L (model-state bytes per
    parameter wb, gb, ob; micro-batches m; the stack's buffers sb)."""
    zero, precision = np.asarray(L.zero), np.asarray(L.precision, dtype=np.intp)
    group = shard_group(L.dp, L.cp, L.shard_group)
    egroup = expert_shard_group(L.dp, L.cp, L.ep, L.shard_group)
    # shapes.sharded_params' divisors at ZeRO >= 1, 2, 3 (dense, expert)
    div = {z: (np.where(zero >= z, group, 1.0), np.where(zero >= z, egroup, 1.0))
           for z in (1, 2, 3)}
    fp8 = precision == FP8
    primary = fp8 & sb["fp8_primary_weights"]
    gather = (zero >= 3) & (group > 1)
    on = offload_masks(L.offload, zero)
    return dict(
        kept_all=not any(np.any(v) for v in on.values()),
        zero=zero, group=group, egroup_gt1=egroup > 1, div=div, fp8=fp8, primary=primary,
        wroot=bufm.root_weight_bytes(wb, fp8), wb=np.where(primary, 1.0, wb - fp8), gb=gb,
        ob=ob, m=m,
        accum_b=bufm.grad_accum_bytes(mixed=precision != FP32, microbatches=m, grad_bytes=gb,
                                      sb=sb),
        gather=gather, whole=gather & sb["pp_unsharded_step"] & (np.asarray(L.pp) > 1),
        pp_grad_b=bufm.pp_unsharded_grad_bytes(gb, sb), on=on,
        bucket_on=(zero >= 2) & (group > 1), bucket_b=bufm.grad_bucket_bytes(gb, sb),
        fp8_copy=np.where(fp8, bufm.fp8_copy_bytes(sb) - primary, 0.0))


def stage_state(P: StageParams, s: dict[str, Any], sb: dict[str, Any],
                saving: bool = True) -> dict[str, Any]:
    """Weights, gradients, optimizer state and the ZeRO buffers of one stage's GPU (`s`:
    `shared`'s factors), and (`saving`) what ZeRO-3 saves on weights.

    ZeRO-1/2/3 shard optimizer state / + gradients / + weights over dp*cp (experts over
    dp*cp/ep); a shard group of 1 shards nothing. ZeRO-2 and 3 reduce-scatter each layer's
    gradients as backward produces them, so one layer's unsharded gradients are alive at a
    time (`grad_bucket`; FSDP's unsharded gradient before its reduce-scatter, DeepSpeed's
    reduce bucket). ZeRO-3 gathers the current layer and prefetches the next (FSDP's default),
    so it holds min(2, layers on the stage) gathered layers plus the root unit (`gathered`).
    Experts whose shard group is 1 are neither sharded nor gathered. The stack's buffers
    (`sb`, buffers.StackBuffers.pick): the accumulation buffer in the reduce dtype, the reduce
    copy in the bucket, and FP8 weight copies, which follow the weights' sharding (the 1 B copy
    of the 3 B fp8 weight is moved into `fp8_weights`; its transpose: buffers.fp8_copy_bytes).
    """
    n_grad, n_opt, n_w = (params_over(P, *s["div"][z]) for z in (2, 1, 3))
    # bf16 weights and the fp8 copies as their own part; FP8 primary weights: 1 B each; the
    # root (embedding, LM head) stays 16-bit without FP8 copies (buffers.root_weight_bytes)
    wb, gb, wroot = s["wb"], s["gb"], s["wroot"]
    r_w = P.root / s["div"][3][0]
    own = n_w - r_w
    weights = wb * own + wroot * r_w
    opt = s["ob"] * n_opt
    unit = P.unit - np.where(s["egroup_gt1"], 0.0, P.unit_expert)  # a layer's sharded part
    layers = np.minimum(2.0, P.dense_layers + P.moe_layers)
    # torchtitan / FSDP2 under PP: the whole stage stays gathered, its gradients unsharded
    stage = P.dense + np.where(s["egroup_gt1"], P.expert, 0.0)  # what ZeRO-3 shards, gathers
    whole, gather, on = s["whole"], s["gather"], s["on"]
    accum = np.where(whole, s["pp_grad_b"] * stage, s["accum_b"] * n_grad)
    grads = gb * n_grad
    if s["kept_all"]:  # nothing offloaded: np.where(False, ...)'s values, without its copies
        zeros = np.zeros(np.broadcast_shapes(*map(np.shape, (weights, grads, accum, opt))))
        st = dict(weights=np.asarray(weights), gradients=np.asarray(grads),
                  optimizer=np.asarray(opt), grad_accum=np.asarray(accum), offloaded=zeros,
                  host_traffic=np.zeros(np.broadcast_shapes(*map(np.shape, (
                      s["m"], weights, grads, gb, wb, n_opt)))))
    else:
        st = offload_parts(on, s["m"], weights=weights, grads=grads, accum=accum, opt=opt,
                           opt_grads=gb * n_opt, opt_weights=wb * n_opt)
    ema: Any = 0.0
    if sb.get("any_ema", True):  # an fp32 EMA of the parameters this GPU updates
        ema = EMA_BYTES * n_opt
        st["offloaded"] = st["offloaded"] + np.where(sb["ema"] == "host", ema, 0.0)
        ema = np.where(sb["ema"] == "gpu", ema, 0.0)
    out = dict(**st, ema=ema, gathered=np.where(gather, wb * np.where(
                   whole, stage - P.root, layers * unit) + wroot * P.root, 0.0),
               grad_bucket=np.where(s["bucket_on"], s["bucket_b"] * unit, 0.0),
               fp8_weights=s["fp8_copy"] * own)
    if saving:
        out["zero3_saving"] = np.where(gather, wb * (P.total - P.root) + wroot * P.root
                                       - weights, 0.0)
    return out
