"""Activation recompute modes and host offload as the training stacks run them (L3 helper).

Not an estimator: the one definition of what each mode keeps and repeats, which `memory` (the
bytes a layer saves) and `compute` (the forward FLOPs recompute repeats) both import, so they
cannot disagree. Codes are `spec.RECOMPUTE`, `spec.RECOMPUTE_MODULES` and `spec.OFFLOAD_PARTS`.

- full, every k-th layer (torchtitan `[activation_checkpoint] mode = "selective",
  selective_ac_option = "k"`: `layer_id % k == 0` is wrapped in full checkpointing;
  Megatron-LM `--recompute-method block --recompute-num-layers n` with n = layers/k per stage):
  a share 1/k of the layers keeps only its input and repeats its forward, the rest keep all.
- op (torchtitan `selective_ac_option = "op"`, torchtitan/models/llama3/infra/parallelize.py
  `_apply_op_sac`): inside each layer the outputs of matmuls, scaled-dot-product attention
  (with its log-sum-exp) and reduce-scatters are saved, except every second matmul
  (`mm_count % 2 == 0`); everything else (norms, rotary, activations and those matmuls) is
  recomputed. In a dense layer the matmuls run wq, wk, wv, wo, then w1, w3, w2 (SwiGLU) or fc1,
  fc2, so wq, wv, w1 and w2 (fc1) are saved and wk, wo, w3 (fc2) repeated. MoE experts run
  grouped GEMMs that the policy does not list; their tensors are taken as saved (an
  approximation) and only the attention matmuls are repeated in MoE layers.
- modules (Megatron-LM `--recompute-granularity selective --recompute-modules ...`,
  megatron/core/transformer/transformer_config.py): core_attn drops the attention core's saved
  tensors (what `selective` always did); layernorm drops the two norm outputs (the QKV and MLP
  inputs; CheckpointWithoutOutput recomputes them, 0 GEMM FLOPs); mlp checkpoints the dense MLP
  (keeps its input, repeats its forward); moe checkpoints the whole MoE layer (experts, router,
  shared experts); moe_act recomputes the experts' activation function, dropping its outputs
  (the fc2 input; unfused SwiGLU also silu(w1 x): fused SwiGLU 1 of its 3 ffn tensors,
  unfused 2 of 4, GELU 1 of 2), with no GEMM FLOPs; mla_up_proj (multi-head latent attention
  only; Megatron-Core MultiLatentAttention recompute_up_proj, the DeepSeek-V3 report's
  "recomputation of ... MLA up-projection", arXiv 2412.19437 section 3.2.3) drops Q, K and V
  and repeats the up-projections' forward (`mla_up_fwd_flops`); with layernorm as well, the
  latent RMSNorms too (`activations.mla_terms`).
- offload (a bitmask): optimizer (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840), params
  (ZeRO-Infinity offload_param, Rajbhandari et al. 2021, arXiv 2104.07857; FSDP CPUOffload),
  grads (ZeRO-Offload's gradient partitions), activations (Megatron-LM/NeMo activation offload:
  each layer's saved tensors leave for host memory after its forward and return for its
  backward; ACT_OFFLOAD_RESIDENT layers stay on the GPU). `Layout.offload_layers` = k > 0
  offloads only the first k layers of each pipeline rank (Megatron-Core cpu_offloading_num_layers,
  Megatron-LM d98e8a64dd: transformer_block.py L308 passes it to TransformerEngine's
  get_cpu_offload_context, whose SynchronizedGroupOffloadHandler.tensor_push offloads the saved
  tensors of layer groups with index < num_offload_group, counted per TransformerBlock forward,
  i.e. per rank; transformer_config.py L1885 requires 0 <= k < num_layers, so the last layer
  always stays; Megatron-Bridge scripts/performance/utils/helpers.py sets cpu_offloading with
  weights not offloaded). The peak is at the start of the backward, where Transformer Engine's
  default synchronizer (DefaultOffloadSynchronizer, TE >= 2.10; v2.14.1 as Megatron-Bridge
  v0.4.2 pins) keeps at most L - k layers on the GPU: all k layers' bytes are off the GPU then
  (`offloaded_layers_bytes`; k = L - 1 still leaves the ACT_OFFLOAD_RESIDENT two), while all k
  layers cross the host link both ways (`offload_share`). TE's earlier handler
  (AsyncDoubleBufferGroupOffloadHandler, before 2.10: the reload of group k - 1 issued at the
  last layer, so k - 1 layers off the GPU at the peak) is not modelled per release.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import (
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
    R_FULL,
    R_MODULES,
    R_OP,
    RECOMPUTE_MODULES,
    TORCHTITAN,
    ModelSpec,
)

__all__ = ["ACT_OFFLOAD_RESIDENT", "OFFLOAD_OVERLAP", "bit", "full_share", "host_traffic",
           "mla_up_fwd_flops", "module_bits", "op_saved_widths", "op_recompute_fwd_flops",
           "offload_bits", "offload_share", "offloaded_activations", "offloaded_layers_bytes",
           "stored_bytes", "tp_gathers_repeated", "transient_bytes"]

# Activation offload keeps the layer being computed and the one whose transfer is in flight
# on the GPU (Megatron-LM's cpu_offloading double buffer; our reading, an assumption).
ACT_OFFLOAD_RESIDENT = 2.0
# Share of the compute that hides host-link (PCIe) transfers: ZeRO-Offload overlaps the
# gradient copies with backward and ZeRO-Infinity prefetches parameters (arXiv 2104.07857,
# section 6.2); an assumed constant, as comm.ZERO3_OVERLAP.
OFFLOAD_OVERLAP = 0.8


def bit(x: Any, mask: int) -> Any:
    """Where the bitmask x (bool, int or float array) has `mask` set."""
    return (np.asarray(x).astype(np.int64) & mask) != 0


def offload_bits(offload: Any) -> dict[str, Any]:
    """The offload bitmask as one bool array per part (True = 1 = the optimizer)."""
    return {"optimizer": bit(offload, O_OPTIMIZER), "params": bit(offload, O_PARAMS),
            "grads": bit(offload, O_GRADS), "activations": bit(offload, O_ACTIVATIONS)}


def module_bits(recompute: Any, modules: Any) -> dict[str, Any]:
    """Which Megatron-LM modules are recomputed (all False unless recompute = modules)."""
    on = np.asarray(recompute) == R_MODULES
    masks = (M_CORE_ATTN, M_MLP, M_MOE, M_MOE_ACT, M_LAYERNORM, M_MLA_UP_PROJ)
    return {name: on & bit(modules, m) for name, m in zip(RECOMPUTE_MODULES, masks, strict=True)}


def full_share(recompute: Any, every: Any) -> Any:
    """Share of the layers that full recompute checkpoints: 1/k (0 in other modes)."""
    return np.where(np.asarray(recompute) == R_FULL, 1.0 / np.maximum(np.asarray(every), 1), 0.0)


def _mm_widths(model: ModelSpec) -> list[tuple[str, int]]:
    """Output width of each matmul of a dense layer, in torchtitan's call order."""
    h, q, kv = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head
    attn = [("wq", q), ("wk", kv), ("wv", kv), ("wo", h)]
    if model.mlp == "swiglu":
        return attn + [("w1", model.ffn), ("w3", model.ffn), ("w2", h)]
    return attn + [("fc1", model.ffn), ("fc2", h)]


