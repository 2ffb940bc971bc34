"""`gpuplan plan`: every accelerator x GPU count x layout x pricing option, evaluated at once (L4).

Steps: (1) the platforms that pass the user's filters, grouped by identical physics; (2) per
group (`groups`), the cartesian grid of counts and layouts as flat arrays, masked by the rules of
`feasibility` (structure, hardware, memory, a finite step) -- physics evaluated once per group;
(3) every feasible physics row joined with every pricing row of every platform of its group
(cost is cheap); (4) constraints, ranking, Pareto front and the structured explanations
(`explain`). No Python loop per candidate. Beside the grid, the HSDP, per-op recompute and
CPU offload copies of its rows (`variants`) are candidates too, checked and tallied alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimators import cost as costm
from ..spec import PRECISIONS, R_OP, RECOMPUTE, Accelerator, ModelSpec
from ..units import GiB
from . import cache, split
from . import feasibility as fz
from .evaluate import Site, outcome
from .explain import OBJECTIVES, finish
from .grid import gpu_counts, model_axes
from .groups import (  # noqa: F401  (re-exported: tests and benchmarks reach them here)
    LayoutTable,
    Tally,
    _clock,
    _layout,
    _take,
    evaluate_group,
    evaluate_groups,
    fastest_per_count,
    layout_table,
)
from .platforms import Filters, Platform, PriceRow, group_by_physics, select_platforms
from .power import check_limit, drawn_watts, power_scaling
from .results import PlanResult, PlanRow, SizeResult
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
    # every GPU held to this power (W): peak FLOP/s x its family's factor, energy at the limit
    power_limit_watts: float | None = None

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
        if self.power_limit_watts is not None:
            check_limit(self.power_limit_watts)

    def gpu_watts(self, acc: Accelerator) -> float:
        """The power a GPU of the plan draws at full load: its TDP, or the power limit below
        it (as `estimate --power-limit-watts` costs energy)."""
        return drawn_watts(acc.tdp_watts, self.power_limit_watts)


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
        rows = price_rows([p], req.site, req.filters.pricing, req.power_limit_watts)
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
    usd, capex = price.at(rows["gpus"])  # owning: the scale-out network from two nodes on
    o = outcome(tokens=req.tokens, tokens_per_s=rows["tokens_per_s"], gpus=rows["gpus"],
                gpus_per_node=plat.gpus_per_node, params=req.model.total_params(),
                mode=costm.mode_code(price.mode), usd_per_gpu_hour=usd,
                tdp_watts=req.gpu_watts(acc), host_watts_per_gpu=host_watts,
                site=req.site)
    shape = rows["gpus"].shape
    rows["days"] = np.broadcast_to(np.asarray(o.days, dtype=float), shape).copy()
    rows["cost_usd"] = np.broadcast_to(np.asarray(o.cost_usd, dtype=float), shape).copy()
    rows["energy_kwh"] = np.broadcast_to(np.asarray(o.energy_kwh, dtype=float), shape).copy()
    for key in ("goodput", "useful_days", "gpu_hours", "co2e_kg"):
        rows[key] = np.broadcast_to(np.asarray(getattr(o, key), dtype=float), shape).copy()
    rows["capex_usd"] = rows["gpus"] * capex
    # what constraints and ranking use: the median, or the --confidence quantile
    rows["rank_days"] = rows["days"] * rows["q_rank"]
    rows["rank_cost_usd"] = rows["cost_usd"] * rows["q_rank"]
    rows["meta"] = np.full(rows["gpus"].size, meta_id)
    ends = tally.apply(acc.id, np.ones(shape, dtype=bool), [fz.goodput_check(rows["days"])])
    rows = _take(rows, ends)
    return rows if rows["gpus"].size else None


def _priced(req: Request, g: dict[str, np.ndarray], prices: list[PriceRow],
            host_watts: list[float], tally: Tally, first_meta: int
            ) -> tuple[dict[str, np.ndarray] | None, list[PriceRow]]:
    """Rows g of one group priced every way of `prices` in one `outcome` call: the rows of
    each price row in turn (as `_price` makes them one price row at a time, with the same
    exclusions counted in the same order), and the price rows that kept a row, whose `meta`
    ids run from `first_meta`."""
    k = len(prices)
    acc = prices[0].platform.accelerator
    assert acc is not None
    cap = np.array([p.platform.max_gpus or np.inf for p in prices], dtype=float)
    offered = ~(g["gpus"][None, :] > cap[:, None])  # fz.offer_check of each price row
    at, i = np.nonzero(offered)  # price-major, rows in order within each
    per_price = np.array([(p.platform.gpus_per_node, costm.mode_code(p.mode), h, *p.figures())
                          for p, h in zip(prices, host_watts, strict=True)], dtype=float).T
    gpn, mode, host, usd, capex, usd_n, capex_n = (v[at] for v in per_price)
    rows = {key: v[i] for key, v in g.items()}
    multi = rows["gpus"] > gpn  # owning more than one node buys the scale-out network
    usd, capex = np.where(multi, usd_n, usd), np.where(multi, capex_n, capex)
    o = outcome(tokens=req.tokens, tokens_per_s=rows["tokens_per_s"], gpus=rows["gpus"],
                gpus_per_node=gpn, params=req.model.total_params(), mode=mode.astype(int),
                usd_per_gpu_hour=usd, tdp_watts=req.gpu_watts(acc), host_watts_per_gpu=host,
                site=req.site)
    shape = i.shape
    for key in ("days", "cost_usd", "energy_kwh", "goodput", "useful_days", "gpu_hours",
                "co2e_kg"):
        rows[key] = np.broadcast_to(np.asarray(getattr(o, key), dtype=float), shape).copy()
    rows["capex_usd"] = rows["gpus"] * capex
    rows["rank_days"] = rows["days"] * rows["q_rank"]
    rows["rank_cost_usd"] = rows["cost_usd"] * rows["q_rank"]
    ends = np.isfinite(rows["days"])  # fz.goodput_check
    no_offer = np.bincount(np.nonzero(~offered)[0], minlength=k)
    no_end = np.bincount(at[~ends], minlength=k)
    kept = np.bincount(at[ends], minlength=k)
    for j in range(k):  # tallied as one price row at a time
        tally.add(acc.id, fz.OFFER_CAP, int(no_offer[j]))
        tally.add(acc.id, fz.NO_GOODPUT, int(no_end[j]))
    ids = first_meta + np.cumsum(kept > 0) - 1
    rows["meta"] = ids[at]
    rows = _take(rows, ends)
    return (rows if ends.any() else None), [p for p, m in zip(prices, kept, strict=True) if m]


def _evaluated(cat: Catalog, req: Request, planned: list[_Group], axes: Any,
               all_counts: np.ndarray, progress: Callable[[int, int], None] | None,
               workers: int = 1) -> cache.Entry:
    """The layout table and each group's fastest rows and tally (`evaluate_group`), from the
    installed cache (`search.cache`) when it holds this request's shape, else computed (and
    kept there); over `workers` processes (`split`) when the search is large."""
    store = cache.installed()
    shape = cache.shape_of(req) if store is not None else None
    if store is not None and shape is not None:
        hit = store.get(cat, shape)
        if hit is not None:
            return hit
    sizes = [p.accelerator.memory_bytes for g in planned for p in g.plats
             if p.accelerator is not None]
    smallest = min(sizes, default=math.inf)
    if workers > 1 and all_counts.size * axes.size >= split.MIN_ROWS:
        entry = _split_evaluated(cat, req, planned, axes, all_counts, smallest, workers,
                                 progress)
    else:
        entry = _part(cat, req, planned, axes, all_counts, smallest, progress)
    if store is not None and shape is not None:
        store.put(shape, entry)
    return entry


def _part(cat: Catalog, req: Request, planned: list[_Group], axes: Any, counts: np.ndarray,
          smallest: float, progress: Callable[[int, int], None] | None) -> cache.Entry:
    """The evaluation of these groups on the layout table of these GPU counts."""
    table = layout_table(req, counts, axes, smallest)
    jobs = [(grp.plats, grp.counts, Tally()) for grp in planned if grp.counts.size]
    done = iter(zip(evaluate_groups(req, cat, jobs, table, progress=progress),
                    [j[2] for j in jobs], strict=True))
    groups: list[Any] = [None if grp.counts.size == 0 else next(done) for grp in planned]
    return cache.Entry(catalog=cat, table=table, groups=tuple(groups),
                       variants=tuple(table.variant_count(g.counts) for g in planned))


def _split_evaluated(cat: Catalog, req: Request, planned: list[_Group], axes: Any,
                     all_counts: np.ndarray, smallest: float, workers: int,
                     progress: Callable[[int, int], None] | None) -> cache.Entry:
    """`_part` over the GPU counts dealt to `workers` processes (`split`), joined: each group's
    fastest rows in GPU-count order, its tallies replayed part after part. The table kept is
    this process's part (the outlook builds a table of its own for a count it lacks)."""
    fit = split.STATE_BYTES * req.model.total_params() / max(
        (p.accelerator.memory_bytes for g in planned for p in g.plats if p.accelerator),
        default=1.0)
    dealt = split.deal([g.counts for g in planned], axes, req.global_batch, fit, workers)

    def one(i: int) -> Any:
        mine = [replace(g, counts=g.counts[np.isin(g.counts, dealt[i])]) for g in planned]
        entry = _part(cat, req, mine, axes, dealt[i], smallest, progress if i == 0 else None)
        return entry if i == 0 else (entry.groups, entry.variants)

    first, *others = split.run_parts(one, len(dealt))
    parts = [(first.groups, first.variants), *others]
    groups: list[Any] = []
    for j in range(len(planned)):
        done = [p[0][j] for p in parts if p[0][j] is not None]
        if not done:
            groups.append(None)
            continue
        rows = {k: np.concatenate([g[k] for g, _ in done]) for k in done[0][0]}
        tally = Tally()
        for _, t in done:
            tally.replay(t)
        groups.append((_take(rows, np.argsort(rows["gpus"], kind="stable")), tally))
    variants = tuple(sum(p[1][j] for p in parts) for j in range(len(planned)))
    return cache.Entry(catalog=cat, table=first.table, groups=tuple(groups), variants=variants)


