"""Derived sizes that several estimators share (L3, below memory, compute, comm and timing).

Not an estimator: no bytes-per-second, no seconds, only what a layout puts on one GPU. Each
quantity has its one definition here; `memory` and `timing` import it, so they cannot disagree.
(The number of micro-batches per step is `spec.Layout.microbatches`.)

- Parameters per GPU of a pipeline stage (Megatron-LM placement; Shoeybi et al. 2019, arXiv
  1909.08053; Narayanan et al. 2021, arXiv 2104.04473): layers / pp transformer layers per
  stage, attention and MLP matrices split by tp, norms and the router replicated across TP,
  KV heads split by tp (or one head replicated when tp > kv_heads), routed experts split over
  ep and (expert tensor parallel = tp) by tp. The first stage holds the vocabulary-parallel
  input embedding (vocab * h / tp), the last stage the final norm and the LM head; a tied
  embedding is copied onto the last stage when pp > 1 (Megatron-LM keeps a copy and
  all-reduces their gradients), so it is counted once per stage that holds it. With pp = 1
  the one stage holds the embedding and the head (once when tied) and the final norm.
- Activation element size: 4 B in fp32, 2 B otherwise (FP8 recipes keep 16-bit activations
  outside the GEMM inputs; see `estimators/memory.py`).
- ZeRO shard group: dp * cp (Megatron-LM's data-parallel group with context parallelism, whose
  ranks hold the same weights); expert parameters live on dp * cp / ep ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import ModelSpec

__all__ = [
    "ACT_BYTES",
    "StageParams",
    "act_element_bytes",
    "expert_shard_group",
    "hidden_activation_bytes",
    "kv_width_per_rank",
    "layers_per_stage",
    "most_params",
    "params_per_gpu",
    "shard_group",
    "sharded_params",
    "stages",
    "tokens_per_rank",
]

# Activation element size by precision code (fp32, fp16, bf16, fp8).
ACT_BYTES = np.array([4.0, 2.0, 2.0, 2.0])


def act_element_bytes(precision: Any) -> Any:
    """Bytes per activation element at each precision code (fp8 counted as 16 bits)."""
    return ACT_BYTES[np.asarray(precision, dtype=np.intp)]


def tokens_per_rank(seq_len: Any, micro_batch: Any, cp: Any) -> Any:
    """Tokens of one micro-batch on one context-parallel rank: s * b / cp."""
    return np.asarray(seq_len) * np.asarray(micro_batch) / np.asarray(cp)


def hidden_activation_bytes(model: ModelSpec, *, seq_len: Any, micro_batch: Any, cp: Any,
                            precision: Any) -> Any:
    """One (s/cp x b x h) activation: what a layer boundary, a TP collective or a full-recompute
    checkpoint holds before any TP/SP split: e * s * b * h / cp."""
    return act_element_bytes(precision) * tokens_per_rank(seq_len, micro_batch, cp) * model.hidden


def kv_width_per_rank(model: ModelSpec, tp: Any) -> Any:
    """KV heads per TP rank * head_dim: split by tp, or one replicated head when tp > kv_heads."""
    return model.d_head * np.maximum(model.kv_heads / np.asarray(tp), 1.0)


def layers_per_stage(model: ModelSpec, pp: Any) -> Any:
    """Transformer layers on one pipeline stage (pp divides the layers: `Layout` rules)."""
    return model.layers / np.asarray(pp)


def shard_group(dp: Any, cp: Any, group: Any = 0) -> Any:
    """Ranks that shard ZeRO state of the dense parameters: dp * cp, or the HSDP shard group
    `group` when it is set (> 0: shard within it, replicate across the dp*cp/group groups;
    Zhao et al. 2023, PyTorch FSDP, arXiv 2304.11277, section 3.2.2 hybrid sharding)."""
    g = np.asarray(group)
    return np.where(g > 0, g, np.asarray(dp) * np.asarray(cp))


def expert_shard_group(dp: Any, cp: Any, ep: Any, group: Any = 0) -> Any:
    """Ranks that shard ZeRO state of the routed experts: dp * cp / ep; with an HSDP shard
    group, group / ep (at least 1: a group smaller than ep leaves experts unsharded)."""
    return np.maximum(shard_group(dp, cp, group) / np.asarray(ep), 1.0)


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage (TP-sharded, before ZeRO), split for sharding."""

    dense: Any  # replicated over dp*cp (attention, dense MLP, norms, router, embeddings)
    expert: Any  # replicated over dp*cp/ep (routed experts)
    unit: Any  # the stage's largest layer (a ZeRO-3 gather unit)
    unit_expert: Any  # of which routed experts (0 for a dense layer)
    root: Any  # embeddings / final norm / head on this stage (the FSDP root unit)
    dense_layers: Any
    moe_layers: Any

    @property
    def total(self) -> Any:
        return self.dense + self.expert