def _mm_inputs(model: ModelSpec) -> dict[str, int]:
    h, q = model.hidden, model.heads * model.d_head
    return {"wq": h, "wk": h, "wv": h, "wo": q, "w1": h, "w3": h, "w2": model.ffn, "fc1": h,
            "fc2": model.ffn}


def op_saved_widths(model: ModelSpec) -> tuple[float, float]:
    """(attention-part, MLP-part) elements per token that op-SAC saves from matmul outputs:
    the 1st, 3rd, 5th, ... matmul of the layer (torchtitan keeps every other one)."""
    attn = mlp = 0.0
    for i, (name, width) in enumerate(_mm_widths(model)):
        if i % 2 == 0:
            if name in ("wq", "wk", "wv", "wo"):
                attn += width
            else:
                mlp += width
    return attn, mlp


def op_bytes(model: ModelSpec, esb: Any, t: Any, t_seq: Any, stats: Any, mlp: Any,
             moe: bool) -> Any:
    """Bytes one layer keeps under op-SAC: its input (e s b h, /t with SP), every other matmul
    output and the attention output (/t), the flash log-sum-exp `stats`; MoE experts keep
    their `mlp` tensors. `esb` = element bytes x tokens of the micro-batch on this rank."""
    attn_mm, mlp_mm = op_saved_widths(model)
    q = model.heads * model.d_head
    return (esb * model.hidden / t_seq + esb * (attn_mm + q) / t + stats
            + (mlp if moe else esb * mlp_mm / t))


