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
- HSDP copies are timed only where the twin's data-parallel traffic is not all hidden and
  the twin's step without its communication and bubble is not slower than the fastest grid
  row of its GPU count (HSDP_UNNEEDED, `hsdp_twins`): a shard group changes only the
  data-parallel traffic and the optimizer step (which it lengthens), so either way the copy
  is slower than a row already found (exact).

Every copy `sized` makes is a candidate of its GPU count (`plan.LayoutTable.variant_count`):
each is either tallied once under the first rule it breaks (`checks`, after the hardware
rules) or physically feasible, like the grid's rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..estimators import memory
from ..estimators.timing import choose  # np.choose's values, without its slow broadcast
from ..spec import O_ACTIVATIONS, O_GRADS, O_OPTIMIZER, O_PARAMS, R_FULL, R_NONE, R_OP, Layout
from . import feasibility as fz
from .evaluate import Site
from .hardware import host_memory_per_gpu
from .platforms import Platform

HSDP_GROUP = 8  # one 8-GPU node of data-parallel ranks (torchtitan/FSDP HSDP recipes)
OFFLOADS = (O_OPTIMIZER, O_OPTIMIZER | O_PARAMS | O_GRADS,
            O_OPTIMIZER | O_PARAMS | O_GRADS | O_ACTIVATIONS)
KINDS = ("hsdp", "op", "offload")  # `kind` codes of the variant rows
# rows per call of the memory model over the table (as memory.CHUNK: temporaries kept in
# cache; larger, since the distinct-row shortcut (estimators/distinct.py) leaves less work per
# row and the same per call: 1 << 16 is ~12% faster than 1 << 14 on a 2 MiB L2)
BLOCK = 1 << 16


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
    twin = np.concatenate([rows for rows, _, _ in picks])  # the picks in turn: one gather
    ends = np.cumsum([rows.size for rows, _, _ in picks])
    keys = set(g) | {"shard_group", "offload", "twin", "kind"}
    out = {k: g[k][twin] if k in g else np.zeros(twin.size, dtype=np.int64) for k in keys}
    starts = np.concatenate(([0], ends[:-1]))
    for (_, change, kind), lo, hi in zip(picks, starts, ends, strict=True):
        for k, v in change.items():
            out[k][lo:hi] = v
        out["kind"][lo:hi] = kind
    out["twin"] = twin
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


# the per-row fields of a variant row that `sized` adds beside the grid's fields (the
# MemoryBreakdown fields total, offloaded and host_traffic)
SIZED = ("memory_bytes", "offloaded", "host_traffic")


# kinds whose memory `sized` leaves to `size_rows`, called when a group first reads it: an
# offload copy's memory is read only where its twin does not fit the group's GPU and no grid
# row fits at its count (`unneeded`), about one copy in seven in a large search
LAZY = (2,)
LAZY_MIN = 1 << 14  # fewer rows of those kinds: sized with the others (a call costs ~3 ms)


