"""Training memory per GPU (L3): weights, gradients, optimizer state, activations, overhead.

Pure numpy. Every `Layout` field may be an array; all arrays broadcast together and the result
is a `MemoryBreakdown` of arrays in BYTES for the most loaded GPU. The model is scalar.

Conventions and sources (each formula is repeated beside its function):

- Model state per parameter (Rajbhandari et al. 2019, ZeRO, arXiv 1910.02054, section 3.1):
  mixed precision AdamW keeps 2 B half weights + 2 B half gradients + 12 B optimizer state
  (fp32 master copy, momentum, variance) = 16 B/param. fp32 training keeps no master copy
  (4 + 4 + 8 = 16 B/param). SGD with momentum: one fp32 buffer (+ fp32 master when mixed).
  Adafactor (Shazeer & Stern 2018, arXiv 1804.04235) without first moment: a factored second
  moment of rows + cols floats per matrix, the full second moment for vectors; the ratio of
  state elements to parameters is computed once per model (an approximation: per-stage shares
  are taken to be the model-wide ratio).
- FP8 follows NVIDIA Transformer Engine's default (without `fp8_model_init`): module weights stay
  in bf16 and each linear layer caches an fp8 copy of its weight for the step, so weights cost
  2 + 1 = 3 B/param; gradients are bf16 and the optimizer keeps an fp32 master copy. A stack
  with FP8 primary weights (Megatron-Bridge's fp8_param_gather) keeps 1 B weights and no bf16
  copy. Under FP8, GEMM inputs saved for the weight gradient cost the stack's `fp8_input_bytes`
  (Transformer Engine's FP8 cast, 1 B; torchao keeps them in bf16); norms, attention and
  activation-function tensors stay bf16 (`activations.layer_terms`).
- Gradient accumulation in fp32 (Megatron-LM's `main_grad` buffer, which its distributed
  optimizer keeps at 4 B/param for bf16 training: 6 + 12/d B/param in total): when precision is
  mixed and there is more than one micro-batch per step, gradients cost 4 B/param instead of 2;
  `gradients` keeps the half-precision 2 B and `grad_accum` the extra 2 B, sharded like the
  gradients. With one micro-batch the ZeRO paper's 2 + 2 + 12 = 16 B/param holds exactly.
- ZeRO (arXiv 1910.02054): stage 1 shards optimizer state, stage 2 also gradients, stage 3 (FSDP)
  also weights, over the data-parallel group, which with context parallelism is dp * cp (as in
  Megatron-LM, where CP ranks hold the same weights). Expert (MoE) parameters live on dp*cp/ep
  expert-data-parallel ranks, so their state is sharded over dp*cp/ep.
- ZeRO-2 and ZeRO-3 reduce-scatter each layer's gradients as backward produces them: one
  layer's unsharded gradients are alive before their reduce-scatter (`grad_bucket`). ZeRO-3
  gathers each layer's full (TP-sharded) weights before use; we count min(2, layers on the
  stage) gathered layers (the current one and one prefetched, FSDP's default; a stage of one
  layer has nothing to prefetch) plus the FSDP root unit (embeddings, final norm, LM head of
  this stage), which torchtitan keeps gathered between forward and backward (`gathered`).
  With a shard group of 1 nothing is sharded or gathered (FSDP switches to NO_SHARD); experts
  whose group dp*cp/ep is 1 are neither. So ZeRO-3 can need more than ZeRO-2 when a stage holds
  few layers or the group is small: it keeps its shard *and* the gathered copy; the breakdown
  carries `gathered` and `zero3_saving` so a report can say so. Under pipeline parallelism a
  stack with `pp_unsharded_step` (torchtitan, FSDP2 through torch.distributed.pipelining)
  keeps the whole stage gathered and accumulates its gradients unsharded, in the reduce
  dtype, until the last micro-batch (`buffers.pp_unsharded_grad_bytes`).
- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053): attention and MLP
  matrices are split by tp; embeddings and the LM head are vocabulary-parallel (/tp); norm and
  router weights are replicated. KV heads are split by tp, or replicated when tp > kv_heads.
  MoE expert weights are split by tp too (expert tensor parallel = tp).
- Pipeline parallelism: layers and parameters per stage as `estimate.shapes.pipeline_stages`
  places them (uneven stages included; Megatron-LM: embedding on the first stage, final norm
  and LM head on the last, a tied embedding counted once on each stage that holds it). In a
  1F1B schedule rank k holds min(pp - k, m) micro-batches of activations (Narayanan et al.
  2021, arXiv 2104.04473); interleaved with vpp chunks, pp + (pp - 1 - 2k) / vpp micro-batches'
  worth of its layers (Megatron-LM's warm-up of (pp - k - 1) * 2 + (vpp - 1) * pp chunks, + 1;
  k = 0 is Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.3); DualPipe (DeepSeek-V3,
  arXiv 2412.19437, Table 2) pp + 1, with two stages' weights and gradients per rank
  (`buffers.dualpipe_copies`). The most loaded GPU is the first, the last or the second rank
  (the busiest middle one), whichever total is largest.
- Activations per layer: Korthikanti et al. 2022 (arXiv 2205.05198), section 4, generalised to
  GQA, SwiGLU and squared ReLU (MLP_SAVED_FFN), flash attention, dropout on/off and fp32; see
  `layer_activation_bytes`.
- Offload (optimizer, params, grads, activations; `recompute.py`) moves bytes to `offloaded`.
- DeepSeek-V3's memory savings (arXiv 2412.19437), each a run's option (buffers.py): BF16
  optimizer moments (section 3.3.3: master weights and gradients stay FP32; `moment_bytes`,
  the `optimizer` part), the low-precision activation cache (3.3.3; `fp8_act_cache`, in
  `activations.layer_terms`), the recompute of the MLA up-projections and RMSNorms (3.2.3;
  recompute modules mla_up_proj and layernorm) and the parameter EMA in CPU memory (3.2.3;
  `ema` = 'host': in `offloaded`; 'gpu': the `ema` line, fp32, sharded like the optimizer).
- Buffers by software stack (`Layout.stack`): see buffers.py (data/memory.toml).
- Loss phase and layer-backward phase (the peaks of torch's caching allocator; no constant is
  fitted). The loss's tensors (`logits`: the 16-bit logits, the fp32 log-softmax and its copies,
  the logits' gradient) are freed once the LM head's backward has run, before the last layer's
  backward (and, under recompute, its re-run forward) builds that layer's working set (the
  transient, non-stored activations of the layer in backward, within `activations`). So the
  allocated peak (torch.cuda.max_memory_allocated) holds the stored parts (weights, gradients,
  optimizer, ZeRO buffers, the stored activations of the in-flight micro-batches) plus
  max(logits, working set): `allocated` = the tensor parts - `loss_overlap`, with
  `loss_overlap` = min(logits, working set). The reserved peak holds both: the caching
  allocator keeps the freed logits' blocks cached rather than returning them to the device,
  and the working set's blocks, of other sizes, generally cannot reuse them (PyTorch, CUDA
  semantics, memory management: https://pytorch.org/docs/stable/notes/cuda.html#memory-management).
- Overhead: runtime_overhead_bytes (CUDA/ROCm context, NCCL buffers; a catalog constant,
  `runtime_context`) plus fragmentation * the tensor parts (caching-allocator slack,
  `allocator_margin`). `reserved` = the tensor parts + margin = `allocated` + `loss_overlap` +
  margin; + context = total (the parts sum to it; `fits` compares it, so reserved, as before).
- Biases, position embeddings and norm statistics (s*b floats) are ignored, as in the papers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..spec import ADAFACTOR, ADAMW, O_ACTIVATIONS, S_DUALPIPE, SGD, Layout, ModelSpec
from ..workload import finetune_of
from . import buffers as bufm
from . import distinct, finetune, state
from .activations import (
    inflight_microbatches,
    layer_activation_bytes,
    layer_recompute_transient_bytes,
    layer_terms,
)
from .buffers import logits_bytes
from .recompute import (
    bit,
    offload_share,
    offloaded_activations,
    offloaded_layers_bytes,
    stored_bytes,
    transient_bytes,
)
from .shapes import (
    act_element_bytes,
    pipeline_stages,
    tokens_per_rank,
)

__all__ = ["MemoryBreakdown", "memory_breakdown", "layer_activation_bytes",
           "layer_recompute_transient_bytes", "model_state_bytes_per_param",
           "adafactor_state_per_param", "logits_bytes", "inflight_microbatches",
           "stage_breakdowns", "most_loaded_total"]

# --- model state -------------------------------------------------------------------------------
# Bytes per parameter by precision code (fp32, fp16, bf16, fp8).
# fp8: bf16 weight + the fp8 copy Transformer Engine caches
_WEIGHT_B = np.array([4.0, 2.0, 2.0, 3.0])
_GRAD_B = np.array([4.0, 2.0, 2.0, 2.0])
_MASTER_B = np.array([0.0, 4.0, 4.0, 4.0])  # fp32 master copy kept by the optimizer when mixed


def adafactor_state_per_param(model: ModelSpec) -> float:
    """Adafactor second-moment elements per parameter: (rows + cols) per matrix, n per vector.

    Shazeer & Stern 2018 (arXiv 1804.04235), section 3: a factored estimate keeps one row and one
    column accumulator per matrix; no first moment (beta1 = 0, the paper's default).
    """
    h, q, kv = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head
    attn = (h + q) * 2 + (h + kv) * 2  # Wq, Wo, Wk, Wv
    mlp = model.mlp_matrices * (h + model.ffn)
    expert, norms = model.mlp_matrices * (h + model.expert_ffn), 2 * h
    dense_layers = model.layers - model.moe_layers
    moe_layer = attn + norms + (model.experts + model.shared_experts) * expert + (h + model.experts)
    emb = (model.vocab + h) * (1 if model.tied_embeddings else 2)
    state = dense_layers * (attn + mlp + norms) + model.moe_layers * moe_layer + emb + h
    return state / model.total_params()


def model_state_bytes_per_param(
    precision: Any, optimizer: Any, adafactor_state: float = 0.0, moment_bytes: Any = 4.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weight, gradient, optimizer) bytes per parameter, unsharded.

    ZeRO (arXiv 1910.02054) 3.1: mixed-precision Adam = 2 + 2 + 12 = 16 B/param.
    AdamW: master (4 when mixed) + m (4) + v (4); SGD: master + momentum (4);
    Adafactor: master + 4 * adafactor_state (see `adafactor_state_per_param`). The moments
    take `moment_bytes` each instead of 4 (2: BF16 moments, DeepSeek-V3 section 3.3.3: AdamW
    = 4 + 2 + 2 = 8 B/param of optimizer state); the master copy stays fp32.
    """
    p, o = np.asarray(precision, dtype=np.intp), np.asarray(optimizer, dtype=np.intp)
    per_opt = np.array([0.0, 0.0, 0.0])
    per_opt[ADAMW], per_opt[SGD], per_opt[ADAFACTOR] = 2.0, 1.0, adafactor_state
    return _WEIGHT_B[p], _GRAD_B[p], _MASTER_B[p] + per_opt[o] * moment_bytes


# --- the breakdown -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the most loaded GPU; `total` is the sum of the parts (`parts`: every field
    but `offloaded`, `zero3_saving`, `stage`, `host_traffic` (bytes per step over the host
    link) and the non-part lines after `stage`).

    `gathered` is what ZeRO-3 holds unsharded (the gathered layers and the root unit);
    `zero3_saving` is what its weight sharding saves on this GPU against ZeRO-2 (both 0 unless
    ZeRO-3 shards). When gathered > zero3_saving, ZeRO-3 uses more memory than ZeRO-2 here:
    the stage holds too few layers, or the shard group is too small, for sharding to pay.
    """

    weights: Any
    gradients: Any
    optimizer: Any
    activations: Any
    logits: Any
    gathered: Any
    grad_bucket: Any  # ZeRO-2/3: one layer's unsharded gradients before their reduce-scatter
    grad_accum: Any
    fp8_weights: Any  # FP8 weight copies cached for the step (Transformer Engine: + transpose)
    moe_tokens: Any  # MoE dispatch/combine token buffers of one layer
    ema: Any  # a parameter EMA on the GPU (fp32, sharded like the optimizer state)
    overhead: Any  # allocator_margin + runtime_context
    offloaded: Any  # on the CPU, not in total
    total: Any
    zero3_saving: Any  # not a part: weights ZeRO-3 saves against ZeRO-2 on this GPU
    stage: Any  # the most loaded pipeline rank: 0 = first, 1 = last, 2 = second (middle)
    allocator_margin: Any  # fragmentation * allocated (reserved, not allocated)
    runtime_context: Any  # CUDA context, workspaces, NCCL: outside the allocator
    allocated: Any  # the tensor parts - loss_overlap (torch.cuda.max_memory_allocated)
    reserved: Any  # the tensor parts + allocator_margin (torch.cuda.max_memory_reserved)
    # Fine-tuning (estimators/finetune.py), not parts: weights = base_weights + adapter_weights,
    # adapter_optimizer is within optimizer; tuned is True when the model is fine-tuned.
    base_weights: Any = 0.0
    adapter_weights: Any = 0.0
    adapter_optimizer: Any = 0.0
    tuned: Any = False
    host_traffic: Any = 0.0  # not a part: bytes per step over the host link (offload)
    # not a part: min(logits, the layer-backward working set), alive at different times: in
    # reserved (the freed logits' blocks stay cached), not in allocated (module docstring)
    loss_overlap: Any = 0.0

    def summary(self, unit: float = 1.0) -> dict[str, Any]:
        """JSON keys weights, gradients, optimizer, activations, other, total (parts sum to total).

        other = the buffer lines (`buffers`). Divide by `unit` (e.g. GiB); a single
        configuration gives Python floats.
        """
        other = sum(np.asarray(v) for v in self.buffer_lines().values())
        parts = {"weights": self.weights, "gradients": self.gradients,
                 "optimizer": self.optimizer, "activations": self.activations,
                 "other": other, "total": self.total}
        if np.any(np.asarray(self.tuned)):
            parts.update(base_weights=self.base_weights, adapter_weights=self.adapter_weights,
                         adapter_optimizer=self.adapter_optimizer)
        return {k: _plain(np.asarray(v) / unit) for k, v in parts.items()}

    def parts(self) -> dict[str, Any]:
        """All on-GPU parts (every field that sums to total)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_PARTS}

    def buffer_lines(self) -> dict[str, Any]:
        """The lines of `other`, in `buffers.BUFFER_LINES` order (they sum to `other`)."""
        return {k: getattr(self, k) for k in bufm.BUFFER_LINES}


