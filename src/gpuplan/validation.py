"""Validation against published training runs, and the calibration of efficiency (L5).

Every run in ``data/published_runs.csv`` is predicted from its stated configuration (details a
source leaves out are filled with the defaults named in the row's ``defaults`` column) and
compared with what its authors measured, on tokens/s per GPU or step time. A published
TFLOP/s or MFU figure is first turned into tokens/s with the FLOP convention its source used:

* ``megatron2021``: 96 B s l h^2 (1 + s/6h + V/16lh) per batch -- counts full recompute
  (Narayanan et al. 2021, eq. 3); equal to our `FlopsBreakdown.hardware(full)`.
* ``palm``: model FLOPs 6N + 12 L h s, no recompute (Chowdhery et al. 2022, appendix B),
  equal to our `FlopsBreakdown.model`.

Each run's memory is predicted too, with its source's memory settings (calibrate/memory_fit.py).
Runs whose configuration is not known (``status = excluded``, reason in ``notes``) are predicted
and printed but kept out of the summary. `calibrate` fits the per-family efficiency constants
on the rows marked ``fit = fit`` only; the rest are a hold-out (docs/calibration.md). A fit
row must belong to the calibration set (`calibration_set_reason`); every error figure says
whether it is in-sample (fit rows under the constants fitted on them) or out-of-sample
(hold-out rows, or any row under leave-one-source-out cross-validation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .calibrate.calibration_set import calibration_set_reason as calibration_set_reason
from .calibrate.fit_cache import FitCache, constants_key
from .calibrate.memory_fit import MemoryFit, layout_fields, memory_options, run_fit
from .calibrate.memory_fit import int_field as _int
from .calibrate.releases import newest_runs, source_group
from .calibrate.time_fields import power_limit, run_stack_row, run_stacks, time_fields
from .catalog import Catalog, read_package_csv
from .errors import CatalogError, GpuplanError
from .estimators.compute import Efficiency, flops_per_token
from .estimators.timing import BOTTLENECKS, step_time
from .search.hardware import (
    efficiency_for,
    family_constants,
    hardware_for,
    pair_is_guess,
    stack_group,
    stack_row,
    with_stack,
)
from .spec import PRECISIONS, R_FULL, RECOMPUTE, STACKS, Layout, ModelSpec, code

RUNS_FILE = "published_runs.csv"
CONVENTIONS = ("palm", "megatron2021")
METRICS = ("tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu_pct")
# Families the target covers (GPU runs).
TARGET_FAMILIES = ("a100", "h100", "h200", "b200", "gb200", "mi250x", "mi300x")


@dataclass(frozen=True, kw_only=True)
class RunResult:
    id: str
    metric: str  # 'tokens_per_s_per_gpu' or 'step_time_s' (what is compared)
    published: float
    predicted: float
    error_pct: float  # (predicted - published) / published * 100
    family: str
    gpu: str
    status: str  # 'known' or 'excluded'
    fit: str  # 'fit' (used to calibrate) or 'holdout'
    source_metric: str  # the figure the source gave (before any FLOP conversion)
    source_value: float
    bottleneck: str
    efficiency_guess: bool
    sample: str = "in"  # 'in' if the constants that predicted it were fitted on it, else 'out'
    stack: str = "megatron"
    precision: str = "bf16"
    moe: bool = False
    gpus: int = 1
    anomaly: str = ""  # a written, source-based reason the run is treated as anomalous
    release: str = ""  # the software release its source table was published for ('' one-off)
    superseded_by: str = ""  # a run of the same configuration's newest release ('' if current)
    memory: MemoryFit | None = None  # predicted memory per GPU vs the GPU's (run_fit)
    memory_settings: str = ""  # 'recorded': its memory settings are read from a cited source
    memory_unmodelled: str = ""  # recorded settings the memory model cannot express

    @property
    def current(self) -> bool:
        """Counted in the default summaries: no newer release of its configuration exists
        (calibrate/releases.py)."""
        return not self.superseded_by

    @property
    def time_ratio(self) -> float:
        """Actual / predicted time: tokens/s errors invert, step-time errors do not."""
        ratio = self.predicted / self.published
        return ratio if self.metric != "step_time_s" else 1.0 / ratio


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run made ready to predict."""

    row: dict[str, str]
    model: ModelSpec
    layout: Layout
    family: str
    gpu: str
    stack: str = "megatron"  # the run's software stack (column `stack`)
    group: str = "megatron"  # its calibration group (`stack_group`)
    memory_options: tuple[str | None, ...] = (None,) * 6  # memory_fit.memory_options