def sized(g: dict[str, np.ndarray], memory_bytes: np.ndarray, smallest_gpu_bytes: float,
          layout: Callable[[dict[str, np.ndarray]], Layout], model: Any, site: Site,
          lazy: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """The variant rows of the runnable table rows `g` that the layout rules accept, with
    their memory per GPU, offloaded bytes and host traffic per step (the most loaded GPU's),
    sorted by kind, then GPU count; `key` indexes them for `extra_rows`. Rows of the kinds
    `lazy` are `pending` (nan until `size_rows`) where they are LAZY_MIN or more."""
    extra = variant_rows(g, np.ones(g["gpus"].size, dtype=bool), memory_bytes,
                         smallest_gpu_bytes)
    if extra["gpus"].size:
        ok = layout(extra).valid_mask(model)
        extra = {k: v[ok] for k, v in extra.items()}
    order = np.lexsort((extra["gpus"], extra["kind"]))  # kind-major, then by GPU count
    extra = {k: v[order] for k, v in extra.items()}
    extra["key"] = extra["kind"] * (1 << 40) + extra["gpus"]
    n = extra["gpus"].size
    extra.update({k: np.full(n, np.nan) for k in SIZED})
    extra["pending"] = np.isin(extra["kind"], lazy)
    if np.count_nonzero(extra["pending"]) < LAZY_MIN:  # not worth a call of their own
        extra["pending"][:] = False
    size_rows(extra, np.flatnonzero(~extra["pending"]), layout, model, site)
    return extra


def size_rows(extra: dict[str, np.ndarray], rows: np.ndarray,
              layout: Callable[[dict[str, np.ndarray]], Layout], model: Any, site: Site
              ) -> None:
    """The memory fields (SIZED) of variant rows `rows` of `extra` (ascending), in blocks
    of BLOCK rows (`most_loaded`; the same values as sizing them with every other row)."""
    for lo in range(0, rows.size, BLOCK):
        at = rows[lo:lo + BLOCK]
        part = {k: v[at] for k, v in extra.items()}
        for k, v in zip(SIZED, most_loaded(model, layout(part), site), strict=True):
            extra[k][at] = v
    extra["pending"][rows] = False


def most_loaded(model: Any, layout: Layout, site: Site) -> tuple[np.ndarray, ...]:
    """`memory_per_gpu(...)`'s total, offloaded and host_traffic alone: those of the stage
    with the largest total (`memory.stage_totals`, the stages of `memory.stage_breakdowns`;
    ties to the first, as `memory.memory_breakdown` picks), without its every other part."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        stages = memory.stage_totals(model, layout,
                                     runtime_overhead_bytes=site.runtime_overhead_bytes,
                                     fragmentation=site.fragmentation, stacks=site.stack_buffers)
    shape = np.broadcast_shapes(*(np.shape(s["total"]) for s in stages))  # the breakdowns'
    pick = np.argmax(np.stack([np.broadcast_to(s["total"], shape) for s in stages]), axis=0)
    return tuple(choose([np.broadcast_to(s[k], pick.shape) for s in stages], pick)
                 for k in ("total", "offloaded", "host_traffic"))


def unneeded(e: dict[str, np.ndarray], twin_memory_bytes: np.ndarray, capacity_bytes: float,
             fitting_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op copies, offload copies) among variant rows `e` that are unneeded: their twin fits
    (`capacity_bytes`), or for offload a grid row fits at their count (`fitting_counts`,
    sorted and distinct: np.unique's)."""
    twin_fits = twin_memory_bytes <= capacity_bytes
    offload = np.flatnonzero(e["kind"] == 2)
    out = np.zeros(twin_fits.shape, dtype=bool)
    out[offload] = twin_fits[offload] | _member(e["gpus"][offload], fitting_counts)
    return twin_fits & (e["kind"] == 1), out


def _member(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """np.isin(values, sorted_unique) for a sorted array of distinct values (np.unique's), by
    binary search: no sort of both per call."""
    if sorted_unique.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_unique, values), sorted_unique.size - 1)
    return sorted_unique[at] == values


def checks(e: dict[str, np.ndarray], *, twin_memory_bytes: np.ndarray, capacity_bytes: float,
           fitting_counts: np.ndarray, host_bytes: float, busy: np.ndarray | None,
           rows: int, skips: tuple[np.ndarray, np.ndarray] | None = None) -> list[fz.Check]:
    """The rules of variant rows `e` beyond the hardware's, in feasibility.ORDER: a copy whose
    twin fits is unneeded (op, offload), offload also at a GPU count where a grid row fits
    (`fitting_counts`), then GPU memory, host memory (`host_bytes` per GPU), and an HSDP copy
    whose twin is not among `busy` (table rows whose DP traffic shows; `rows` table rows).
    `skips`: `unneeded` of these arguments, when the caller has it already."""
    op, offload = skips or unneeded(e, twin_memory_bytes, capacity_bytes, fitting_counts)
    return [fz.Check(code=fz.OP_UNNEEDED, bad=op),
            fz.Check(code=fz.OFFLOAD_UNNEEDED, bad=offload),
            fz.memory_check(e["memory_bytes"], capacity_bytes),
            fz.host_memory_check(e["offloaded"], host_bytes),
            fz.Check(code=fz.HSDP_UNNEEDED, bad=not_in(e["twin"], busy, rows))]


def candidates(table: Any, counts: np.ndarray, kinds: tuple[int, ...], *, plats: list[Platform],
               cat: Any, tally: Any, keys: list[str], fitting: np.ndarray,
               allow_consumer: bool, busy: np.ndarray | None = None,
               precisions: tuple[int, ...] | None = None) -> dict[str, np.ndarray]:
    """The variant rows of `table` (a plan.LayoutTable) of these kinds and GPU counts that pass
    the hardware rules and `checks` on the platforms `plats` (one physics group), each
    rejected one tallied once (`tally`, a plan.Tally); sorted by count, with fields `keys`
    (`row` negative: no table row; -2 - i for row i of `table.extra`). `fitting`: the counts
    where a grid row fits in GPU memory;
    `busy`: the timed grid rows whose data-parallel traffic shows (None: no HSDP rule);
    `precisions`: only the rows of these precision codes (None: all)."""
    acc = plats[0].accelerator
    assert acc is not None
    ex = table.extra
    sel, e = _selected(table, counts, kinds, precisions)
    if sel.size == 0:
        return {k: np.zeros(0, dtype=table.g[k].dtype if k in table.g else float) for k in keys}
    if set(kinds) & {1, 2}:
        skips = unneeded(e, e["twin_memory_bytes"], acc.memory_bytes, fitting)
    else:  # no op or offload copy: none is unneeded
        skips = (np.zeros(sel.size, dtype=bool), np.zeros(sel.size, dtype=bool))
    if set(kinds) & set(LAZY):
        e = _sized_now(table, sel, e, skips)
    host = (min(host_memory_per_gpu(cat, acc, p) for p in plats)
            if np.any(e["offloaded"] > 0) else np.inf)
    keep = tally.apply(acc.id, np.ones(sel.size, dtype=bool), [
        *fz.hardware_checks(tp=e["tp"], precision=e["precision"], gpus=e["gpus"],
                            platform=plats[0], allow_consumer=allow_consumer),
        *checks(e, twin_memory_bytes=e["twin_memory_bytes"], capacity_bytes=acc.memory_bytes,
                fitting_counts=fitting, host_bytes=host, busy=busy,
                rows=table.memory_bytes.size, skips=skips)])
    kept = np.flatnonzero(keep)
    at = e["gpus"][kept]
    if at.size and not (at[1:] >= at[:-1]).all():  # one kind's rows are sorted already
        kept = kept[np.argsort(at, kind="stable")]
    pick = sel[kept]
    out = {k: ex[k][pick] for k in keys if k != "row"}
    out["row"] = -2 - pick  # negative: no table row (-2 - i: row i of `extra`)
    return {k: out[k] for k in keys}