def op_recompute_fwd_flops(model: ModelSpec) -> float:
    """Forward FLOPs per token, all layers, that op-SAC repeats: 2 k n for every matmul it
    does not save (attention ones in every layer, MLP ones in dense layers only)."""
    ins = _mm_inputs(model)
    attn = mlp = 0.0
    for i, (name, width) in enumerate(_mm_widths(model)):
        if i % 2 == 1:
            f = 2.0 * ins[name] * width
            if name in ("wq", "wk", "wv", "wo"):
                attn += f
            else:
                mlp += f
    dense_layers = model.layers - model.moe_layers
    return model.layers * attn + dense_layers * mlp


def mla_up_fwd_flops(model: ModelSpec) -> float:
    """Forward FLOPs per token, all layers, that mla_up_proj repeats: the query and KV
    up-projections, 2 x q_lora_rank x heads x (d_head + rope) + 2 x kv_lora_rank x heads x
    (d_head + v_head_dim) per layer (0 without MLA; without a query latent the query
    projection from the hidden state, hidden x heads x (d_head + rope))."""
    if not model.is_mla:
        return 0.0
    qk = model.heads * (model.d_head + model.rope_head_dim)
    kv = model.heads * (model.d_head + (model.v_head_dim or model.d_head))
    q_in = model.q_lora_rank or model.hidden
    return model.layers * 2.0 * (q_in * qk + model.kv_lora_rank * kv)


def is_op(recompute: Any) -> Any:
    return np.asarray(recompute) == R_OP


def tp_gathers_repeated(recompute: Any, stack: Any) -> Any:
    """Tensor-parallel all-reduce equivalents per layer and micro-batch that the backward
    repeats because the stack keeps no sequence-parallel all-gather's output: 1.0 (the layer's
    2 all-gathers, each half a ring all-reduce) under torchtitan's per-op SAC, whose save list
    (torchtitan 820504e, models/llama3/parallelize_llama.py `_save_list`) holds mm, SDPA,
    reduce_scatter_tensor and max but no all_gather (torchtitan's TP always runs sequence
    parallel; `op_bytes` keeps only the sharded layer input); else 0.0. Python ints give a
    float, arrays an array. Megatron-Core's re-gather is not counted (docs/calibration.md)."""
    return ((stack == TORCHTITAN) & (recompute == R_OP)) * 1.0


def stored_bytes(acts: Any, rc: Any, modules: Any = 1, every: Any = 1,
            moe: bool = False) -> Any:
    """Bytes one layer keeps under each recompute code (`spec.RECOMPUTE`): full checkpoints
    a share 1/k of the layers (`recompute.full_share`); modules drop what each Megatron-LM
    module recomputes (`recompute.module_bits`)."""
    rc = np.asarray(rc, dtype=np.intp)
    k = full_share(rc, every)
    full = k * acts.full + (1.0 - k) * acts.none
    mb = module_bits(rc, modules)
    drop_mlp = mb["moe"] if moe else mb["mlp"]
    mods = (acts.none - mb["core_attn"] * (acts.none - acts.selective)
            - mb["layernorm"] * acts.norm_out - drop_mlp * acts.mlp
            - ((mb["moe_act"] & ~drop_mlp) * acts.act_out if moe else 0.0))
    if np.any(acts.mla_up):  # an MLA model (`activations.mla_terms`)
        mods = (mods - mb["mla_up_proj"] * acts.mla_up
                - (mb["mla_up_proj"] & mb["layernorm"]) * acts.mla_norm)
    return np.choose(rc, [acts.none, acts.selective, full, acts.op, mods])


def transient_bytes(acts: Any, rc: Any, modules: Any = 1, every: Any = 1,
                         moe: bool = False) -> Any:
    """full: the layer's complete activations minus its stored input (the input is reused);
    selective: the recomputed attention scores (non-flash only); op and modules: what the
    layer recomputes (all it saves without recompute minus what it keeps); none: nothing."""
    rc = np.asarray(rc, dtype=np.intp)
    return np.choose(rc, [0.0, acts.none - acts.selective, acts.none - acts.full,
                          np.maximum(acts.none - acts.op, 0.0),
                          acts.none - stored_bytes(acts, rc, modules, every, moe)])


def offload_share(offload_layers: Any, stage_layers: Any) -> Any:
    """Share of a rank's decoder layers whose activations go to host memory: the first
    `offload_layers` of its `stage_layers` (0 = every layer, share 1)."""
    n = np.asarray(offload_layers, dtype=float)
    per = np.minimum(n, stage_layers) / np.maximum(stage_layers, 1.0)
    return np.where(n > 0, per, 1.0)


