"""Step time: compute + exposed communication + pipeline bubble + optimizer step (L3).

Composes `compute` and `comm` (its only estimate imports). Everything broadcasts over arrays
of configurations (the fields of `Layout`, `Hardware` and `Efficiency`); a scalar query is a
grid of one. Unsupported precisions (nan peak) give an infinite step time and 0 tokens/s.

    step_s = compute_s + memory_s + overhead_s + optimizer_s
           + tp_comm_s + pp_comm_s + dp_comm_s + cp_comm_s + ep_comm_s   (exposed parts)
           + bubble_s                                                    (= TIMING_PARTS)

compute_s covers GEMMs (and routed experts, whose grouped GEMMs take the efficiency of their
smallest dimension, compute.expert_gemm_dim) at the calibrated matmul efficiency and the
attention core in 16 bits at attention_ratio x that efficiency (slower where the softmax's
exponentials bind, compute.attention_exp_factor); memory_s includes the MoE token routing
traffic (compute.moe_routing_elems_per_token). Communication hides behind compute by
named overlap fractions (estimators/comm.py) that share one budget, the GEMM time. bubble_s =
(pp - 1) / (microbatches * vpp) x the pipeline's busy time, the interleaved 1F1B bubble of
Narayanan et al. 2021 (arXiv 2104.04473, section 2.2.2), or DualPipe's (`_bubble_fraction`,
Layout.schedule). The MoE all-to-all (deduplicated by the flex dispatcher or one copy per routed
expert, Layout.moe_dispatcher; comm.moe_all_to_all_s) is exposed under 1F1B and hidden under
DualPipe and under 1F1B with Megatron-Core's all-to-all overlap (schedule 1f1b-a2a,
comm.EP_OVERLAP_A2A); across scale-up domains the deduplicated dispatch is also bounded by
its internode pipeline (comm.a2a_logical_copies at the fabric's moe_dispatch_logical_share of
the line rate, Hardware.scale_out_dispatch_share). The scale-out link runs at
comm.NET_EFFICIENCY of the NIC; the DP reduction (in buckets) hides only behind the last
micro-batch's backward (`dp_comm.data_parallel_comm`); overhead_s adds the step's syncs
(`_step_sync_s`).
`timing_one.step_time_one` evaluates the same model for one configuration in Python floats.
Every per-step part is that of the slowest pipeline stage (`slowest_stage`: the most decoder
layers, the last stage's LM head counted), so uneven stages (`shapes.stage_layers`) slow the
step and the bubble with it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..rules import LayoutArrays
from ..spec import (
    BF16,
    FP8,
    PRECISIONS,
    S_1F1B_A2A,
    S_DUALPIPE,
    Hardware,
    Layout,
    ModelSpec,
    moe_dedup,
)
from ..units import DAY, HOUR
from ..workload import finetune_of
from . import comm, compute, dp_comm, finetune
from .compute import (
    FWD_BWD,
    MOE_LOAD_IMBALANCE,
    OPTIMIZER_STEP_BYTES,
    Efficiency,
    attention_exp_factor,
    compute_time,
    elementwise_bytes_per_token_layer,
    expert_gemm_dim,
    flops_per_token,
    logits_bytes_per_token,
    matmul_efficiency,
    memory_bound_time,
)
from .recompute import OFFLOAD_OVERLAP, full_share, module_bits, tp_gathers_repeated
from .shapes import (
    StageParams,
    act_element_bytes,
    hidden_activation_bytes,
    kv_width_per_rank,
    most_params,
    pipeline_stages,
    sharded_params,
    stage_layers,
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
    overhead_s: Any  # fixed per-layer, per-micro-batch time (launches, tails) + per-step syncs
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
    return choose([table[..., i] for i in range(len(PRECISIONS))], precision)


def choose(choices: Any, index: Any) -> Any:
    """`np.choose(index, choices)` (the same values, shape and dtype), as np.where over the
    codes present: np.choose is about 10x slower on broadcast choices."""
    index = np.asarray(index)
    if index.dtype.kind not in "iu" or index.size == 0 or index.min() < 0 \
            or index.max() >= len(choices):
        return np.choose(index, choices)  # its errors and its empty result
    dtype = np.result_type(*choices)
    shape = np.broadcast_shapes(index.shape, *(np.shape(c) for c in choices))
    codes = np.flatnonzero(np.bincount(index.ravel(), minlength=len(choices)))
    out = np.broadcast_to(np.asarray(choices[codes[-1]], dtype=dtype), shape)
    for i in codes[-2::-1]:
        out = np.where(index == i, np.asarray(choices[i], dtype=dtype), out)
    return out


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
    exp: Any  # SFU exponentials per second (inf: no catalog figure)
    domain: Any
    up: Any
    a_up: Any
    out: Any  # scale-out bandwidth per GPU x comm.NET_EFFICIENCY
    a_out: Any
    logical: Any  # the flex dispatch's internode pipeline rate per GPU (inf = no bound)
    schedule: Any  # code into spec.SCHEDULES
    dedup: Any  # deduplicated MoE dispatch (spec.moe_dedup)
    rg: Any  # TP all-gathers the backward repeats (recompute.tp_gathers_repeated)
    ag_bytes: Any  # bytes per parameter of the ZeRO-1/2 all-gather (dp_comm.gather_bytes)
    z3_bytes: Any  # and of the ZeRO-3 gathers

    @cached_property
    def full(self) -> Any:
        """Share of the layers full recompute repeats (1/recompute_every; 0 in other modes)."""
        return full_share(self.rc, self.rk)

    def link(self, span: Any) -> tuple[Any, Any]:
        return comm.group_link(span, self.domain, self.up, self.a_up, self.out, self.a_out)


def _context(layout: Layout, hw: Hardware, stacks: Any = None) -> _Ctx:
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    prec, rc = np.asarray(layout.precision), np.asarray(layout.recompute)
    stack = np.asarray(getattr(layout, "stack", 0))
    ag_b, z3_b = dp_comm.gather_bytes(prec == FP8, stack, stacks,
                                      f(getattr(hw, "fp8_gemm_any_layout", 0.0)) > 0)
    return _Ctx(**LayoutArrays.read(layout, float), rc=rc, prec=prec,
                m=np.asarray(layout.microbatches, dtype=float),
                act_bytes=act_element_bytes(prec),  # FP8 recipes keep 16-bit activations
                peak=peak_at(hw, prec), peak16=_peak16(hw, prec), domain=f(hw.scale_up_domain),
                exp=f(getattr(hw, "exp_per_s", np.inf)),
                up=f(hw.scale_up_bytes_per_s), a_up=f(hw.scale_up_latency_s),
                out=f(hw.scale_out_bytes_per_s) * comm.NET_EFFICIENCY,
                a_out=f(hw.scale_out_latency_s),
                logical=comm.dispatch_logical_bw(f(hw.scale_out_bytes_per_s),
                                                 getattr(hw, "scale_out_dispatch_share", np.nan)),
                schedule=np.asarray(getattr(layout, "schedule", 0)),
                dedup=moe_dedup(np.asarray(getattr(layout, "moe_dispatcher", 0)), stack),
                rg=tp_gathers_repeated(rc, stack), ag_bytes=ag_b, z3_bytes=z3_b)


def slowest_stage(model: ModelSpec, c: _Ctx, layer_flops: Any, head_flops: Any
                  ) -> tuple[Any, Any]:
    """(decoder layers, 1.0 if it holds the LM head else 0.0) of the pipeline stage with the
    most FLOPs: the first, the busiest middle or the last (+ the head) rank of
    `shapes.stage_layers` (the embedding lookup is not counted)."""
    first, middle, last = stage_layers(model, c.pp, c.vpp, c.first, c.last)
    front = np.maximum(first, middle)
    head_wins = last * layer_flops + head_flops >= front * layer_flops
    return np.where(head_wins, last, front), np.where(head_wins, 1.0, 0.0)


def _compute_parts(model: ModelSpec, c: _Ctx, hw: Hardware, eff: Efficiency,
                   optimizer: Any) -> dict[str, Any]:
    """GEMM time, memory-bound time, fixed overhead and optimizer step on the slowest pipeline
    stage (`slowest_stage`: its layers, plus the LM head on the last).

    Under FP8 recipes only the transformer layers' GEMMs run in FP8: the LM head stays at the
    16-bit peak (Megatron-Core's output layer is its own ColumnParallelLinear, not a
    Transformer Engine module, so fp8_autocast leaves it in BF16 unless the opt-in
    `fp8_output_proj` (default False, MXFP8 only) is set; DeepSeek-V3, arXiv
    2412.19437 section 3.3.1, keeps "the embedding module, the output head, MoE gating
    modules, normalization operators, and attention operators" in BF16/FP32; MPT ties its
    head to the embedding, which llm-foundry's Transformer Engine swap does not touch)."""
    L, h = model.layers, model.hidden
    fl = flops_per_token(model, c.seq)
    tokens_gpu = c.gb * c.seq / (c.dp * c.cp)  # tokens each stage's tp group sees per step
    layer_hw = (fl.hardware(c.rc, c.rmods, c.rk) - fl.lm_head) / L
    lps, head = slowest_stage(model, c, layer_hw, fl.lm_head)
    stage_flops = tokens_gpu / c.tp * (layer_hw * lps + fl.lm_head * head)
    # Routed experts run grouped GEMMs whose smallest dimension is min(rows per expert,
    # hidden, expert ffn) (compute.expert_gemm_dim; the busiest expert sets the pace, x the
    # load imbalance); the attention core runs in 16 bits at attention_ratio x the GEMM
    # efficiency.
    per_layer_tokens = tokens_gpu / c.tp * lps / L  # (tokens x all layers) x this stage's share
    expert = per_layer_tokens * _expert_flops(model, c) / stage_flops
    at_exec = fl.attention_executed(c.rc, c.rmods, c.rk)
    attn = per_layer_tokens * at_exec / stage_flops
    # The LM head stays in 16 bits under FP8 recipes (see the docstring).
    head16 = tokens_gpu / c.tp * fl.lm_head * head / stage_flops
    eff_mm = matmul_efficiency(eff, h / c.tp, c.prec)
    eff16 = matmul_efficiency(eff, h / c.tp, BF16)
    rows = tokens_per_rank(c.seq, c.mb, c.cp) / c.tp  # each rank routes its SP shard
    eff_ex = matmul_efficiency(eff, expert_gemm_dim(model, rows, c.ep), c.prec)
    eff_at = eff16 * np.asarray(eff.attention_ratio)
    compute_s = (compute_time(stage_flops * (1 - expert - attn - head16), c.peak, eff_mm)
                 + compute_time(stage_flops * head16, c.peak16, eff16)
                 + compute_time(stage_flops * expert * MOE_LOAD_IMBALANCE, c.peak, eff_ex)
                 + compute_time(stage_flops * attn * attention_exp_factor(
                     model, fl.attention, at_exec, c.peak16, c.exp), c.peak16, eff_at))
    per_token = (elementwise_bytes_per_token_layer(model, c.act_bytes, c.ep) * lps
                 + logits_bytes_per_token(model) * head)
    repeat = 1.0 + c.full / 3.0  # full recompute repeats the forward
    casts = compute.fp8_cast_bytes(model, tokens_gpu, c.tp, c.ep, c.m, lps, c.full, eff, c.prec)
    memory_s = memory_bound_time(tokens_gpu / c.tp * per_token * repeat + casts,
                                 hw.memory_bandwidth_bytes_per_s, eff.memory_fraction)
    overhead_s = np.asarray(eff.layer_overhead_s) * lps * c.m * repeat
    placed = pipeline_stages(model, c.tp, c.pp, c.ep, c.vpp, c.first, c.last)  # computed once
    params = most_params(*placed)
    opt_bytes = choose(OPTIMIZER_STEP_BYTES, optimizer)
    optimizer_s = memory_bound_time(_optimizer_params(c, placed) * opt_bytes,
                                    hw.memory_bandwidth_bytes_per_s, eff.memory_fraction)
    return dict(compute_s=compute_s, memory_s=memory_s, overhead_s=overhead_s,
                optimizer_s=optimizer_s, params=params, fl=fl, eff_mm=eff_mm, lps=lps,
                placed=placed)


def _step_sync_s(c: _Ctx) -> Any:
    """Fixed per-step synchronization: comm.STEP_SYNC_COLLECTIVES scalar all-reduces over every
    GPU (gradient norm, loss), latency-bound on NCCL's tree: 2 log2(gpus) alpha of the link
    the whole job spans."""
    gpus = c.tp * c.pp * c.dp * c.cp
    _, alpha = c.link(gpus)
    return comm.STEP_SYNC_COLLECTIVES * comm.tree_allreduce_latency_s(gpus, alpha)


def _optimizer_params(c: _Ctx, placed: tuple[StageParams, ...]) -> Any:
    """Parameters whose optimizer step one GPU runs: its stage's, sharded as ZeRO-1+ shards the
    optimizer state (the same count as the memory model's optimizer bytes); the busiest of the
    stages `placed` (`shapes.pipeline_stages`)."""
    return functools.reduce(np.maximum, [sharded_params(P, c.dp, c.cp, c.ep, c.zero >= 1, c.sg)
                                         for P in placed])


def _model_parallel_comm(model: ModelSpec, c: _Ctx, compute_s: Any, eff: Efficiency,
                         lps: Any) -> dict[str, tuple[Any, Any]]:
    """TP, CP, EP and PP communication per step (Megatron-LM rank order), each as
    (total seconds, seconds of it that compute could hide); `lps`: the slowest stage's
    decoder layers; `act_layer`: one (mb x s/cp x h) activation."""
    act_layer = hidden_activation_bytes(model, seq_len=c.seq, micro_batch=c.mb, cp=c.cp,
                                        precision=c.prec)
    bw, a = c.link(c.tp)
    tp = comm.tp_comm_s(act_layer, c.tp, comm.tp_layer_collectives(c.full), lps, c.m, bw, a,
                        comm.tp_gather_share(c.prec == FP8, eff.fp8_tp_gather, c.act_bytes), c.rg)
    # TP overlap (userbuffers) only inside the scale-up domain; across it, none hidden.
    tp_overlap = np.where(c.tp <= c.domain, eff.tp_overlap, comm.TP_CROSS_NODE_OVERLAP)

    bw, a = c.link(c.tp * c.cp)
    kv = tokens_per_rank(c.seq, c.mb, c.cp) * 2.0 * kv_width_per_rank(model, c.tp) * c.act_bytes
    cp = comm.cp_comm_s(kv, c.cp, lps, c.m, bw, a)
    fl = flops_per_token(model, c.seq)

    # EP ranks sit at stride tp*cp inside the data-parallel dimension; the dispatch
    # (comm.moe_all_to_all_s: flex once per GPU and remote domain, forwarded over the scale-up
    # link; alltoall once per routed expert) sends to the same domain over the scale-up link
    # and to the rest over the fabric.
    # The busiest rank receives MOE_LOAD_IMBALANCE x the mean.
    k = model.experts_per_token if model.is_moe else 0
    ep_in = comm.ranks_inside(c.tp * c.cp, c.ep, c.domain)
    ep = comm.moe_all_to_all_s(act_layer / c.tp * MOE_LOAD_IMBALANCE, c.ep, ep_in,
                               model.experts, k, model.moe_layers * lps / model.layers, c.m,
                               c.up, c.a_up, c.out, c.a_out, c.dedup, c.logical)

    bw, a = c.link(c.tp * c.cp * c.dp * c.pp)  # scale-out once the job leaves one domain
    pp = comm.pp_comm_s(act_layer / c.tp, c.pp, c.vpp, c.m, bw, a)  # scatter-gather (Megatron)
    dual = c.schedule == S_DUALPIPE
    pp_overlap = np.where((c.vpp > 1) | dual, comm.PP_OVERLAP_INTERLEAVED, comm.PP_OVERLAP_1F1B)
    paired = comm.EP_OVERLAP_A2A * (1.0 - 1.0 / c.m)  # 1F1B with the all-to-all overlap
    ep_overlap = np.where(dual, comm.EP_OVERLAP_DUALPIPE,
                          np.where(c.schedule == S_1F1B_A2A, paired, comm.EP_OVERLAP))
    return {"tp_comm_s": (tp, tp_overlap * compute_s),
            "cp_comm_s": (cp, comm.CP_OVERLAP * compute_s * fl.attention / fl.model),
            "ep_comm_s": (ep, ep_overlap * compute_s),
            "pp_comm_s": (pp, pp_overlap * compute_s)}


def _finetuned(model: ModelSpec, ft: Any, c: _Ctx, parts: dict[str, Any]) -> dict[str, Any]:
    """Compute parts of a fine-tune (estimators/finetune.py): FLOPs without the frozen weights'
    gradients (x the quantized base's slowdown), the optimizer step and the gradient sync over
    the trainable parameters only; MFU/HFU count the fine-tune's FLOPs."""
    fl = parts["fl"]
    model_r, hw_r = finetune.flops_ratios(model, ft, model_flops=fl.model, attention=fl.attention,
                                          lm_head=fl.lm_head,
                                          recompute_extra=fl.recompute_extra(c.rc))
    share = finetune.trainable_params(model, ft) / model.total_params()
    out = dict(parts, model_ratio=model_r, hw_ratio=hw_r)
    out["compute_s"] = parts["compute_s"] * hw_r * finetune.quant_slowdown(ft)
    out["optimizer_s"] = parts["optimizer_s"] * share
    out["params"], out["share"] = parts["params"] * share, share
    return out


def _bubble_fraction(c: _Ctx) -> Any:
    """Pipeline bubble as a share of the busy time. Interleaved 1F1B: (pp-1)/(m vpp)
    (Narayanan et al. 2021, section 2.2.2). DualPipe (DeepSeek-V3 report, table 2): a bubble of
    (pp/2 - 1)(F&B + B - 3W) per step against 1F1B's (pp-1)(F+B), with F a forward chunk,
    B a full backward (2F) and W its weight-gradient half (F); F&B taken as F + B (no credit
    for the overlap inside the pair, an upper bound) gives (pp/2 - 1) 2F, i.e.
    (pp/2 - 1) (2/3) / m of the busy time (m micro-batches of F + B each)."""
    one_f_one_b = (c.pp - 1.0) / (c.m * c.vpp)
    dual = np.maximum(c.pp / 2.0 - 1.0, 0.0) * (2.0 / 3.0) / c.m
    return np.where(c.schedule == S_DUALPIPE, dual, one_f_one_b)


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
              host_traffic: Any = 0.0, stacks: Any = None) -> TimingBreakdown:
    """Time of one optimizer step of `model` under `layout` on `hw` (all arrays broadcast).
    `host_traffic`: bytes per step each GPU moves over its host link for offloaded state
    (`memory.MemoryBreakdown.host_traffic`); `stacks`: the stacks' buffers.StackBuffers, as
    the memory model takes them (None: buffers.LEGACY)."""
    c = _context(layout, hw, stacks)
    cp_ = _compute_parts(model, c, hw, eff, layout.optimizer)
    ft = finetune_of(model)
    if ft is not None:
        cp_ = _finetuned(model, ft, c, cp_)
    compute_s, memory_s, overhead_s = cp_["compute_s"], cp_["memory_s"], cp_["overhead_s"]
    comms = {**_model_parallel_comm(model, c, compute_s, eff, cp_["lps"]),
             **dp_comm.data_parallel_comm(c, cp_["params"], dp_comm.busiest_split(
                 cp_["placed"], cp_.get("share", 1.0)), compute_s),
             **_offload_comm(c, hw, host_traffic, compute_s)}
    exposed = dict(zip(comms, comm.shared_overlap([t for t, _ in comms.values()],
                                                  [h for _, h in comms.values()], compute_s),
                       strict=True))
    mp = {k: exposed[k] for k in ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s")}
    dp_s = exposed["dp_reduce"] + exposed["dp_param_gather"] + exposed["dp_gather"]
    busy = compute_s + memory_s + overhead_s + mp["tp_comm_s"] + mp["cp_comm_s"] + mp["ep_comm_s"]
    bubble_s = _bubble_fraction(c) * busy
    sync_s = _step_sync_s(c)  # once per step: outside the pipeline's busy time
    overhead_s = overhead_s + sync_s
    offload_s = exposed["offload"]
    step = busy + sync_s + cp_["optimizer_s"] + mp["pp_comm_s"] + dp_s + bubble_s + offload_s
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
        mfu=np.where(ok, fl.model * cp_.get("model_ratio", 1.0) * per_peak, 0.0),
        hfu=np.where(ok, fl.hardware(c.rc) * cp_.get("hw_ratio", 1.0) * per_peak, 0.0),
        bottleneck=bottleneck_code(parts),
        matmul_efficiency=cp_["eff_mm"], efficiency_guess=np.asarray(eff.guess),
    )


