"""Which pruned ZeRO-3 rows the HSDP rule needs, settled without the time model (#11) (L4).

`variants.hsdp_twins` times a grid row's HSDP copy when the row's data-parallel time shows
(`dp_exposed` > 0) and its `floor_s` (compute + memory + overhead + optimizer) is within
FLOOR_MARGIN of its GPU count's fastest step (`best`). `prune` skips rows provably slower
than a timed row; a ZeRO-3 row it skips still decides this verdict for its copy, so:

- `relevant`: only rows whose HSDP copy exists and fits the group's GPU memory matter (the
  copy's other rules are the twin's, which it passed): for the others the verdict changes
  nothing, and they are skipped like any other row;
- `settle`: once the rows kept are timed, `best` is known exactly (a skipped row is never the
  fastest). A skipped row is then not busy when its floor bound (`prune.floors`) is above
  best x (1 + FLOOR_MARGIN); busy when dp x cp > 1 (its data-parallel reduction over the dp x
  cp ranks then shows: `timing._data_parallel_comm` hides at most `tail` < 1 of it) and an
  upper bound of its floor (`ceilings`) is below; the rows between are timed, as before, for
  their verdict alone.

`ceilings` bounds floor_s from above with the terms of `prune.floors`: the attention core's
exponential factor (`compute.attention_exp_factor`, a mean of max(1, r) and max(1, r/2)) at
max(1, r), the step's sync at the larger latency of the two links, the optimizer step exact
(`timing._optimizer_params` of `shapes.pipeline_stages`). A guard checks the ceiling and the
dp rule on every row timed (kept or unsettled); if one fails, `prune` times every row.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ..estimators import comm, timing
from ..estimators.compute import OPTIMIZER_STEP_BYTES, _attention_dims
from ..estimators.shapes import pipeline_stages
from ..rules import LayoutArrays
from ..spec import PRECISIONS
from . import feasibility as fz
from .timed import filled, layout_of, time_many
from .timed import scalar as _scalar
from .variants import FLOOR_MARGIN

ENABLED = True  # False: every pruned row the HSDP rule may need is timed (tests compare)
# the fewest rows a job settles (fewer are timed, as without settling): settling costs about
# half a millisecond per job, timing a row about a third of a microsecond
MIN_ROWS = 2048


def relevant(g: dict[str, np.ndarray], clock: Any, table: Any) -> np.ndarray | None:
    """Rows g (one group's) whose HSDP copy the search checks for being needed: ZeRO-3 grid
    rows with an HSDP copy in the table that fits the group's GPU memory (None: no table,
    every ZeRO-3 grid row)."""
    if not ENABLED or table is None or not table.extra:
        return None
    if "hsdp_memory" not in table.bounds:  # per grid row, its HSDP copy's memory (inf: none)
        mem = np.full(table.g["gpus"].size, np.inf)
        ex = table.extra
        hsdp = np.flatnonzero(ex["kind"] == 0)
        mem[ex["twin"][hsdp]] = ex["memory_bytes"][hsdp]
        table.bounds["hsdp_memory"] = mem
    row = g["row"]
    grid = (row >= 0) & (g["zero"] == 3)
    mem = table.bounds["hsdp_memory"][np.where(grid, row, 0)]
    cap = _scalar(clock.hw.memory_bytes)
    return grid & ~np.asarray(fz.memory_check(mem, cap).bad)


def _optimizer_bytes(req: Any, table: Any, rows: np.ndarray) -> np.ndarray:
    """Bytes the optimizer step streams on the busiest stage of these grid rows (timing's
    `_optimizer_params` x OPTIMIZER_STEP_BYTES), kept in the table for every row with an
    HSDP copy (`relevant` rows have one; nan for the others)."""
    if "opt_bytes" not in table.bounds:
        have = np.full(table.g["gpus"].size, np.nan)
        ex = table.extra
        new = ex["twin"][ex["kind"] == 0]
        lay = layout_of({k: v[new] for k, v in table.g.items()}, req)
        c: Any = SimpleNamespace(**LayoutArrays.read(lay, float))
        placed = pipeline_stages(req.model, c.tp, c.pp, c.ep, c.vpp, c.first, c.last)
        opt = np.asarray(timing.choose(OPTIMIZER_STEP_BYTES, lay.optimizer), dtype=float)
        have[new] = timing._optimizer_params(c, placed) * opt
        table.bounds["opt_bytes"] = have
    return table.bounds["opt_bytes"][rows]


def ceilings(req: Any, table: Any, d: dict[str, np.ndarray], clock: Any) -> np.ndarray:
    """An upper bound of floor_s of `relevant` rows d (row, gpus, floor_lb: their floor
    bound, `prune.floors`) on one group's clock: the floor bound with its attention term at
    the largest exponential factor max(1, r) (the bound is at factor 1, every term >= 0, so
    x max(1, r) bounds it), plus the step's sync and the optimizer step (module docstring)."""
    hw, eff = clock.hw, clock.eff
    q, v = _attention_dims(req.model)
    codes = np.arange(len(PRECISIONS))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = (np.asarray(timing._peak16(hw, codes), dtype=float).reshape(-1)
             * req.model.heads / (2.0 * (q + v)) / _scalar(getattr(hw, "exp_per_s", np.inf)))
        factor = float(np.nanmax(np.append(r, 1.0)))
        alpha = max(_scalar(hw.scale_up_latency_s), _scalar(hw.scale_out_latency_s))
        sync = comm.STEP_SYNC_COLLECTIVES * 2.0 * np.log2(
            np.maximum(d["gpus"].astype(float), 1.0)) * alpha
        opt = _optimizer_bytes(req, table, d["row"]) / (
            _scalar(hw.memory_bandwidth_bytes_per_s) * _scalar(eff.memory_fraction))
        return d["floor_lb"] * factor + sync + opt


