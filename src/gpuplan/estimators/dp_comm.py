"""Data-parallel communication per step: gradient reduction and parameter gathers (L3).

The time model's DP part (`timing.step_time` composes it; `timing_one._data_parallel` is its
scalar twin, checked to 1e-9). Collective costs are `comm`'s alpha-beta formulas; the groups:

- dense (and shared-expert) parameters reduce over the dp x cp group (`comm.dp_cp_group`);
- routed experts, when they are expert-parallel (ep > 1), over the expert-data-parallel group
  of the ranks holding the same expert shard (`expert_dp_group`), in buffers of their own;
- parameters are gathered in FP8 (1 B) where the stack keeps FP8 primary weights
  (`param_gather_bytes`, from the memory model's `buffers.StackBuffers.fp8_primary_weights`);
  gradients are reduced in comm.GRAD_REDUCE_BYTES whatever the precision.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import buffers as bufm
from . import comm

# Megatron-Core reduces the gradients of expert-parallel parameters (param.allreduce False:
# ep > 1 or expert_tp != tp) over the expert data-parallel group, in buffers of their own
# (NVIDIA/Megatron-LM @ d98e8a6, megatron/core/distributed/distributed_data_parallel.py:
# "if buffer_key.is_expert_parallel: data_parallel_group = self.intra_expt_dp_group"; the
# same bucket size as the dense buffers), and the distributed optimizer and Megatron FSDP
# gather them over it. parallel_state.py builds it from the expert rank generator (tp =
# expert_tp, ep, dp = world / (expert_tp x ep x pp), cp = 1, order "tp-cp-ep-dp-pp"): its
# get_ranks("dp") groups (EXPERT_DATA_PARALLEL_GROUP) hold dp x cp x tp / (ep x expert_tp)
# ranks at stride expert_tp x ep. gpuplan splits experts by tp (expert_tp = tp;
# shapes.pipeline_stages), so dp x cp / ep ranks at stride tp x ep: the memory model's
# expert shard group (shapes.expert_shard_group). With ep = 1 experts share the dense buffers.


def expert_dp_group(tp: Any, dp: Any, cp: Any, ep: Any, domain: Any) -> tuple[Any, Any]:
    """(ranks, ranks per scale-up domain) of the expert-data-parallel group: max(dp cp / ep, 1)
    ranks at stride tp x ep (comment above), floor(domain / (tp ep)) of them in one domain."""
    ep = np.asarray(ep, dtype=float)
    ranks = np.maximum(np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float) / ep, 1.0)
    return ranks, comm.ranks_inside(np.asarray(tp, dtype=float) * ep, ranks, domain)


def param_gather_bytes(gathers_fp8: Any) -> Any:
    """Bytes per parameter of a parameter all-gather: comm.FP8_ELEMENT_BYTES where it moves
    FP8 data (`buffers.fp8_param_gathers`), else comm.PARAM_GATHER_BYTES."""
    return np.where(gathers_fp8, comm.FP8_ELEMENT_BYTES, comm.PARAM_GATHER_BYTES)


def busiest_split(placed: Any, share: Any = 1.0) -> tuple[Any, Any]:
    """(dense, routed-expert) parameters per GPU of the stage with the most parameters
    (`shapes.most_params`; the first of equals), x `share` (a fine-tune's trainable share)."""
    dense, expert, best = placed[0].dense, placed[0].expert, placed[0].total
    for P in placed[1:]:
        more = P.total > best
        dense, expert = np.where(more, P.dense, dense), np.where(more, P.expert, expert)
        best = np.maximum(best, P.total)
    return dense * share, expert * share


def _sync(c: Any, params: Any, ranks: Any, n_in: Any, buckets: Any) -> tuple[Any, Any, Any]:
    """(once-per-step reduction, ZeRO-1/2 parameter all-gather, ZeRO-3 gathers) of `params`
    over a group of `ranks`, n_in per scale-up domain."""
    links = (c.up, c.a_up, c.out, c.a_out)
    reduce, gather = comm.dp_sync_parts_s(params, ranks, c.zero, n_in, *links, buckets,
                                          c.ag_bytes)
    gathers = comm.zero3_gather_s(params, ranks, c.zero, c.m, n_in, *links, c.z3_bytes)
    return reduce, gather, gathers


def data_parallel_comm(c: Any, params: Any, split: tuple[Any, Any], compute_s: Any
                       ) -> dict[str, tuple[Any, Any]]:
    """DP time, hierarchical over the dp x cp group (`comm.dp_cp_group`), in gradient buckets
    (`comm.dp_buckets`); routed experts (`split`: dense, expert of `busiest_split`) over the
    expert-DP group where ep > 1. With gradient accumulation the reduction runs once per
    step, so it can hide only behind the backward (2/3 of the compute) of the LAST
    micro-batch; ZeRO-1/2's parameter all-gather behind the forward (1/3) of the next step's
    first micro-batch (Megatron's overlap_param_gather); the last bucket of each is exposed (a
    reduction starts when its bucket's gradients are complete; a forward needs its first
    bucket gathered). ZeRO-3 gathers (every micro-batch) hide behind all compute. `c`:
    timing's context."""
    ranks, n_in = comm.dp_cp_group(c.tp, c.dp, c.cp, c.domain)
    own = (c.ep > 1) & (split[1] > 0)  # experts in buffers of their own
    dense, expert = np.where(own, split[0], params), np.where(own, split[1], 0.0)
    buckets = comm.dp_buckets(dense, c.dp)
    reduce, gather, gathers = _sync(c, dense, ranks, n_in, buckets)
    if np.any(own):
        e_ranks, e_in = expert_dp_group(c.tp, c.dp, c.cp, c.ep, c.domain)
        e_buckets = comm.dp_buckets(expert, c.dp)
        parts = _sync(c, expert, e_ranks, e_in, e_buckets)
        reduce, gather, gathers = (np.where(own, a + b, a) for a, b in
                                   zip((reduce, gather, gathers), parts, strict=True))
        buckets = np.where(own, buckets + e_buckets, buckets)
    # HSDP: sharded inside the shard group, replicated across the groups; a group of all
    # dp*cp ranks is plain ZeRO (no replicas), so it takes the bucketed path above exactly
    hsdp = (c.sg > 0) & (c.sg < ranks)
    rs_mb = reduce  # one micro-batch's gradient reduce-scatter (ZeRO-3 below)
    if np.any(hsdp):  # its sync (reduce-scatter in the group + all-reduce across) as one part
        h_sync, h_gathers, h_rs = hsdp_comm(c, params)
        reduce = np.where(hsdp, h_sync, reduce)
        rs_mb = np.where(hsdp, h_rs, rs_mb)
        gather = np.where(hsdp, 0.0, gather)
        gathers = np.where(hsdp, h_gathers, gathers)
    # ZeRO-3/FSDP reduce-scatters every micro-batch's gradients (no unsharded accumulation:
    # PyTorch FSDP reduces in each backward unless no_sync keeps full gradients, Zhao et al.
    # 2023, arXiv 2304.11277, section 3.2; FSDP2 likewise by default), each hidden behind its
    # own backward; only the last micro-batch's last bucket is exposed. HSDP's all-reduce
    # across the replicas stays once per step (FSDP2's set_requires_all_reduce(False) on all
    # but the last micro-batch).
    # Under pipeline parallelism the stage defers the sync to the step's last micro-batch
    # (torch.distributed.pipelining's backward_maybe_with_nosync; the memory model's
    # pp_unsharded_step), so once per step there.
    per_step = np.where((c.zero >= 3) & (c.pp <= 1), c.m, 1.0)
    reduce = reduce + (per_step - 1.0) * rs_mb
    per_mb = compute_s / c.m
    tail = 1.0 - 1.0 / (buckets * per_step)  # share of the reductions that can overlap at all
    return {"dp_reduce": (reduce, np.minimum(comm.DP_OVERLAP * per_mb * per_step * 2.0 / 3.0,
                                             reduce * tail)),
            "dp_param_gather": (gather, np.minimum(comm.DP_OVERLAP * per_mb / 3.0,
                                                   gather * tail)),
            "dp_gather": (gathers, comm.ZERO3_OVERLAP * compute_s)}


def hsdp_comm(c: Any, params: Any) -> tuple[Any, Any, Any]:
    """(gradient sync, ZeRO-3 gathers) per step, and the sync's reduce-scatter inside the group
    (what ZeRO-3 repeats per micro-batch), with an HSDP shard group of c.sg of the dp*cp ranks
    (`comm.dp_cp_group`, stride tp), its replicas at stride tp*group (`comm.hsdp_grad_sync_s`).
    All parameters, experts included, take the shard group (torchtitan's HSDP)."""
    ranks = c.dp * c.cp
    group = np.clip(c.sg, 1.0, ranks)
    n_in = comm.ranks_inside(c.tp, group, c.domain)
    r_in = comm.ranks_inside(c.tp * group, ranks / group, c.domain)
    links = (c.up, c.a_up, c.out, c.a_out)
    sync = comm.hsdp_grad_sync_s(params, group, ranks / group, c.zero, n_in, r_in, *links,
                                 c.ag_bytes)
    gathers = comm.zero3_gather_s(params, group, c.zero, c.m, n_in, *links, c.z3_bytes)
    rs = comm.hierarchical_rs_s(params * comm.GRAD_REDUCE_BYTES, group, n_in, *links)
    return sync, gathers, rs


def gather_bytes(prec_fp8: Any, stack: Any, stacks: Any, any_layout: Any) -> tuple[Any, Any]:
    """(ZeRO-1/2 all-gather, ZeRO-3 gathers) bytes per parameter for each configuration's
    stack (`stacks`: buffers.StackBuffers, None = buffers.LEGACY, no FP8 primary weights)."""
    sb = stacks if stacks is not None else bufm.LEGACY
    s = np.asarray(stack, dtype=np.intp)
    ag, z3 = bufm.fp8_param_gathers(prec_fp8, np.asarray(sb.fp8_primary_weights)[s],
                                    np.asarray(sb.fp8_transpose)[s], any_layout)
    return param_gather_bytes(ag), param_gather_bytes(z3)