def offloaded_layers_bytes(offload_layers: Any, stage_layers: Any, held: Any, stored: Any,
                           kept: Any) -> Any:
    """At most how many of the `kept` bytes activation offload holds on the host: with
    offload_layers = k > 0, the first k layers of each of the `held` in-flight micro-batches
    (`stored` bytes a micro-batch over `stage_layers` layers); with k = 0 (every layer), all
    `kept`. Transformer Engine's default synchronizer (Megatron-Core's cpu_offloading_num_layers
    goes to its get_cpu_offload_context) frees layer i's GPU copy before layer L - k + i runs
    forward and starts reloading it at layer L - 1 - k + i's backward step, once layer
    L - k + i's activations are freed, so at most L - k layers' activations are on the GPU at
    any time, the peak (the backward's start) included: NVIDIA/TransformerEngine
    transformer_engine/pytorch/cpu_offload.py DefaultOffloadSynchronizer
    (_init_offload_synchronization_dicts, fwd_step, bwd_step), lines 600-645 at v2.14.1
    (366798ef8, the version Megatron-Bridge v0.4.2 / NeMo 26.04.01 pins): "peak memory usage
    of saving activations is (num_layers - num_offloaded_layers) * T"."""
    n = np.asarray(offload_layers, dtype=float)
    part = stored * held * np.minimum(n, stage_layers) / np.maximum(stage_layers, 1.0)
    return np.where(n > 0, part, kept)


def offloaded_activations(offload: Any, layer_bytes: Any, kept: Any, chosen: Any = None) -> Any:
    """Saved activation bytes that activation offload moves to host memory: all `kept` but
    ACT_OFFLOAD_RESIDENT layers of `layer_bytes`; at most `chosen` (`offloaded_layers_bytes`;
    None = no limit)."""
    resident = np.minimum(ACT_OFFLOAD_RESIDENT * layer_bytes, kept)
    gone = kept - resident if chosen is None else np.minimum(chosen, kept - resident)
    return np.where(offload_bits(offload)["activations"], gone, 0.0)


def offload_state(offload: Any, zero: Any, m: Any, *, weights: Any, grads: Any, accum: Any,
                  opt: Any, opt_grads: Any, opt_weights: Any) -> dict[str, Any]:
    """GPU bytes of weights, gradients (+ fp32 accumulation) and optimizer state, the bytes
    offloaded to the host, and the host traffic per step, under the offload bitmask. Params
    move only under ZeRO-3 and gradients under ZeRO-2/3 (`rules.py` refuses the others)."""
    return offload_parts(offload_masks(offload, zero), m, weights=weights, grads=grads,
                         accum=accum, opt=opt, opt_grads=opt_grads, opt_weights=opt_weights)


def offload_masks(offload: Any, zero: Any) -> dict[str, Any]:
    """The offload bits that take effect under the ZeRO stage: params only under ZeRO-3,
    gradients only under ZeRO-2/3 (`rules.py` refuses the others)."""
    zero = np.asarray(zero)
    return {k: v & (zero >= need) for (k, v), need in
            zip(offload_bits(offload).items(), (0, 3, 2, 0), strict=True)}


def offload_parts(on: dict[str, Any], m: Any, *, weights: Any, grads: Any, accum: Any,
                  opt: Any, opt_grads: Any, opt_weights: Any) -> dict[str, Any]:
    """`offload_state` with its masks `on` (what is offloaded, after the ZeRO stage's rule)
    given: what stays on the GPU, what is offloaded and the host traffic per step."""
    return dict(weights=np.where(on["params"], 0.0, weights),
                gradients=np.where(on["grads"], 0.0, grads),
                optimizer=np.where(on["optimizer"], 0.0, opt),
                grad_accum=np.where(on["grads"], 0.0, accum),
                offloaded=(np.where(on["optimizer"], opt, 0.0)
                           + np.where(on["params"], weights, 0.0)
                           + np.where(on["grads"], grads + accum, 0.0)),
                host_traffic=host_traffic(on, m, weights, grads, opt_grads, opt_weights))


def host_traffic(on: dict[str, Any], m: Any, weights: Any, grad_shard: Any, opt_grads: Any,
                  opt_weights: Any) -> Any:
    """Bytes per step one GPU moves over its host link for the offloaded model state:
    parameters fetched for every micro-batch's forward and backward (ZeRO-Infinity); gradient
    shards sent every micro-batch (offloaded gradients accumulate on the host) or, with the
    optimizer alone offloaded, once per step; the updated 16-bit weights sent back once."""
    params = np.where(on["params"], 2.0 * m * weights, 0.0)
    grads = np.where(on["grads"], m * grad_shard, np.where(on["optimizer"], opt_grads, 0.0))
    back = np.where(on["optimizer"] & ~on["params"], opt_weights, 0.0)
    return params + grads + back
