"""Validation against published training runs, and the calibration of efficiency (L5).

Every run in ``data/published_runs.csv`` is predicted from its stated configuration (details a
source leaves out are filled with the defaults named in the row's ``defaults`` column) and
compared with what its authors measured, on tokens/s per GPU or step time. A published
TFLOP/s or MFU figure is first turned into tokens/s with the FLOP convention its source used:

* ``megatron2021``: 96 B s l h^2 (1 + s/6h + V/16lh) per batch -- counts full recompute
  (Narayanan et al. 2021, eq. 3); equal to our `FlopsBreakdown.hardware(full)`.
* ``palm``: model FLOPs 6N + 12 L h s, no recompute (Chowdhery et al. 2022, appendix B),
  equal to our `FlopsBreakdown.model`.

Runs whose configuration is not known (``status = excluded``, reason in ``notes``) are predicted
and printed but kept out of the summary. `calibrate` fits the per-family efficiency constants
on the rows marked ``fit = fit`` only; the rest are a hold-out (docs/calibration.md). A fit
row must belong to the calibration set (`calibration_set_reason`); every error figure says
whether it is in-sample (fit rows under the constants fitted on them) or out-of-sample
(hold-out rows, or any row under leave-one-source-out cross-validation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .catalog import Catalog, read_package_csv
from .errors import CatalogError
from .estimators.compute import Efficiency, flops_per_token
from .estimators.timing import BOTTLENECKS, step_time
from .search.hardware import efficiency_for, hardware_for
from .spec import PRECISIONS, R_FULL, RECOMPUTE, Layout, ModelSpec, code

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


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run made ready to predict."""

    row: dict[str, str]
    model: ModelSpec
    layout: Layout
    family: str
    gpu: str


def load_runs() -> list[dict[str, str]]:
    return read_package_csv(RUNS_FILE)


# The calibration set (../shared/data/README.md, "Which runs may be used to fit model
# constants"): the runs of the public list (column `public_id` names the run there), plus two
# groups of llm-foundry benchmark rows the list lacks: sequence length >= 4,096, and MPT-13B on
# 8 x H100 in BF16. Only rows of this set may be marked `fit`.
LLMFOUNDRY_SOURCE = "llm-foundry, scripts/train/benchmarking/README.md"
LONG_CONTEXT_MIN_SEQ = 4096


def calibration_set_reason(row: dict[str, str]) -> str:
    """Why a run may be used to fit constants ('' if it may not): 'public list',
    'llm-foundry long context' or 'llm-foundry MPT-13B 8xH100 BF16'."""
    if row.get("public_id", "").strip():
        return "public list"
    if LLMFOUNDRY_SOURCE not in row.get("source", ""):
        return ""
    if _int(row, "seq_len") >= LONG_CONTEXT_MIN_SEQ:
        return "llm-foundry long context"
    mpt13b = (_int(row, "layers"), _int(row, "hidden")) == (40, 5120)  # MPT-13B's yaml
    if (mpt13b and row.get("gpu") == "h100-sxm" and _int(row, "gpus") == 8
            and row.get("precision") == "bf16"):
        return "llm-foundry MPT-13B 8xH100 BF16"
    return ""


def _int(row: dict[str, str], key: str, default: int = 0) -> int:
    v = row.get(key, "").strip()
    return int(v) if v else default


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
            precision=code(PRECISIONS, row["precision"], "precision"))
        gpus = int(row["gpus"])
        if int(layout.gpus) != gpus:
            raise CatalogError(f"tp*pp*cp*dp = {layout.gpus} but gpus = {gpus}")
        acc = cat.accelerator(row["gpu"])
    except (KeyError, ValueError, CatalogError) as err:
        raise CatalogError(f"{RUNS_FILE}: run '{row.get('id', '?')}': {err}") from None
    return RunSpec(row=row, model=model, layout=layout, family=acc.family, gpu=acc.id)


def _hardware(cat: Catalog, rs: RunSpec) -> Any:
    row = rs.row
    return hardware_for(cat, rs.gpu, precision=row["precision"],
                        gpus_per_node=_int(row, "gpus_per_node") or None,
                        scale_up_domain=_int(row, "scale_up_domain") or None,
                        scale_out_bytes_per_s=float(row["nic_gbit_per_gpu"]) * 1e9 / 8
                        if row.get("nic_gbit_per_gpu") else None)


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


