"""Step time: compute + exposed communication + pipeline bubble + optimizer step (L3).

Composes `compute` and `comm` (its only estimate imports). Everything broadcasts over arrays
of configurations (the fields of `Layout`, `Hardware` and `Efficiency`); a scalar query is a
grid of one. Unsupported precisions (nan peak) give an infinite step time and 0 tokens/s.

    step_s = compute_s + memory_s + overhead_s + optimizer_s
           + tp_comm_s + pp_comm_s + dp_comm_s + cp_comm_s + ep_comm_s   (exposed parts)
           + bubble_s                                                    (= TIMING_PARTS)

compute_s covers GEMMs (and routed experts, whose grouped GEMMs take the efficiency of their
smallest dimension, compute.expert_gemm_dim) at the calibrated matmul efficiency and the
attention core in 16 bits at attention_ratio x that efficiency; memory_s includes the MoE
token routing traffic (compute.moe_routing_elems_per_token). Communication hides behind
compute by named overlap fractions (estimators/comm.py) that share one budget, the GEMM time.
bubble_s = (pp - 1) / (microbatches * vpp) x the pipeline's busy time, the interleaved 1F1B
bubble of Narayanan et al. 2021 (arXiv 2104.04473, section 2.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..rules import LayoutArrays
from ..spec import BF16, FP8, PRECISIONS, Hardware, Layout, ModelSpec
from ..units import DAY, HOUR
from . import comm
from .compute import (
    FWD_BWD,
    MOE_LOAD_IMBALANCE,
    OPTIMIZER_STEP_BYTES,
    Efficiency,
    compute_time,
    elementwise_bytes_per_token_layer,
    expert_gemm_dim,
    flops_per_token,
    logits_bytes_per_token,
    matmul_efficiency,
    memory_bound_time,
)
from .recompute import OFFLOAD_OVERLAP, full_share, module_bits
from .shapes import (
    StageParams,
    act_element_bytes,
    hidden_activation_bytes,
    kv_width_per_rank,
    layers_per_stage,
    most_params,
    sharded_params,
    stages,
    tokens_per_rank,
)

# The TimingBreakdown fields that sum to step_s, in display order.
TIMING_PARTS = ("compute_s", "memory_s", "overhead_s", "optimizer_s", "tp_comm_s", "pp_comm_s",
                "dp_comm_s", "cp_comm_s", "ep_comm_s", "bubble_s", "offload_s")
BOTTLENECKS = ("compute", "memory bandwidth", "TP comm", "DP comm", "PP bubble", "PP comm",
               "CP comm", "EP comm")


@dataclass(frozen=True, kw_only=True)
class TimingBreakdown:
    """Seconds per optimizer step by part (arrays). The parts sum to step_s."""

    compute_s: Any  # GEMMs and attention at achievable efficiency
    memory_s: Any  # memory-bound elementwise kernels (norms, activations, residuals, logits)
    overhead_s: Any  # fixed per-layer, per-micro-batch time (launches, tails, syncs)
    optimizer_s: Any
    tp_comm_s: Any  # exposed
    pp_comm_s: Any
    dp_comm_s: Any  # exposed (after overlap with backward)
    cp_comm_s: Any
    ep_comm_s: Any
    bubble_s: Any
    step_s: Any
    offload_s: Any = 0.0  # exposed host-link (PCIe) transfers of offloaded state (#11)
    tokens_per_s: Any  # whole cluster
    mfu: Any  # PaLM convention, against dense peak at the layout's precision
    hfu: Any  # including recompute FLOPs
    bottleneck: Any  # int code into BOTTLENECKS
    matmul_efficiency: Any
    efficiency_guess: Any  # True where the efficiency row is a guess (no calibration data)

    def bottleneck_name(self) -> Any:
        return np.asarray(BOTTLENECKS, dtype=object)[np.asarray(self.bottleneck)]


def peak_at(hw: Hardware, precision: Any) -> Any:
    """Dense peak FLOP/s at each candidate's precision code.

    `hw.peak_flops_by_precision` (shape (..., 4), indexed by spec.PRECISIONS codes, nan where
    unsupported) wins when present; otherwise `hw.peak_flops` is taken as already selected.
    """
    table = getattr(hw, "peak_flops_by_precision", None)
    if table is None:
        return np.asarray(hw.peak_flops, dtype=float)
    table = np.asarray(table, dtype=float)
    choices = [table[..., i] for i in range(len(PRECISIONS))]
    return np.choose(np.asarray(precision), choices)


def _peak16(hw: Hardware, precision: Any) -> Any:
    """BF16 peak; without a per-precision table, half the FP8 peak (dense FP8 = 2 x BF16 on
    every part in the catalog) or the given peak at 16/32 bits."""
    if getattr(hw, "peak_flops_by_precision", None) is not None:
        return peak_at(hw, np.where(np.asarray(precision) == FP8, BF16, precision))
    peak = np.asarray(hw.peak_flops, dtype=float)
    return np.where(np.asarray(precision) == FP8, peak / 2.0, peak)


def _expert_flops(model: ModelSpec, c: Any) -> Any:
    """Executed FLOPs per token in routed experts, all layers (0 for dense models): full
    recompute and Megatron-LM's moe module repeat their forward."""
    if not model.is_moe:
        return 0.0
    routed = FWD_BWD * 2.0 * model.moe_layers * model.experts_per_token * model.expert_params()
    return routed * (1.0 + (c.full + module_bits(c.rc, c.rmods)["moe"]) / 3.0)