def load_runs() -> list[dict[str, str]]:
    return read_package_csv(RUNS_FILE)


def run_model(cat: Catalog, row: dict[str, str]) -> ModelSpec:
    if row.get("model", "").strip():
        return cat.model(row["model"])
    experts = _int(row, "experts")
    return ModelSpec(
        id=row["id"], name=row["id"], layers=_int(row, "layers"), hidden=_int(row, "hidden"),
        heads=_int(row, "heads"), kv_heads=_int(row, "kv_heads"), ffn=_int(row, "ffn"),
        vocab=_int(row, "vocab"), mlp=row.get("mlp") or "gelu", head_dim=_int(row, "head_dim"),
        experts=experts, experts_per_token=_int(row, "experts_per_token"),
        moe_ffn=_int(row, "moe_ffn"), tied_embeddings=True, source=row.get("source", ""))


def run_spec(cat: Catalog, row: dict[str, str]) -> RunSpec:
    """A CSV row -> model, layout and platform (errors name the row)."""
    try:
        model = run_model(cat, row)
        layout = Layout(
            tp=_int(row, "tp", 1), pp=_int(row, "pp", 1), dp=_int(row, "dp", 1),
            cp=_int(row, "cp", 1), ep=_int(row, "ep", 1), vpp=_int(row, "vpp", 1),
            zero=_int(row, "zero"), micro_batch=_int(row, "micro_batch", 1),
            global_batch=_int(row, "global_batch"), seq_len=_int(row, "seq_len"),
            recompute=code(RECOMPUTE, row["recompute"], "recompute"),
            precision=code(PRECISIONS, row["precision"], "precision"),
            stack=code(STACKS, row.get("stack") or STACKS[0], "stack"), **layout_fields(row),
            **time_fields(row))
        gpus = int(row["gpus"])
        if int(layout.gpus) != gpus:
            raise CatalogError(f"tp*pp*cp*dp = {layout.gpus} but gpus = {gpus}")
        acc = cat.accelerator(row["gpu"])
    except (KeyError, ValueError, GpuplanError) as err:
        raise CatalogError(f"{RUNS_FILE}: run '{row.get('id', '?')}': {err}") from None
    stack = STACKS[int(layout.stack)]
    return RunSpec(row=row, model=model, layout=layout, family=acc.family, gpu=acc.id,
                   stack=stack, group=stack_group(cat, stack), memory_options=memory_options(row))


def _hardware(cat: Catalog, rs: RunSpec) -> Any:
    row = rs.row
    return power_limit(row, cat.accelerator(rs.gpu), hardware_for(
        cat, rs.gpu, precision=row["precision"], gpus_per_node=_int(row, "gpus_per_node") or None,
        scale_up_domain=_int(row, "scale_up_domain") or None,
        scale_out_bytes_per_s=float(row["nic_gbit_per_gpu"]) * 1e9 / 8
        if row.get("nic_gbit_per_gpu") else None))


def published_value(rs: RunSpec) -> tuple[str, float]:
    """(compared metric, value): TFLOP/s and MFU become tokens/s per GPU by the source's FLOP
    convention; tokens/s per GPU and step time are compared as they are."""
    row = rs.row
    metric, value = row["metric"], float(row["published"])
    if metric in ("tokens_per_s_per_gpu", "step_time_s"):
        return metric, value
    fl = flops_per_token(rs.model, rs.layout.seq_len)
    conv = row.get("flop_convention", "")
    if conv == "megatron2021":
        per_token = float(fl.hardware(R_FULL))
    elif conv == "palm":
        per_token = float(fl.model)
    else:
        raise CatalogError(f"{RUNS_FILE}: run '{row['id']}': flop_convention must be one of "
                           f"{', '.join(CONVENTIONS)}")
    if metric == "tflops_per_gpu":
        return "tokens_per_s_per_gpu", value * 1e12 / per_token
    if metric == "mfu_pct":
        peak = float(row["ref_peak_tflops"]) * 1e12
        return "tokens_per_s_per_gpu", value / 100 * peak / per_token
    raise CatalogError(f"{RUNS_FILE}: run '{row['id']}': metric must be one of "
                       f"{', '.join(METRICS)}")