def search(cat: Catalog, req: Request,
           progress: Callable[[int, int], None] | None = None, workers: int = 1) -> PlanResult:
    """Evaluate every candidate; return ranked plans, the Pareto front and the exclusions.
    `workers`: processes a large search may use (`split`; the same result)."""
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
    work = _evaluated(cat, req, planned, axes, all_counts, progress, workers)
    table = work.table
    tally = Tally()
    joined: list[dict[str, np.ndarray]] = []
    meta: list[PriceRow] = []
    for grp, done in zip(planned, work.groups, strict=True):
        if done is None:
            continue
        g, part = done
        tally.replay(part)
        if g["gpus"].size and grp.prices:
            rows, used = _priced(req, g, grp.prices, grp.host_watts, tally, len(meta))
            if rows is not None:
                meta += used
                joined.append(rows)
    if progress:
        progress(len(planned), len(planned))
    allrows = ({k: np.concatenate([j[k] for j in joined]) for k in joined[0]} if joined else {})
    # layouts of the grid and their variants (`variants`), per group
    physics = [g.counts.size * per_group + v for g, v in zip(planned, work.variants,
                                                              strict=True)]
    priced = sum(n * max(len(g.prices), 1) for n, g in zip(physics, planned, strict=True))
    counts = dict(evaluated=priced, physics_evaluated=sum(physics))
    result, winner = finish(req, allrows, meta, counts, tally.excluded(), tally.by_gpu,
                            tally.physically_feasible, excluded_platforms)
    if winner is not None:
        found = next((done for grp, done in zip(planned, work.groups, strict=True)
                      if winner.platform in grp.plats), None)
        result = replace(result, outlook=outlook(cat, req, result.plans[0], winner.platform,
                                                 table, found))
    return with_power(req, platforms, result)