def bottleneck_code(parts: Any) -> Any:
    """Index of the largest of `parts` (same-shape arrays; nan counts as 0, ties go to the
    first): `np.argmax(np.nan_to_num(np.stack(parts), nan=0.0), axis=0)` part by part, on
    contiguous rows (about 3x faster than the strided argmax over the stack)."""
    best = np.where(np.isnan(parts[0]), 0.0, parts[0])
    code = np.zeros(best.shape, dtype=np.intp)
    for i, part in enumerate(parts[1:], start=1):
        value = np.where(np.isnan(part), 0.0, part)
        code[value > best] = i
        np.maximum(best, value, out=best)
    return code[()]


def training_days(tokens: Any, tokens_per_s: Any) -> Any:
    """Wall-clock days to process `tokens` at `tokens_per_s` (whole cluster)."""
    return np.asarray(tokens, dtype=float) / np.asarray(tokens_per_s, dtype=float) / DAY


def gpu_hours(tokens: Any, tokens_per_s: Any, gpus: Any) -> Any:
    """GPU-hours to process `tokens`: GPUs x wall-clock hours."""
    seconds = np.asarray(tokens, dtype=float) / np.asarray(tokens_per_s, dtype=float)
    return np.asarray(gpus, dtype=float) * seconds / HOUR