_NOT_PARTS = {"offloaded", "total", "zero3_saving", "stage", "allocator_margin",
              "runtime_context", "allocated", "reserved", "base_weights", "adapter_weights",
              "adapter_optimizer", "tuned", "host_traffic", "loss_overlap"}


def _plain(x: np.ndarray) -> Any:
    return float(x) if x.ndim == 0 else x


CHUNK = 1 << 14  # configurations per block: keeps the temporaries in the CPU cache


def memory_breakdown(
    model: ModelSpec,
    layout: Layout,
    *,
    runtime_overhead_bytes: float,
    fragmentation: float,
    stacks: bufm.StackBuffers | None = None,
) -> MemoryBreakdown:
    """Per-GPU training memory of the most loaded GPU, for every configuration in `layout`.

    The first and last pipeline stages are both evaluated; for each configuration the one with
    the larger total is reported with its parts (they coincide when pp == 1).
    `runtime_overhead_bytes` and `fragmentation` are catalog constants with a source; `stacks`
    the catalog's [memory.STACK] buffers (`buffers.from_table`; None: `buffers.LEGACY`).
    Large grids are evaluated in blocks of CHUNK configurations (same arithmetic, same result;
    the temporaries then stay in cache, about 2x faster for a million configurations).
    """
    names = [f.name for f in fields(layout)]
    values = [np.asarray(getattr(layout, n)) for n in names]
    shape = np.broadcast(*values).shape
    size = int(np.prod(shape))
    kw: dict[str, Any] = dict(runtime_overhead_bytes=runtime_overhead_bytes,
                              fragmentation=fragmentation, stacks=stacks)
    if size <= CHUNK:
        return _block(model, layout, **kw)
    flat = {n: (v if v.ndim == 0 else np.broadcast_to(v, shape).reshape(-1))
            for n, v in zip(names, values, strict=True)}
    out: dict[str, np.ndarray] = {}
    for lo in range(0, size, CHUNK):
        part = Layout(**{n: (v if v.ndim == 0 else v[lo:lo + CHUNK]) for n, v in flat.items()})
        bd = _block(model, part, **kw)
        for f in fields(bd):
            arr = np.asarray(getattr(bd, f.name))
            if f.name not in out:
                out[f.name] = np.empty(size, dtype=arr.dtype)
            out[f.name][lo:lo + CHUNK] = arr
    return MemoryBreakdown(**{k: v.reshape(shape) for k, v in out.items()})


