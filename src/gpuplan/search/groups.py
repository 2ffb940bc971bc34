"""One physics group's part of `plan` (L4): the layout table every group shares (structural
checks and memory per GPU, once per search), then per group the hardware and memory masks, the
step time of the rows that fit and the fastest feasible layout of each GPU count, every
exclusion tallied. `search.plan` composes them; no Python loop per candidate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..estimators import memory
from ..spec import STACKS
from . import feasibility as fz
from . import prune, variants
from .evaluate import time_per_step  # noqa: F401  (benchmarks count rows through it)
from .grid import Axes, mesh, mesh_rows
from .hardware import best_stack, efficiency_for, hardware_table, host_memory_per_gpu, limited
from .intervals import at_confidence, interval
from .platforms import Platform
from .results import Excluded
from .timed import Timing, time_many
from .timed import field_or_zero as _field  # noqa: F401
from .timed import layout_of as _layout


def _take(g: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Rows `mask` (a boolean mask or indices) of every field of g: a mask is turned into
    indices once (indexing a dozen fields by a mask scans it a dozen times: about 2x slower)."""
    at = np.flatnonzero(mask) if mask.dtype == bool else mask
    return {k: v[at] for k, v in g.items()}


@dataclass
class LayoutTable:
    """Every layout of every GPU count, evaluated once for all platforms: the structural checks
    and the memory per GPU depend on the layout alone (not on which GPU runs it), so a group
    of platforms only compares memory with its capacity and adds its own masks. Only the rows
    that can run are kept (`g`, count-major); the others are counted per GPU count, TP degree
    and reason (`dropped`), so each group tallies them exactly without touching them."""

    g: dict[str, np.ndarray]  # runnable rows, count-major: block i holds those of counts[i]
    starts: np.ndarray  # rows of block i: g[...][starts[i]:starts[i + 1]]
    position: dict[int, int]  # GPU count -> block number
    tp_values: np.ndarray  # the TP axis, indexing dropped's second dimension
    dropped: np.ndarray  # (blocks, tp values, 3): rows not divisible / not valid / no interleave
    memory_bytes: np.ndarray  # per GPU, per runnable row
    # HSDP, op-recompute and offload copies of runnable rows (`variants.sized`): their fields,
    # twin (a row of g) and kind, memory_bytes, offloaded, host_traffic; sorted by kind, count
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    # `plan.at_size`'s fastest layout of one count on one platform, by (platform, count,
    # precisions): it depends on the request shape alone, as the table does
    sizes: dict[tuple, Any] = field(default_factory=dict)
    memo: dict[tuple, Any] = field(default_factory=dict)  # variants.candidates' row selections
    # the bound terms (`prune._table_terms`: per number of rows equal but for what they do not
    # read, `termrows.term_ids`) and the twins' figures (`twins.relevant`)
    bounds: dict[str, np.ndarray] = field(default_factory=dict)
    per_count: dict[int, int] = field(default_factory=dict)  # variant rows by GPU count
    # sizes the `pending` variant rows given (`variants.size_rows`), as a group reads them
    sizer: Callable[[np.ndarray], None] | None = None

    def variant_count(self, counts: np.ndarray) -> int:
        """The variant candidates of these GPU counts (all kinds; counted once per count)."""
        if not self.extra:
            return 0
        if not self.per_count:
            values, n = np.unique(self.extra["gpus"], return_counts=True)
            self.per_count.update(zip(values.tolist(), n.tolist(), strict=True))
        return sum(self.per_count.get(int(c), 0) for c in np.unique(counts))

    def blocks(self, counts: np.ndarray) -> list[int]:
        return [self.position[int(c)] for c in counts]

    def rows(self, counts: np.ndarray) -> np.ndarray | slice:
        """The runnable rows of these GPU counts: a slice (a view, no copy) when their blocks
        are consecutive, as they are for one node size's power-of-two counts."""
        blocks = self.blocks(counts)
        if not blocks:
            return slice(0, 0)
        if blocks == list(range(blocks[0], blocks[0] + len(blocks))):
            return slice(int(self.starts[blocks[0]]), int(self.starts[blocks[-1] + 1]))
        return np.concatenate([np.arange(self.starts[b], self.starts[b + 1]) for b in blocks])

    def of(self, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """`values[self.rows(counts)]` (one value per runnable row): a view when the blocks
        are consecutive, else their slices joined (a copy, no gather)."""
        blocks = self.blocks(counts)
        if not blocks or blocks == list(range(blocks[0], blocks[0] + len(blocks))):
            return values[self.rows(counts)]
        return np.concatenate([values[self.starts[b]:self.starts[b + 1]] for b in blocks])


def layout_table(req: Any, counts: np.ndarray, axes: Axes,
                 smallest_gpu_bytes: float = math.inf) -> LayoutTable:
    """The runnable layouts of every GPU count (one loop step per count, arrays within), and
    their variants (`variants.sized`; op recompute and offload only of rows that do not fit
    in `smallest_gpu_bytes`, the smallest GPU memory of the search)."""
    counts = np.unique(np.asarray(counts, dtype=np.int64))
    tp_values = np.asarray(axes.tp, dtype=np.int64)
    dropped = np.zeros((len(counts), tp_values.size, 3), dtype=np.int64)
    parts: list[dict[str, np.ndarray]] = []
    for i, c in enumerate(counts):
        # the grid unflattened (`grid.mesh`): the layout rules (elementwise) broadcast, each
        # computed once per combination of the fields it reads; tp*pp*cp divides the count
        f, dropped[i, :, 0] = mesh(int(c), axes)
        shape = np.broadcast_shapes(*(v.shape for v in f.values()))
        valid = np.broadcast_to(_layout(f, req).valid_mask(req.model), shape)
        # Megatron-LM's interleaved schedule runs micro-batches per step in groups of pp
        interleaves = (f["vpp"] == 1) | (req.global_batch % (f["dp"] * f["micro_batch"]
                                                            * f["pp"]) == 0)
        tp_at = np.searchsorted(tp_values, f["tp"].reshape(-1))  # per first-axis triple
        for j, bad in ((1, ~valid), (2, valid & ~interleaves)):
            per_triple = np.count_nonzero(bad, axis=tuple(range(1, bad.ndim)))
            dropped[i, :, j] = np.bincount(tp_at, per_triple, tp_values.size).astype(np.int64)
        parts.append(mesh_rows(f, valid & interleaves))
    g = ({k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts
         else {k: np.zeros(0, dtype=np.int64) for k in _ROW_KEYS})
    mem = _most_loaded(req, g)
    starts = np.concatenate(([0], np.cumsum([p["gpus"].size for p in parts], dtype=np.int64)))
    lay = lambda x: _layout(x, req)  # noqa: E731
    extra = variants.sized(g, mem, smallest_gpu_bytes, lay, req.model, req.site, variants.LAZY)
    g.update(variants.defaults(g["gpus"].size))
    return LayoutTable(g=g, starts=starts, position={int(c): i for i, c in enumerate(counts)},
                       tp_values=tp_values, dropped=dropped, memory_bytes=mem, extra=extra,
                       sizer=lambda rows: variants.size_rows(extra, rows, lay, req.model,
                                                             req.site))


def _most_loaded(req: Any, g: dict[str, np.ndarray]) -> np.ndarray:
    """Memory per GPU of rows g (`memory.most_loaded_total`), in blocks of variants.BLOCK rows
    as `memory.memory_breakdown` evaluates large grids: the same arithmetic row by row (so the
    same values), its temporaries kept in the CPU cache (about 1.8x faster on 200k rows)."""
    n = g["gpus"].size
    mem = np.full(n, np.nan)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for lo in range(0, n, variants.BLOCK):
            part = {k: v[lo:lo + variants.BLOCK] for k, v in g.items()}
            mem[lo:lo + variants.BLOCK] = memory.most_loaded_total(
                req.model, _layout(part, req),
                runtime_overhead_bytes=req.site.runtime_overhead_bytes,
                fragmentation=req.site.fragmentation, stacks=req.site.stack_buffers)
    return mem


_ROW_KEYS = ("gpus", "tp", "pp", "vpp", "cp", "dp", "ep", "zero", "micro_batch", "recompute",
             "precision")


class Tally:
    """Exclusions counted by feasibility code, overall and per accelerator; `log` keeps every
    count in order, so that `replay` adds one tally to another exactly as if counted there."""

    def __init__(self) -> None:
        self.total: Counter = Counter()
        self.by_gpu: dict[str, Counter] = {}
        self.physically_feasible = 0
        self.log: list[tuple[str, str, int]] = []

    def replay(self, other: Tally) -> None:
        for gpu, code, k in other.log:
            self.add(gpu, code, k)
        self.physically_feasible += other.physically_feasible

    def drop(self, gpu: str, code: str, mask: np.ndarray) -> None:
        self.add(gpu, code, int(np.count_nonzero(mask)))

    def add(self, gpu: str, code: str, k: int) -> None:
        if k:
            self.log.append((gpu, code, k))
            self.total[code] += k
            self.by_gpu.setdefault(gpu, Counter())[code] += k

    def apply(self, gpu: str, keep: np.ndarray, checks: list[fz.Check]) -> np.ndarray:
        """Drop the kept rows each check rejects, in order (a row counts under its first)."""
        for c in checks:
            bad = keep & c.bad
            self.drop(gpu, c.code, bad)
            keep = keep & ~bad
        return keep

    def excluded(self) -> tuple[Excluded, ...]:
        return tuple(Excluded(reason=k, count=v)
                     for k, v in sorted(self.total.items(), key=lambda kv: fz.ORDER.index(kv[0]))
                     if v)


@dataclass
class _Work:
    """One group's evaluation between the batched timing steps of `evaluate_groups`."""

    acc_id: str
    counts: np.ndarray
    tally: Tally
    kw: dict[str, Any]  # what variants.candidates needs besides the table and the kinds
    clock: Any  # _Clock
    g: dict[str, np.ndarray]  # the rows to time, then the fastest of each count
    key: Any  # what decides the rows to time (`_rows_key`): equal keys, equal rows


def evaluate_group(req: Any, cat: Catalog, plats: list[Platform], counts: np.ndarray,
                   axes: Axes, tally: Tally, table: LayoutTable | None = None,
                   precisions: tuple[int, ...] | None = None) -> dict[str, np.ndarray]:
    """Physics of one group over its grid and the grid's variants; returns the fastest
    feasible row of each GPU count (and tallies every exclusion). `precisions` (codes): only
    the table's rows of these precisions, the others neither evaluated nor tallied (None:
    all)."""
    if table is None:
        acc = plats[0].accelerator
        assert acc is not None
        table = layout_table(req, counts, axes, acc.memory_bytes)
    return evaluate_groups(req, cat, [(plats, counts, tally)], table, precisions)[0]


def evaluate_groups(req: Any, cat: Catalog,
                    groups: list[tuple[list[Platform], np.ndarray, Tally]], table: LayoutTable,
                    precisions: tuple[int, ...] | None = None,
                    progress: Callable[[int, int], None] | None = None
                    ) -> list[dict[str, np.ndarray]]:
    """`evaluate_group` of each (platforms, counts, tally) group on the shared table: each
    group's rows, checks and tally exactly as alone; groups whose rows to time are the same
    share them, and the step times of all groups take a few calls (`timed.time_many`).
    `progress(i, n)`: called as each group's rows are prepared."""
    works: list[_Work] = []
    seen: dict[Any, tuple[dict[str, np.ndarray], np.ndarray, list[tuple[str, int]]]] = {}
    keys: set[Any] = set()
    chosen = []
    for i, (plats, counts, _) in enumerate(groups):
        if progress:
            progress(i, len(groups))
        chosen.append(_chosen(req, cat, plats, counts, table, precisions, keys))
    # the offload copies' memory every group reads, in one call (`variants.LAZY`)
    variants.size_read(table, [(counts, c.fitting, plats[0].accelerator, precisions)  # type: ignore[misc]
                               for (plats, counts, _), c in zip(groups, chosen, strict=True)
                               if not c.seen])
    for (plats, counts, tally), c in zip(groups, chosen, strict=True):
        works.append(_prepared(req, cat, plats, counts, tally, table, precisions, seen, c))
    # rows provably slower than a row of their count are skipped, counted as they would be
    kept, timed, skipped, busy = prune.timed_rows(req, [(w.g, w.clock, w.key) for w in works],
                                                 table)
    hsdp: list[tuple[_Work, dict[str, np.ndarray]]] = []
    for i, (w, n_skipped) in enumerate(zip(works, skipped, strict=True)):
        g, t = kept[i], timed[i]
        kept[i] = timed[i] = None  # type: ignore[call-overload]  # freed once used (page
        w.tally.physically_feasible += n_skipped  # faults: split.py)
        g, t = _runs(g, t, w.acc_id, w.tally)
        # HSDP copies only where they may be the fastest of their count (variants.hsdp_twins)
        h = variants.candidates(table, w.counts, (0,), **w.kw,
                                busy=np.concatenate([variants.hsdp_twins(g), busy[i]]))
        w.g = _described(fastest_per_count(g), t, w.clock)
        if h["gpus"].size:
            hsdp.append((w, h))
    # HSDP copies provably slower than their count's fastest grid row are skipped likewise
    known = [(w.g["gpus"], w.g["step_s"]) for w, _ in hsdp]
    kept, timed, skipped, _ = prune.timed_rows(req, [(h, w.clock, None) for w, h in hsdp],
                                               table, known)
    for (w, _), h, t, n_skipped in zip(hsdp, kept, timed, skipped, strict=True):
        w.tally.physically_feasible += n_skipped
        h, t = _runs(h, t, w.acc_id, w.tally)  # the fastest of each part at each count, then
        h = _described(fastest_per_count(h), t, w.clock)  # of both
        g = {k: np.concatenate([w.g[k], h[k]]) for k in w.g}
        w.g = fastest_per_count(_take(g, np.argsort(g["gpus"], kind="stable")))
    for w in works:
        for k in ("host_traffic", "row", "dp_exposed", "floor_s", "at"):  # search-internal
            w.g.pop(k)
    return [w.g for w in works]


# the fields of a group's rows until the pruning (prune.timed_rows reads them; it gathers the
# others, `timed.filled`, for the rows it times), beside memory_bytes, host_traffic and row
LEAN = ("gpus", "tp", "ep", "pp", "zero")


def _rows_key(req: Any, cat: Catalog, plats: list[Platform], counts: np.ndarray,
              precisions: tuple[int, ...] | None) -> tuple:
    """Everything `_prepared` reads to choose a group's rows (beyond the shared table): the
    GPU counts and precisions, the hardware rules' inputs (`feasibility.hardware_checks`), the
    GPU memory and the host memory per GPU the offload copies check (`variants.candidates`).
    Two groups with equal keys (e.g. one GPU behind two networks) have the same rows."""
    p0 = plats[0]
    acc = p0.accelerator
    assert acc is not None
    consumer = acc.consumer and not req.filters.allow_consumer
    host = min(host_memory_per_gpu(cat, acc, p) for p in plats)
    return (counts.tobytes(), precisions, p0.scale_up_domain, "fp8" in acc.peak_flops,
            p0.gpus_per_node if consumer else 0, acc.memory_bytes,
            host if host == host else "nan")


@dataclass
class _Chosen:
    """A group's grid rows (`_chosen`), before its variants: its key, the rows, the counts
    where one fits and its tally so far; `seen`: a group of the same key chose them first."""

    key: Any
    g: dict[str, np.ndarray] | None = None
    fitting: np.ndarray | None = None
    mine: Tally | None = None
    seen: bool = False


def _chosen(req: Any, cat: Catalog, plats: list[Platform], counts: np.ndarray,
            table: LayoutTable, precisions: tuple[int, ...] | None, keys: set[Any]) -> _Chosen:
    """The table's rows of a group's counts that pass its hardware rules and fit its memory
    (the others tallied), unless a group of the same `_rows_key` (in `keys`) chose them."""
    p0 = plats[0]
    acc = p0.accelerator
    assert acc is not None
    key = _rows_key(req, cat, plats, counts, precisions)
    if key in keys:
        return _Chosen(key=key, seen=True)
    keys.add(key)
    mine = Tally()
    _tally_dropped(mine, acc.id, table, counts, p0.scale_up_domain)
    idx = table.rows(counts)
    tp, prec, gpus = (table.of(table.g[k], counts) for k in ("tp", "precision", "gpus"))
    wanted = np.ones(tp.shape, dtype=bool) if precisions is None else np.isin(prec, precisions)
    keep = mine.apply(acc.id, wanted, [
        *fz.hardware_checks(tp=tp, precision=prec, gpus=gpus, platform=p0,
                            allow_consumer=req.filters.allow_consumer),
        fz.memory_check(table.of(table.memory_bytes, counts), acc.memory_bytes)])
    rows = (np.arange(table.g["gpus"].size)[idx] if isinstance(idx, slice) else idx)[keep]
    g = {k: table.g[k][rows] for k in LEAN}  # the others once pruned (`timed.filled`)
    g["memory_bytes"] = table.memory_bytes[rows]
    g["host_traffic"] = np.zeros(rows.size)
    g["row"] = rows
    return _Chosen(key=key, g=g, fitting=_distinct(g["gpus"]), mine=mine)


def _distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a), in one pass (no sort) where a does not decrease (rows in table order)."""
    if a.size == 0 or not (a[1:] >= a[:-1]).all():
        return np.unique(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


def _prepared(req: Any, cat: Catalog, plats: list[Platform], counts: np.ndarray, tally: Tally,
              table: LayoutTable, precisions: tuple[int, ...] | None,
              seen: dict[Any, Any] | None = None, chosen: _Chosen | None = None) -> _Work:
    """One group's rows to time: the table's rows of its counts that pass its hardware rules
    and fit its memory (`chosen`, else chosen now), and their op-recompute and offload copies
    (`variants`), sorted by GPU count; every other row tallied. `seen`: rows already chosen
    for groups of the same `_rows_key`, reused (the same arrays, and the same counts tallied
    under this GPU)."""
    p0 = plats[0]
    acc = p0.accelerator
    assert acc is not None
    if chosen is None:
        chosen = _chosen(req, cat, plats, counts, table, precisions,
                         set() if seen is None else set(seen))
    kw = dict(plats=plats, cat=cat, tally=tally, allow_consumer=req.filters.allow_consumer,
              precisions=precisions)
    key = chosen.key
    if seen is not None and key in seen:
        g, fitting, log = seen[key]
        for code, k in log:
            tally.add(acc.id, code, k)
        return _Work(acc_id=acc.id, counts=counts, tally=tally, clock=_clock(req, cat, p0),
                     kw=dict(kw, keys=list(g), fitting=fitting), g=dict(g), key=key)
    g, fitting, mine = chosen.g, chosen.fitting, chosen.mine
    assert g is not None and fitting is not None and mine is not None
    v = variants.candidates(table, counts, (1, 2), **dict(kw, tally=mine, keys=list(g),
                                                           fitting=fitting))
    if v["gpus"].size:  # timed with the grid rows (one call), in GPU-count order
        g = {k: np.concatenate([g[k], v[k]]) for k in g}
        g = _take(g, np.argsort(g["gpus"], kind="stable"))
    log = [(code, k) for _, code, k in mine.log]
    if seen is not None:
        seen[key] = (g, fitting, log)
    for code, k in log:
        tally.add(acc.id, code, k)
    return _Work(acc_id=acc.id, counts=counts, tally=tally, clock=_clock(req, cat, p0),
                 kw=dict(kw, keys=list(g), fitting=fitting), g=dict(g), key=key)


@dataclass(frozen=True, kw_only=True)
class _Clock:
    """What times one group's rows: its hardware, stack, efficiency and interval."""

    hw: Any
    eff: Any
    stack: int  # a code of spec.STACKS
    quantiles: tuple[tuple[str, float], ...]  # (q10, q90, q_rank) step-time factors


def _clock(req: Any, cat: Catalog, plat: Platform) -> _Clock:
    acc = plat.accelerator
    assert acc is not None
    hw = limited(hardware_table(cat, [(acc, plat)]), acc,
                 getattr(req, "power_limit_watts", None))  # plan --power-limit-watts
    stack = req.stack or best_stack(cat, acc.family)
    eff = efficiency_for(cat, hw.family, stack)
    iv = interval(cat, acc.family, stack, bool(np.asarray(eff.guess).reshape(-1)[0]))
    return _Clock(hw=hw, eff=eff, stack=STACKS.index(stack),
                  quantiles=(("q10", iv.p10), ("q90", iv.p90),
                             ("q_rank", at_confidence(iv, req.confidence))))


def _timed(req: Any, g: dict[str, np.ndarray], clock: _Clock, gpu: str,
           tally: Tally) -> tuple[dict[str, np.ndarray], Any]:
    """The step time of rows g on one group's clock (`_runs` of `timed.time_many`)."""
    return _runs(g, time_many(req, [(g, clock, None)])[0], gpu, tally)


def _runs(g: dict[str, np.ndarray], t: Timing, gpu: str,
          tally: Tally) -> tuple[dict[str, np.ndarray], Timing]:
    """Rows g with their step time t: (the rows with a finite step, with what choosing among
    them needs, `at` indexing their timing breakdown; the breakdown). Rows without a finite
    step are excluded (NO_LINK), the others counted physically feasible. `_described` adds
    the rest of a row's figures to the few rows the search keeps."""
    n = g["gpus"].shape
    g["stack"] = t.stack
    g["tokens_per_s"], g["step_s"] = t.full("tokens_per_s"), t.full("step_s")
    g["dp_exposed"] = t.full("dp_comm_s")
    g["floor_s"] = t.floor()
    g["at"] = np.arange(n[0])
    ok = tally.apply(gpu, np.ones(n, dtype=bool), [fz.runs_check(g["step_s"], g["tokens_per_s"])])
    tally.physically_feasible += int(ok.sum())
    return (g if ok.all() else _take(g, ok)), t  # mostly all run: no copy


# the timing breakdown's parts that `_described` reads (bottleneck, small micro-batch, MFU)
_DESCRIBED = ("mfu", "compute_s", "memory_s", "overhead_s", "optimizer_s", "tp_comm_s",
              "dp_comm_s", "bubble_s", "pp_comm_s", "cp_comm_s", "ep_comm_s", "offload_s",
              "matmul_efficiency")


def _described(g: dict[str, np.ndarray], t: Timing, clock: _Clock) -> dict[str, np.ndarray]:
    """Rows g of `_timed` with MFU, bottleneck, small micro-batch, the efficiency's guess flag
    and the interval's factors, read from their breakdown t (row `at`); elementwise, so the
    same figures as computing them over every timed row."""
    at = g["at"]
    sub = SimpleNamespace(**{k: t.pick(k, at) for k in _DESCRIBED})
    n = at.shape
    for key, value, dtype in (
            ("mfu", sub.mfu, float), ("bottleneck", fz.bottleneck(sub), np.intp),
            ("small_mb", fz.small_micro_batch(
                overhead_s=sub.overhead_s, compute_s=sub.compute_s,
                matmul_efficiency=sub.matmul_efficiency, matmul_max=clock.eff.matmul_max), bool),
            ("guess", clock.eff.guess, bool), *((k, q, float) for k, q in clock.quantiles)):
        g[key] = np.broadcast_to(np.asarray(value, dtype=dtype), n).copy()
    return g


def _tally_dropped(tally: Tally, gpu: str, table: LayoutTable, counts: np.ndarray,
                   domain: int) -> None:
    """Tally the rows the table dropped for these counts, each under its first broken rule in
    fz.ORDER: not divisible, then TP beyond the scale-up domain, then the layout rules, then
    interleaving (exactly as if every row went through the checks in order)."""
    d = table.dropped[table.blocks(counts)].sum(axis=0)  # (tp values, 3)
    over = table.tp_values > domain
    tally.add(gpu, fz.DIVIDE, int(d[:, 0].sum()))
    tally.add(gpu, fz.TP_DOMAIN, int(d[over, 1:].sum()))
    tally.add(gpu, fz.LAYOUT, int(d[~over, 1].sum()))
    tally.add(gpu, fz.INTERLEAVE, int(d[~over, 2].sum()))


def fastest_per_count(g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keep the fastest layout at each GPU count (ties: less memory). Exact, not a heuristic:
    within one group and count, every pricing row's cost, days and energy rise with step time,
    so a slower layout is dominated in every objective and under every constraint.
    Rows arrive sorted by GPU count (the table is count-major), so this is O(n) with reduceat."""
    n = g["gpus"].size
    if n == 0:
        return g
    starts = np.flatnonzero(np.concatenate(([True], g["gpus"][1:] != g["gpus"][:-1])))
    segment = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
    tps = g["tokens_per_s"]
    best = tps == np.maximum.reduceat(tps, starts)[segment]
    mem = np.where(best, g["memory_bytes"], np.inf)
    best &= mem == np.minimum.reduceat(mem, starts)[segment]
    first = np.flatnonzero(best)
    _, pick = np.unique(segment[first], return_index=True)
    return _take(g, first[pick])