def run_inputs(cat: Catalog, rs: RunSpec) -> tuple[Any, Any, str, float]:
    """What predicting a run takes besides the constants: (hardware, stacks' buffers,
    compared metric, published value)."""
    return (_hardware(cat, rs), run_stacks(cat, rs.row), *published_value(rs))


def predict(cat: Catalog, rs: RunSpec, eff: Efficiency | None = None,
            inputs: tuple[Any, Any, str, float] | None = None) -> tuple[Any, Any]:
    """Predicted value of the compared metric (array over eff's shape) and the breakdown;
    `inputs`: the run's `run_inputs` (computed here if not given)."""
    eff = eff if eff is not None else efficiency_for(cat, [rs.family], rs.stack)
    hw, stacks, metric, _ = inputs or run_inputs(cat, rs)
    t = step_time(rs.model, rs.layout, hw, eff, stacks=stacks)
    if metric == "step_time_s":
        return t.step_s, t
    return t.tokens_per_s / rs.layout.gpus, t


def run_efficiency(cat: Catalog, rs: RunSpec,
                   efficiency: dict[str, dict[str, float]] | None = None,
                   stacks: dict[str, dict[str, float]] | None = None) -> Efficiency:
    """The efficiency a run is predicted with: its family's constants (`efficiency`
    overrides them, per family) under its stack's (`stacks` overrides them, per group)."""
    values = family_constants(cat, rs.family)
    values.update((efficiency or {}).get(rs.family, {}))
    out = with_stack(values, run_stack_row(cat, rs.stack, rs.row, (stacks or {}).get(rs.group)))
    return Efficiency(**{k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in out.items()},
                      guess=np.asarray([pair_is_guess(cat, rs.family, rs.stack)]))


def validate_runs(cat: Catalog, rows: list[dict[str, str]] | None = None,
                  efficiency: dict[str, dict[str, float]] | None = None,
                  sample: str | None = None,
                  stacks: dict[str, dict[str, float]] | None = None,
                  newest: dict[str, str] | None = None) -> list[RunResult]:
    """Predict every published run; `efficiency` overrides rows of [efficiency.FAMILY] and
    `stacks` the [stack.NAME] constants of a calibration group. `sample` labels every result
    ('out' under cross-validation); by default fit rows are in-sample, the rest out. `newest`
    (`calibrate.releases.newest_runs` of the whole data set; default: of `rows`) marks the
    runs a newer release supersedes."""
    rows = rows if rows is not None else load_runs()
    newest = newest if newest is not None else newest_runs(rows)
    results = []
    for row in rows:
        rs = run_spec(cat, row)
        eff = run_efficiency(cat, rs, efficiency, stacks)
        pred, t = predict(cat, rs, eff)
        metric, pub = published_value(rs)
        p = float(np.asarray(pred).ravel()[0])
        results.append(RunResult(
            id=row["id"], metric=metric, published=pub, predicted=p,
            error_pct=(p - pub) / pub * 100.0, family=rs.family, gpu=rs.gpu,
            status=row.get("status", "known"), fit=row.get("fit", "holdout"),
            source_metric=row["metric"], source_value=float(row["published"]),
            bottleneck=BOTTLENECKS[int(np.asarray(t.bottleneck).ravel()[0])],
            efficiency_guess=bool(np.asarray(t.efficiency_guess).ravel()[0]),
            sample=sample or ("in" if row.get("fit") == "fit" else "out"),
            stack=rs.stack, precision=row["precision"],
            moe=bool(int(rs.model.experts or 0) > 1), gpus=int(rs.layout.gpus),
            anomaly=row.get("anomaly", ""), release=row.get("release", ""),
            superseded_by=newest.get(row["id"], ""), memory=run_fit(
                cat, rs.model, rs.layout, gpus=int(rs.layout.gpus), options=rs.memory_options,
                gpu=cat.accelerator(rs.gpu),
                capacity_bytes=float(np.asarray(_hardware(cat, rs).memory_bytes).ravel()[0])),
            memory_settings=row.get("memory_settings", "").strip(),
            memory_unmodelled=row.get("memory_unmodelled", "").strip()))
    return results


def _stats(errors: list[float]) -> dict[str, Any]:
    a = np.abs(np.asarray(errors, dtype=float))
    if not len(a):
        return {"n": 0, "median_abs_error_pct": None, "worst_abs_error_pct": None}
    return {"n": int(len(a)), "median_abs_error_pct": float(np.median(a)),
            "worst_abs_error_pct": float(np.max(a))}