def most_loaded_total(model: ModelSpec, layout: Layout, *, runtime_overhead_bytes: float,
                      fragmentation: float, stacks: bufm.StackBuffers | None = None) -> Any:
    """`memory_breakdown(...).total` alone (the search needs no parts): the largest stage
    total, without selecting every part of the most loaded stage."""
    return functools.reduce(np.maximum, [d["total"] for d in _stage_dicts(
        model, layout, runtime_overhead_bytes=runtime_overhead_bytes,
        fragmentation=fragmentation, stacks=stacks, total_only=True)])


def stage_totals(model: ModelSpec, layout: Layout, *, runtime_overhead_bytes: float,
                 fragmentation: float, stacks: bufm.StackBuffers | None = None
                 ) -> tuple[dict[str, Any], ...]:
    """Of the first, the last and the second pipeline rank (as `stage_breakdowns`): the parts
    the total sums, the total, the offloaded bytes and the host traffic (no other part)."""
    return _stage_dicts(model, layout, runtime_overhead_bytes=runtime_overhead_bytes,
                        fragmentation=fragmentation, stacks=stacks, total_only=True)


def stage_breakdowns(model: ModelSpec, layout: Layout, *, runtime_overhead_bytes: float,
                     fragmentation: float, stacks: bufm.StackBuffers | None = None
                     ) -> tuple[MemoryBreakdown, ...]:
    """The breakdowns of a GPU of the first, the last and the second pipeline rank (stage codes
    0, 1, 2; the first and last are equal when pp == 1, the second holds no layer when
    pp < 3); `memory_breakdown` reports the largest."""
    dicts = _stage_dicts(model, layout, runtime_overhead_bytes=runtime_overhead_bytes,
                         fragmentation=fragmentation, stacks=stacks)
    shape = np.shape(np.asarray(sum(d["total"] for d in dicts)))
    return tuple(MemoryBreakdown(**{k: np.broadcast_to(v, shape) for k, v in d.items()},
                                 stage=np.full(shape, i, dtype=np.int8))
                 for i, d in enumerate(dicts))