@dataclass(frozen=True, kw_only=True)
class _Ctx(LayoutArrays):
    """Layout fields (as floats) and hardware arrays, read once (broadcastable)."""

    rc: Any
    prec: Any
    m: Any  # micro-batches per replica
    act_bytes: Any
    peak: Any
    peak16: Any  # 16-bit peak (attention runs in BF16 under FP8 recipes)
    domain: Any
    up: Any
    a_up: Any
    out: Any
    a_out: Any

    @cached_property
    def full(self) -> Any:
        """Share of the layers full recompute repeats (1/recompute_every; 0 in other modes)."""
        return full_share(self.rc, self.rk)

    def link(self, span: Any) -> tuple[Any, Any]:
        return comm.group_link(span, self.domain, self.up, self.a_up, self.out, self.a_out)


def _context(layout: Layout, hw: Hardware) -> _Ctx:
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    prec = np.asarray(layout.precision)
    return _Ctx(**LayoutArrays.read(layout, float),
                rc=np.asarray(layout.recompute), prec=prec,
                m=np.asarray(layout.microbatches, dtype=float),
                act_bytes=act_element_bytes(prec),  # FP8 recipes keep 16-bit activations
                peak=peak_at(hw, prec), peak16=_peak16(hw, prec), domain=f(hw.scale_up_domain),
                up=f(hw.scale_up_bytes_per_s), a_up=f(hw.scale_up_latency_s),
                out=f(hw.scale_out_bytes_per_s), a_out=f(hw.scale_out_latency_s))