def best_at(g: dict[str, np.ndarray], t: Any, gpus: np.ndarray) -> np.ndarray:
    """The fastest finite step of timed rows g (sorted by count; timing t) at each of `gpus`
    (inf where none): the `best` of `variants.hsdp_twins`."""
    n = g["gpus"].size
    if n == 0:
        return np.full(gpus.shape, np.inf)
    step = t.full("step_s")
    starts = np.flatnonzero(np.concatenate(([True], g["gpus"][1:] != g["gpus"][:-1])))
    counts = g["gpus"][starts]
    low = np.minimum.reduceat(np.where(np.isfinite(step), step, np.inf), starts)
    i = np.minimum(np.searchsorted(counts, gpus), counts.size - 1)
    return np.where(counts[i] == gpus, low[i], np.inf)


SAMPLE = 17  # every SAMPLE-th relevant row timed is checked against its ceiling (the guard)


def holds(req: Any, table: Any, g: dict[str, np.ndarray], t: Any, clock: Any,
          floor_lb: np.ndarray, every: bool = False) -> bool:
    """The guard on timed rows g (every field; `floor_lb` their floor bound): where
    `relevant` (every SAMPLE-th such row, or each if `every`), floor_s is below the ceiling,
    and dp x cp > 1 gives a data-parallel time that shows."""
    rel = relevant(g, clock, table)
    if rel is None or not rel.any():
        return True
    at = np.flatnonzero(rel)[::1 if every else SAMPLE]
    floor = t.floor(at)
    ceil = ceilings(req, table, {"row": g["row"][at], "gpus": g["gpus"][at],
                                 "floor_lb": floor_lb[at]}, clock)
    dp_ok = (g["dp"][at] * g["cp"][at] <= 1) | (t.pick("dp_comm_s", at) > 0)
    return bool(np.all(dp_ok & (floor <= ceil * (1.0 + MARGIN))))


MARGIN = 1e-6  # as prune.MARGIN: sums of the same parts in another order


def settle(req: Any, table: Any, jobs: list[tuple[dict[str, np.ndarray], Any, Any]],
           kept: list[dict[str, np.ndarray]], timings: list[Any],
           deferred: list[dict[str, np.ndarray] | None]
           ) -> tuple[list[np.ndarray] | None, int]:
    """(per job, the table rows among its `deferred` ones (skipped, `relevant`, floor bound
    not above `best`) that `variants.hsdp_twins` would return had they been timed, None when
    the guard fails on a row timed here; the rows timed here)."""
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in jobs]
    unsure: list[tuple[int, dict[str, np.ndarray], np.ndarray]] = []
    for i, d in enumerate(deferred):
        if d is None or d["row"].size == 0:
            continue
        clock = jobs[i][1]
        best = best_at(kept[i], timings[i], d["gpus"]) * (1.0 + FLOOR_MARGIN)
        if not np.all(np.isfinite(best)):  # a row kept runs at each count skipped against
            return None, 0
        d = dict(d, dp=table.g["dp"][d["row"]])
        ranks = d["dp"] * table.g["cp"][d["row"]]  # the dp x cp group (comm.dp_cp_group)
        free = d["floor_lb"] > best * (1.0 + MARGIN)
        busy = ~free & (ranks > 1) & (ceilings(req, table, d, clock) * (1.0 + MARGIN) <= best)
        out[i] = d["row"][busy]
        left = np.flatnonzero(~free & ~busy)
        if left.size:
            unsure.append((i, {k: v[left] for k, v in d.items()}, best[left]))
    if not unsure:
        return out, 0
    rows = [filled(table, {k: v for k, v in d.items() if k != "floor_lb"})
            for _, d, _ in unsure]
    times = time_many(req, [(r, jobs[i][1], None) for (i, _, _), r in zip(unsure, rows,
                                                                            strict=True)])
    for (i, d, best), r, t in zip(unsure, rows, times, strict=True):
        if not (holds(req, table, r, t, jobs[i][1], d["floor_lb"], every=True)
                and np.all(np.isfinite(t.full("step_s")))):
            return None, 0
        busy = (t.full("dp_comm_s") > 0) & (t.floor() <= best)
        out[i] = np.concatenate([out[i], d["row"][busy]])
    return out, sum(d["row"].size for _, d, _ in unsure)
