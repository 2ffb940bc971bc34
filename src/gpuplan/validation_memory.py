"""Memory validation against published per-GPU measurements (L5): `gpuplan validate --memory`.

Every row of ``data/memory_runs.csv`` gives a run's complete layout, its software stack, what
was measured and whether it is ``allocated`` (torch.cuda.max_memory_allocated: the tensors) or
``reserved`` (torch.cuda.max_memory_reserved: the caching allocator's peak, what torchtitan
logs) or ``device`` (nvidia-smi's memory.used: reserved + the runtime context, the estimate's
``total``). The estimate's matching figure is compared with it, and a run recorded as having
run (``ran = yes``) that the model predicts does not fit (reserved + runtime context > the
GPU's memory) is counted. A run's settings that are not
layout fields come from their own columns: ``compiled_loss = yes`` (torch.compile'd loss).

These rows are validation data only: no constant is fitted on them (docs/calibration.md).
A row whose layout the model refuses (e.g. an uneven pipeline split) is reported with the
refusal and kept out of the error summary.

``data/allocator_logs.csv`` holds published logs that print both PyTorch peaks (max allocated,
max reserved) of one training process; `allocator_margins` applies the rule of
docs/calibration.md 'Allocator margin from published reserved/allocated logs' to them (the
margin per allocator setting, and whether the setting reaches the rule's quorum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .catalog import Catalog, read_package_csv
from .errors import CatalogError, GpuplanError
from .estimators.buffers import LEGACY
from .search.evaluate import ALLOCATORS, Site, memory_per_gpu, site_from_catalog
from .spec import PRECISIONS, RECOMPUTE, STACKS, Layout, code
from .units import GiB

MEMORY_RUNS_FILE = "memory_runs.csv"
ALLOCATOR_LOGS_FILE = "allocator_logs.csv"
# the rule's quorum (docs/calibration.md): runs and independent sources per setting
QUORUM_RUNS, QUORUM_SOURCES = 8, 4
MIN_ALLOCATED_MIB = 10 * 1024  # the rule's floor on max allocated (10 GiB)
KINDS = ("allocated", "reserved", "device")
# what each kind of measurement is compared with: the tensors, the caching allocator's peak,
# or what nvidia-smi shows (reserved + the runtime context outside the allocator)
_PREDICTED = {"allocated": "allocated", "reserved": "reserved", "device": "total"}


@dataclass(frozen=True, kw_only=True)
class MemoryRunResult:
    id: str
    kind: str  # 'allocated', 'reserved' or 'device' (what was measured, and what is compared)
    measured_gib: float
    predicted_gib: float | None  # None when the layout is refused
    error_pct: float | None  # (predicted - measured) / measured * 100
    total_gib: float | None  # predicted device use: reserved + runtime context
    gpu_memory_gib: float
    fits: bool | None
    ran: bool
    stack: str
    refused: str  # the model's one-line refusal, '' when it predicts the run
    source: str


def load_memory_runs() -> list[dict[str, str]]:
    return read_package_csv(MEMORY_RUNS_FILE)


def load_allocator_logs() -> list[dict[str, str]]:
    """The collected logs, each row checked (errors name the row)."""
    rows = read_package_csv(ALLOCATOR_LOGS_FILE)
    for row in rows:
        _check_log(row)
    return rows


LOG_COLUMNS = ("id", "source_id", "setting", "max_allocated_mib", "max_reserved_mib",
               "admitted", "reason", "source", "locator", "as_of")


def _check_log(row: dict[str, str]) -> None:
    where = f"{ALLOCATOR_LOGS_FILE}: log '{row.get('id', '?')}'"
    missing = [c for c in LOG_COLUMNS if c not in row]
    if missing:
        raise CatalogError(f"{where}: missing column(s) {', '.join(missing)}")
    try:
        alloc, res = float(row["max_allocated_mib"]), float(row["max_reserved_mib"])
    except ValueError:
        raise CatalogError(f"{where}: max_allocated_mib and max_reserved_mib must be numbers "
                           f"(MiB), got '{row['max_allocated_mib']}' and "
                           f"'{row['max_reserved_mib']}'") from None
    problems = [
        (row["setting"] not in ALLOCATORS, f"setting must be one of {', '.join(ALLOCATORS)}"),
        (row["admitted"] not in ("yes", "no"), "admitted must be yes or no"),
        (not (0 < alloc <= res < math.inf), "needs 0 < max_allocated_mib <= max_reserved_mib, "
         "both finite"),
        ((row["admitted"] == "no") != bool(row["reason"].strip()),
         "a reason is given exactly when the log is not admitted"),
        (row["admitted"] == "yes" and alloc < MIN_ALLOCATED_MIB,
         "an admitted log has max allocated >= 10 GiB"),
        (not all(row[c].strip() for c in ("source", "source_id", "locator", "as_of")),
         "source, source_id, locator and as_of are required"),
        ("https://" not in row["source"], "source must give the log's public address "
         "(https://...)")]
    for bad, msg in problems:
        if bad:
            raise CatalogError(f"{where}: {msg}")


def allocator_margins(rows: list[dict[str, str]] | None = None) -> dict[str, dict[str, Any]]:
    """Per allocator setting: the admitted runs, their independent sources, the median of
    max_reserved / max_allocated - 1 (None without runs) rounded to 0.01, and whether the
    rule's quorum is reached (docs/calibration.md)."""
    rows = load_allocator_logs() if rows is None else rows
    out: dict[str, dict[str, Any]] = {}
    for name in ALLOCATORS:
        mine = [r for r in rows if r["setting"] == name and r["admitted"] == "yes"]
        vals = [float(r["max_reserved_mib"]) / float(r["max_allocated_mib"]) - 1 for r in mine]
        sources = len({r["source_id"] for r in mine})
        out[name] = {
            "runs": len(mine), "sources": sources,
            "median": round(float(np.median(vals)), 2) if vals else None,
            "quorum": len(mine) >= QUORUM_RUNS and sources >= QUORUM_SOURCES}
    return out


