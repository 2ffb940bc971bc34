"""`gpuplan plan`: every accelerator x GPU count x layout x pricing option, evaluated at once (L4).

Steps: (1) the platforms that pass the user's filters, grouped by identical physics; (2) per
group, the cartesian grid of counts and layouts as flat arrays, masked for structural
infeasibility, then memory, then time -- physics evaluated once per group; (3) every feasible
physics row joined with every pricing row of every platform of its group (cost is cheap);
(4) constraints, ranking, Pareto front, and the explanations. No Python loop per candidate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimate import cost as costm
from ..estimate.timing import BOTTLENECKS
from ..spec import FP8, PRECISIONS, RECOMPUTE, Layout, ModelSpec
from ..units import GiB
from .evaluate import Site, memory_per_gpu, outcome, time_per_step
from .grid import Axes, gpu_counts, model_axes, product
from .hardware import efficiency_for, hardware_table
from .pareto import pareto_front
from .platforms import Filters, Platform, as_hardware_platform, group_by_physics, select_platforms
from .single import host_watts_per_gpu, price_rows

OBJECTIVES = ("cost", "time", "energy")
DEFAULT_MAX_GPUS = 16384
MAX_GPUS_CAP = 2**20  # the largest cluster the search enumerates (1,048,576 GPUs)
SEARCH_CAP = 50_000_000  # candidates; above this the user must narrow the search

# Exclusion reasons, in the order they are applied.
R_DIVIDE = "degrees do not divide the GPU count"
R_TP_DOMAIN = "TP beyond the scale-up domain"
R_LAYOUT = "layout does not suit the model or batch (heads, layers, experts, batch)"
R_FP8 = "FP8 on hardware without it"
R_CONSUMER = "consumer GPUs beyond one node (pass --allow-consumer)"
R_OOM = "out of memory"
R_NO_LINK = "no finite step time (traffic over a link the platform lacks)"
R_OFFER_CAP = "more GPUs than the offer provides"
R_DEADLINE = "misses the deadline"
R_BUDGET = "over budget"


@dataclass(frozen=True, kw_only=True)
class Request:
    model: ModelSpec
    tokens: float
    seq_len: int
    global_batch: int
    deadline_days: float | None = None
    budget_usd: float | None = None
    max_gpus: int = DEFAULT_MAX_GPUS
    objective: str = "cost"
    top: int = 10
    filters: Filters = field(default_factory=Filters)
    precisions: tuple[str, ...] = ("bf16", "fp8")
    site: Site

    def check(self) -> None:
        if not self.tokens > 0:
            raise ConfigError("--tokens must be more than 0 (e.g. 15T); the plan needs to know "
                              "how much to train")
        if self.deadline_days is not None and not self.deadline_days > 0:
            raise ConfigError(f"--deadline-days must be in the future (> 0), got "
                              f"{self.deadline_days:g}")
        if self.budget_usd is not None and not self.budget_usd > 0:
            raise ConfigError(f"--budget-usd must be more than 0, got {self.budget_usd:g}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--objective must be one of {', '.join(OBJECTIVES)}")
        if self.max_gpus < 1:
            raise ConfigError("--max-gpus must be at least 1")
        if self.max_gpus > MAX_GPUS_CAP:
            raise ConfigError(f"--max-gpus {self.max_gpus:,} is above the cap of "
                              f"{MAX_GPUS_CAP:,} GPUs the search enumerates; lower it")
        if self.top < 1:
            raise ConfigError("--top must be at least 1")


@dataclass
class _Physics:
    """Feasible physics rows of all groups (flat arrays)."""

    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **arrays: np.ndarray) -> None:
        for k, v in arrays.items():
            self.cols.setdefault(k, []).append(np.asarray(v))

    def done(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in self.cols.items()}


def _layout(g: dict[str, np.ndarray], req: Request) -> Layout:
    return Layout(tp=g["tp"], pp=g["pp"], dp=g["dp"], cp=g["cp"], ep=g["ep"], vpp=1,
                  zero=g["zero"], micro_batch=g["micro_batch"], global_batch=req.global_batch,
                  seq_len=req.seq_len, recompute=g["recompute"], precision=g["precision"])


def _take(g: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in g.items()}


@dataclass
class LayoutTable:
    """Every layout of every GPU count, evaluated once for all platforms: the structural checks
    and the memory per GPU depend on the layout alone (not on which GPU runs it), so a group
    of platforms only compares memory with its capacity and adds its own masks."""

    g: dict[str, np.ndarray]  # count-major rows: block i holds every layout of counts[i]
    block: int
    position: dict[int, int]  # GPU count -> block number
    divisible: np.ndarray
    valid: np.ndarray  # divisible and structurally valid for the model and batch
    memory_bytes: np.ndarray  # per GPU (nan where not valid)

    def rows(self, counts: np.ndarray) -> np.ndarray | slice:
        """The rows of these GPU counts: a slice (a view, no copy) when their blocks are
        consecutive, as they are for one node size's power-of-two counts."""
        blocks = [self.position[int(c)] for c in counts]
        if not blocks:
            return slice(0, 0)
        if blocks == list(range(blocks[0], blocks[0] + len(blocks))):
            return slice(blocks[0] * self.block, (blocks[-1] + 1) * self.block)
        return np.concatenate([np.arange(b * self.block, (b + 1) * self.block) for b in blocks])