def with_power(req: Request, platforms: list[Platform], result: PlanResult) -> PlanResult:
    """The result stating a power limit: in its assumptions, and each GPU's factor and law
    (`power.power_scaling`) for every accelerator considered; unchanged without one."""
    if req.power_limit_watts is None:
        return result
    accs = {p.accelerator.id: p.accelerator for p in platforms if p.accelerator is not None}
    return replace(result, assumptions=replace(result.assumptions,
                                               power_limit_watts=req.power_limit_watts),
                   power=tuple((k, power_scaling(accs[k], req.power_limit_watts))
                               for k in sorted(accs)))


REUSE = True  # False: the outlook evaluates every count itself (tests compare both)


def searched_row(found: Any, gpus: int, precision: str) -> dict[str, np.ndarray] | None:
    """The search's fastest row of `gpus` GPUs in the winner's group (`found`: its rows, one
    per GPU count, and tally), when it is also what `_size_physics` finds for that count and
    `precision` alone: a row of that precision and a plain grid row (no shard group, offload
    or op recompute). Exact: the fastest row over all precisions, of this precision, is the
    fastest over its own (the first of the same ties, in the same order); a grid row of it
    fits at that count, so the offload copies are unneeded in both; and the HSDP copies are
    timed against the same fastest step. None: `at_size` evaluates the count."""
    if not REUSE or found is None:
        return None
    g = found[0]
    at = np.flatnonzero(g["gpus"] == gpus)
    if at.size != 1:
        return None
    i = int(at[0])
    if (int(g["precision"][i]) != PRECISIONS.index(precision) or g["shard_group"][i]
            or g["offload"][i] or int(g["recompute"][i]) == R_OP):
        return None
    return {k: v[at] for k, v in g.items()}