def counted(results: list[RunResult], all_releases: bool = False) -> list[RunResult]:
    """The runs a summary counts: the current ones (newest release of their configuration),
    or every run with `all_releases`."""
    return [r for r in results if all_releases or r.current]


def summary(results: list[RunResult], status: str = "known",
            subset: str = "all", all_releases: bool = False) -> dict[str, Any]:
    """Median and worst absolute error overall and per family, over the current runs (every
    release with `all_releases`) with `status` (and `fit` equal to `subset` unless subset is
    'all'). `sample` says whether the figure is in-sample ('in'), out-of-sample ('out') or
    both ('mixed')."""
    chosen = [r for r in counted(results, all_releases)
              if r.status == status and subset in ("all", r.fit)]
    out = _stats([r.error_pct for r in chosen])
    kinds = {r.sample for r in chosen}
    out["sample"] = kinds.pop() if len(kinds) == 1 else "mixed"
    out["per_family"] = {f: _stats([r.error_pct for r in chosen if r.family == f])
                         for f in sorted({r.family for r in chosen})}
    return out


# --- calibration ----------------------------------------------------------------------------


FIT_START = {"matmul_max": 0.6, "half_dim": 0.0, "layer_overhead_s": 0.0,
             "attention_ratio": 1.0}
STACK_START = {"matmul_scale": 1.0, "fp8_ratio": 0.8}
Constants = dict[str, dict[str, Any]]  # family (or stack group) -> constant -> value or grid


def _fit_runs(cat: Catalog, rows: list[dict[str, str]] | None) -> list[RunSpec]:
    return [run_spec(cat, r) for r in (rows if rows is not None else load_runs())
            if r.get("fit") == "fit" and r.get("status", "known") == "known"]


def _fit_loss(cat: Catalog, runs: list[RunSpec], fams: Constants, stacks: Constants,
              cache: FitCache) -> np.ndarray:
    """Sum over runs of log(predicted / published)^2; any constant may be a grid (array).
    Each run's inputs and its prediction under each set of constants are kept in `cache`."""
    loss: Any = 0.0
    for rs in runs:
        values = with_stack(fams[rs.family], run_stack_row(cat, rs.stack, rs.row, stacks[rs.group]))
        run = rs.row["id"]
        if run not in cache.inputs:
            cache.inputs[run] = run_inputs(cat, rs)
        inputs = cache.inputs[run]
        key = (run, constants_key(values))
        if key not in cache.predictions:
            cache.predictions[key] = predict(cat, rs, Efficiency(**values), inputs)[0]
        loss = loss + np.log(np.asarray(cache.predictions[key], dtype=float) / inputs[3]) ** 2
    return np.atleast_1d(loss)


def _descend(cat: Catalog, runs: list[RunSpec], fams: Constants, stacks: Constants,
             target: dict[str, Any], params: tuple[str, ...], cache: FitCache,
             sweeps: int = 8) -> None:
    """Coordinate descent on CALIBRATION_GRID for `params` of `target` (one entry of `fams`
    or `stacks`, changed in place): the first two jointly on their full grids (they trade
    off most), then each in turn with the others held, until nothing moves."""
    grid = CALIBRATION_GRID
    head = params[:2]
    axes = np.meshgrid(*(grid[p] for p in head), indexing="ij")
    target.update({p: a.ravel() for p, a in zip(head, axes, strict=True)})
    i = int(np.argmin(_fit_loss(cat, runs, fams, stacks, cache)))
    target.update({p: float(a.ravel()[i]) for p, a in zip(head, axes, strict=True)})
    for _ in range(sweeps):
        before = {p: target[p] for p in params}
        for p in params:
            target[p] = grid[p]
            loss = _fit_loss(cat, runs, fams, stacks, cache)
            target[p] = float(grid[p][int(np.argmin(loss))])
        if {p: target[p] for p in params} == before:
            break