def _compute_parts(model: ModelSpec, c: _Ctx, hw: Hardware, eff: Efficiency,
                   optimizer: Any) -> dict[str, Any]:
    """GEMM time, memory-bound time, fixed overhead and optimizer step on the busiest (last)
    pipeline stage: its layers/pp layers plus the LM head."""
    L, h = model.layers, model.hidden
    fl = flops_per_token(model, c.seq)
    tokens_gpu = c.gb * c.seq / (c.dp * c.cp)  # tokens each stage's tp group sees per step
    layer_hw = (fl.hardware(c.rc, c.rmods, c.rk) - fl.lm_head) / L
    lps = layers_per_stage(model, c.pp)
    stage_flops = tokens_gpu / c.tp * (layer_hw * lps + fl.lm_head)
    # Routed experts run grouped GEMMs whose smallest dimension is min(rows per expert,
    # hidden, expert ffn) (compute.expert_gemm_dim; the busiest expert sets the pace, x the
    # load imbalance); the attention core runs in 16 bits at attention_ratio x the GEMM
    # efficiency.
    per_layer_tokens = tokens_gpu / c.tp / c.pp  # (tokens x all layers) / pp = this stage's
    expert = per_layer_tokens * _expert_flops(model, c) / stage_flops
    attn = per_layer_tokens * fl.attention_executed(c.rc, c.rmods, c.rk) / stage_flops
    eff_mm = matmul_efficiency(eff, h / c.tp, c.prec)
    rows = tokens_per_rank(c.seq, c.mb, c.cp) / c.tp  # each rank routes its SP shard
    eff_ex = matmul_efficiency(eff, expert_gemm_dim(model, rows, c.ep), c.prec)
    eff_at = matmul_efficiency(eff, h / c.tp, BF16) * np.asarray(eff.attention_ratio)
    compute_s = (compute_time(stage_flops * (1 - expert - attn), c.peak, eff_mm)
                 + compute_time(stage_flops * expert * MOE_LOAD_IMBALANCE, c.peak, eff_ex)
                 + compute_time(stage_flops * attn, c.peak16, eff_at))
    per_token = (elementwise_bytes_per_token_layer(model, c.act_bytes, c.ep) * lps
                 + logits_bytes_per_token(model))
    repeat = 1.0 + c.full / 3.0  # full recompute repeats the forward
    memory_s = memory_bound_time(tokens_gpu / c.tp * per_token * repeat,
                                 hw.memory_bandwidth_bytes_per_s, eff.memory_fraction)
    overhead_s = np.asarray(eff.layer_overhead_s) * lps * c.m * repeat
    placed = stages(model, c.tp, c.pp, c.ep)  # (first, last), computed once
    params = most_params(*placed)
    opt_bytes = np.choose(np.asarray(optimizer), OPTIMIZER_STEP_BYTES)
    optimizer_s = memory_bound_time(_optimizer_params(c, placed) * opt_bytes,
                                    hw.memory_bandwidth_bytes_per_s, eff.memory_fraction)
    return dict(compute_s=compute_s, memory_s=memory_s, overhead_s=overhead_s,
                optimizer_s=optimizer_s, params=params, fl=fl, eff_mm=eff_mm)


def _optimizer_params(c: _Ctx, placed: tuple[StageParams, StageParams]) -> Any:
    """Parameters whose optimizer step one GPU runs: its stage's, sharded as ZeRO-1+ shards the
    optimizer state (the same count as the memory model's optimizer bytes); the busier of the
    (first, last) stages `placed` (`shapes.stages`)."""
    return np.maximum(*(sharded_params(P, c.dp, c.cp, c.ep, c.zero >= 1, c.sg) for P in placed))


