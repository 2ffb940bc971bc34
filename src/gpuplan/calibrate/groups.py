"""Validation by group, residual quantiles for prediction intervals, interval coverage and the
FP8/BF16 gain on paired runs (issue #12, L5).

Residuals are actual / predicted *time* (`RunResult.time_ratio`) of runs predicted under
leave-one-source-out cross-validation, so no residual comes from constants fitted on its own
source. Runs with a written `anomaly` reason in published_runs.csv are left out of the
quantiles and of the coverage (and reported as such); they stay in every |error| figure
(`by_group`, validation.summary), so a flag never improves an error figure
(docs/calibration.md, "Fine-grained MoE: anomaly reasons ...").

Release spread (calibrate/releases.py): the figures by group, the coverage and the FP8 pairs
count the current runs (newest release of each configuration) unless `all_releases`. The
residual quantiles -- the stated uncertainty -- come from every release, older ones included:
how far a run may fall from current, well-tuned software is what they state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..search.hardware import stack_group
from ..search.intervals import GUESS_WIDEN
from ..validation import RunResult, counted, source_group
from .releases import configuration, release_order

# A (family, stack) group needs this many runs for its own quantiles; fewer use 'pooled'.
MIN_GROUP_RUNS = 10
SCALES = ((64, "<=64"), (1024, "<=1024"), (None, ">1024"))


def scale_label(gpus: int) -> str:
    for top, label in SCALES:
        if top is None or gpus <= top:
            return label
    return SCALES[-1][1]


# what each group report splits by: name -> the run's label
GROUPINGS: dict[str, Callable[[RunResult], str]] = {
    "family": lambda r: r.family,
    "stack": lambda r: r.stack,
    "precision": lambda r: r.precision,
    "moe": lambda r: "moe" if r.moe else "dense",
    "scale": lambda r: scale_label(r.gpus),
}


def _usable(results: list[RunResult]) -> list[RunResult]:
    return [r for r in results if r.status == "known" and not r.anomaly]


def quantiles(ratios: list[float]) -> tuple[float, float, float]:
    """P10, P50, P90 at rank p(n+1) of the n sorted ratios, interpolated (numpy "weibull",
    Hyndman and Fan definition 6): a new run exchangeable with the n falls below the k-th
    smallest with chance k/(n+1), so [P10, P90] covers 0.8 of new runs whatever n, where
    numpy's default rank 1 + p(n-1) covers 0.8(n-1)/(n+1) (docs/calibration.md,
    "Prediction-interval quantiles at plotting position p(n+1)")."""
    a = np.asarray(ratios, dtype=float)
    p10, p50, p90 = np.quantile(a, (0.1, 0.5, 0.9), method="weibull")
    return float(p10), float(p50), float(p90)


def residual_table(cat: Catalog, cv: list[RunResult]) -> dict[str, dict[str, Any]]:
    """GROUP -> {family, stack, runs, p10, p50, p90} over cross-validated runs; 'pooled' holds
    every run, a (family, stack group) row needs MIN_GROUP_RUNS runs. Rounded to 3 decimals,
    as written to data/residuals.toml."""
    runs = _usable(cv)
    out: dict[str, dict[str, Any]] = {}
    p = quantiles([r.time_ratio for r in runs])
    out["pooled"] = {"family": "all", "stack": "all", "runs": len(runs),
                     **{k: round(v, 3) for k, v in zip(("p10", "p50", "p90"), p, strict=True)}}
    keys = sorted({(r.family, stack_group(cat, r.stack)) for r in runs})
    for family, group in keys:
        mine = [r for r in runs if r.family == family and stack_group(cat, r.stack) == group]
        if len(mine) < MIN_GROUP_RUNS:
            continue
        q = quantiles([r.time_ratio for r in mine])
        out[f"{family}-{group}"] = {
            "family": family, "stack": group, "runs": len(mine),
            **{k: round(v, 3) for k, v in zip(("p10", "p50", "p90"), q, strict=True)}}
    return out


def _bounds(cat: Catalog, train: list[RunResult], r: RunResult) -> tuple[float, float]:
    """P10/P90 for run r from residuals of other sources: its group's if large enough, else
    the pooled ones (widened for a guess)."""
    group = stack_group(cat, r.stack)
    mine = [t.time_ratio for t in train if t.family == r.family
            and stack_group(cat, t.stack) == group]
    if len(mine) >= MIN_GROUP_RUNS and not r.efficiency_guess:
        q10, _, q90 = quantiles(mine)
        return q10, q90
    q10, _, q90 = quantiles([t.time_ratio for t in train])
    widen = GUESS_WIDEN if r.efficiency_guess else 1.0
    return float(np.exp(np.log(q10) * widen)), float(np.exp(np.log(q90) * widen))


def coverage(cat: Catalog, cv: list[RunResult], all_releases: bool = False) -> dict[str, Any]:
    """Share of the current runs (every run with `all_releases`) inside their P10-P90 range
    when the quantiles come from the other sources' cross-validated residuals
    (leave-one-source-out), overall and by group. The quantiles use every release of the other
    sources, as data/residuals.toml does (`residual_table`): the intervals checked are the ones
    estimate and plan state."""
    pool = _usable(cv)
    runs = counted(pool, all_releases)
    inside: dict[str, bool] = {}
    for src in sorted({source_group(r.id) for r in runs}):
        train = [r for r in pool if source_group(r.id) != src]
        for r in (r for r in runs if source_group(r.id) == src):
            lo, hi = _bounds(cat, train, r)
            inside[r.id] = lo <= r.time_ratio <= hi
    out: dict[str, Any] = {"n": len(inside),
                           "coverage": float(np.mean(list(inside.values()))) if inside else None}
    for name, label in GROUPINGS.items():
        out[f"by_{name}"] = {k: float(np.mean([inside[r.id] for r in runs if label(r) == k]))
                             for k in sorted({label(r) for r in runs})}
    out["inside"] = inside
    return out


def _stats(rs: list[RunResult], inside: dict[str, bool] | None) -> dict[str, Any]:
    a = np.abs([r.error_pct for r in rs])
    cov = [inside[r.id] for r in rs if inside and r.id in inside]
    return {"n": len(rs), "median_abs_error_pct": float(np.median(a)),
            "worst_abs_error_pct": float(np.max(a)),
            "coverage": float(np.mean(cov)) if cov else None}


def by_group(results: list[RunResult], inside: dict[str, bool] | None = None,
             all_releases: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """Median and worst |error| (and interval coverage where `inside` is given) of the known
    current runs (every release with `all_releases`) by family, stack, precision, MoE/dense
    and scale."""
    known = [r for r in counted(results, all_releases) if r.status == "known"]
    return {name: {k: _stats([r for r in known if label(r) == k], inside)
                   for k in sorted({label(r) for r in known})}
            for name, label in GROUPINGS.items()}


PAIR_KEY = ("gpu", "gpus", "model", "layers", "hidden", "seq_len", "global_batch",
            "micro_batch", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "recompute", "stack")


def fp8_pairs(rows: list[dict[str, str]], results: list[RunResult],
              all_releases: bool = False) -> list[dict[str, Any]]:
    """BF16/FP8 pairs (same source, hardware, model and layout): published and predicted
    FP8/BF16 throughput gain and the gain's error. A pair measures one release's FP8 gain, so
    it is current when no newer release of its series publishes a pair on the same hardware,
    GPU count and model (`superseded_by` names that pair's FP8 run); only current pairs are
    returned unless `all_releases`."""
    by_id = {r.id: r for r in results}
    known = [r for r in rows if r.get("status", "known") == "known" and r["id"] in by_id]
    key = {r["id"]: (source_group(r["id"]), *(r.get(k, "") for k in PAIR_KEY)) for r in known}
    out = []
    for b in (r for r in known if r["precision"] == "bf16"):
        for f in (r for r in known if r["precision"] == "fp8" and key[r["id"]] == key[b["id"]]):
            rb, rf = by_id[b["id"]], by_id[f["id"]]
            pub = (rf.published / rb.published if rf.metric != "step_time_s"
                   else rb.published / rf.published)
            pred = (rf.predicted / rb.predicted if rf.metric != "step_time_s"
                    else rb.predicted / rf.predicted)
            out.append({"bf16": b["id"], "fp8": f["id"], "published_gain": pub,
                        "predicted_gain": pred, "error_pct": (pred - pub) / pub * 100.0,
                        "release": b.get("release", ""), "_config": configuration(b)[:4]})
    return [p for p in _mark_pairs(out) if all_releases or not p["superseded_by"]]


def _mark_pairs(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's `superseded_by`: the FP8 run of the newest-release pair of its (series,
    hardware, GPU count, model), '' when it is that release (or has none)."""
    newest: dict[tuple[str, ...], dict[str, Any]] = {}
    for p in (p for p in pairs if p["release"]):
        top = newest.get(p["_config"])
        if top is None or release_order(p["release"]) > release_order(top["release"]):
            newest[p["_config"]] = p
    out = []
    for p in pairs:
        top = newest.get(p.pop("_config"))
        later = (top is not None and bool(p["release"])
                 and release_order(p["release"]) < release_order(top["release"]))
        out.append({**p, "superseded_by": top["fp8"] if top is not None and later else ""})
    return out


def group_report(cat: Catalog, results: list[RunResult], rows: list[dict[str, str]],
                 cross_validated: bool, all_releases: bool = False) -> dict[str, Any]:
    """What `validate` adds by group, over the current runs (every run with `all_releases`):
    |error| by family, stack, precision, MoE/dense and scale; under cross-validation the
    P10-P90 coverage (overall and per group); the FP8/BF16 gain on paired runs; the runs
    flagged anomalous with their written reason."""
    cov = coverage(cat, results, all_releases) if cross_validated else None
    inside = cov.pop("inside") if cov else None
    return {"groups": by_group(results, inside, all_releases), "interval_coverage": cov,
            "fp8_pairs": fp8_pairs(rows, results, all_releases),
            "anomalous": [{"id": r.id, "reason": r.anomaly} for r in results if r.anomaly]}
