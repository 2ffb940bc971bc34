"""Which knob makes a configuration fit in GPU memory (L4), computed, not guessed.

`fit_options` takes one configuration that does not fit, builds its variants (one knob
changed at a time), keeps the structurally valid ones, evaluates their memory (`_totals`) and
returns a `FitOption` (flags and the memory they leave) for the smallest change of each knob
that fits, least disruptive first:
recompute, ZeRO stage, CPU offload, micro-batch, tensor parallel, pipeline parallel, and finally
more GPUs with ZeRO-3 (the smallest multiple of 8) -- or, when no GPU count fits, more GPUs with
ZeRO-3 and full recompute together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ..estimators.memory import most_loaded_total
from ..estimators.memory_one import memory_breakdown_one
from ..rules import first_broken
from ..spec import R_FULL, RECOMPUTE, Layout, ModelSpec
from ..units import GiB
from .results import FitOption

__all__ = ["fit_options"]

MAX_TP = 8  # tensor parallelism stays inside one 8-GPU server's scale-up domain
MAX_GPUS = 65536  # largest cluster the "more GPUs" search considers


def _variants(model: ModelSpec, base: dict[str, Any], gpus: int) -> list[tuple[str, str, dict]]:
    """(knob, flag text, field overrides) of the knobs that keep the GPU count, in order from
    least to most disruptive (the GPU counts after them: `_gpu_counts`)."""
    out: list[tuple[str, str, dict]] = []
    for r in range(int(base["recompute"]) + 1, R_FULL + 1):  # the modes after full are finer
        out.append(("recompute", f"--recompute {RECOMPUTE[r]}", {"recompute": r}))
    for z in range(int(base["zero"]) + 1, 4):
        out.append(("zero", f"--zero {z}", {"zero": z}))
    if not base["offload"]:
        out.append(("offload", "--offload", {"offload": True}))
    mb = int(base["micro_batch"])
    small = [d for d in range(1, math.isqrt(mb) + 1) if mb % d == 0]  # sqrt(mb) steps, not mb
    for m in sorted({x for d in small for x in (d, mb // d)} - {mb}, reverse=True):
        out.append(("micro_batch", f"--micro-batch {m}", {"micro_batch": m}))
    tp, pp, cp = int(base["tp"]), int(base["pp"]), int(base["cp"])
    for t in range(tp + 1, MAX_TP + 1):
        if gpus % (t * pp * cp) == 0:
            out.append(("tp", f"--tp {t}", {"tp": t, "dp": gpus // (t * pp * cp)}))
    for p in range(pp + 1, model.layers + 1):
        if model.layers % p == 0 and gpus % (tp * p * cp) == 0:
            out.append(("pp", f"--pp {p}", {"pp": p, "dp": gpus // (tp * p * cp)}))
    return out


def _gpu_counts(base: dict[str, Any], gpus: int) -> np.ndarray:
    """The larger GPU counts tried with ZeRO-3: multiples of 8 above `gpus`, up to MAX_GPUS,
    that hold whole replicas (tp * pp * cp GPUs) and whose data-parallel size divides the
    global batch into micro-batches (`rules`' batch_multiple; valid_mask would drop the others,
    so dropping them first only saves their rows)."""
    per_replica = int(base["tp"]) * int(base["pp"]) * int(base["cp"])
    mb, gb = max(int(base["micro_batch"]), 1), int(base["global_batch"])
    lo = 8 * (gpus // 8 + 1)
    if per_replica >= 1 and gb >= 1 and math.isqrt(gb) <= DIVISOR_SEARCH:
        # the same counts from the other side: dp = count / per_replica must divide gb / mb,
        # so only the divisors of gb / mb are candidates (a few dozen, not MAX_GPUS / 8)
        dps = _divisors(gb // mb) if gb % mb == 0 else []
        return np.array([d * per_replica for d in dps if (d * per_replica) % 8 == 0
                         and lo <= d * per_replica <= MAX_GPUS], dtype=np.int64)
    counts = np.arange(lo, MAX_GPUS + 1, 8, dtype=np.int64)
    counts = counts[counts % per_replica == 0]
    step = mb * (counts // per_replica)
    return counts[gb % step == 0]


DIVISOR_SEARCH = 1024  # divisors by trial up to this square root; numpy's sieve beyond


def _divisors(n: int) -> list[int]:
    """The divisors of n >= 1, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _grid(base: dict[str, Any], variants: list[tuple[str, str, dict]], counts: np.ndarray
          ) -> Layout:
    """Every variant as one grid (rows: `variants`, then each count with ZeRO-3, then, unless
    the layout recomputes fully already, each count with ZeRO-3 and full recompute)."""
    per_replica = int(base["tp"]) * int(base["pp"]) * int(base["cp"])
    blocks = [{"zero": 3}]
    if int(base["recompute"]) != R_FULL:  # last resort: both, then more GPUs
        blocks.append({"zero": 3, "recompute": R_FULL})
    rows = len(variants) + len(blocks) * len(counts)
    cols = {k: np.full(rows, v) for k, v in base.items()}
    for i, (_, _, ov) in enumerate(variants):
        for k, v in ov.items():
            cols[k][i] = v
    for j, ov in enumerate(blocks):
        lo = len(variants) + j * len(counts)
        cols["dp"][lo:lo + len(counts)] = counts // per_replica
        for k, v in ov.items():
            cols[k][lo:lo + len(counts)] = v
    return Layout(**cols)