def _block(model: ModelSpec, layout: Layout, *, runtime_overhead_bytes: float,
           fragmentation: float, stacks: bufm.StackBuffers | None = None) -> MemoryBreakdown:
    dicts = _stage_dicts(model, layout, runtime_overhead_bytes=runtime_overhead_bytes,
                         fragmentation=fragmentation, stacks=stacks)
    pick = np.argmax(np.stack(np.broadcast_arrays(*(d["total"] for d in dicts))), axis=0)
    shape = np.shape(pick)  # ties go to the first, then the last stage
    out = {k: np.broadcast_to(np.choose(pick, [np.broadcast_to(d[k], shape) for d in dicts]),
                              shape) for k in dicts[0]}
    return MemoryBreakdown(**out, stage=pick.astype(np.int8))


@dataclass(frozen=True)
class _PerLayer:
    """Activation bytes of one layer and micro-batch, and the head's, for a layout."""

    dense_stored: Any
    dense_transient: Any
    moe_stored: Any
    moe_transient: Any
    head: Any  # saved + transient logits bytes (compiled/in-place loss: e-byte logits only)
    loss_copy: Any  # one fp32 copy of the logits (4*s*b*V/t): the loss's upcast, by stack
    emb_mask: Any  # embedding dropout mask, per micro-batch
    moe_tokens: Any  # one MoE token buffer of a layer (tokens x top-k x hidden)


