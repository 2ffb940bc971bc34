"""The candidate grid: GPU count x TP x (PP, VPP) x CP x EP x ZeRO x micro-batch x recompute x
precision, as flat numpy arrays (L4). One call per physics group; no Python loop per candidate.

Pipeline sizes: every pp up to MAX_PP that divides one of the searched GPU counts (others are
never a layout of them), whether or not it divides the layers (uneven stages,
`estimators.shapes.stage_layers`); with each pp > 1, the interleaving factors VPP_CHOICES whose
pp * vpp virtual stages the layers (+ embedding and loss) can fill. Context parallelism for long
sequences (CP_CHOICES by sequence length)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import PRECISIONS, ModelSpec

TP_CHOICES = (1, 2, 4, 8)
ZERO_CHOICES = (0, 1, 2, 3)
MICRO_BATCH_CHOICES = (1, 2, 4, 8)
RECOMPUTE_CHOICES = (0, 1, 2)
MAX_PP = 32
VPP_CHOICES = (1, 2, 4)  # interleaved 1F1B chunks per rank (Narayanan et al. 2021, 2.2)
# context-parallel degrees by shortest sequence length (tokens): ring attention pays from ~16k
CP_CHOICES = ((131072, (1, 2, 4, 8, 16)), (32768, (1, 2, 4, 8)), (16384, (1, 2)), (0, (1,)))


@dataclass(frozen=True)
class Axes:
    """The values each axis takes for one model (shared by every physics group)."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    vpp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    zero: tuple[int, ...]
    micro_batch: tuple[int, ...]
    recompute: tuple[int, ...]
    precision: tuple[int, ...]
    layers: int = 0  # the model's, bounding pp * vpp (0: no bound)

    def pipelines(self) -> list[tuple[int, int]]:
        """(pp, vpp) pairs: vpp > 1 only with pp > 1 and pp * vpp <= layers + 2."""
        return [(p, v) for p in self.pp for v in self.vpp
                if v == 1 or (p > 1 and (not self.layers or p * v <= self.layers + 2))]

    @property
    def size(self) -> int:
        """Layouts per GPU count (the product of every axis, pipelines as pairs)."""
        n = len(self.pipelines())
        for v in (self.tp, self.cp, self.ep, self.zero, self.micro_batch, self.recompute,
                  self.precision):
            n *= len(v)
        return n

    def sizes(self) -> dict[str, int]:
        """Values searched per dimension (benchmarks and reports)."""
        return {"tp": len(self.tp), "pp": len(self.pp), "vpp": len(self.vpp),
                "pp x vpp": len(self.pipelines()), "cp": len(self.cp), "ep": len(self.ep),
                "zero": len(self.zero), "micro_batch": len(self.micro_batch),
                "recompute": len(self.recompute), "precision": len(self.precision)}


def pp_choices(layers: int, counts: Any = None) -> tuple[int, ...]:
    """Pipeline sizes up to MAX_PP and the layers: those dividing one of `counts` (the GPU
    counts searched), else the divisors of the layers and the powers of two."""
    top = min(MAX_PP, layers)
    if counts is not None:
        cs = [int(c) for c in np.unique(np.asarray(counts, dtype=np.int64))]
        return tuple(p for p in range(1, top + 1) if any(c % p == 0 for c in cs))
    return tuple(p for p in range(1, top + 1) if layers % p == 0 or p & (p - 1) == 0)


def model_axes(model: ModelSpec, seq_len: int, *, precisions: tuple[str, ...] = ("bf16", "fp8"),
               recompute: tuple[int, ...] = RECOMPUTE_CHOICES,
               zero: tuple[int, ...] = ZERO_CHOICES, counts: Any = None) -> Axes:
    tp = tuple(t for t in TP_CHOICES if model.heads % t == 0)
    pp = pp_choices(model.layers, counts)
    cp = next(c for least, c in CP_CHOICES if seq_len >= least)
    ep: tuple[int, ...] = (1,)
    if model.is_moe:
        ep = tuple(e for e in (1, 2, 4, 8, 16, 32, 64) if model.experts % e == 0)
    prec = tuple(PRECISIONS.index(p) for p in precisions)
    return Axes(tp=tp, pp=pp, vpp=VPP_CHOICES, cp=cp, ep=ep, zero=zero,
                micro_batch=MICRO_BATCH_CHOICES, recompute=recompute, precision=prec,
                layers=model.layers)