def _model_parallel_comm(model: ModelSpec, c: _Ctx, compute_s: Any, tp_overlap: Any
                         ) -> dict[str, tuple[Any, Any]]:
    """TP, CP, EP and PP communication per step (Megatron-LM rank order), each as
    (total seconds, seconds of it that compute could hide)."""
    lps = layers_per_stage(model, c.pp)
    # one (mb x s/cp x h) activation
    act_layer = hidden_activation_bytes(model, seq_len=c.seq, micro_batch=c.mb, cp=c.cp,
                                        precision=c.prec)
    bw, a = c.link(c.tp)
    tp = comm.tp_comm_s(act_layer, c.tp, comm.tp_layer_collectives(c.full), lps, c.m, bw, a)

    bw, a = c.link(c.tp * c.cp)
    kv = tokens_per_rank(c.seq, c.mb, c.cp) * 2.0 * kv_width_per_rank(model, c.tp) * c.act_bytes
    cp = comm.cp_comm_s(kv, c.cp, lps, c.m, bw, a)
    fl = flops_per_token(model, c.seq)

    # EP ranks sit at stride tp*cp inside the data-parallel dimension; the all-to-all sends to
    # peers in the same scale-up domain over it and to the rest over the scale-out fabric.
    # The busiest rank receives MOE_LOAD_IMBALANCE x the mean.
    k = model.experts_per_token if model.is_moe else 0
    ep_in = comm.ranks_inside(c.tp * c.cp, c.ep, c.domain)
    ep = comm.ep_comm_s(act_layer / c.tp * k * MOE_LOAD_IMBALANCE, c.ep,
                        model.moe_layers / c.pp, c.m, c.up, c.a_up, n_inner=ep_in,
                        bw_outer=c.out, alpha_outer=c.a_out)

    bw, a = c.link(c.tp * c.cp * c.dp * c.pp)  # scale-out once the job leaves one domain
    pp = comm.pp_comm_s(act_layer / c.tp, c.pp, c.vpp, c.m, bw, a)  # scatter-gather (Megatron)
    pp_overlap = np.where(c.vpp > 1, comm.PP_OVERLAP_INTERLEAVED, comm.PP_OVERLAP_1F1B)
    return {"tp_comm_s": (tp, np.asarray(tp_overlap) * compute_s),
            "cp_comm_s": (cp, comm.CP_OVERLAP * compute_s * fl.attention / fl.model),
            "ep_comm_s": (ep, comm.EP_OVERLAP * compute_s),
            "pp_comm_s": (pp, pp_overlap * compute_s)}


def _data_parallel_comm(c: _Ctx, params: Any, compute_s: Any) -> dict[str, tuple[Any, Any]]:
    """DP time, hierarchical over the dp group (stride tp*cp). The gradient sync hides behind
    the last micro-batch (backward, + the next forward for ZeRO's parameter gather); ZeRO-3
    gathers hide behind all compute."""
    n_in = comm.ranks_inside(c.tp * c.cp, c.dp, c.domain)
    sync = comm.dp_grad_sync_s(params, c.dp, c.zero, n_in, c.up, c.a_up, c.out, c.a_out)
    gathers = comm.zero3_gather_s(params, c.dp, c.zero, c.m, n_in, c.up, c.a_up, c.out, c.a_out)
    hsdp = c.sg > 0  # HSDP: sharded inside the shard group, replicated across the groups
    if np.any(hsdp):
        h_sync, h_gathers = _hsdp_comm(c, params)
        sync, gathers = np.where(hsdp, h_sync, sync), np.where(hsdp, h_gathers, gathers)
    window = compute_s / c.m * np.where(c.zero >= 1, 1.0, 2.0 / 3.0)
    return {"dp_sync": (sync, comm.DP_OVERLAP * window),
            "dp_gather": (gathers, comm.ZERO3_OVERLAP * compute_s)}


def _hsdp_comm(c: _Ctx, params: Any) -> tuple[Any, Any]:
    """(gradient sync, ZeRO-3 gathers) per step with an HSDP shard group: the shard group is
    c.sg of the dp*cp ranks, taken as c.sg / cp data-parallel ranks (exact for cp = 1) at
    stride tp*cp, its replicas at stride tp*cp*group (`comm.hsdp_grad_sync_s`)."""
    group = np.clip(c.sg / c.cp, 1.0, c.dp)
    n_in = comm.ranks_inside(c.tp * c.cp, group, c.domain)
    r_in = comm.ranks_inside(c.tp * c.cp * group, c.dp / group, c.domain)
    links = (c.up, c.a_up, c.out, c.a_out)
    sync = comm.hsdp_grad_sync_s(params, group, c.dp / group, c.zero, n_in, r_in, *links)
    gathers = comm.zero3_gather_s(params, group, c.zero, c.m, n_in, *links)
    return sync, gathers


