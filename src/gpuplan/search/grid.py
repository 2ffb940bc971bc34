"""The candidate grid: GPU count x TP x PP x CP x EP x ZeRO x micro-batch x recompute x precision,
as flat numpy arrays (L4). One call per physics group; no Python loop per candidate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec import PRECISIONS, ModelSpec

TP_CHOICES = (1, 2, 4, 8)
ZERO_CHOICES = (0, 1, 2, 3)
MICRO_BATCH_CHOICES = (1, 2, 4, 8)
RECOMPUTE_CHOICES = (0, 1, 2)
MAX_PP = 32


@dataclass(frozen=True)
class Axes:
    """The values each axis takes for one model (shared by every physics group)."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    zero: tuple[int, ...]
    micro_batch: tuple[int, ...]
    recompute: tuple[int, ...]
    precision: tuple[int, ...]


def model_axes(model: ModelSpec, seq_len: int, *, precisions: tuple[str, ...] = ("bf16", "fp8"),
               recompute: tuple[int, ...] = RECOMPUTE_CHOICES,
               zero: tuple[int, ...] = ZERO_CHOICES) -> Axes:
    tp = tuple(t for t in TP_CHOICES if model.heads % t == 0)
    pp = tuple(p for p in range(1, min(MAX_PP, model.layers) + 1) if model.layers % p == 0)
    cp = (1, 2, 4, 8) if seq_len >= 32768 else ((1, 2) if seq_len >= 16384 else (1,))
    ep: tuple[int, ...] = (1,)
    if model.is_moe:
        ep = tuple(e for e in (1, 2, 4, 8, 16, 32, 64) if model.experts % e == 0)
    prec = tuple(PRECISIONS.index(p) for p in precisions)
    return Axes(tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, micro_batch=MICRO_BATCH_CHOICES,
                recompute=recompute, precision=prec)


def gpu_counts(gpus_per_node: int, cap: int, at_least: int = 1) -> np.ndarray:
    """Power-of-two multiples of the node size from `at_least` up to `cap` (and one node)."""
    counts = []
    n = gpus_per_node
    while n <= cap:
        if n >= at_least or n == gpus_per_node and at_least <= gpus_per_node:
            counts.append(n)
        n *= 2
    return np.array(counts, dtype=np.int64)


def product(counts: np.ndarray, axes: Axes) -> dict[str, np.ndarray]:
    """Cartesian product of the GPU counts and every axis, flattened (int64 arrays)."""
    dims = [np.asarray(counts, dtype=np.int64)] + [
        np.asarray(v, dtype=np.int64) for v in (axes.tp, axes.pp, axes.cp, axes.ep, axes.zero,
                                                  axes.micro_batch, axes.recompute,
                                                  axes.precision)]
    mesh = np.meshgrid(*dims, indexing="ij", copy=False)
    names = ("gpus", "tp", "pp", "cp", "ep", "zero", "micro_batch", "recompute", "precision")
    out = {k: m.reshape(-1) for k, m in zip(names, mesh, strict=True)}
    out["dp"] = out["gpus"] // (out["tp"] * out["pp"] * out["cp"])
    return out