def _per_layer(model: ModelSpec, L: Layout, sb: dict[str, Any]) -> _PerLayer:
    tp, cp = np.asarray(L.tp), np.asarray(L.cp)
    rc = np.asarray(L.recompute, dtype=np.intp)
    kw = dict(seq_len=L.seq_len, micro_batch=L.micro_batch, tp=tp, cp=cp, sp=L.sp,
              precision=np.asarray(L.precision, dtype=np.intp))
    mods, every = L.recompute_modules, L.recompute_every
    stack_kw = dict(fp8_input_bytes=sb["fp8_input_bytes"], swiglu_saved=sb["swiglu_saved_ffn"],
                    fp8_cache=sb["fp8_act_cache"])
    dense = layer_terms(model, flash=L.flash, dropout=L.dropout, **kw, **stack_kw)
    dense_stored = stored_bytes(dense, rc, mods, every)
    dense_transient = transient_bytes(dense, rc, mods, every)
    moe_stored, moe_transient = dense_stored, dense_transient  # a dense model: the same layers
    if model.is_moe:
        moe = layer_terms(model, flash=L.flash, dropout=L.dropout, moe=True, **kw, **stack_kw)
        moe_stored = stored_bytes(moe, rc, mods, every, True)
        moe_transient = transient_bytes(moe, rc, mods, every, True)
    e, compiled = act_element_bytes(kw["precision"]), sb["compiled_loss"] | sb["inplace_loss"]
    saved, live = logits_bytes(model, loss_saved_bytes=np.where(compiled, e, 4.0), **kw)
    emb_mask = np.asarray(L.dropout) * tokens_per_rank(L.seq_len, L.micro_batch, cp) \
        * model.hidden / np.where(L.sp, tp, 1)
    return _PerLayer(dense_stored=dense_stored, dense_transient=dense_transient,
                     moe_stored=moe_stored, moe_transient=moe_transient,
                     head=saved + np.where(sb["inplace_loss"], 0.0, live),
                     loss_copy=np.where(compiled, 0.0, live * 4.0 / e),
                     emb_mask=emb_mask, moe_tokens=bufm.moe_token_bytes(
                         model, tokens=tokens_per_rank(L.seq_len, L.micro_batch, cp)
                         / np.where(L.sp, tp, 1), precision=kw["precision"]))