def _offload_comm(c: _Ctx, hw: Hardware, host_traffic: Any, compute_s: Any
                  ) -> dict[str, tuple[Any, Any]]:
    """Host-link (PCIe) transfers of offloaded state per step: bytes / the link's bandwidth
    per direction, hidden behind compute up to recompute.OFFLOAD_OVERLAP."""
    traffic = np.asarray(host_traffic, dtype=float)
    bw = np.asarray(getattr(hw, "host_bytes_per_s", np.nan), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(traffic > 0, traffic / bw, 0.0)
    return {"offload": (np.where(np.isnan(t), np.inf, t), OFFLOAD_OVERLAP * compute_s)}


def step_time(model: ModelSpec, layout: Layout, hw: Hardware, eff: Efficiency,
              host_traffic: Any = 0.0) -> TimingBreakdown:
    """Time of one optimizer step of `model` under `layout` on `hw` (all arrays broadcast).
    `host_traffic`: bytes per step each GPU moves over its host link for offloaded state
    (`memory.MemoryBreakdown.host_traffic`)."""
    c = _context(layout, hw)
    cp_ = _compute_parts(model, c, hw, eff, layout.optimizer)
    compute_s, memory_s, overhead_s = cp_["compute_s"], cp_["memory_s"], cp_["overhead_s"]
    comms = {**_model_parallel_comm(model, c, compute_s, eff.tp_overlap),
             **_data_parallel_comm(c, cp_["params"], compute_s),
             **_offload_comm(c, hw, host_traffic, compute_s)}
    exposed = dict(zip(comms, comm.shared_overlap([t for t, _ in comms.values()],
                                                  [h for _, h in comms.values()], compute_s),
                       strict=True))
    mp = {k: exposed[k] for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s")}
    dp_s = exposed["dp_sync"] + exposed["dp_gather"]
    busy = compute_s + memory_s + overhead_s + mp["tp_comm_s"] + mp["cp_comm_s"] + mp["ep_comm_s"]
    bubble_s = (c.pp - 1.0) / (c.m * c.vpp) * busy  # interleaved 1F1B (Narayanan et al. 2021)
    offload_s = exposed["offload"]
    step = busy + cp_["optimizer_s"] + mp["pp_comm_s"] + dp_s + bubble_s + offload_s
    ok = np.isfinite(step) & (step > 0)
    step = np.where(ok, step, np.inf)
    tokens_per_s = np.where(ok, c.gb * c.seq / step, 0.0)
    fl = cp_["fl"]
    per_peak = tokens_per_s / (c.tp * c.pp * c.dp * c.cp * c.peak)
    parts = np.broadcast_arrays(compute_s + overhead_s, memory_s + cp_["optimizer_s"],
                                mp["tp_comm_s"], dp_s, bubble_s, mp["pp_comm_s"],
                                mp["cp_comm_s"], mp["ep_comm_s"])
    return TimingBreakdown(
        compute_s=compute_s, memory_s=memory_s, overhead_s=overhead_s,
        optimizer_s=cp_["optimizer_s"], dp_comm_s=dp_s, bubble_s=bubble_s, **mp,
        offload_s=offload_s,
        step_s=step, tokens_per_s=tokens_per_s,
        mfu=np.where(ok, fl.model * per_peak, 0.0),
        hfu=np.where(ok, fl.hardware(c.rc) * per_peak, 0.0),
        bottleneck=np.argmax(np.stack(np.nan_to_num(parts, nan=0.0)), axis=0),
        matmul_efficiency=cp_["eff_mm"], efficiency_guess=np.asarray(eff.guess),
    )


def training_days(tokens: Any, tokens_per_s: Any) -> Any:
    """Wall-clock days to process `tokens` at `tokens_per_s` (whole cluster)."""
    return np.asarray(tokens, dtype=float) / np.asarray(tokens_per_s, dtype=float) / DAY


def gpu_hours(tokens: Any, tokens_per_s: Any, gpus: Any) -> Any:
    """GPU-hours to process `tokens`: GPUs x wall-clock hours."""
    seconds = np.asarray(tokens, dtype=float) / np.asarray(tokens_per_s, dtype=float)
    return np.asarray(gpus, dtype=float) * seconds / HOUR