def fit_family(cat: Catalog, family: str, params: tuple[str, ...], grid: dict[str, np.ndarray],
               rows: list[dict[str, str]] | None = None, fixed: dict[str, float] | None = None,
               sweeps: int = 8, stacks: Constants | None = None
               ) -> tuple[dict[str, float], float, int]:
    """Least squares on log(predicted / published) over the family's `fit` rows, each under
    its stack's constants (`stacks`, by calibration group; default: the catalog's).

    Returns (best values, RMS log error, number of runs used)."""
    runs = [rs for rs in _fit_runs(cat, rows) if rs.family == family]
    if not runs:
        raise CatalogError(f"no fit runs for family '{family}' in {RUNS_FILE}")
    # Start from the same neutral point whatever the catalog holds (reproducible); only the
    # unfitted memory_fraction and tp_overlap come from the family's catalog row.
    base = family_constants(cat, family)
    values: dict[str, Any] = {**base, **FIT_START, "fp8_ratio": 1.0, **(fixed or {})}
    stacks = stacks or {g: dict(stack_row(cat, g)) for g in {rs.group for rs in runs}}
    fams, cache = {family: values}, FitCache()
    _descend(cat, runs, fams, stacks, values, params, cache, sweeps)
    rms = float(np.sqrt(_fit_loss(cat, runs, fams, stacks, cache)[0] / len(runs)))
    return {p: values[p] for p in params}, rms, len(runs)


# Which constants are fitted on which family's `fit` rows (1-4 per family, never per run);
# families without enough runs inherit from the nearest calibrated one (docs/calibration.md).
CALIBRATION_PLAN: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("a100", ("matmul_max", "layer_overhead_s", "half_dim", "attention_ratio"), None),
    ("h100", ("matmul_max", "layer_overhead_s", "half_dim", "attention_ratio"), None),
    ("gb200", ("matmul_max",), "h100"),  # 2 fit runs: one constant, the rest from Hopper
)
# Which constants each stack's calibration group fits, pooled over families (megatron is the
# reference: matmul_scale 1); a group without a constant takes it from `from` (megatron).
STACK_PLAN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("megatron", ("fp8_ratio",)),
    ("fsdp", ("matmul_scale", "fp8_ratio")),
    ("deepspeed", ("matmul_scale",)),
)
# A group with fewer fit runs than this fits nothing (one constant on one or two runs would be
# a constant per run): it keeps the reference constants and its pairs are guesses.
MIN_STACK_RUNS = 3
CALIBRATION_ROUNDS = 2  # families, then stacks, twice (each fit sees the other's values)
CALIBRATION_GRID: dict[str, np.ndarray] = {
    "matmul_max": np.round(np.arange(0.40, 1.0001, 0.01), 2),
    "half_dim": np.array([0.0, 50, 100, 200, 300, 400, 600, 800, 1200]),
    "layer_overhead_s": np.arange(0.0, 1.5001e-3, 50e-6),
    "fp8_ratio": np.round(np.arange(0.40, 1.0001, 0.02), 2),
    "attention_ratio": np.round(np.arange(0.20, 1.2001, 0.02), 2),
    "matmul_scale": np.round(np.arange(0.50, 1.5001, 0.01), 2),
}


def _fit_families(cat: Catalog, runs: list[RunSpec], fams: Constants, stacks: Constants,
                  cache: FitCache) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for family, params, parent in CALIBRATION_PLAN:
        own = [rs for rs in runs if rs.family == family]
        inherited = ({k: v for k, v in out[parent].items() if k in CALIBRATION_GRID}
                     if parent else {})
        start = {**family_constants(cat, family), **FIT_START, "fp8_ratio": 1.0,
                 **{k: v for k, v in inherited.items() if k not in params}}
        fams[family] = values = {**start, **{k: v for k, v in fams.get(family, {}).items()
                                             if k in params}}
        if not own and not parent:
            raise CatalogError(f"no fit runs for family '{family}' in {RUNS_FILE}")
        if own:
            _descend(cat, own, fams, stacks, values, params, cache)
        else:  # no runs left (cross-validation): the parent's values
            values.update({k: inherited[k] for k in params})
        rms = (float(np.sqrt(_fit_loss(cat, own, fams, stacks, cache)[0] / len(own))) if own
               else float("nan"))
        out[family] = {**{k: v for k, v in values.items() if k in CALIBRATION_GRID
                          and k != "matmul_scale" and k != "fp8_ratio"},
                       "rms_log_error": rms, "runs": len(own)}
    return out