def _int(row: dict[str, str], key: str, default: int) -> int:
    v = row.get(key, "").strip()
    return int(v) if v else default


def memory_layout(row: dict[str, str]) -> Layout:
    """A CSV row -> the Layout it states (errors name the row)."""
    try:
        if row["kind"] not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        return Layout(
            tp=_int(row, "tp", 1), pp=_int(row, "pp", 1), dp=_int(row, "dp", 1),
            cp=_int(row, "cp", 1), ep=_int(row, "ep", 1), vpp=_int(row, "vpp", 1),
            zero=_int(row, "zero", 0), micro_batch=_int(row, "micro_batch", 1),
            global_batch=_int(row, "global_batch", 1), seq_len=_int(row, "seq_len", 2048),
            recompute=code(RECOMPUTE, row["recompute"], "recompute"),
            precision=code(PRECISIONS, row["precision"], "precision"),
            stack=code(STACKS, row["stack"], "stack"))
    except (KeyError, ValueError, GpuplanError) as err:
        raise CatalogError(f"{MEMORY_RUNS_FILE}: run '{row.get('id', '?')}': {err}") from None


def _capacity_gib(cat: Catalog, row: dict[str, str]) -> float:
    given = row.get("gpu_memory_gib", "").strip()
    return float(given) if given else cat.accelerator(row["gpu"]).memory_bytes / GiB


def _run_site(site: Site, row: dict[str, str]) -> Site:
    """The site with the run's own settings that are not layout fields: a loss compiled
    with torch.compile (column `compiled_loss`, `buffers.StackBuffers.with_compiled_loss`)."""
    if row.get("compiled_loss", "").strip() != "yes":
        return site
    return replace(site, stack_buffers=(site.stack_buffers or LEGACY).with_compiled_loss())


def validate_memory(cat: Catalog, rows: list[dict[str, str]] | None = None
                    ) -> list[MemoryRunResult]:
    """Predict every memory run with the catalog's constants."""
    site = site_from_catalog(cat)
    out = []
    for row in rows if rows is not None else load_memory_runs():
        layout, model = memory_layout(row), cat.model(row["model"])
        cap = _capacity_gib(cat, row)
        base: dict[str, Any] = dict(
            id=row["id"], kind=row["kind"], measured_gib=float(row["measured_gib"]),
            gpu_memory_gib=cap, ran=row.get("ran", "yes") == "yes", stack=row["stack"],
            source=row.get("source", ""))
        try:
            layout.check(model, int(row["gpus"]))
        except GpuplanError as err:
            out.append(MemoryRunResult(**base, predicted_gib=None, error_pct=None,
                                       total_gib=None, fits=None, refused=str(err)))
            continue
        mem = memory_per_gpu(model, layout, _run_site(site, row))
        pred = float(np.asarray(getattr(mem, _PREDICTED[row["kind"]])).reshape(-1)[0]) / GiB
        total = float(np.asarray(mem.total).reshape(-1)[0]) / GiB
        out.append(MemoryRunResult(
            **base, predicted_gib=pred,
            error_pct=(pred - base["measured_gib"]) / base["measured_gib"] * 100.0,
            total_gib=total, fits=total <= cap, refused=""))
    return out


def memory_summary(results: list[MemoryRunResult]) -> dict[str, Any]:
    """Median and worst |error| over predicted runs, the runs that ran but are predicted not
    to fit, and the refused runs."""
    errs = np.abs([r.error_pct for r in results if r.error_pct is not None])
    return {
        "n": int(len(errs)),
        "median_abs_error_pct": float(np.median(errs)) if len(errs) else None,
        "worst_abs_error_pct": float(np.max(errs)) if len(errs) else None,
        "ran_but_predicted_not_to_fit": [r.id for r in results if r.ran and r.fits is False],
        "refused": [r.id for r in results if r.refused],
        "sample": "out",
    }