def _offload_acts(d: dict[str, Any], L: Layout, P: Any, m: Any, held: Any, stored: Any,
                  kept: Any, layer: Any) -> Any:
    """Activation offload of a rank (`recompute.offloaded_activations`; with offload_layers,
    the first ones of its layers, `recompute.offload_share`): the bytes leaving the GPU, added
    to `d`'s offloaded; each micro-batch's saved bytes of those layers go out and come back
    over the host link (`host_traffic`). Where no row has the activations' offload bit
    nothing leaves or moves (0: `d` unchanged, as adding zeros leaves it)."""
    if (not np.any(bit(L.offload, O_ACTIVATIONS))
            and np.shape(d["offloaded"]) == np.shape(d["host_traffic"]) == np.shape(kept)):
        return 0.0
    nl = P.dense_layers + P.moe_layers
    share = offload_share(L.offload_layers, nl)
    chosen = offloaded_layers_bytes(L.offload_layers, nl, held, stored, kept)
    gone = offloaded_activations(L.offload, layer, kept, chosen)
    d["offloaded"] = d["offloaded"] + gone
    # with offload_layers the layers cross the host link even when none is off at the peak
    moves = (gone > 0) | ((np.asarray(L.offload_layers) > 0) & bit(L.offload, O_ACTIVATIONS))
    d["host_traffic"] = d["host_traffic"] + np.where(moves, 2.0 * m * (stored * share), 0.0)
    return gone


