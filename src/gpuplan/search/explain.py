"""Constraints, ranking, Pareto front and the structured explanations of a plan (L4).

`finish` takes the priced feasible rows of `plan.search` and returns the `PlanResult`: the
ranked options, the front, the best row per objective, and as data (never sentences) why the
winner won (`Comparison`, `Note`), what to relax when nothing fits (`Relax`) and why a GPU the
user named is missing (`Favourite`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from ..spec import PRECISIONS, RECOMPUTE, STACKS, offload_names
from ..units import GiB
from . import feasibility as fz
from .pareto import pareto_front
from .platforms import PriceRow
from .results import (
    Assumptions,
    Comparison,
    Excluded,
    Favourite,
    Note,
    PlanResult,
    PlanRow,
    Relax,
)

if TYPE_CHECKING:
    from .evaluate import Site
    from .plan import Request

OBJECTIVES = ("cost", "time", "energy")
LONG_RUN_DAYS = 180.0  # a winner slower than this gets a note (hardware and prices move)

Rows = dict[str, np.ndarray]


def plan_row(rows: Rows, i: int, meta: list[PriceRow], req: Request) -> PlanRow:
    price = meta[int(rows["meta"][i])]
    plat = price.platform
    acc = plat.accelerator
    assert acc is not None
    mem = float(rows["memory_bytes"][i])
    gpus = int(rows["gpus"][i])
    return PlanRow(
        gpu=acc.id, gpus=gpus, nodes=-(-gpus // plat.gpus_per_node), tp=int(rows["tp"][i]),
        pp=int(rows["pp"][i]), dp=int(rows["dp"][i]), cp=int(rows["cp"][i]),
        ep=int(rows["ep"][i]), vpp=int(rows["vpp"][i]), zero=int(rows["zero"][i]),
        micro_batch=int(rows["micro_batch"][i]), global_batch=req.global_batch,
        seq_len=req.seq_len, recompute=RECOMPUTE[int(rows["recompute"][i])],
        precision=PRECISIONS[int(rows["precision"][i])], acquisition=plat.acquisition,
        offer=plat.offer.id if plat.offer else None,
        system=plat.system.id if plat.system else None, platform=plat.label,
        pricing=price.mode, usd_per_gpu_hour=float(price.at(gpus)[0]),
        time_to_train_days=float(rows["days"][i]), cost_usd=float(rows["cost_usd"][i]),
        energy_kwh=float(rows["energy_kwh"][i]), goodput=float(rows["goodput"][i]),
        mfu=float(rows["mfu"][i]), tokens_per_s=float(rows["tokens_per_s"][i]),
        step_time_s=float(rows["step_s"][i]), memory_gib_per_gpu=mem / GiB,
        gpu_memory_gib=acc.memory_bytes / GiB, headroom_gib=(acc.memory_bytes - mem) / GiB,
        bottleneck=fz.BOTTLENECKS[int(rows["bottleneck"][i])],
        micro_batch_too_small=bool(rows["small_mb"][i]),
        cash_up_front_usd=float(rows["capex_usd"][i]) if plat.acquisition == "own" else 0.0,
        export_cn=acc.export_cn, vendor=acc.vendor, efficiency_is_guess=bool(rows["guess"][i]),
        stack=STACKS[int(rows["stack"][i])] if "stack" in rows else STACKS[0],
        shard_group=int(rows["shard_group"][i]) if "shard_group" in rows else 0,
        offload_parts=offload_names(int(rows["offload"][i])) if "offload" in rows else (),
        **_spot_spread(price), **_ranges(rows, i))


def _spot_spread(price: PriceRow) -> dict[str, Any]:
    """The spread a spot row was ranked on, per GPU-hour (only offers that record one)."""
    o = price.platform.offer
    if price.mode != "spot" or o is None or o.spot_usd_per_hour_min is None:
        return {}
    assert o.spot_usd_per_hour_max is not None
    return {"spot_spread_usd_per_gpu_hour": (o.spot_usd_per_hour_min / o.count,
                                             o.spot_usd_per_hour_max / o.count),
            "spot_observations": o.spot_observations}


def _ranges(rows: Rows, i: int) -> dict[str, Any]:
    """The P10/P90 fields of one plan row (search.intervals ratios times its figures)."""
    if "q10" not in rows:
        return {}
    out: dict[str, float | None] = {}
    for field, key in (("step_time_s", "step_s"), ("time_to_train_days", "days"),
                       ("cost_usd", "cost_usd")):
        for q in ("10", "90"):
            out[f"{field}_p{q}"] = float(rows[key][i] * rows[f"q{q}"][i])
    return out


def assumptions(site: Site) -> Assumptions:
    return Assumptions(
        own_years=site.years, own_utilization=site.utilization,
        commitment_reuse_utilization=site.reuse_utilization,
        spot_interruptions_per_instance_hour=site.spot_interruptions_per_hour,
        gpu_mtbf_hours=site.gpu_mtbf_hours,
        electricity_usd_per_kwh=site.electricity_usd_per_kwh, pue=site.pue,
        allocator=site.allocator)


def objective_key(rows: Rows, objective: str) -> tuple[np.ndarray, ...]:
    days, cost = rows.get("rank_days", rows["days"]), rows.get("rank_cost_usd", rows["cost_usd"])
    if objective == "time":
        return cost, days  # lexsort: last key is primary
    if objective == "energy":
        return cost, rows["energy_kwh"]
    return days, cost


def _dedupe(rows: Rows, order: np.ndarray) -> np.ndarray:
    """Keep the first (best) row of each way to get GPUs (platform and pricing) in `order`, so
    the ranking lists distinct options; other GPU counts show in the outlook and the front."""
    _, first = np.unique(rows["meta"][order], return_index=True)
    return order[np.sort(first)]


def _constraints(req: Request, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """(late, over): rows that miss the deadline; rows over the budget. The budget caps money
    spent: the cloud bill, or for owned hardware the purchase when it exceeds the run's share
    of the cluster's lifetime cost."""
    late = rows.get("rank_days", rows["days"]) > req.deadline
    over = np.zeros(late.shape, dtype=bool)
    if req.budget_usd is not None:
        cost = rows.get("rank_cost_usd", rows["cost_usd"])
        over = np.maximum(cost, rows["capex_usd"]) > req.budget_usd
    return late, over


