"""`gpuplan plan`: every accelerator x GPU count x layout x pricing option, evaluated at once (L4).

Steps: (1) the platforms that pass the user's filters, grouped by identical physics; (2) per
group, the cartesian grid of counts and layouts as flat arrays, masked by the rules of
`feasibility` (structure, hardware, memory, a finite step) -- physics evaluated once per group;
(3) every feasible physics row joined with every pricing row of every platform of its group
(cost is cheap); (4) constraints, ranking, Pareto front and the structured explanations
(`explain`). No Python loop per candidate. Beside the grid, the HSDP, per-op recompute and
CPU offload copies of its rows (`variants`) are candidates too, checked and tallied alike.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimators import cost as costm
from ..estimators import memory
from ..spec import PRECISIONS, RECOMPUTE, STACKS, Layout, ModelSpec
from ..units import GiB
from . import feasibility as fz
from . import variants
from .evaluate import Site, outcome, time_per_step
from .explain import OBJECTIVES, finish
from .grid import Axes, gpu_counts, model_axes, product
from .hardware import best_stack, efficiency_for, hardware_table
from .intervals import at_confidence, interval
from .platforms import Filters, Platform, PriceRow, group_by_physics, select_platforms
from .results import Excluded, PlanResult, PlanRow, SizeResult
from .single import host_watts_per_gpu, price_rows

DEFAULT_MAX_GPUS = 16384
# Without --deadline-days the plan asks for a run within a year: the cheapest plan is otherwise
# the slowest one (a 2-year run on a few spot GPUs), which nobody would choose.
DEFAULT_DEADLINE_DAYS = 365.0
MAX_GPUS_CAP = 2**20  # the largest cluster the search enumerates (1,048,576 GPUs)
SEARCH_CAP = 200_000_000  # candidates (layouts x GPU counts x prices); above, narrow the search


@dataclass(frozen=True, kw_only=True)
class Request:
    model: ModelSpec
    tokens: float
    seq_len: int
    global_batch: int
    deadline_days: float | None = None  # None: DEFAULT_DEADLINE_DAYS, stated in the result
    budget_usd: float | None = None
    max_gpus: int = DEFAULT_MAX_GPUS
    objective: str = "cost"
    top: int = 10
    filters: Filters = field(default_factory=Filters)
    precisions: tuple[str, ...] = ("bf16", "fp8")
    site: Site
    stack: str | None = None  # a name of spec.STACKS; None: each family's best-supported stack
    confidence: float | None = None  # rank on this quantile of time and cost (None: median)

    @property
    def deadline(self) -> float:
        return DEFAULT_DEADLINE_DAYS if self.deadline_days is None else self.deadline_days

    def check(self) -> None:
        if not (self.tokens > 0 and math.isfinite(self.tokens)):
            raise ConfigError("--tokens must be a finite number more than 0 (e.g. 15T); the "
                              "plan needs to know how much to train")
        if self.deadline_days is not None and not (
                self.deadline_days > 0 and math.isfinite(self.deadline_days)):
            raise ConfigError(f"--deadline-days must be in the future (> 0) and finite, got "
                              f"{self.deadline_days:g}")
        if self.budget_usd is not None and not (
                self.budget_usd > 0 and math.isfinite(self.budget_usd)):
            raise ConfigError(f"--budget-usd must be more than 0 and finite, got "
                              f"{self.budget_usd:g}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--objective must be one of {', '.join(OBJECTIVES)}")
        if self.max_gpus < 1:
            raise ConfigError("--max-gpus must be at least 1")
        if self.max_gpus > MAX_GPUS_CAP:
            raise ConfigError(f"--max-gpus {self.max_gpus:,} is above the cap of "
                              f"{MAX_GPUS_CAP:,} GPUs the search enumerates; lower it")
        if self.top < 1:
            raise ConfigError("--top must be at least 1")


def _layout(g: dict[str, np.ndarray], req: Request) -> Layout:
    return Layout(tp=g["tp"], pp=g["pp"], dp=g["dp"], cp=g["cp"], ep=g["ep"], vpp=g["vpp"],
                  zero=g["zero"], micro_batch=g["micro_batch"], global_batch=req.global_batch,
                  seq_len=req.seq_len, recompute=g["recompute"], precision=g["precision"],
                  shard_group=_field(g, "shard_group"), offload=_field(g, "offload"))


def _field(g: dict[str, np.ndarray], key: str) -> np.ndarray | int:
    """A variant field of rows g, 0 when no row sets it (the estimators' scalar path)."""
    v = g.get(key)
    return v if v is not None and v.any() else 0


def _take(g: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in g.items()}


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

    def variant_count(self, counts: np.ndarray) -> int:
        """The variant candidates of these GPU counts (all kinds)."""
        return int(np.isin(self.extra["gpus"], counts).sum()) if self.extra else 0

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


def layout_table(req: Request, counts: np.ndarray, axes: Axes,
                 smallest_gpu_bytes: float = math.inf) -> LayoutTable:
    """The runnable layouts of every GPU count (one loop step per count, arrays within), and
    their variants (`variants.sized`; op recompute and offload only of rows that do not fit
    in `smallest_gpu_bytes`, the smallest GPU memory of the search)."""
    counts = np.unique(np.asarray(counts, dtype=np.int64))
    tp_values = np.asarray(axes.tp, dtype=np.int64)
    dropped = np.zeros((len(counts), tp_values.size, 3), dtype=np.int64)
    parts: list[dict[str, np.ndarray]] = []
    for i, c in enumerate(counts):
        g, dropped[i, :, 0] = product(int(c), axes)  # tp*pp*cp divides the count
        valid = _layout(g, req).valid_mask(req.model)
        # Megatron-LM's interleaved schedule runs micro-batches per step in groups of pp
        interleaves = (g["vpp"] == 1) | (req.global_batch % (g["dp"] * g["micro_batch"]
                                                            * g["pp"]) == 0)
        tp_at = np.searchsorted(tp_values, g["tp"])
        dropped[i, :, 1] = np.bincount(tp_at[~valid], minlength=tp_values.size)
        dropped[i, :, 2] = np.bincount(tp_at[valid & ~interleaves], minlength=tp_values.size)
        parts.append(_take(g, valid & interleaves))
    g = ({k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts
         else {k: np.zeros(0, dtype=np.int64) for k in _ROW_KEYS})
    mem = np.full(g["gpus"].size, np.nan)
    if g["gpus"].size:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            mem = np.asarray(memory.most_loaded_total(
                req.model, _layout(g, req), runtime_overhead_bytes=req.site.runtime_overhead_bytes,
                fragmentation=req.site.fragmentation, stacks=req.site.stack_buffers),
                dtype=float)
    starts = np.concatenate(([0], np.cumsum([p["gpus"].size for p in parts], dtype=np.int64)))
    extra = variants.sized(g, mem, smallest_gpu_bytes, lambda x: _layout(x, req), req.model,
                           req.site)
    g.update(variants.defaults(g["gpus"].size))
    return LayoutTable(g=g, starts=starts, position={int(c): i for i, c in enumerate(counts)},
                       tp_values=tp_values, dropped=dropped, memory_bytes=mem, extra=extra)


_ROW_KEYS = ("gpus", "tp", "pp", "vpp", "cp", "dp", "ep", "zero", "micro_batch", "recompute",
             "precision")


class Tally:
    """Exclusions counted by feasibility code, overall and per accelerator."""

    def __init__(self) -> None:
        self.total: Counter = Counter()
        self.by_gpu: dict[str, Counter] = {}
        self.physically_feasible = 0

    def drop(self, gpu: str, code: str, mask: np.ndarray) -> None:
        self.add(gpu, code, int(np.count_nonzero(mask)))

    def add(self, gpu: str, code: str, k: int) -> None:
        if k:
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


def evaluate_group(req: Request, cat: Catalog, plats: list[Platform], counts: np.ndarray,
                   axes: Axes, tally: Tally, table: LayoutTable | None = None
                   ) -> dict[str, np.ndarray]:
    """Physics of one group over its grid and the grid's variants; returns the fastest
    feasible row of each GPU count (and tallies every exclusion)."""
    p0 = plats[0]
    acc = p0.accelerator
    assert acc is not None
    if table is None:
        table = layout_table(req, counts, axes, acc.memory_bytes)
    _tally_dropped(tally, acc.id, table, counts, p0.scale_up_domain)
    idx = table.rows(counts)
    tp, prec, gpus = (table.g[k][idx] for k in ("tp", "precision", "gpus"))
    keep = tally.apply(acc.id, np.ones(tp.shape, dtype=bool), [
        *fz.hardware_checks(tp=tp, precision=prec, gpus=gpus, platform=p0,
                            allow_consumer=req.filters.allow_consumer),
        fz.memory_check(table.memory_bytes[idx], acc.memory_bytes)])
    rows = (np.arange(table.g["gpus"].size)[idx] if isinstance(idx, slice) else idx)[keep]
    g = {k: v[rows] for k, v in table.g.items()}
    g["memory_bytes"] = table.memory_bytes[rows]
    g["host_traffic"] = np.zeros(rows.size)
    g["row"] = rows
    kw = dict(plats=plats, cat=cat, tally=tally, keys=list(g), fitting=np.unique(g["gpus"]),
              allow_consumer=req.filters.allow_consumer)
    v = variants.candidates(table, counts, (1, 2), **kw)  # op recompute, offload
    if v["gpus"].size:  # timed with the grid rows (one call), in GPU-count order
        g = {k: np.concatenate([g[k], v[k]]) for k in g}
        g = _take(g, np.argsort(g["gpus"], kind="stable"))
    clock = _clock(req, cat, p0)
    g, t = _timed(req, g, clock, acc.id, tally)
    # HSDP copies only where they may be the fastest of their count (variants.hsdp_twins)
    h = variants.candidates(table, counts, (0,), busy=variants.hsdp_twins(g), **kw)
    g = _described(fastest_per_count(g), t, clock)
    if h["gpus"].size:  # the fastest of each part at each count, then of both
        h, t = _timed(req, h, clock, acc.id, tally)
        h = _described(fastest_per_count(h), t, clock)
        g = {k: np.concatenate([g[k], h[k]]) for k in g}
        g = fastest_per_count(_take(g, np.argsort(g["gpus"], kind="stable")))
    for k in ("host_traffic", "row", "dp_exposed", "floor_s", "at"):  # search-internal
        g.pop(k)
    return g


@dataclass(frozen=True, kw_only=True)
class _Clock:
    """What times one group's rows: its hardware, stack, efficiency and interval."""

    hw: Any
    eff: Any
    stack: int  # a code of spec.STACKS
    quantiles: tuple[tuple[str, float], ...]  # (q10, q90, q_rank) step-time factors


def _clock(req: Request, cat: Catalog, plat: Platform) -> _Clock:
    acc = plat.accelerator
    assert acc is not None
    hw = hardware_table(cat, [(acc, plat)])
    stack = req.stack or best_stack(cat, acc.family)
    eff = efficiency_for(cat, hw.family, stack)
    iv = interval(cat, acc.family, stack, bool(np.asarray(eff.guess).reshape(-1)[0]))
    return _Clock(hw=hw, eff=eff, stack=STACKS.index(stack),
                  quantiles=(("q10", iv.p10), ("q90", iv.p90),
                             ("q_rank", at_confidence(iv, req.confidence))))


def _timed(req: Request, g: dict[str, np.ndarray], clock: _Clock, gpu: str,
           tally: Tally) -> tuple[dict[str, np.ndarray], Any]:
    """The step time of rows g: (the rows with a finite step, with what choosing among them
    needs, `at` indexing their timing breakdown; the breakdown). Rows without a finite step are
    excluded (NO_LINK), the others counted physically feasible. `_described` adds the rest of
    a row's figures to the few rows the search keeps."""
    n = g["gpus"].shape
    g["stack"] = np.full(n, clock.stack)
    t = time_per_step(req.model, replace(_layout(g, req), stack=g["stack"]), clock.hw,
                      clock.eff, g["host_traffic"])
    for key, value in (("tokens_per_s", t.tokens_per_s), ("step_s", t.step_s),
                       ("dp_exposed", t.dp_comm_s),
                       ("floor_s", t.compute_s + t.memory_s + t.overhead_s + t.optimizer_s)):
        g[key] = np.broadcast_to(np.asarray(value, dtype=float), n).copy()
    g["at"] = np.arange(n[0])
    ok = tally.apply(gpu, np.ones(n, dtype=bool), [fz.runs_check(g["step_s"], g["tokens_per_s"])])
    tally.physically_feasible += int(ok.sum())
    return _take(g, ok), t


# the timing breakdown's parts that `_described` reads (bottleneck, small micro-batch, MFU)
_DESCRIBED = ("mfu", "compute_s", "memory_s", "overhead_s", "optimizer_s", "tp_comm_s",
              "dp_comm_s", "bubble_s", "pp_comm_s", "cp_comm_s", "ep_comm_s", "offload_s",
              "matmul_efficiency")


def _described(g: dict[str, np.ndarray], t: Any, clock: _Clock) -> dict[str, np.ndarray]:
    """Rows g of `_timed` with MFU, bottleneck, small micro-batch, the efficiency's guess flag
    and the interval's factors, read from their breakdown t (row `at`); elementwise, so the
    same figures as computing them over every timed row."""
    shape, at = np.shape(t.step_s), g["at"]
    sub = SimpleNamespace(**{k: np.broadcast_to(np.asarray(getattr(t, k)), shape)[at]
                             for k in _DESCRIBED})
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


@dataclass(frozen=True, kw_only=True)
class _Group:
    plats: list[Platform]
    counts: np.ndarray
    prices: list[PriceRow]
    host_watts: list[float]  # host power per GPU of each price row's platform


def _group(req: Request, cat: Catalog, plats: list[Platform], cap: int) -> _Group:
    """The GPU counts and price rows of one physics group; host power once per platform."""
    prices: list[PriceRow] = []
    host_watts: list[float] = []
    for p in plats:
        rows = price_rows([p], req.site, req.filters.pricing)
        watts = host_watts_per_gpu(cat, p) if rows else 0.0
        prices += rows
        host_watts += [watts] * len(rows)
    return _Group(plats=plats, counts=gpu_counts(plats[0].gpus_per_node, cap), prices=prices,
                  host_watts=host_watts)


def _price(req: Request, g: dict[str, np.ndarray], price: PriceRow, host_watts: float,
           tally: Tally, meta_id: int) -> dict[str, np.ndarray] | None:
    """Rows of one group priced one way: days, cost, energy; rows the offer cannot supply or
    whose run never ends (goodput 0) are excluded. `host_watts` is the platform's host power
    per GPU (`host_watts_per_gpu`)."""
    plat = price.platform
    acc = plat.accelerator
    assert acc is not None
    sel = tally.apply(acc.id, np.ones(g["gpus"].size, dtype=bool),
                      [fz.offer_check(g["gpus"], plat)])
    rows = _take(g, sel)
    if rows["gpus"].size == 0:
        return None
    o = outcome(tokens=req.tokens, tokens_per_s=rows["tokens_per_s"], gpus=rows["gpus"],
                gpus_per_node=plat.gpus_per_node, params=req.model.total_params(),
                mode=costm.mode_code(price.mode), usd_per_gpu_hour=price.usd_per_gpu_hour,
                tdp_watts=acc.tdp_watts, host_watts_per_gpu=host_watts,
                site=req.site)
    shape = rows["gpus"].shape
    rows["days"] = np.broadcast_to(np.asarray(o.days, dtype=float), shape).copy()
    rows["cost_usd"] = np.broadcast_to(np.asarray(o.cost_usd, dtype=float), shape).copy()
    rows["energy_kwh"] = np.broadcast_to(np.asarray(o.energy_kwh, dtype=float), shape).copy()
    for key in ("goodput", "useful_days", "gpu_hours", "co2e_kg"):
        rows[key] = np.broadcast_to(np.asarray(getattr(o, key), dtype=float), shape).copy()
    rows["capex_usd"] = rows["gpus"] * price.capex_per_gpu
    # what constraints and ranking use: the median, or the --confidence quantile
    rows["rank_days"] = rows["days"] * rows["q_rank"]
    rows["rank_cost_usd"] = rows["cost_usd"] * rows["q_rank"]
    rows["meta"] = np.full(rows["gpus"].size, meta_id)
    ends = tally.apply(acc.id, np.ones(shape, dtype=bool), [fz.goodput_check(rows["days"])])
    rows = _take(rows, ends)
    return rows if rows["gpus"].size else None


def search(cat: Catalog, req: Request,
           progress: Callable[[int, int], None] | None = None) -> PlanResult:
    """Evaluate every candidate; return ranked plans, the Pareto front and the exclusions."""
    req.check()
    platforms, excluded_platforms = select_platforms(cat, req.filters)
    planned = []
    for plats in group_by_physics(platforms).values():
        cap = min(req.max_gpus, max(p.max_gpus or req.max_gpus for p in plats))
        planned.append(_group(req, cat, plats, cap))
    all_counts = (np.concatenate([g.counts for g in planned]) if planned
                  else np.zeros(0, dtype=np.int64))
    axes = model_axes(req.model, req.seq_len, precisions=req.precisions, counts=all_counts)
    per_group = axes.size
    total = sum(g.counts.size * per_group * len(g.prices) for g in planned)
    if total > SEARCH_CAP:
        raise ConfigError(f"the search space has {total:,} candidates, above the cap of "
                          f"{SEARCH_CAP:,}; narrow it with --gpu, --max-gpus, --cloud or "
                          f"--acquisition")
    sizes = [p.accelerator.memory_bytes for g in planned for p in g.plats
             if p.accelerator is not None]
    table = layout_table(req, all_counts, axes, min(sizes, default=math.inf))
    tally = Tally()
    joined: list[dict[str, np.ndarray]] = []
    meta: list[PriceRow] = []
    for i, grp in enumerate(planned):
        if progress:
            progress(i, len(planned))
        if grp.counts.size == 0:
            continue
        g = evaluate_group(req, cat, grp.plats, grp.counts, axes, tally, table)
        for price, host in zip(grp.prices, grp.host_watts, strict=True):
            rows = _price(req, g, price, host, tally, len(meta)) if g["gpus"].size else None
            if rows is not None:
                meta.append(price)
                joined.append(rows)
    if progress:
        progress(len(planned), len(planned))
    allrows = ({k: np.concatenate([j[k] for j in joined]) for k in joined[0]} if joined else {})
    # layouts of the grid and their variants (`variants`), per group
    physics = [g.counts.size * per_group + table.variant_count(g.counts) for g in planned]
    priced = sum(n * max(len(g.prices), 1) for n, g in zip(physics, planned, strict=True))
    counts = dict(evaluated=priced, physics_evaluated=sum(physics))
    result, winner = finish(req, allrows, meta, counts, tally.excluded(), tally.by_gpu,
                            tally.physically_feasible, excluded_platforms)
    if winner is not None:
        result = replace(result, outlook=outlook(cat, req, result.plans[0], winner.platform))
    return result


def at_size(cat: Catalog, req: Request, plat: Platform, gpus: int, mode: str,
            precisions: tuple[str, ...]) -> SizeResult:
    """The fastest layout of `gpus` GPUs on one platform, priced in `mode` (no deadline or
    budget applied): days, cost, tokens/s, MFU -- or not feasible, with the reason's code."""
    if plat.max_gpus and gpus > plat.max_gpus:
        return SizeResult(gpus=gpus, feasible=False, reason=fz.OFFER_CAP)
    axes = model_axes(req.model, req.seq_len, precisions=precisions, counts=[gpus])
    tally = Tally()
    g = evaluate_group(req, cat, [plat], np.array([gpus]), axes, tally)
    if g["gpus"].size == 0:
        # the binding reason is the last check that excluded anything (all layouts that
        # passed the earlier checks failed it), not the most frequent one
        reason = next((c for c in reversed(fz.ORDER) if tally.total.get(c)), fz.LAYOUT)
        return SizeResult(gpus=gpus, feasible=False, reason=reason)
    prices = [r for r in price_rows([plat], req.site) if r.mode == mode]
    if not prices:
        return SizeResult(gpus=gpus, feasible=False, reason=f"no_price_{mode}")
    # one GPU count: evaluate_group already kept its fastest layout alone
    rows = _price(req, g, prices[0], host_watts_per_gpu(cat, plat), tally, 0)
    if rows is None:
        return SizeResult(gpus=gpus, feasible=False, reason=fz.NO_GOODPUT)
    assert plat.accelerator is not None
    return SizeResult(
        gpus=gpus, feasible=True, gpu=plat.accelerator.id, platform=plat.label, pricing=mode,
        time_to_train_days=float(rows["days"][0]), cost_usd=float(rows["cost_usd"][0]),
        useful_days=float(rows["useful_days"][0]), goodput=float(rows["goodput"][0]),
        gpu_hours=float(rows["gpu_hours"][0]), energy_kwh=float(rows["energy_kwh"][0]),
        co2e_kg=float(rows["co2e_kg"][0]),
        tokens_per_s=float(rows["tokens_per_s"][0]), mfu=float(rows["mfu"][0]),
        tp=int(rows["tp"][0]), pp=int(rows["pp"][0]), dp=int(rows["dp"][0]),
        zero=int(rows["zero"][0]), micro_batch=int(rows["micro_batch"][0]),
        precision=PRECISIONS[int(rows["precision"][0])],
        recompute=RECOMPUTE[int(rows["recompute"][0])],
        memory_gib_per_gpu=float(rows["memory_bytes"][0]) / GiB,
        cash_up_front_usd=gpus * prices[0].capex_per_gpu)


def _layout_key(r: SizeResult) -> tuple:
    return (r.tp, r.pp, r.zero, r.micro_batch, r.recompute, r.precision)


def outlook(cat: Catalog, req: Request, winner: PlanRow, plat: Platform
            ) -> tuple[SizeResult, ...]:
    """Days, cost and scaling efficiency of the winner's platform at 1/2x, 2x and 4x its GPUs
    (the fastest layout at each count, same pricing; constraints other than memory ignored).
    Scaling efficiency is tokens/s per GPU relative to the smallest feasible size shown; above
    1 when more GPUs free the memory for a faster layout (noted as 'faster_layout')."""
    base = winner.gpus
    counts = [c for c in (base // 2, base, base * 2, base * 4)
              if c >= plat.gpus_per_node and c % plat.gpus_per_node == 0]
    out = [at_size(cat, req, plat, c, winner.pricing, (winner.precision,)) for c in counts]
    ref = next((r for r in out if r.feasible), None)
    if ref is None:
        return tuple(out)
    per_gpu = (ref.tokens_per_s or 0.0) / ref.gpus
    done = []
    for r in out:
        if r.feasible and per_gpu > 0:
            eff = (r.tokens_per_s or 0.0) / r.gpus / per_gpu
            note = ("faster_layout" if eff > 1 + 1e-9 and _layout_key(r) != _layout_key(ref)
                    else None)
            r = replace(r, scaling_efficiency=eff, scaling_note=note)
        done.append(r)
    return tuple(done)