def _stage_dicts(model: ModelSpec, L: Layout, *, runtime_overhead_bytes: float,
                 fragmentation: float, stacks: bufm.StackBuffers | None = None,
                 total_only: bool = False) -> tuple[dict[str, Any], ...]:
    """Every part of `MemoryBreakdown` (but `stage`) for the first, last and second rank
    (`total_only`: those the total sums, and the total)."""
    precision = np.asarray(L.precision, dtype=np.intp)
    m = np.asarray(L.microbatches, dtype=float)
    sbuf = stacks or bufm.LEGACY
    sb = sbuf.pick(L.stack)
    # the run's memory options (buffers.py), skipped where no stack takes them
    moments = sb["moment_bytes"] if any(b != 4.0 for b in sbuf.moment_bytes) else 4.0
    sb["any_ema"] = any(x != "none" for x in sbuf.ema)
    if not any(sbuf.fp8_act_cache):
        sb["fp8_act_cache"] = False
    wb, gb, ob = model_state_bytes_per_param(precision, L.optimizer,
                                             adafactor_state_per_param(model), moments)
    acts = distinct.once(lambda x: _per_layer(model, x, sb), L, distinct.PER_LAYER_READS, sb)
    ft = finetune_of(model)
    dual = np.asarray(L.schedule) == S_DUALPIPE
    out = []
    pp = np.asarray(L.pp)
    placed = distinct.once(lambda x: pipeline_stages(model, x.tp, x.pp, x.ep, x.vpp,  # (first,
        x.first_stage_layers, x.last_stage_layers), L, distinct.STAGE_READS, sb)  # last, second)
    shared = state.shared(L, wb, gb, ob, m, sb)  # the stages' common factors, computed once
    # the loss's fp32 tensors (saved log-softmax + copies) are one chunk's (buffers.py)
    head = acts.head + ((1.0 + sb["loss_fp32_copies"]) / sb["loss_chunks"] - 1.0) \
        * acts.loss_copy
    for P, rank, emb, last in ((placed[0], 0, 1.0, pp == 1), (placed[2], pp - 1, 0.0, True),
                               (placed[1], 1, 0.0, False)):
        d = bufm.dualpipe_copies(state.stage_state(P, shared, sb, not total_only), dual)
        stored = P.dense_layers * acts.dense_stored + P.moe_layers * acts.moe_stored
        dense, moe = P.dense_layers > 0, P.moe_layers > 0  # the stage holds such layers
        transient = np.maximum(np.where(dense, acts.dense_transient, 0.0),
                               np.where(moe, acts.moe_transient, 0.0))
        if ft is not None:  # fine-tuning: frozen base, adapters (estimators/finetune.py);
            # the middle rank counts as a later stage (an upper bound for 'freeze'); the parts
            # it does not model (FP8 copies, host traffic) stay those of full training
            ft_d, stored, transient = finetune.stage_parts(model, ft, P, L, (wb, gb, ob), stored,
                                                           transient, emb == 1.0, sb)
            d = {**d, **ft_d}
        d["moe_tokens"] = np.where(moe, acts.moe_tokens, 0.0) * sb["moe_token_buffers"]
        held = _inflight(dual, pp, L.vpp, m, rank)
        kept = held * (stored + emb * acts.emb_mask)
        d["logits"] = np.where(last, head, 0.0)
        layer = np.maximum(np.where(dense, acts.dense_stored, 0.0),
                           np.where(moe, acts.moe_stored, 0.0))
        d["activations"] = kept - _offload_acts(d, L, P, m, held, stored, kept, layer) \
            + transient
        out.append(_totals(d, transient, fragmentation, float(runtime_overhead_bytes),
                           total_only))
    return tuple(out)


def _totals(d: dict[str, Any], transient: Any, fragmentation: float, runtime: float,
            total_only: bool) -> dict[str, Any]:
    """A stage's parts d with its allocated, reserved and total bytes and the allocator's and
    runtime's overheads (`total_only`: the total alone, the runtime added as the number it
    is: the same values)."""
    tensors = sum(d[k] for k in _ALLOCATED)
    d["allocator_margin"] = fragmentation * tensors
    d["reserved"] = tensors + d["allocator_margin"]
    if total_only:
        d["total"] = d["reserved"] + runtime
        return d
    # the loss phase and the layer-backward phase peak apart (module docstring)
    d["loss_overlap"] = np.minimum(d["logits"], transient)
    d["allocated"] = tensors - d["loss_overlap"]
    d["runtime_context"] = np.full(np.shape(tensors), runtime)
    d["overhead"] = d["runtime_context"] + d["allocator_margin"]
    d["total"] = d["reserved"] + d["runtime_context"]
    return d


def _inflight(dual: np.ndarray, pp: Any, vpp: Any, m: Any, rank: Any) -> Any:
    """Micro-batches of activations rank `rank` holds: 1F1B's pp - rank (capped at m), and
    DualPipe's pp + 1 (`buffers.dualpipe_inflight`) where a row is DualPipe (none: 1F1B's
    alone, np.where's values)."""
    held = inflight_microbatches(pp, vpp, m, rank)
    if dual.any() or np.shape(held) != np.broadcast_shapes(dual.shape, np.shape(pp),
                                                           np.shape(m), np.shape(held)):
        held = np.where(dual, bufm.dualpipe_inflight(pp, m), held)
    return held


_ALLOCATED = ("weights", "gradients", "optimizer", "activations", "logits", "gathered",
              "grad_bucket", "grad_accum", "fp8_weights", "moe_tokens", "ema")