def fit_options(
    model: ModelSpec,
    layout: Layout,
    capacity_bytes: float,
    gpus: int,
    *,
    runtime_overhead_bytes: float,
    fragmentation: float,
    stacks: Any = None,
    total_bytes: float | None = None,
) -> tuple[FitOption, ...]:
    """The smallest change of each knob that makes `layout` fit; () if it fits already.

    Each knob is changed alone from `layout` (a single configuration), keeping the global batch
    and, for tp/pp, the GPU count. Only structurally valid variants (`Layout.valid_mask`) count;
    their memory comes from one vectorized call on the valid rows alone. `total_bytes`: the
    layout's own memory under the same site, when the caller has it (`memory_breakdown_one`'s
    total; computed here when None).
    """
    kw = dict(runtime_overhead_bytes=runtime_overhead_bytes, fragmentation=fragmentation,
              stacks=stacks)
    if total_bytes is None:
        total_bytes = float(memory_breakdown_one(model, layout, **kw).total)
    if total_bytes <= capacity_bytes:
        return ()
    base = _scalars(layout)
    variants = _variants(model, base, gpus)
    counts = _gpu_counts(base, gpus)
    rows = len(variants) + len(counts) * (1 if int(base["recompute"]) == R_FULL else 2)
    search = _one_by_one if rows <= SCALAR_ROWS else _on_a_grid
    return tuple(FitOption(knob=knob, flags=flags, gpus=n, memory_gib=total / GiB,
                           capacity_gib=capacity_bytes / GiB)
                 for knob, flags, n, total in search(model, base, variants, counts,
                                                     capacity_bytes, kw))


_PLAIN = (int, float, bool)


def _scalars(layout: Layout) -> dict[str, Any]:
    """`Layout.scalars()`: the fields of one configuration as Python numbers (those already
    Python numbers as they are, not through numpy)."""
    return {k: x if type(x) in _PLAIN else np.asarray(x).item()
            for k, x in ((k, getattr(layout, k)) for k in layout.__dataclass_fields__)}


SCALAR_ROWS = 64  # up to this many variants, they are checked one by one (scalar paths)
Found = list[tuple[str, str, Any, float]]  # (knob, flags, GPU count or None, bytes)


def _picks(rows: Iterator[tuple[str, str, Any, Callable[[], Any]]], capacity_bytes: float
           ) -> Found:
    """The first row of each knob that fits, from (knob, flags, GPU count, its memory: bytes,
    or None for a structurally invalid row) rows in order, each memory asked for only while its
    knob has no fit; more GPUs with full recompute only when more GPUs alone do not fit."""
    out: Found = []
    done: set[str] = set()
    for knob, flags, n, memory in rows:
        if knob in done or (knob == "gpus+full" and "gpus" in done):
            continue
        total = memory()
        if total is not None and total <= capacity_bytes:
            done.add(knob)
            out.append((knob, flags, n, total))
    return out


def _labelled(base: dict[str, Any], variants: list[tuple[str, str, dict]], counts: np.ndarray
              ) -> Iterator[tuple[str, str, Any, dict]]:
    """(knob, flags, GPU count, overrides) of every variant, in `_grid`'s row order."""
    per_replica = int(base["tp"]) * int(base["pp"]) * int(base["cp"])
    for knob, flags, ov in variants:
        yield knob, flags, None, ov
    blocks: list[tuple[str, dict[str, Any]]] = [("gpus", {})]
    if int(base["recompute"]) != R_FULL:
        blocks.append(("gpus+full", {"recompute": R_FULL}))
    for knob, extra in blocks:
        for n in counts.tolist():
            yield knob, f"{n}", n, {"zero": 3, "dp": n // per_replica, **extra}


def _one_total(model: ModelSpec, fields: dict[str, Any], kw: dict[str, Any]) -> float | None:
    """Memory of one variant (`memory_one`), None when it breaks a rule (`rules.first_broken`,
    the rules of `Layout.valid_mask`)."""
    layout = Layout(**fields)
    if first_broken(layout, model) is not None:
        return None
    return float(memory_breakdown_one(model, layout, **kw).total)


def _one_by_one(model: ModelSpec, base: dict[str, Any], variants: list[tuple[str, str, dict]],
                counts: np.ndarray, capacity_bytes: float, kw: dict[str, Any]) -> Found:
    """A few variants, in order, each checked and evaluated only while its knob has no fit."""
    return _picks(((k, f, n, partial(_one_total, model, {**base, **ov}, kw))
                   for k, f, n, ov in _labelled(base, variants, counts)), capacity_bytes)


def _on_a_grid(model: ModelSpec, base: dict[str, Any], variants: list[tuple[str, str, dict]],
               counts: np.ndarray, capacity_bytes: float, kw: dict[str, Any]) -> Found:
    """Many variants: one grid, its structurally valid rows (`Layout.valid_mask`) and their
    memory in one vectorized call (`memory.most_loaded_total`; the scalar path's equal to
    1e-9, tests/test_memory_one.py)."""
    grid = _grid(base, variants, counts)
    rows = np.flatnonzero(np.asarray(grid.valid_mask(model))).tolist()
    sub = Layout(**{k: np.asarray(getattr(grid, k))[rows] for k in base})
    totals = dict(zip(rows, np.asarray(most_loaded_total(model, sub, **kw)).reshape(-1).tolist(),
                      strict=True))
    return _picks(((k, f, n, partial(totals.get, i))
                   for i, (k, f, n, _) in enumerate(_labelled(base, variants, counts))),
                  capacity_bytes)