def layout_table(req: Request, counts: np.ndarray, axes: Axes) -> LayoutTable:
    counts = np.unique(np.asarray(counts, dtype=np.int64))
    g = product(counts, axes)
    block = g["gpus"].size // max(len(counts), 1)
    divisible = g["gpus"] % (g["tp"] * g["pp"] * g["cp"]) == 0
    g["dp"] = np.maximum(g["dp"], 1)
    valid = divisible & _layout(g, req).valid_mask(req.model)
    mem = np.full(g["gpus"].size, np.nan)
    if valid.any():
        bd = memory_per_gpu(req.model, _layout(_take(g, valid), req), req.site)
        mem[valid] = np.asarray(bd.total, dtype=float)
    return LayoutTable(g=g, block=block, position={int(c): i for i, c in enumerate(counts)},
                       divisible=divisible, valid=valid, memory_bytes=mem)


def evaluate_group(req: Request, cat: Catalog, plats: list[Platform], counts: np.ndarray,
                   axes: Axes, tally: Counter, by_gpu: dict[str, Counter],
                   table: LayoutTable | None = None) -> dict[str, Any]:
    """Physics of one group over its grid; returns feasible rows (and tallies exclusions)."""
    p0 = plats[0]
    acc = p0.accelerator
    if table is None:
        table = layout_table(req, counts, axes)
    idx = table.rows(counts)
    gpu_tally = by_gpu.setdefault(acc.id, Counter())

    def drop(mask: np.ndarray, reason: str) -> None:
        k = int(mask.sum())
        if k:
            tally[reason] += k
            gpu_tally[reason] += k

    # masks on the few columns they need; every other column is gathered once, at the end
    divisible, valid = table.divisible[idx], table.valid[idx]
    tp, prec, gpus = (table.g[k][idx] for k in ("tp", "precision", "gpus"))
    drop(~divisible, R_DIVIDE)
    keep = divisible.copy()
    bad = keep & (tp > p0.scale_up_domain)
    drop(bad, R_TP_DOMAIN)
    keep &= ~bad
    bad = keep & ~valid
    drop(bad, R_LAYOUT)
    keep &= ~bad
    bad = keep & (prec == FP8) & ("fp8" not in acc.peak_flops)
    drop(bad, R_FP8)
    keep &= ~bad
    if acc.consumer and not req.filters.allow_consumer:
        bad = keep & (gpus > p0.gpus_per_node)
        drop(bad, R_CONSUMER)
        keep &= ~bad
    mem = table.memory_bytes[idx]
    oom = keep & ~(mem <= acc.memory_bytes)
    drop(oom, R_OOM)
    rows = (np.arange(table.g["gpus"].size)[idx] if isinstance(idx, slice) else idx)[keep & ~oom]
    g = {k: v[rows] for k, v in table.g.items()}
    g["memory_bytes"] = table.memory_bytes[rows]
    if g["gpus"].size == 0:
        return g
    hw = hardware_table(cat, [(acc, as_hardware_platform(p0))])
    eff = efficiency_for(cat, hw.family)
    t = time_per_step(req.model, _layout(g, req), hw, eff)
    g["tokens_per_s"] = np.asarray(t.tokens_per_s, dtype=float)
    g["step_s"] = np.asarray(t.step_s, dtype=float)
    g["mfu"] = np.asarray(t.mfu, dtype=float)
    g["bottleneck"] = np.asarray(t.bottleneck)
    g["guess"] = np.broadcast_to(np.asarray(eff.guess, dtype=bool), g["step_s"].shape).copy()
    ok = np.isfinite(g["step_s"]) & (g["tokens_per_s"] > 0)
    drop(~ok, R_NO_LINK)
    g = _take(g, ok)
    tally["_feasible_physics"] += int(ok.sum())
    return fastest_per_count(g)


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