def finish(req: Request, rows: Rows, meta: list[PriceRow], counts: dict[str, int],
           excluded: tuple[Excluded, ...], by_gpu: dict[str, Counter], physically_feasible: int,
           excluded_platforms: tuple[Any, ...]) -> tuple[PlanResult, PriceRow | None]:
    """The result, and the winner's way to pay (None when nothing meets the constraints)."""
    n = rows["gpus"].size if rows else 0
    base: dict[str, Any] = dict(
        model=req.model.id, tokens=req.tokens, seq_len=req.seq_len,
        global_batch=req.global_batch, objective=req.objective, deadline_days=req.deadline,
        deadline_is_default=req.deadline_days is None, budget_usd=req.budget_usd,
        physically_feasible=physically_feasible, plans=(), pareto=(), best=(), why=(),
        outlook=(), excluded_platforms=excluded_platforms, assumptions=assumptions(req.site),
        export_region=req.filters.export_region, stack=req.stack, confidence=req.confidence,
        **counts)
    if n == 0:
        return PlanResult(**base, feasible=0, options=0, excluded=excluded,
                          relax=_relax_nothing_fits(req, excluded),
                          favourite=_favourite(req, by_gpu, excluded_platforms, set())), None
    late, over = _constraints(req, rows)
    tally = Counter({e.reason: e.count for e in excluded})
    tally[fz.DEADLINE] += int(late.sum())
    tally[fz.BUDGET] += int((over & ~late).sum())
    excluded = tuple(Excluded(reason=k, count=tally[k]) for k in fz.ORDER if tally.get(k))
    ok = ~late & ~over
    gpu_of = np.array([m.platform.accelerator.id for m in meta  # type: ignore[union-attr]
                       ])[rows["meta"]]
    by_gpu = {k: Counter(v) for k, v in by_gpu.items()}
    for code, mask in ((fz.DEADLINE, late), (fz.BUDGET, over & ~late)):
        for gpu, k in zip(*np.unique(gpu_of[mask], return_counts=True), strict=True):
            by_gpu.setdefault(str(gpu), Counter())[code] += int(k)
    feasible_gpus = set(gpu_of[ok].tolist())
    favourite = _favourite(req, by_gpu, excluded_platforms, feasible_gpus)
    if not ok.any():
        return PlanResult(**base, feasible=0, options=0, excluded=excluded,
                          relax=_relax(req, rows, late, over), favourite=favourite), None
    sub = {k: v[ok] for k, v in rows.items()}
    order = np.lexsort(objective_key(sub, req.objective))
    ranked = _dedupe(sub, order)
    plans = tuple(plan_row(sub, i, meta, req) for i in ranked[: req.top])
    best = tuple((obj, plan_row(sub, order[0] if obj == req.objective
                                else np.lexsort(objective_key(sub, obj))[0], meta, req))
                 for obj in OBJECTIVES)
    base.update(plans=plans, best=best,
                pareto=tuple(plan_row(sub, i, meta, req)
                             for i in pareto_front(sub["cost_usd"], sub["days"])),
                why=_why(req, sub, ranked, meta, plans[0]))
    return (PlanResult(**base, feasible=int(ok.sum()), options=len(ranked), excluded=excluded,
                       relax=(), favourite=favourite), meta[int(sub["meta"][order[0]])])