def gpu_counts(gpus_per_node: int, cap: int, at_least: int = 1) -> np.ndarray:
    """Power-of-two multiples of the node size from `at_least` up to `cap` (and one node)."""
    counts = []
    n = gpus_per_node
    while n <= cap:
        if n >= at_least or n == gpus_per_node and at_least <= gpus_per_node:
            counts.append(n)
        n *= 2
    return np.array(counts, dtype=np.int64)


def product(count: int, axes: Axes) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The layouts of one GPU count whose tp * pp * cp divides it, as flat int64 arrays (the
    cartesian product of every axis, pipelines as (pp, vpp) pairs, precision the fastest
    axis; `mesh` unflattened), and per TP value (axes.tp order) how many layouts of the full
    product were left out because it does not."""
    f, dropped = mesh(count, axes)
    shape = np.broadcast_shapes(*(v.shape for v in f.values()))
    return {k: np.broadcast_to(v, shape).reshape(-1) for k, v in f.items()}, dropped


# the axes of `mesh` after the first (the (tp, (pp, vpp), cp) triples that divide the count)
MESH_AXES = ("ep", "zero", "micro_batch", "recompute", "precision")


def mesh(count: int, axes: Axes) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`product(count, axes)` unflattened: each field an int64 array that broadcasts to the
    grid's shape (triples, *MESH_AXES) -- tp, cp, pp, vpp, gpus and dp along the first axis,
    each of MESH_AXES along its own, size 1 along the others -- so a quantity of a few fields
    is computed once per combination of their values (numpy broadcasts it); `product`'s
    rows are the grid in C order. The same dropped counts."""
    pipes = np.asarray(axes.pipelines(), dtype=np.int64).reshape(-1, 2)
    # the (tp, pipeline, cp) triples whose tp * pp * cp divides the count, tp-major
    t, i, c = (v.reshape(-1) for v in np.meshgrid(
        np.asarray(axes.tp, dtype=np.int64), np.arange(len(pipes), dtype=np.int64),
        np.asarray(axes.cp, dtype=np.int64), indexing="ij"))
    ok = count % (t * pipes[i, 0] * c) == 0 if t.size else np.zeros(0, dtype=bool)
    tri = np.stack([t[ok], i[ok], c[ok]], axis=1).reshape(-1, 3)
    rest = [np.asarray(getattr(axes, k), dtype=np.int64) for k in MESH_AXES]
    per_inner = int(np.prod([v.size for v in rest]))
    kept = np.array([np.count_nonzero(tri[:, 0] == tv) for tv in axes.tp], dtype=np.int64)
    dropped = (len(pipes) * len(axes.cp) - kept) * per_inner

    def along(v: np.ndarray, axis: int) -> np.ndarray:
        shape = [1] * (1 + len(rest))
        shape[axis] = v.size
        return v.reshape(shape)

    out = {k: along(v, j + 1) for j, (k, v) in enumerate(zip(MESH_AXES, rest, strict=True))}
    tp, cp, pp, vpp = tri[:, 0], tri[:, 2], pipes[tri[:, 1], 0], pipes[tri[:, 1], 1]
    out.update(tp=along(tp, 0), cp=along(cp, 0), pp=along(pp, 0), vpp=along(vpp, 0),
               gpus=along(np.full(tri.shape[0], count, dtype=np.int64), 0),
               dp=along(count // (tp * pp * cp), 0))
    return out, dropped


def mesh_rows(f: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of `product` where `keep` (a mask broadcasting to the grid of `mesh`'s fields
    f) holds, as flat arrays: each field gathered from its own axis's values."""
    shape = np.broadcast_shapes(*(v.shape for v in f.values()))
    at = np.nonzero(np.broadcast_to(keep, shape))
    axis = {k: j + 1 for j, k in enumerate(MESH_AXES)}
    return {k: v.reshape(-1)[at[axis.get(k, 0)]] for k, v in f.items()}