def _attention_per_rank(model: ModelSpec, tp: Any) -> Any:
    """Attention weights and the layer's norms per TP rank. Wq, Wo split by tp; Wk, Wv per KV
    head. MLA (DeepSeek-V2): all attention matrices taken as split by tp (its small
    down-projections are replicated in Megatron-LM: an under-count of < 1% of a layer)."""
    if model.is_mla:
        return model.attention_params_per_layer() / tp + model.norm_params_per_layer()
    h, q = model.hidden, model.heads * model.d_head
    return 2 * h * q / tp + 2 * h * kv_width_per_rank(model, tp) + model.norm_params_per_layer()


def _roots(model: ModelSpec, tp: Any, pp: Any) -> tuple[Any, Any]:
    """Embedding / head / final-norm parameters per GPU on the first and the last stage."""
    h = model.hidden
    single = model.embedding_params() / tp + h  # pp == 1: embedding and head (once if tied)
    emb = model.vocab * h / tp
    return np.where(pp == 1, single, emb), np.where(pp == 1, single, emb + h)


def stages(model: ModelSpec, tp: Any, pp: Any, ep: Any) -> tuple[StageParams, StageParams]:
    """Parameters per GPU on the first and the last pipeline stage (Megatron-LM placement)."""
    tp, pp, ep = np.asarray(tp), np.asarray(pp), np.asarray(ep)
    attn = _attention_per_rank(model, tp)
    mlp = model.dense_mlp_params() / tp
    lps = layers_per_stage(model, pp)
    roots = _roots(model, tp, pp)
    if not model.is_moe:
        return tuple(  # type: ignore[return-value]
            StageParams(dense=lps * (attn + mlp) + r, expert=0.0, unit=attn + mlp,
                        unit_expert=0.0, root=r, dense_layers=lps, moe_layers=0.0)
            for r in roots)
    experts = (model.experts / ep) * model.expert_params() / tp
    other = model.shared_experts * model.expert_params() / tp + model.hidden * model.experts
    n_moe = (np.clip(lps - model.dense_layers, 0, lps),  # dense layers come first
             np.minimum(lps, model.moe_layers))
    out = []
    for nm, r in zip(n_moe, roots, strict=True):
        nd = lps - nm
        moe_wins = (nm > 0) & ((nd == 0) | (experts + other >= mlp))
        unit = attn + np.where(moe_wins, experts + other, mlp)
        out.append(StageParams(dense=lps * attn + nd * mlp + nm * other + r, expert=nm * experts,
                               unit=unit, unit_expert=np.where(moe_wins, experts, 0.0), root=r,
                               dense_layers=nd, moe_layers=nm))
    return out[0], out[1]


def params_per_gpu(model: ModelSpec, tp: Any, pp: Any, ep: Any) -> Any:
    """Parameters on one GPU of the stage that holds the most (before ZeRO sharding)."""
    return most_params(*stages(model, tp, pp, ep))


def most_params(first: StageParams, last: StageParams) -> Any:
    """Parameters on one GPU of the busier of the first and last stages (before ZeRO)."""
    return np.maximum(first.total, last.total)


def sharded_params(P: StageParams, dp: Any, cp: Any, ep: Any, sharded: Any,
                   group: Any = 0) -> Any:
    """Parameters per GPU of stage P whose state ZeRO shards where `sharded` is true: dense
    parameters over dp*cp (or the HSDP shard group), routed experts over dp*cp/ep (or
    group/ep); unsharded elsewhere."""
    sharded = np.asarray(sharded, bool)
    dense = np.where(sharded, shard_group(dp, cp, group), 1.0)
    expert = np.where(sharded, expert_shard_group(dp, cp, ep, group), 1.0)
    return P.dense / dense + P.expert / expert