def _compare(label: str, r: PlanRow, w: PlanRow) -> Comparison:
    return Comparison(label=label, row=r,
                      cost_ratio=r.cost_usd / w.cost_usd if w.cost_usd > 0 else None,
                      time_ratio=r.time_to_train_days / w.time_to_train_days)


def _why(req: Request, sub: Rows, ranked: np.ndarray, meta: list[PriceRow],
         winner: PlanRow) -> tuple[Comparison | Note, ...]:
    """The runner-up, the best option without spot and of the other acquisition, and the
    facts a reader must know about the winner."""
    out: list[Comparison | Note] = []
    shown = {int(sub["meta"][ranked[0]])}

    def mention(label: str, i: int) -> None:
        if int(sub["meta"][i]) not in shown:
            shown.add(int(sub["meta"][i]))
            out.append(_compare(label, plan_row(sub, i, meta, req), winner))

    if len(ranked) > 1:
        mention("runner_up", ranked[1])
    if winner.time_to_train_days > LONG_RUN_DAYS:
        out.append(Note(code="long_run", value=winner.time_to_train_days))
    if winner.micro_batch_too_small:
        out.append(Note(code=fz.SMALL_MICRO_BATCH, gpu=winner.gpu))
    if winner.pricing == "spot":
        out.append(Note(code="spot_assumption", value=req.site.spot_interruptions_per_hour))
        safe = [i for i in ranked if meta[int(sub["meta"][i])].mode != "spot"]
        if safe:
            mention("best_without_spot", safe[0])
    if winner.efficiency_is_guess:
        out.append(Note(code="efficiency_guess", gpu=winner.gpu))
    if winner.export_cn == "licensed" and req.filters.export_region == "cn":
        out.append(Note(code="export_licence", gpu=winner.gpu))
    for acq in ("cloud", "own"):
        if acq == winner.acquisition:
            continue
        acq_rows = [i for i in ranked if meta[int(sub["meta"][i])].platform.acquisition == acq]
        if acq_rows:
            mention(f"best_{acq}", acq_rows[0])
        else:
            out.append(Note(code="no_option", acquisition=acq))
    return tuple(out)


def _relax(req: Request, rows: Rows, late: np.ndarray, over: np.ndarray) -> tuple[Relax, ...]:
    """Which constraint to relax, and by how much, when nothing meets them all."""
    out = []
    keep_deadline = None if req.deadline_days is None else req.deadline
    if req.budget_usd is not None and (~late).any():
        out.append(Relax(kind="budget", budget_usd=float(rows["cost_usd"][~late].min()),
                         keep_deadline_days=keep_deadline))
    if (~over).any():
        out.append(Relax(kind="deadline",
                         deadline_days=float(np.ceil(rows["days"][~over].min())),
                         keep_budget_usd=req.budget_usd))
    if not out:
        out.append(Relax(kind="both", deadline_days=float(rows["days"].min()),
                         budget_usd=float(rows["cost_usd"].min())))
    return tuple(out)


def _relax_nothing_fits(req: Request, excluded: tuple[Excluded, ...]) -> tuple[Relax, ...]:
    if not excluded:
        return (Relax(kind="filters"),)
    codes = {e.reason for e in excluded}
    out = []
    if fz.OOM in codes:
        out.append(Relax(kind="memory", max_gpus=req.max_gpus))
    if fz.CONSUMER in codes:
        out.append(Relax(kind="allow_consumer"))
    if not out:
        top = sorted(excluded, key=lambda e: -e.count)[:3]
        out.append(Relax(kind="invalid", excluded=tuple(top)))
    return tuple(out)


def _order(code: str) -> int:
    return fz.ORDER.index(code) if code in fz.ORDER else len(fz.ORDER)


def _favourite(req: Request, by_gpu: dict[str, Counter], excluded_platforms: tuple[Any, ...],
               feasible_gpus: set[str]) -> tuple[Favourite, ...]:
    """Why each GPU the user named is missing from the feasible plans (if it is)."""
    out = []
    for gpu in req.filters.gpus:
        if gpu in feasible_gpus:
            continue
        plats = tuple({(p.reason, p.id): p for p in excluded_platforms if p.gpu == gpu}.values())
        c = by_gpu.get(gpu, Counter())
        # the three largest counts, ties in feasibility.ORDER (not in the order the checks
        # first counted them, which depends on how the search split its work)
        ranked = sorted(c.items(), key=lambda kv: (-kv[1], _order(kv[0])))
        top = tuple(Excluded(reason=k, count=v) for k, v in ranked[:3])
        out.append(Favourite(gpu=gpu, platforms=plats, excluded=() if plats else top))
    return tuple(out)