def predict(cat: Catalog, rs: RunSpec, eff: Efficiency | None = None) -> tuple[Any, Any]:
    """Predicted value of the compared metric (array over eff's shape) and the breakdown."""
    eff = eff if eff is not None else efficiency_for(cat, [rs.family])
    t = step_time(rs.model, rs.layout, _hardware(cat, rs), eff)
    metric, _ = published_value(rs)
    if metric == "step_time_s":
        return t.step_s, t
    return t.tokens_per_s / rs.layout.gpus, t


def validate_runs(cat: Catalog, rows: list[dict[str, str]] | None = None,
                  efficiency: dict[str, dict[str, float]] | None = None,
                  sample: str | None = None) -> list[RunResult]:
    """Predict every published run; `efficiency` overrides rows of [efficiency.FAMILY].
    `sample` labels every result ('out' under cross-validation); by default fit rows are
    in-sample and the rest out-of-sample."""
    results = []
    for row in rows if rows is not None else load_runs():
        rs = run_spec(cat, row)
        eff = efficiency_for(cat, [rs.family])
        if efficiency and rs.family in efficiency:
            eff = replace(eff, **{k: np.asarray([v]) for k, v in efficiency[rs.family].items()})
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
            sample=sample or ("in" if row.get("fit") == "fit" else "out")))
    return results


def _stats(errors: list[float]) -> dict[str, Any]:
    a = np.abs(np.asarray(errors, dtype=float))
    if not len(a):
        return {"n": 0, "median_abs_error_pct": None, "worst_abs_error_pct": None}
    return {"n": int(len(a)), "median_abs_error_pct": float(np.median(a)),
            "worst_abs_error_pct": float(np.max(a))}


def summary(results: list[RunResult], status: str = "known",
            subset: str = "all") -> dict[str, Any]:
    """Median and worst absolute error overall and per family, over runs with `status`
    (and `fit` equal to `subset` unless subset is 'all'). `sample` says whether the figure is
    in-sample ('in'), out-of-sample ('out') or both ('mixed')."""
    chosen = [r for r in results if r.status == status and subset in ("all", r.fit)]
    out = _stats([r.error_pct for r in chosen])
    kinds = {r.sample for r in chosen}
    out["sample"] = kinds.pop() if len(kinds) == 1 else "mixed"
    out["per_family"] = {f: _stats([r.error_pct for r in chosen if r.family == f])
                         for f in sorted({r.family for r in chosen})}
    return out


# --- calibration ----------------------------------------------------------------------------


FIT_START = {"matmul_max": 0.6, "half_dim": 0.0, "fp8_ratio": 0.8, "layer_overhead_s": 0.0,
             "attention_ratio": 1.0}


def _fit_loss(cat: Catalog, runs: list[RunSpec], values: dict[str, Any]) -> np.ndarray:
    """Sum over runs of log(predicted / published)^2, for arrays of candidate constants."""
    eff = Efficiency(**values)
    loss: Any = 0.0
    for rs in runs:
        pred, _ = predict(cat, rs, eff)
        _, pub = published_value(rs)
        loss = loss + np.log(np.asarray(pred, dtype=float) / pub) ** 2
    return np.atleast_1d(loss)


def fit_family(cat: Catalog, family: str, params: tuple[str, ...], grid: dict[str, np.ndarray],
               rows: list[dict[str, str]] | None = None, fixed: dict[str, float] | None = None,
               sweeps: int = 8) -> tuple[dict[str, float], float, int]:
    """Least squares on log(predicted / published) over the family's `fit` rows.

    Coordinate descent on grids: the first two parameters are searched jointly on their full
    grids (they trade off most: peak efficiency and the fixed overhead), then each parameter
    in turn on its grid with the others held, for `sweeps` rounds or until nothing moves.
    Vectorized: one step_time call per run evaluates a whole grid.

    Returns (best values, RMS log error, number of runs used)."""
    runs = [run_spec(cat, r) for r in (rows if rows is not None else load_runs())
            if r.get("fit") == "fit" and r.get("status", "known") == "known"]
    runs = [rs for rs in runs if rs.family == family]
    if not runs:
        raise CatalogError(f"no fit runs for family '{family}' in {RUNS_FILE}")
    # Start from the same neutral point whatever the catalog holds (reproducible); only the
    # unfitted memory_fraction and tp_overlap come from the family's catalog row.
    base = efficiency_for(cat, [family])
    values: dict[str, Any] = {**FIT_START,
                              "memory_fraction": float(np.asarray(base.memory_fraction)[0]),
                              "tp_overlap": float(np.asarray(base.tp_overlap)[0])}
    values.update(fixed or {})
    head = params[:2]
    axes = np.meshgrid(*(grid[p] for p in head), indexing="ij")
    loss = _fit_loss(cat, runs, {**values, **{p: a.ravel() for p, a in zip(head, axes,
                                                                             strict=True)}})
    i = int(np.argmin(loss))
    values.update({p: float(a.ravel()[i]) for p, a in zip(head, axes, strict=True)})
    for _ in range(sweeps):
        before = dict(values)
        for p in params:
            loss = _fit_loss(cat, runs, {**values, p: grid[p]})
            values[p] = float(grid[p][int(np.argmin(loss))])
        if values == before:
            break
    best = {p: values[p] for p in params}
    rms = float(np.sqrt(_fit_loss(cat, runs, values)[0] / len(runs)))
    return best, rms, len(runs)


