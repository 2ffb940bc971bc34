"""Fine-tuning runs against the model (L5, #15): `gpuplan validate --finetune`.

Every row of ``data/finetune_runs.csv`` is a published figure with its complete configuration:
peak memory per GPU (torchtune's tables) or time to train (MLPerf Training's Llama 2 70B LoRA).
Each is predicted through the public API (`gpuplan.estimate` with the row's method, rank,
targets and layout) and compared. Validation only: nothing is fitted on these rows (the one
fine-tuning constant, the quantized base's slowdown, comes from its own source, see
estimators/finetune.py). Targets (#15): memory within 10% median, MLPerf within 20%.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from .catalog import Catalog, read_package_csv

RUNS_FILE = "finetune_runs.csv"
TARGETS = {"memory": 0.10, "time": 0.20}  # median |error| targets of issue #15


@dataclass(frozen=True, kw_only=True)
class FineTuneResult:
    id: str
    kind: str  # 'memory' (GiB per GPU) or 'time' (minutes to train)
    model: str
    method: str
    gpu: str
    gpus: int
    measured: float
    predicted: float
    unit: str
    error: float  # predicted / measured - 1
    source: str
    locator: str


def load_runs() -> list[dict[str, str]]:
    return read_package_csv(RUNS_FILE)


def _opt_int(v: str) -> int | None:
    return int(v) if v.strip() else None


def predict(cat: Catalog, row: dict[str, str]) -> float:
    """GiB per GPU (kind memory) or minutes (kind time) of one row, through `gpuplan.estimate`."""
    from .api import estimate

    samples = _opt_int(row["samples"])
    seq = int(row["seq_len"])
    e = estimate(model=row["model"], gpu=row["gpu"], gpus=int(row["gpus"]), tp=int(row["tp"]),
                 zero=int(row["zero"]), seq_len=seq, micro_batch=int(row["micro_batch"]),
                 global_batch=int(row["global_batch"]), recompute=row["recompute"],
                 precision=row["precision"], method=row["method"],
                 lora_rank=_opt_int(row["lora_rank"]), lora_targets=row["lora_targets"] or None,
                 samples=samples, catalog=cat)
    if row["kind"] == "memory":
        return e.memory_gib.total
    return (e.useful_days or 0.0) * 24 * 60


def validate_finetune(cat: Catalog) -> list[FineTuneResult]:
    out = []
    for row in load_runs():
        measured = float(row["measured"])
        predicted = predict(cat, row)
        out.append(FineTuneResult(
            id=row["id"], kind=row["kind"], model=row["model"], method=row["method"],
            gpu=row["gpu"], gpus=int(row["gpus"]), measured=measured, predicted=predicted,
            unit=row["unit"], error=predicted / measured - 1.0, source=row["source"],
            locator=row["locator"]))
    return out


def summary(results: list[FineTuneResult]) -> dict[str, dict[str, Any]]:
    """Per kind: runs, median and worst |error|, the target and whether the median meets it."""
    out: dict[str, dict[str, Any]] = {}
    for kind, target in TARGETS.items():
        errs = [abs(r.error) for r in results if r.kind == kind]
        if not errs:
            continue
        med = statistics.median(errs)
        out[kind] = {"runs": len(errs), "median_abs_error": med, "worst_abs_error": max(errs),
                     "target": target, "meets_target": med <= target}
    return out