def calibrate_all(cat: Catalog, rows: list[dict[str, str]] | None = None,
                  cache: FitCache | None = None
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Fit CALIBRATION_PLAN and STACK_PLAN in CALIBRATION_ROUNDS alternating rounds.
    Returns (family -> {constant, 'rms_log_error', 'runs'}, stack group -> {'matmul_scale',
    'fp8_ratio', 'rms_log_error', 'runs', 'fitted_families'}). `cache` (calibrate/fit_cache.py)
    may be shared by fits of the same runs (cross_validate's refits)."""
    runs, cache = _fit_runs(cat, rows), cache if cache is not None else FitCache()
    groups = {g for g, _ in STACK_PLAN} | {rs.group for rs in runs}
    stacks: Constants = {g: dict(STACK_START) for g in groups}
    fams: Constants = {}  # round one starts every family at FIT_START (reproducible)
    families: dict[str, dict[str, Any]] = {}
    for _ in range(CALIBRATION_ROUNDS):
        families = _fit_families(cat, runs, fams, stacks, cache)
        for group, params in STACK_PLAN:
            own = [rs for rs in runs if rs.group == group and rs.family in fams]
            if group != "megatron":  # FP8 gain from the reference unless fitted below
                stacks[group]["fp8_ratio"] = stacks["megatron"]["fp8_ratio"]
            fp8 = [rs for rs in own if rs.row["precision"] == "fp8"]
            fitted = tuple(p for p in params if p != "fp8_ratio" or fp8)
            if len(own) >= MIN_STACK_RUNS and fitted:
                _descend(cat, own, fams, stacks, stacks[group], fitted, cache)
    out = {}
    for group, _ in STACK_PLAN:
        own = [rs for rs in runs if rs.group == group and rs.family in fams]
        rms = (float(np.sqrt(_fit_loss(cat, own, fams, stacks, cache)[0] / len(own))) if own
               else float("nan"))
        out[group] = {"matmul_scale": float(stacks[group]["matmul_scale"]),
                      "fp8_ratio": float(stacks[group]["fp8_ratio"]), "rms_log_error": rms,
                      "runs": len(own), "fitted_families": sorted({rs.family for rs in own})
                      if len(own) >= MIN_STACK_RUNS else []}
    return families, out


def calibrate(cat: Catalog, rows: list[dict[str, str]] | None = None
              ) -> dict[str, dict[str, Any]]:
    """The family constants of `calibrate_all` (family -> constants, rms, runs)."""
    return calibrate_all(cat, rows)[0]


def _as_overrides(fit: dict[str, dict[str, Any]], parents: dict[str, str]
                  ) -> dict[str, dict[str, float]]:
    """Fitted constants per family; a family fitted on no runs of its own takes those of the
    family it inherits from in efficiency.toml (`inherits`, followed up the chain)."""
    keys = set(CALIBRATION_GRID)
    out = {f: {k: v for k, v in d.items() if k in keys} for f, d in fit.items()}
    for child in parents:
        parent = parents[child]
        while parent not in out and parent in parents:
            parent = parents[parent]
        if child not in out and parent in out:
            out[child] = out[parent]
    return out


def _stack_overrides(fit: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {g: {k: d[k] for k in ("matmul_scale", "fp8_ratio")} for g, d in fit.items()}


def cross_validate(cat: Catalog, rows: list[dict[str, str]] | None = None) -> list[RunResult]:
    """Leave-one-source-out: for each publication, refit every family and stack without that
    publication's runs and predict them. Returns one result per known run, each predicted by
    constants that never saw its source (sample 'out'; `fit` keeps the row's role in the full
    fit, so the fit rows' figure is the cross-validation error within the fit set). A source
    with no fit row leaves the fit unchanged, so the full fit is computed once for all such;
    the refits share one FitCache (calibrate/fit_cache.py: the same runs, predicted once per
    set of constants)."""
    rows = rows if rows is not None else load_runs()
    known = [r for r in rows if r.get("status", "known") == "known"]
    newest = newest_runs(rows)
    results: list[RunResult] = []
    full: Any = None
    parents, cache = cat.efficiency_parents(), FitCache()  # every refit predicts the same runs
    for group in sorted({source_group(r["id"]) for r in known}):
        test = [r for r in known if source_group(r["id"]) == group]
        if any(r.get("fit") == "fit" for r in test):
            train = [{**r, "fit": "holdout"} if source_group(r["id"]) == group else r
                     for r in rows]
            fit = calibrate_all(cat, train, cache)
        else:
            full = full if full is not None else calibrate_all(cat, rows, cache)
            fit = full
        results += validate_runs(cat, test, efficiency=_as_overrides(fit[0], parents),
                                 stacks=_stack_overrides(fit[1]), sample="out", newest=newest)
    return results
