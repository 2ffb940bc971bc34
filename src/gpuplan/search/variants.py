"""Layouts `plan` adds beside the cartesian grid (#11): HSDP shard groups, torchtitan's per-op
recompute and CPU offload, each a copy of a grid row (its `twin`) with one field changed (L4).

They are not a full axis of the grid, to keep the search fast and exact:
- HSDP (shard group HSDP_GROUP) copies every ZeRO-3 row whose dp*cp ranks are a larger
  multiple of the group: more memory than full sharding, less data-parallel traffic.
- op recompute copies rows without recompute, and offload (OFFLOADS) copies ZeRO-3 rows with
  full recompute, only where the twin does not fit on the smallest GPU of the search. On a
  GPU where the twin fits, the copy is excluded (feasibility's OP_UNNEEDED, OFFLOAD_UNNEEDED):
  the twin runs the same work without the recompute or the host transfers, so it is at least
  as fast in the same memory, and the copy can never win (exact). Offload is moreover tried
  only at GPU counts where no grid row fits ("offload when nothing else fits"; a heuristic).
- HSDP copies are timed only where the twin's data-parallel traffic is not all hidden
  (HSDP_UNNEEDED): otherwise the shard group cannot shorten the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import O_ACTIVATIONS, O_GRADS, O_OPTIMIZER, O_PARAMS, R_FULL, R_NONE, R_OP

HSDP_GROUP = 8  # one 8-GPU node of data-parallel ranks (torchtitan/FSDP HSDP recipes)
OFFLOADS = (O_OPTIMIZER, O_OPTIMIZER | O_PARAMS | O_GRADS,
            O_OPTIMIZER | O_PARAMS | O_GRADS | O_ACTIVATIONS)
KINDS = ("hsdp", "op", "offload")  # `kind` codes of the variant rows


def variant_rows(g: dict[str, np.ndarray], valid: np.ndarray, memory_bytes: np.ndarray,
                 smallest_gpu_bytes: float) -> dict[str, np.ndarray]:
    """Copies of grid rows `g` (count-major, as `grid.product` builds them) with the
    variant's field changed, plus `twin` (the row index in g) and `kind` (into KINDS)."""
    idx = np.flatnonzero(valid)
    big = ~(memory_bytes[idx] <= smallest_gpu_bytes)
    zero3, rc = g["zero"][idx] == 3, g["recompute"][idx]
    ranks = g["dp"][idx] * g["cp"][idx]
    picks: list[tuple[np.ndarray, dict[str, Any], int]] = [
        (idx[zero3 & (ranks > HSDP_GROUP) & (ranks % HSDP_GROUP == 0)],
         {"shard_group": HSDP_GROUP}, 0),
        (idx[big & (rc == R_NONE)], {"recompute": R_OP}, 1)]
    lean = idx[big & zero3 & (rc == R_FULL)]
    picks += [(lean, {"offload": o}, 2) for o in OFFLOADS]
    parts = []
    for rows, change, kind in picks:
        part = {k: v[rows] for k, v in g.items()}
        part.update({k: np.full(rows.size, v, dtype=np.int64) for k, v in change.items()})
        part["twin"], part["kind"] = rows, np.full(rows.size, kind, dtype=np.int64)
        parts.append(part)
    keys = set(g) | {"shard_group", "offload", "twin", "kind"}
    out = {}
    for k in keys:
        out[k] = np.concatenate([p.get(k, np.zeros(p["twin"].size, dtype=np.int64))
                                 for p in parts])
    return out


def defaults(n: int) -> dict[str, np.ndarray]:
    """The variant fields of plain grid rows."""
    return {"shard_group": np.zeros(n, dtype=np.int64), "offload": np.zeros(n, dtype=np.int64)}


def not_in(rows: np.ndarray, busy: np.ndarray | None, n: int) -> np.ndarray:
    """Where table rows `rows` are not among `busy` (none are when busy is None)."""
    if busy is None:
        return np.zeros(rows.size, dtype=bool)
    mark = np.zeros(n, dtype=bool)
    mark[busy] = True
    return ~mark[rows]


def extra_rows(ex: dict[str, np.ndarray], counts: np.ndarray, kinds: tuple[int, ...]
                ) -> np.ndarray:
    """Indices of the variant rows of these kinds and GPU counts (`extra` is sorted by kind,
    then count: a binary search per pair, no scan)."""
    want = [k * (1 << 40) + int(c) for k in kinds for c in counts]
    lo = np.searchsorted(ex["key"], want, side="left")
    hi = np.searchsorted(ex["key"], want, side="right")
    return np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)] or
                          [np.zeros(0, dtype=np.int64)]).astype(np.int64)