# Which constants are fitted on which family's `fit` rows (2-4 per family, never per run);
# families without enough runs inherit from the nearest calibrated one (docs/calibration.md).
CALIBRATION_PLAN: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("a100", ("matmul_max", "layer_overhead_s", "half_dim", "attention_ratio"), None),
    ("h100", ("matmul_max", "layer_overhead_s", "half_dim", "attention_ratio", "fp8_ratio"),
     None),
    ("gb200", ("matmul_max",), "h100"),  # 2 fit runs: one constant, the rest from Hopper
)
CALIBRATION_GRID: dict[str, np.ndarray] = {
    "matmul_max": np.round(np.arange(0.40, 1.0001, 0.01), 2),
    "half_dim": np.array([0.0, 50, 100, 200, 300, 400, 600, 800, 1200]),
    "layer_overhead_s": np.arange(0.0, 1.5001e-3, 50e-6),
    "fp8_ratio": np.round(np.arange(0.40, 1.0001, 0.02), 2),
    "attention_ratio": np.round(np.arange(0.20, 1.2001, 0.02), 2),
}


def calibrate(cat: Catalog, rows: list[dict[str, str]] | None = None
              ) -> dict[str, dict[str, Any]]:
    """Fit CALIBRATION_PLAN; returns family -> {constant: value, 'rms_log_error', 'runs'}."""
    out: dict[str, dict[str, Any]] = {}
    for family, params, parent in CALIBRATION_PLAN:
        inherited = ({k: v for k, v in out[parent].items() if k in CALIBRATION_GRID}
                     if parent else {})
        fixed = {k: v for k, v in inherited.items() if k not in params}
        try:
            best, rms, n = fit_family(cat, family, params, CALIBRATION_GRID, rows=rows,
                                      fixed=fixed)
        except CatalogError:
            if not parent:
                raise
            best, rms, n = {k: inherited[k] for k in params}, float("nan"), 0  # no runs left
        out[family] = {**fixed, **best, "rms_log_error": rms, "runs": n}
    return out


def source_group(run_id: str) -> str:
    """The publication a run comes from: its id up to the first dash."""
    return run_id.split("-", 1)[0]


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


def cross_validate(cat: Catalog, rows: list[dict[str, str]] | None = None) -> list[RunResult]:
    """Leave-one-source-out: for each publication, refit every family without that
    publication's runs and predict them. Returns one result per known run, each predicted by
    constants that never saw its source (sample 'out'; `fit` keeps the row's role in the full
    fit, so the fit rows' figure is the cross-validation error within the fit set). A source
    with no fit row leaves the fit unchanged, so the full fit is computed once for all such."""
    rows = rows if rows is not None else load_runs()
    known = [r for r in rows if r.get("status", "known") == "known"]
    results: list[RunResult] = []
    full: dict[str, dict[str, float]] | None = None
    parents = cat.efficiency_parents()
    for group in sorted({source_group(r["id"]) for r in known}):
        test = [r for r in known if source_group(r["id"]) == group]
        if any(r.get("fit") == "fit" for r in test):
            train = [{**r, "fit": "holdout"} if source_group(r["id"]) == group else r
                     for r in rows]
            eff = _as_overrides(calibrate(cat, train), parents)
        else:
            full = full if full is not None else _as_overrides(calibrate(cat, rows), parents)
            eff = full
        results += validate_runs(cat, test, efficiency=eff, sample="out")
    return results