def _selected(table: Any, counts: np.ndarray, kinds: tuple[int, ...],
              precisions: tuple[int, ...] | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The variant rows of these kinds, counts and precisions, and the fields the checks read;
    kept in the table (`memo`, when it has one) for the other groups of the same counts."""
    key = (counts.tobytes(), kinds, precisions)
    memo = getattr(table, "memo", None)
    if memo is not None and key in memo:
        return memo[key]
    ex = table.extra
    sel = extra_rows(ex, counts, kinds) if ex else np.zeros(0, dtype=np.int64)
    if precisions is not None:
        sel = sel[np.isin(ex["precision"][sel], precisions)]
    e = {k: ex[k][sel] for k in ("tp", "precision", "gpus", "kind", "twin", "memory_bytes",
                                 "offloaded")} if sel.size else {}
    if sel.size:  # what `unneeded` compares with each group's GPU memory
        e["twin_memory_bytes"] = table.memory_bytes[e["twin"]]
    if memo is not None:
        memo[key] = (sel, e)
    return sel, e


# relative margin on the HSDP floor: sums of the same parts in another order differ by
# float64 round-off (~1e-16); a copy is skipped only when surely slower
FLOOR_MARGIN = 1e-9


def hsdp_twins(g: dict[str, np.ndarray]) -> np.ndarray:
    """Table rows (`row`; variant rows have -1) of the timed rows `g` (sorted by GPU count)
    whose HSDP copy may be the fastest of its count: their data-parallel time shows
    (`dp_exposed` > 0) and `floor_s` (compute + memory-bound + overhead + optimizer time: what
    no shard group shortens) is within FLOOR_MARGIN of the count's fastest step."""
    n = g["gpus"].size
    if n == 0:
        return g["row"]
    starts = np.flatnonzero(np.concatenate(([True], g["gpus"][1:] != g["gpus"][:-1])))
    segment = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
    best = np.minimum.reduceat(g["step_s"], starts)[segment]
    return g["row"][(g["row"] >= 0) & (g["dp_exposed"] > 0)
                    & (g["floor_s"] <= best * (1 + FLOOR_MARGIN))]


def _sized_now(table: Any, sel: np.ndarray, e: dict[str, np.ndarray],
               skips: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
    """The fields `e` of variant rows `sel` with the memory of the pending ones (`LAZY`) that
    this group reads -- those not `unneeded` (`skips`, on the group's GPU) -- computed now
    (`table.sizer`)."""
    ex = table.extra
    if "pending" not in ex:
        return e
    wait = ex["pending"][sel]
    if wait.any():
        skip = np.logical_or(*skips)
        if (wait & ~skip).any():  # none after `size_read`, unless a caller skipped it
            table.sizer(sel[wait & ~skip])
    return dict(e, memory_bytes=ex["memory_bytes"][sel], offloaded=ex["offloaded"][sel])


def size_read(table: Any, groups: list[tuple[np.ndarray, np.ndarray, Any, Any]]) -> None:
    """Size (`table.sizer`) the pending variant rows that these groups -- (GPU counts, counts
    where a grid row fits, accelerator, precisions) -- will read (`_sized_now`), in one call:
    the memory model's cost is mostly per call."""
    ex = table.extra
    if "pending" not in ex or table.sizer is None or not ex["pending"].any():
        return
    need = np.zeros(ex["pending"].size, dtype=bool)
    for counts, fitting, acc, precisions in groups:
        sel, e = _selected(table, counts, LAZY, precisions)
        if sel.size:
            skip = np.logical_or(*unneeded(e, e["twin_memory_bytes"], acc.memory_bytes,
                                           fitting))
            need[sel[~skip]] = True
    need &= ex["pending"]
    if need.any():
        table.sizer(np.flatnonzero(need))