def search(cat: Catalog, req: Request,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Evaluate every candidate; return ranked plans, the Pareto front and the exclusions."""
    req.check()
    platforms, excluded_platforms = select_platforms(cat, req.filters)
    axes = model_axes(req.model, req.seq_len, precisions=req.precisions)
    groups = list(group_by_physics(platforms).items())
    per_group = (len(axes.tp) * len(axes.pp) * len(axes.cp) * len(axes.ep) * len(axes.zero)
                 * len(axes.micro_batch) * len(axes.recompute) * len(axes.precision))
    tally: Counter = Counter()
    by_gpu: dict[str, Counter] = {}
    joined: list[dict[str, np.ndarray]] = []
    meta: list[tuple[Platform, str, float, float]] = []
    evaluated = 0
    physics_rows = 0
    planned = []
    for _, plats in groups:
        caps = [p.max_gpus or req.max_gpus for p in plats]
        cap = min(req.max_gpus, max(caps))
        counts = gpu_counts(plats[0].gpus_per_node, cap)
        planned.append((plats, counts, price_rows(plats, req.site, req.filters.pricing)))
    total = sum(c.size * per_group * len(prices) for _, c, prices in planned)
    if total > SEARCH_CAP:
        raise ConfigError(f"the search space has {total:,} candidates, above the cap of "
                          f"{SEARCH_CAP:,}; narrow it with --gpu, --max-gpus, --cloud or "
                          f"--acquisition")
    table = layout_table(req, np.concatenate([c for _, c, _ in planned]) if planned
                         else np.zeros(0, dtype=np.int64), axes)
    for i, (plats, counts, prices) in enumerate(planned):
        if progress:
            progress(i, len(planned))
        physics_rows += counts.size * per_group
        evaluated += counts.size * per_group * max(len(prices), 1)
        if counts.size == 0:
            continue
        g = evaluate_group(req, cat, plats, counts, axes, tally, by_gpu, table)
        if g["gpus"].size == 0:
            # every pricing row of this group shares the physics exclusions
            continue
        acc = plats[0].accelerator
        host_w = host_watts_per_gpu(cat, plats[0])
        for plat, mode, rate, capex_per_gpu in prices:
            sel = np.ones(g["gpus"].size, dtype=bool)
            if plat.max_gpus:
                over = g["gpus"] > plat.max_gpus
                tally[R_OFFER_CAP] += int(over.sum())
                by_gpu[acc.id][R_OFFER_CAP] += int(over.sum())
                sel &= ~over
            rows = _take(g, sel)
            if rows["gpus"].size == 0:
                continue
            o = outcome(tokens=req.tokens, tokens_per_s=rows["tokens_per_s"], gpus=rows["gpus"],
                        gpus_per_node=plat.gpus_per_node, params=req.model.total_params(),
                        mode=costm.mode_code(mode), usd_per_gpu_hour=rate,
                        tdp_watts=acc.tdp_watts, host_watts_per_gpu=host_w, site=req.site)
            rows["days"] = np.asarray(o.days, dtype=float)
            rows["cost_usd"] = np.asarray(o.cost_usd, dtype=float)
            rows["energy_kwh"] = np.asarray(o.energy_kwh, dtype=float)
            rows["goodput"] = np.broadcast_to(np.asarray(o.goodput, dtype=float),
                                              rows["days"].shape).copy()
            rows["capex_usd"] = rows["gpus"] * capex_per_gpu
            rows["meta"] = np.full(rows["gpus"].size, len(meta))
            meta.append((plat, mode, rate, capex_per_gpu))
            joined.append(rows)
    if progress:
        progress(len(planned), len(planned))
    allrows = ({k: np.concatenate([j[k] for j in joined]) for k in joined[0]} if joined else {})
    physically_feasible = tally.pop("_feasible_physics", 0)
    return _finish(cat, req, allrows, meta, evaluated, physics_rows, physically_feasible,
                   tally, by_gpu, excluded_platforms)


# --- constraints, ranking, explanations --------------------------------------------------------

def _objective_key(rows: dict[str, np.ndarray], objective: str) -> tuple[np.ndarray, ...]:
    if objective == "time":
        return rows["cost_usd"], rows["days"]  # lexsort: last key is primary
    if objective == "energy":
        return rows["cost_usd"], rows["energy_kwh"]
    return rows["days"], rows["cost_usd"]


def _plan_record(rows: dict[str, np.ndarray], i: int, meta: list, req: Request) -> dict[str, Any]:
    plat, mode, rate, _ = meta[int(rows["meta"][i])]
    acc = plat.accelerator
    mem = float(rows["memory_bytes"][i])
    return {
        "gpu": acc.id, "gpus": int(rows["gpus"][i]), "tp": int(rows["tp"][i]),
        "nodes": -(-int(rows["gpus"][i]) // plat.gpus_per_node),
        "pp": int(rows["pp"][i]), "dp": int(rows["dp"][i]), "cp": int(rows["cp"][i]),
        "ep": int(rows["ep"][i]), "zero": int(rows["zero"][i]),
        "micro_batch": int(rows["micro_batch"][i]), "global_batch": req.global_batch,
        "seq_len": req.seq_len,
        "recompute": RECOMPUTE[int(rows["recompute"][i])],
        "precision": PRECISIONS[int(rows["precision"][i])],
        "acquisition": plat.acquisition,
        "offer": plat.offer.id if plat.offer else None,
        "system": plat.system.id if plat.system else None,
        "platform": plat.label, "pricing": mode, "usd_per_gpu_hour": rate,
        "time_to_train_days": float(rows["days"][i]), "cost_usd": float(rows["cost_usd"][i]),
        "energy_kwh": float(rows["energy_kwh"][i]), "goodput": float(rows["goodput"][i]),
        "mfu": float(rows["mfu"][i]), "tokens_per_s": float(rows["tokens_per_s"][i]),
        "step_time_s": float(rows["step_s"][i]),
        "memory_gib_per_gpu": mem / GiB, "gpu_memory_gib": acc.memory_bytes / GiB,
        "headroom_gib": (acc.memory_bytes - mem) / GiB,
        "bottleneck": BOTTLENECKS[int(rows["bottleneck"][i])],
        "cash_up_front_usd": float(rows["capex_usd"][i]) if plat.acquisition == "own" else 0.0,
        "export_cn": acc.export_cn, "vendor": acc.vendor,
        "efficiency_is_guess": bool(rows["guess"][i]),
    }


def _dedupe(rows: dict[str, np.ndarray], order: np.ndarray) -> np.ndarray:
    """Keep the first (best) row of each way to get GPUs (platform and pricing) in `order`, so
    the ranking lists distinct options; other GPU counts show in the outlook and the front."""
    key = rows["meta"][order]
    _, first = np.unique(key, return_index=True)
    return order[np.sort(first)]


def _finish(cat: Catalog, req: Request, rows: dict[str, np.ndarray], meta: list,
            evaluated: int, physics_rows: int, physically_feasible: int, tally: Counter,
            by_gpu: dict[str, Counter], excluded_platforms: dict[str, list[str]]
            ) -> dict[str, Any]:
    n = rows["gpus"].size if rows else 0
    result: dict[str, Any] = {
        "model": req.model.id, "tokens": req.tokens, "seq_len": req.seq_len,
        "global_batch": req.global_batch, "objective": req.objective,
        "deadline_days": req.deadline_days, "budget_usd": req.budget_usd,
        "evaluated": evaluated, "physics_evaluated": physics_rows,
        "physically_feasible": physically_feasible, "feasible": 0, "plans": [], "pareto": [],
        "best": {},
        "excluded": {}, "excluded_platforms": excluded_platforms, "why": [], "relax": [],
        "favourite": [], "outlook": [],
        "assumptions": {
            "own_years": req.site.years, "own_utilization": req.site.utilization,
            "commitment_reuse_utilization": req.site.reuse_utilization,
            "spot_interruptions_per_instance_hour": req.site.spot_interruptions_per_hour,
            "gpu_mtbf_hours": req.site.gpu_mtbf_hours,
            "electricity_usd_per_kwh": req.site.electricity_usd_per_kwh, "pue": req.site.pue,
        },
    }
    if n == 0:
        result["excluded"] = dict(tally)
        result["relax"] = _relax_nothing_fits(req, tally)
        result["favourite"] = _favourite(req, by_gpu, excluded_platforms, rows, meta)
        return result
    ok = np.ones(n, dtype=bool)
    late = np.zeros(n, dtype=bool)
    over = np.zeros(n, dtype=bool)
    if req.deadline_days is not None:
        late = rows["days"] > req.deadline_days
    if req.budget_usd is not None:
        # the budget caps money spent: the cloud bill, or for owned hardware the purchase when
        # it exceeds the run's share of the cluster's lifetime cost
        over = np.maximum(rows["cost_usd"], rows["capex_usd"]) > req.budget_usd
    tally[R_DEADLINE] += int(late.sum())
    tally[R_BUDGET] += int((over & ~late).sum())
    ok = ~late & ~over & np.isfinite(rows["cost_usd"])
    result["excluded"] = {k: v for k, v in tally.items() if v}
    result["feasible"] = int(ok.sum())
    if not ok.any():
        result["relax"] = _relax(req, rows, late, over)
        result["favourite"] = _favourite(req, by_gpu, excluded_platforms, rows, meta)
        return result
    idx = np.flatnonzero(ok)
    sub = {k: v[idx] for k, v in rows.items()}
    order = np.lexsort(_objective_key(sub, req.objective))
    best_unique = _dedupe(sub, order)
    top = best_unique[: req.top]
    result["plans"] = [_plan_record(sub, i, meta, req) for i in top]
    front = pareto_front(sub["cost_usd"], sub["days"])
    result["pareto"] = [_plan_record(sub, i, meta, req) for i in front]
    for obj in OBJECTIVES:
        i = np.lexsort(_objective_key(sub, obj))[0] if obj != req.objective else order[0]
        result["best"][obj] = _plan_record(sub, i, meta, req)
    winner = result["plans"][0]
    result["why"] = _why(req, sub, best_unique, meta, winner)
    result["favourite"] = _favourite(req, by_gpu, excluded_platforms, sub, meta)
    result["outlook"] = outlook(cat, req, winner, meta[int(sub["meta"][order[0]])][0])
    return result


def _fmt_days(days: float) -> str:
    return f"{days:,.1f} days" if days >= 1 else f"{days * 24:,.1f} hours"


def _fmt_usd(x: float) -> str:
    if x >= 1e6:
        return f"${x / 1e6:,.2f}M"
    if x >= 1e3:
        return f"${x / 1e3:,.0f}k"
    return f"${x:,.0f}"


def _why(req: Request, sub: dict[str, np.ndarray], ranked: np.ndarray, meta: list,
         winner: dict[str, Any]) -> list[str]:
    obj = {"cost": "cheapest", "time": "fastest", "energy": "least energy"}[req.objective]
    cons = []
    if req.deadline_days is not None:
        cons.append(f"finishing within {req.deadline_days:g} days")
    if req.budget_usd is not None:
        cons.append(f"costing at most {_fmt_usd(req.budget_usd)}")
    lines = [
        f"winner: {obj} of {len(ranked):,} distinct option{'s' if len(ranked) != 1 else ''}"
        + (" " + " and ".join(cons) if cons else "") + f": {winner['gpus']} x {winner['gpu']} "
        f"({winner['platform']}, {winner['pricing']}) in {_fmt_days(winner['time_to_train_days'])} "
        f"for {_fmt_usd(winner['cost_usd'])}; MFU {winner['mfu'] * 100:.0f}%, limited by "
        f"{winner['bottleneck']}, {winner['headroom_gib']:.0f} GiB memory headroom per GPU."
    ]
    shown = {int(sub["meta"][ranked[0]])}

    def mention(label: str, i: int) -> None:
        if int(sub["meta"][i]) in shown:
            return
        shown.add(int(sub["meta"][i]))
        lines.append(_compare(label, _plan_record(sub, i, meta, req), winner))

    if len(ranked) > 1:
        mention("runner-up", ranked[1])
    if winner["pricing"] == "spot":
        lines.append(
            f"spot assumes the capacity exists for the whole run and is reclaimed "
            f"{req.site.spot_interruptions_per_hour:g} times per instance-hour (catalog default, a "
            f"lower bound for GPU instances; --interruptions changes it)")
        safe = [i for i in ranked if meta[int(sub["meta"][i])][1] != "spot"]
        if safe:
            mention("best option without spot", safe[0])
    if winner["efficiency_is_guess"]:
        lines.append(f"caution: no published run calibrates {winner['gpu']}'s efficiency; its "
                     f"speed rests on a stated guess (docs/calibration.md)")
    if winner["export_cn"] == "licensed" and req.filters.export_region == "cn":
        lines.append(f"{winner['gpu']} needs a US export licence for China; licences have been "
                     f"granted (see `gpuplan catalog show {winner['gpu']}`)")
    for acq in ("cloud", "own"):
        if acq == winner["acquisition"]:
            continue
        acq_rows = [i for i in ranked if meta[int(sub["meta"][i])][0].acquisition == acq]
        if acq_rows:
            mention(f"best {'owned' if acq == 'own' else 'cloud'} option", acq_rows[0])
        else:
            lines.append(f"no {'owned' if acq == 'own' else 'cloud'} option meets the "
                         "constraints")
    return lines


def _compare(label: str, r: dict[str, Any], w: dict[str, Any]) -> str:
    dc = r["cost_usd"] / w["cost_usd"] if w["cost_usd"] > 0 else math.inf
    dd = r["time_to_train_days"] / w["time_to_train_days"]
    return (f"{label}: {r['gpus']} x {r['gpu']} ({r['platform']}, {r['pricing']}) in "
            f"{_fmt_days(r['time_to_train_days'])} for {_fmt_usd(r['cost_usd'])} "
            f"({dc:.2f}x the cost, {dd:.2f}x the time of the winner)"
            + (f"; {_fmt_usd(r['cash_up_front_usd'])} up front" if r["acquisition"] == "own"
               else ""))


def _relax(req: Request, rows: dict[str, np.ndarray], late: np.ndarray,
           over: np.ndarray) -> list[str]:
    """Which constraint to relax, and by how much, when nothing meets them all."""
    out = []
    if req.budget_usd is not None:
        cand = ~late & np.isfinite(rows["cost_usd"])
        if cand.any():
            out.append(f"feasible from a budget of {_fmt_usd(float(rows['cost_usd'][cand].min()))}"
                       + (f" (keeping the {req.deadline_days:g}-day deadline)"
                          if req.deadline_days is not None else ""))
    if req.deadline_days is not None:
        cand = ~over
        if cand.any():
            out.append(f"feasible from a deadline of "
                       f"{math.ceil(float(rows['days'][cand].min()))} days"
                       + (f" (keeping the {_fmt_usd(req.budget_usd)} budget)"
                          if req.budget_usd is not None else ""))
    if not out:
        out.append(f"relax both: the fastest option takes {float(rows['days'].min()):,.0f} days "
                   f"and the cheapest costs {_fmt_usd(float(rows['cost_usd'].min()))}")
    return out


def _relax_nothing_fits(req: Request, tally: Counter) -> list[str]:
    if not tally:
        return ["no platform passes the filters; widen --gpu, --vendor, --cloud, --region, "
                "--acquisition or --export-region"]
    out = []
    if tally.get(R_OOM):
        out.append(f"nothing that is otherwise valid fits in memory on the platforms left "
                   f"(up to {req.max_gpus} GPUs, single-instance offers capped at one node): "
                   f"allow more GPUs (--max-gpus), other GPUs or a shorter --seq-len")
    if tally.get(R_CONSUMER):
        out.append("consumer cards were limited to one node; --allow-consumer lifts that")
    if not out:
        out.append("no candidate is valid: " + ", ".join(f"{k} ({v:,})"
                                                         for k, v in tally.most_common(3)))
    return out


def _favourite(req: Request, by_gpu: dict[str, Counter], excluded_platforms: dict[str, list[str]],
               rows: dict[str, np.ndarray], meta: list) -> list[str]:
    """Why each GPU the user named is missing from the feasible plans (if it is)."""
    out = []
    feasible_gpus = set()
    if rows and rows.get("meta") is not None and rows["meta"].size:
        feasible_gpus = {meta[int(m)][0].accelerator.id for m in np.unique(rows["meta"])}
    for gpu in req.filters.gpus:
        if gpu in feasible_gpus:
            continue
        reasons = [f"{r} ({i.split(': ', 1)[1]})" if ": " in i else r
                   for r, ids in excluded_platforms.items() for i in dict.fromkeys(ids)
                   if i.startswith(gpu + ":") or i == gpu]
        c = by_gpu.get(gpu, Counter())
        parts = [f"{k} ({v:,})" for k, v in c.most_common(3)]
        if reasons:
            out.append(f"{gpu}: " + "; ".join(reasons))
        elif parts:
            out.append(f"{gpu}: no feasible candidate: " + ", ".join(parts))
        else:
            out.append(f"{gpu}: no offer or system in the catalog matches the filters")
    return out


def at_size(cat: Catalog, req: Request, plat: Platform, gpus: int, mode: str,
            precisions: tuple[str, ...]) -> dict[str, Any]:
    """The fastest layout of `gpus` GPUs on one platform, priced in `mode` (no deadline or
    budget applied): days, cost, tokens/s, MFU -- or feasible False with the reason."""
    if plat.max_gpus and gpus > plat.max_gpus:
        return {"gpus": gpus, "feasible": False, "reason": R_OFFER_CAP}
    axes = model_axes(req.model, req.seq_len, precisions=precisions)
    tally: Counter = Counter()
    g = evaluate_group(req, cat, [plat], np.array([gpus]), axes, tally, {})
    if g["gpus"].size == 0:
        tally.pop("_feasible_physics", None)
        # the binding reason is the last check that excluded anything (all layouts that
        # passed the earlier checks failed it), not the most frequent one
        order = [R_DIVIDE, R_TP_DOMAIN, R_LAYOUT, R_FP8, R_CONSUMER, R_OOM, R_NO_LINK]
        reason = next((r for r in reversed(order) if tally.get(r)), "no valid layout")
        return {"gpus": gpus, "feasible": False, "reason": reason}
    prices = [r for r in price_rows([plat], req.site) if r[1] == mode]
    if not prices:
        return {"gpus": gpus, "feasible": False, "reason": f"no {mode} price"}
    _, _, rate, capex_per_gpu = prices[0]
    i = int(np.argmax(g["tokens_per_s"]))
    o = outcome(tokens=req.tokens, tokens_per_s=g["tokens_per_s"][i], gpus=gpus,
                gpus_per_node=plat.gpus_per_node, params=req.model.total_params(),
                mode=costm.mode_code(mode), usd_per_gpu_hour=rate,
                tdp_watts=plat.accelerator.tdp_watts,
                host_watts_per_gpu=host_watts_per_gpu(cat, plat), site=req.site)
    first = lambda x: float(np.asarray(x).reshape(-1)[0])  # noqa: E731
    return {"gpus": gpus, "feasible": True, "gpu": plat.accelerator.id, "platform": plat.label,
            "pricing": mode, "time_to_train_days": first(o.days), "cost_usd": first(o.cost_usd),
            "useful_days": first(o.useful_days), "goodput": first(o.goodput),
            "gpu_hours": first(o.gpu_hours), "energy_kwh": first(o.energy_kwh),
            "co2e_kg": first(o.co2e_kg),
            "tokens_per_s": float(g["tokens_per_s"][i]), "mfu": float(g["mfu"][i]),
            "tp": int(g["tp"][i]), "pp": int(g["pp"][i]), "dp": int(g["dp"][i]),
            "zero": int(g["zero"][i]), "micro_batch": int(g["micro_batch"][i]),
            "precision": PRECISIONS[int(g["precision"][i])],
            "recompute": RECOMPUTE[int(g["recompute"][i])],
            "memory_gib_per_gpu": float(g["memory_bytes"][i]) / GiB,
            "cash_up_front_usd": gpus * capex_per_gpu}


def outlook(cat: Catalog, req: Request, winner: dict[str, Any], plat: Platform
            ) -> list[dict[str, Any]]:
    """Days, cost and scaling efficiency of the winner's platform at 1/2x, 2x and 4x its GPUs
    (the fastest layout at each count, same pricing; constraints other than memory ignored).
    Scaling efficiency is tokens/s per GPU relative to the smallest feasible size shown."""
    base = winner["gpus"]
    counts = [c for c in (base // 2, base, base * 2, base * 4)
              if c >= plat.gpus_per_node and c % plat.gpus_per_node == 0]
    out = [at_size(cat, req, plat, c, winner["pricing"], (winner["precision"],))
           for c in counts]
    ref = next((r["tokens_per_s"] / r["gpus"] for r in out if r["feasible"]), None)
    for r in out:
        if r["feasible"] and ref:
            r["scaling_efficiency"] = r["tokens_per_s"] / r["gpus"] / ref
    return out
