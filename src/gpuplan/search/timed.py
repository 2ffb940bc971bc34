"""The step times of many physics groups' rows in few calls of the time model (L4).

`plan` times, per physics group, the layouts that fit its GPU: a few hundred thousand rows
over some fifty groups, most rows timed in a dozen groups. The time model costs about a
millisecond per call, whatever its size, plus a fraction of a microsecond per row, and much of
that per-row work depends on the layout alone (pipeline placement, FLOPs, parameters per GPU,
bytes to communicate), not on the hardware. So:

- groups whose rows are the same (`key`: same GPU counts, memory, hardware rules; e.g. one
  GPU behind several networks) are timed together, the layout as a row vector and each
  group's hardware and efficiency as a column: numpy computes the layout-only terms once per
  row and the rest once per (group, row), in blocks of BLOCK rows (temporaries kept in cache);
- a group of ALONE rows or more is timed in a call of its own;
- the other groups share calls of up to BATCH rows, each row with its group's hardware.

The time model is elementwise (every figure of a row depends on that row and its hardware
alone), so every way gives each row exactly the figures a call per group gives
(`tests/test_search_cache.py` checks plan results against that).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ..spec import Layout
from .evaluate import time_per_step

ALONE, BATCH = 1 << 14, 1 << 16  # rows: a call of its own; the most rows a shared call holds
BLOCK = 1 << 14  # rows per call of groups timed together (rows x groups elements)


def layout_of(g: dict[str, np.ndarray], req: Any) -> Layout:
    """The Layout of rows g (a request's global batch and sequence length)."""
    return Layout(tp=g["tp"], pp=g["pp"], dp=g["dp"], cp=g["cp"], ep=g["ep"], vpp=g["vpp"],
                  zero=g["zero"], micro_batch=g["micro_batch"], global_batch=req.global_batch,
                  seq_len=req.seq_len, recompute=g["recompute"], precision=g["precision"],
                  shard_group=field_or_zero(g, "shard_group"),
                  offload=field_or_zero(g, "offload"))


def filled(table: Any, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows g with every field of their layout table's rows (`row` >= 0: row of table.g;
    -2 - i: row i of table.extra) that g lacks, gathered now: the search carries a few fields
    (`groups.LEAN`) until the pruning has skipped the rows it may (most of them), and gathers
    the others for the rows it times. g itself when it has them all (or no `row`)."""
    if table is None or "row" not in g:
        return g
    missing = [k for k in table.g if k not in g]
    if not missing:
        return g
    row, out = g["row"], dict(g)
    grid = row >= 0
    if grid.all():
        out.update({k: table.g[k][row] for k in missing})
        return out
    gi, vi = np.flatnonzero(grid), np.flatnonzero(~grid)
    gr, vr = row[gi], -2 - row[vi]
    for k in missing:
        v = np.empty(row.size, dtype=table.g[k].dtype)
        v[gi], v[vi] = table.g[k][gr], table.extra[k][vr]
        out[k] = v
    return out


def scalar(v: Any) -> float:
    """The one value of a hardware or efficiency field (a group's clock holds one per field)."""
    return float(np.asarray(v, dtype=float).reshape(-1)[0])


# floor_s: what a row's step takes before communication, bubble and offload (the HSDP rule's
# `variants.hsdp_twins`, the pruning's floor bound and its guards); summed in this order
FLOOR_PARTS = ("compute_s", "memory_s", "overhead_s", "optimizer_s")


def field_or_zero(g: dict[str, np.ndarray], key: str) -> np.ndarray | int:
    """A variant field of rows g, 0 when no row sets it (the estimators' scalar path)."""
    v = g.get(key)
    return v if v is not None and v.any() else 0


@dataclass
class Timing:
    """The step-time breakdown of one group's rows, held as pieces of the calls that timed
    them: (first row, end row, breakdown, its first column, its row in the breakdown's group
    axis or -1 when it has none)."""

    n: int
    stack: np.ndarray
    pieces: list[tuple[int, int, Any, int, int]]

    def full(self, name: str) -> np.ndarray:
        """Field `name` of every row (a float array of its own)."""
        out = np.empty(self.n)
        for lo, hi, t, at, j in self.pieces:
            out[lo:hi] = _cut(t, name, at, at + hi - lo, j)
        return out

    def floor(self, rows: np.ndarray | None = None) -> np.ndarray:
        """floor_s (FLOOR_PARTS summed) of every row, or of these rows."""
        c, m, o, opt = (self.full(k) if rows is None else self.pick(k, rows)
                        for k in FLOOR_PARTS)
        return c + m + o + opt

    def pick(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Field `name` of these rows."""
        if not self.pieces:
            return np.zeros(rows.shape)
        if len(self.pieces) == 1:
            lo, hi, t, at, j = self.pieces[0]
            return _cut(t, name, at, at + hi - lo, j)[rows - lo]
        out = np.empty(rows.shape, dtype=np.asarray(getattr(self.pieces[0][2], name)).dtype)
        for lo, hi, t, at, j in self.pieces:
            mine = (rows >= lo) & (rows < hi)
            out[mine] = _cut(t, name, at, at + hi - lo, j)[rows[mine] - lo]
        return out


def _cut(t: Any, name: str, lo: int, hi: int, j: int) -> np.ndarray:
    """Columns lo:hi of field `name` of breakdown t (of row j of its group axis, if any)."""
    full, shape = np.asarray(getattr(t, name)), np.shape(t.step_s)
    if full.shape != shape:  # a scalar or a column (np.broadcast_to costs ~5 us a call)
        full = np.broadcast_to(full, shape)
    return full[lo:hi] if j < 0 else full[j, lo:hi]


def time_many(req: Any, jobs: list[tuple[dict[str, np.ndarray], Any, Any]]) -> list[Timing]:
    """The step times of each job's rows g on its clock (`groups._Clock`); jobs with the same
    `key` (not None) have the same rows (module docstring)."""
    out = [Timing(n=g["gpus"].size, stack=np.full(g["gpus"].size, c.stack), pieces=[])
           for g, c, _ in jobs]
    alike: dict[Any, list[int]] = defaultdict(list)
    for i, (g, c, key) in enumerate(jobs):
        if key is not None and g["gpus"].size:
            alike[(key, c.stack)].append(i)
    batch: list[int] = []
    for i, (g, c, key) in enumerate(jobs):
        n = g["gpus"].size
        together = alike.get((key, c.stack), []) if key is not None else []
        if len(together) > 1:
            if together[0] == i:
                _time_together(req, jobs, together, out)
        elif n >= ALONE:
            _time_alone(req, jobs, i, out)
        elif n:
            if sum(jobs[j][0]["gpus"].size for j in batch) + n > BATCH:
                _time_batch(req, jobs, batch, out)
                batch = []
            batch.append(i)
    if batch:
        _time_batch(req, jobs, batch, out)
    return out


def _time_alone(req: Any, jobs: list[tuple[dict[str, np.ndarray], Any, Any]], i: int,
                out: list[Timing]) -> None:
    """Job i's rows in a call of their own, on its own hardware."""
    g, c, _ = jobs[i]
    t = time_per_step(req.model, replace(layout_of(g, req), stack=out[i].stack), c.hw, c.eff,
                      g["host_traffic"], req.site.stack_buffers)
    out[i].pieces.append((0, g["gpus"].size, t, 0, -1))


def _time_together(req: Any, jobs: list[tuple[dict[str, np.ndarray], Any, Any]],
                   which: list[int], out: list[Timing]) -> None:
    """Jobs `which` (the same rows and stack): the layout as a row vector, each job's hardware
    and efficiency as a column, in blocks of BLOCK rows."""
    g = jobs[which[0]][0]
    n = g["gpus"].size
    hw = _stacked([jobs[i][1].hw for i in which])
    eff = _stacked([jobs[i][1].eff for i in which])
    stack = out[which[0]].stack
    for lo in range(0, n, BLOCK):
        part = {k: v[lo:lo + BLOCK] for k, v in g.items() if k in _TIMED_KEYS}
        t = time_per_step(req.model, replace(layout_of(part, req), stack=stack[lo:lo + BLOCK]),
                          hw, eff, part["host_traffic"], req.site.stack_buffers)
        hi = min(n, lo + BLOCK)
        for j, i in enumerate(which):
            out[i].pieces.append((lo, hi, t, 0, j))


def _time_batch(req: Any, jobs: list[tuple[dict[str, np.ndarray], Any, Any]],
                which: list[int], out: list[Timing]) -> None:
    """One call of the time model over the rows of jobs `which`, each row with its job's
    hardware and efficiency (a job alone: its own)."""
    if len(which) == 1:
        _time_alone(req, jobs, which[0], out)
        return
    sizes = [jobs[i][0]["gpus"].size for i in which]
    keys = [k for k in jobs[which[0]][0] if k in _TIMED_KEYS]
    g = {k: np.concatenate([jobs[i][0][k] for i in which]) for k in keys}
    stack = np.concatenate([out[i].stack for i in which])
    hw = _per_row([jobs[i][1].hw for i in which], sizes)
    eff = _per_row([jobs[i][1].eff for i in which], sizes)
    t = time_per_step(req.model, replace(layout_of(g, req), stack=stack), hw, eff,
                      g["host_traffic"], req.site.stack_buffers)
    at = 0
    for i, n in zip(which, sizes, strict=True):
        out[i].pieces.append((0, n, t, at, -1))
        at += n


# the row fields the time model reads (`layout_of`) and the offload traffic
_TIMED_KEYS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch", "recompute",
               "precision", "shard_group", "offload", "host_traffic")


def _records(records: list[Any]) -> dict[str, list[np.ndarray] | None]:
    """Each field of the records (Hardware or Efficiency, one candidate each) as a list of
    their values with a leading axis of one; None for a field that is no array in any."""
    out: dict[str, list[np.ndarray] | None] = {}
    for f in fields(records[0]):
        parts = [np.asarray(getattr(r, f.name)) for r in records]
        out[f.name] = (None if all(p.ndim == 0 for p in parts) else
                       [p.reshape(1, *p.shape[1:]) if p.ndim else p.reshape(1) for p in parts])
    return out


def _per_row(records: list[Any], sizes: list[int]) -> Any:
    """One record whose array fields hold each record's value repeated for its rows."""
    values = {k: (getattr(records[0], k) if v is None else
                  np.repeat(np.concatenate(v), sizes, axis=0))
              for k, v in _records(records).items()}
    return type(records[0])(**values)


def _stacked(records: list[Any]) -> Any:
    """One record whose array fields hold the records' values along a leading group axis
    (k, 1, ...), to broadcast against a row vector of layouts."""
    values = {}
    for k, v in _records(records).items():
        if v is None:
            values[k] = getattr(records[0], k)
        else:
            a = np.concatenate(v)
            values[k] = a.reshape(a.shape[0], 1, *a.shape[1:])
    return type(records[0])(**values)