def at_size(cat: Catalog, req: Request, plat: Platform, gpus: int, mode: str,
            precisions: tuple[str, ...], table: LayoutTable | None = None,
            found: Any = None) -> SizeResult:
    """The fastest layout of `gpus` GPUs on one platform, priced in `mode` (no deadline or
    budget applied): days, cost, tokens/s, MFU -- or not feasible, with the reason's code.
    `table`: the search's layout table, whose rows of this count and these precisions are
    this count's layouts (the same rows, memory and variants a table of its own would hold);
    None, or a count it lacks: a table of its own. `found`: the search's rows of the
    platform's group (`searched_row`), used where they hold this count's answer."""
    if plat.max_gpus and gpus > plat.max_gpus:
        return SizeResult(gpus=gpus, feasible=False, reason=fz.OFFER_CAP)
    row = searched_row(found, gpus, precisions[0]) if len(precisions) == 1 else None
    g, reason = (row, None) if row is not None else _size_physics(cat, req, plat, gpus,
                                                                  precisions, table)
    if reason is not None:
        return SizeResult(gpus=gpus, feasible=False, reason=reason)
    tally = Tally()
    prices = [r for r in price_rows([plat], req.site, power_limit_watts=req.power_limit_watts)
              if r.mode == mode]
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
        cash_up_front_usd=gpus * float(prices[0].at(gpus)[1]))


def _size_physics(cat: Catalog, req: Request, plat: Platform, gpus: int,
                  precisions: tuple[str, ...], table: LayoutTable | None
                  ) -> tuple[dict[str, np.ndarray], str | None]:
    """The fastest layout of `gpus` GPUs on `plat` (`evaluate_group`), or the reason none runs.
    Kept in the search's table (`LayoutTable.sizes`), which holds what depends on the request
    shape alone: later plans of the same shape (search.cache) reuse it."""
    key = (plat.label, plat.physics_key, gpus, precisions)
    if table is not None and key in table.sizes:
        return table.sizes[key]
    axes = model_axes(req.model, req.seq_len, precisions=precisions, counts=[gpus])
    tally = Tally()
    shared = table is not None and gpus in table.position
    g = evaluate_group(req, cat, [plat], np.array([gpus]), axes, tally,
                       table if shared else None, axes.precision if shared else None)
    # the binding reason is the last check that excluded anything (all layouts that passed
    # the earlier checks failed it), not the most frequent one
    reason = (None if g["gpus"].size else
              next((c for c in reversed(fz.ORDER) if tally.total.get(c)), fz.LAYOUT))
    if table is not None:
        table.sizes[key] = (g, reason)
    return g, reason


def _layout_key(r: SizeResult) -> tuple:
    return (r.tp, r.pp, r.zero, r.micro_batch, r.recompute, r.precision)


def outlook(cat: Catalog, req: Request, winner: PlanRow, plat: Platform,
            table: LayoutTable | None = None, found: Any = None) -> tuple[SizeResult, ...]:
    """Days, cost and scaling efficiency of the winner's platform at 1/2x, 2x and 4x its GPUs
    (the fastest layout at each count, same pricing; constraints other than memory ignored).
    Scaling efficiency is tokens/s per GPU relative to the smallest feasible size shown; above
    1 when more GPUs free the memory for a faster layout (noted as 'faster_layout')."""
    base = winner.gpus
    counts = [c for c in (base // 2, base, base * 2, base * 4)
              if c >= plat.gpus_per_node and c % plat.gpus_per_node == 0]
    out = [at_size(cat, req, plat, c, winner.pricing, (winner.precision,), table, found)
           for c in counts]
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
