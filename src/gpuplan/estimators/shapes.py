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
- Layers per pipeline stage (`stage_layers`): when pp * vpp divides the layers, each stage holds
  layers / pp (Megatron-LM's default). Otherwise the split is Megatron-LM's
  `--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split` (the
  embedding and the loss each count as one layer; Megatron Bridge's Llama 3.1 405B and Qwen3
  235B recipes split 126 + 2 and 94 + 2 this way) with torchtitan's rule for a remainder
  (`generate_llm_fqn_per_model_part`: the first virtual stages get one more): the pp * vpp
  virtual stages share layers + 2 units, virtual stage v goes to rank v mod pp, and the first
  rank gives one unit to the embedding, the last one to the loss. Explicit first/last stage
  sizes (Megatron-LM's `--decoder-first-pipeline-num-layers` / `--decoder-last-...`) leave the
  rest to the other stages, spread evenly with any remainder on the earlier ones. The estimators
  see three ranks: the first, the second (the busiest middle stage: the most layers and the
  most micro-batches in flight of the middle ones; no layers when pp < 3) and the last.
- Activation element size: 4 B in fp32, 2 B otherwise (FP8 recipes keep 16-bit activations
  outside the GEMM inputs; see `estimators/memory.py`).
- ZeRO shard group: dp * cp (Megatron-LM's data-parallel group with context parallelism, whose
  ranks hold the same weights); expert parameters live on dp * cp / ep ranks.
"""

from __future__ import annotations

import functools
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
    "pipeline_stages",
    "stage_layers",
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
    """Mean transformer layers per pipeline stage: layers / pp (`stage_layers` for each)."""
    return model.layers / np.asarray(pp)


def _default_split(L: int, pp: Any, vpp: Any) -> tuple[Any, Any, Any]:
    """Decoder layers on ranks 0, 1 and pp-1 under the default split (module docstring):
    even when pp*vpp divides L, else L + 2 units over pp*vpp virtual stages, remainder first;
    rank k holds virtual stages k, k+pp, ...: vpp*q + clip(ceil((r - k)/pp), 0, vpp) units."""
    S = np.maximum(pp * vpp, 1)
    q, r = (L + 2) // S, (L + 2) % S
    units = [vpp * q + np.clip(-((k - r) // pp), 0, vpp) for k in (0, 1, pp - 1)]
    even = L // np.maximum(pp, 1)
    divides = L % S == 0
    one = pp == 1  # the one rank holds the embedding and the loss
    return (np.where(divides, even, units[0] - 1 - one), np.where(divides, even, units[1]),
            np.where(divides, even, units[2] - 1 - one))


def _explicit_split(L: int, pp: Any, first: Any, last: Any) -> tuple[Any, Any, Any]:
    """Ranks 0, 1, pp-1 when first/last are given (0 = not given): the other stages share the
    rest, base = rest // others, the earlier ones one more while the remainder lasts."""
    kf, kl = (first > 0) * 1, (last > 0) * 1
    others = np.maximum(pp - kf - kl, 1)
    rest = L - first - last
    base, rem = rest // others, rest % others

    def other(j: Any) -> Any:
        return base + (j < rem)

    return (np.where(kf > 0, first, other(0)), other(1 - kf),
            np.where(kl > 0, last, other(others - 1)))


def stage_layers(model: ModelSpec, pp: Any, vpp: Any = 1, first: Any = 0,
                 last: Any = 0) -> tuple[Any, Any, Any]:
    """Decoder layers (floats) on the first rank, the second rank (the busiest middle stage;
    0 when pp < 3) and the last rank; with pp = 1 the first and the last are the one rank.
    `first`/`last`: explicit sizes (0 = the default split of the module docstring)."""
    pp, vpp = np.asarray(pp), np.asarray(vpp)
    first, last = np.asarray(first), np.asarray(last)
    if first.ndim == last.ndim == 0 and first == 0 and last == 0:  # the default split alone
        f, mid, la = _default_lookup(model.layers, pp, vpp)
    else:
        d = _default_split(model.layers, pp, vpp)
        e = _explicit_split(model.layers, pp, first, last)
        explicit = (first > 0) | (last > 0)
        f, mid, la = (np.where(explicit, x, y) for x, y in zip(e, d, strict=True))
    f, mid, la = (np.asarray(x, dtype=float) for x in (f, mid, la))
    return f, np.where(pp >= 3, mid, 0.0), la


LOOKUP_MAX = 1 << 14  # (pp, vpp) table entries worth building for a large grid


def _default_lookup(L: int, pp: Any, vpp: Any) -> tuple[Any, Any, Any]:
    """`_default_split`, read from a table of every (pp, vpp) up to the grid's largest when the
    grid is large and that table small: the same numbers, ~10x faster on a million layouts."""
    if pp.size + vpp.size < 4096 or min(pp.min(), vpp.min()) < 1:
        return _default_split(L, pp, vpp)
    P, V = int(pp.max()), int(vpp.max())
    if (P + 1) * (V + 1) > LOOKUP_MAX:
        return _default_split(L, pp, vpp)
    table = _default_split(L, *np.meshgrid(np.arange(1, P + 1), np.arange(1, V + 1),
                                           indexing="ij"))
    i, j = pp.astype(np.intp) - 1, vpp.astype(np.intp) - 1
    return tuple(t[i, j] for t in table)  # type: ignore[return-value]


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


def pipeline_stages(model: ModelSpec, tp: Any, pp: Any, ep: Any, vpp: Any = 1, first: Any = 0,
                    last: Any = 0) -> tuple[StageParams, StageParams, StageParams]:
    """Parameters per GPU on the first, the second (busiest middle) and the last rank, their
    layers from `stage_layers` (Megatron-LM placement; layers taken in model order, so the
    dense layers of an MoE model sit on the first rank; with vpp > 1 an approximation)."""
    tp, pp, ep = np.asarray(tp), np.asarray(pp), np.asarray(ep)
    attn = _attention_per_rank(model, tp)
    mlp = model.dense_mlp_params() / tp
    n = stage_layers(model, pp, vpp, first, last)
    emb, head = _roots(model, tp, pp)
    roots = (emb, 0.0, head)
    if not model.is_moe:
        return tuple(  # type: ignore[return-value]
            StageParams(dense=lay * (attn + mlp) + r, expert=0.0, unit=attn + mlp,
                        unit_expert=0.0, root=r, dense_layers=lay, moe_layers=0.0)
            for lay, r in zip(n, roots, strict=True))
    start = (0.0, n[0], model.layers - n[2])  # first layer index of each rank's layers
    experts = (model.experts / ep) * model.expert_params() / tp
    other = model.shared_experts * model.expert_params() / tp + model.hidden * model.experts
    out = []
    for lay, a, r in zip(n, start, roots, strict=True):
        nm = lay - np.clip(model.dense_layers - a, 0, lay)  # dense layers come first
        nd = lay - nm
        moe_wins = (nm > 0) & ((nd == 0) | (experts + other >= mlp))
        unit = attn + np.where(moe_wins, experts + other, mlp)
        out.append(StageParams(dense=lay * attn + nd * mlp + nm * other + r, expert=nm * experts,
                               unit=unit, unit_expert=np.where(moe_wins, experts, 0.0), root=r,
                               dense_layers=nd, moe_layers=nm))
    return out[0], out[1], out[2]


def stages(model: ModelSpec, tp: Any, pp: Any, ep: Any) -> tuple[StageParams, StageParams]:
    """Parameters per GPU on the first and the last pipeline stage, default split."""
    f, _, la = pipeline_stages(model, tp, pp, ep)
    return f, la


def params_per_gpu(model: ModelSpec, tp: Any, pp: Any, ep: Any) -> Any:
    """Parameters on one GPU of the stage that holds the most (before ZeRO sharding)."""
    return most_params(*pipeline_stages(model, tp, pp, ep))


def most_params(*placed: StageParams) -> Any:
    """Parameters on one GPU of the busiest of the given stages (before ZeRO)."""
    return functools.reduce(np.maximum, [P.total for P in placed])


def sharded_params(P: StageParams, dp: Any, cp: Any, ep: Any, sharded: Any,
                   group: Any = 0) -> Any:
    """Parameters per GPU of stage P whose state ZeRO shards where `sharded` is true: dense
    parameters over dp*cp (or the HSDP shard group), routed experts over dp*cp/ep (or
    group/ep); unsharded elsewhere."""
    sharded = np.asarray(sharded, bool)
    return params_over(P, np.where(sharded, shard_group(dp, cp, group), 1.0),
                       np.where(sharded, expert_shard_group(dp, cp, ep, group), 1.0))


def params_over(P: StageParams, dense_div: Any, expert_div: Any) -> Any:
    """Parameters per GPU of stage P with dense parameters split dense_div ways and routed
    experts expert_div ways (`sharded_params` with its divisors given)."""
    return P.dense / dense_div + P.expert / expert_div
