"""Fine-tuning runs against the model (L5, #15): `gpuplan validate --finetune`.

Every row of ``data/finetune_runs.csv`` is a published figure with its complete configuration:
peak memory per GPU (torchtune's tables) or time to train (MLPerf Training's Llama 2 70B LoRA).
Each is predicted through the public API (`gpuplan.estimate` with the row's method, rank,
targets, layout and software stack) and compared. Validation only: nothing is fitted on these
rows (the one fine-tuning constant, the quantized base's slowdown, comes from its own source,
see estimators/finetune.py). Targets (#15): memory within 10% median, MLPerf within 20%.

What is compared is what was measured:

- memory: column ``memory_kind`` says which figure the source reports: ``allocated``
  (torch.cuda.max_memory_allocated, or torchtune's "peak memory active", which equals it when
  no tensor is freed but still referenced), ``reserved`` (max_memory_reserved: + the caching
  allocator's margin) or ``device`` (what nvidia-smi shows: + the CUDA context); the
  estimate's matching figure is compared.
- time (MLPerf): the time to train runs from run_start to run_stop and includes every
  evaluation of the validation set (MLPerf Training rules, "Quality measure": the time to
  evaluate is on the clock). Columns ``evals`` (evaluations up to convergence) and
  ``eval_samples`` (sequences per evaluation) add evals x eval_samples forward passes, each
  ``estimators.finetune.forward_share`` of a trained sample's time.
- ``model_flags`` describes a model without a preset (``layers=28 hidden=3072 ...``); the
  ``model`` column then only names it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from .catalog import Catalog, read_package_csv

RUNS_FILE = "finetune_runs.csv"
TARGETS = {"memory": 0.10, "time": 0.20}  # median |error| targets of issue #15
MEMORY_KINDS = ("allocated", "reserved", "device")


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
    stack: str = "megatron"
    memory_kind: str = ""  # memory rows: allocated | reserved | device
    eval_minutes: float = 0.0  # time rows: the evaluations' share of `predicted`


def load_runs() -> list[dict[str, str]]:
    return read_package_csv(RUNS_FILE)


def _opt_int(v: str) -> int | None:
    return int(v) if v.strip() else None


def _model_flags(text: str) -> dict[str, Any]:
    """'layers=28 hidden=3072 mlp=swiglu tied_embeddings=true' -> estimate's model flags."""
    out: dict[str, Any] = {}
    for item in text.split():
        key, value = item.split("=", 1)
        out[key] = (value == "true" if value in ("true", "false")
                    else int(value) if value.isdigit() else value)
    return out


def _row_model(cat: Catalog, row: dict[str, str]) -> Any:
    """The row's model: its `model_flags`, or else the preset its `model` names."""
    from .workload import model_from_flags, resolve_model

    flags = _model_flags(row["model_flags"])
    return model_from_flags(**flags) if flags else resolve_model(cat, row["model"])


def _estimate(cat: Catalog, row: dict[str, str], model: Any) -> Any:
    from .api import estimate

    return estimate(model=model, gpu=row["gpu"], gpus=int(row["gpus"]), tp=int(row["tp"]),
                    cp=int(row["cp"] or 1), zero=int(row["zero"]), seq_len=int(row["seq_len"]),
                    micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                    recompute=row["recompute"], precision=row["precision"],
                    stack=row["stack"] or "megatron", offload=row["offload"] or False,
                    method=row["method"], lora_rank=_opt_int(row["lora_rank"]),
                    lora_targets=row["lora_targets"] or None, samples=_opt_int(row["samples"]),
                    catalog=cat)


def eval_minutes(model: Any, row: dict[str, str], tokens_per_s: float) -> float:
    """Minutes of the row's evaluations: evals x eval_samples sequences, forward only."""
    if not row["evals"].strip() or tokens_per_s <= 0:
        return 0.0
    from .estimators import compute
    from .estimators import finetune as ftm
    from .spec import R_FULL, RECOMPUTE
    from .workload import finetune_spec, with_finetune

    ft = finetune_spec(model, method=row["method"], lora_rank=_opt_int(row["lora_rank"]),
                       lora_targets=row["lora_targets"] or None)
    seq = int(row["seq_len"])
    fl = compute.flops_per_token(with_finetune(model, ft), seq)
    rc = RECOMPUTE.index(row["recompute"]) if row["recompute"] in RECOMPUTE else R_FULL
    share = float(ftm.forward_share(model, ft, model_flops=fl.model, attention=fl.attention,
                                    lm_head=fl.lm_head, recompute_extra=fl.recompute_extra(rc)))
    sequences = float(row["evals"]) * float(row["eval_samples"])
    return sequences * seq * share / tokens_per_s / 60.0


def predict(cat: Catalog, row: dict[str, str]) -> float:
    """GiB per GPU (kind memory, the figure `memory_kind` names) or minutes (kind time,
    training plus evaluations) of one row, through `gpuplan.estimate`."""
    return _predict(cat, row)[0]


def _predict(cat: Catalog, row: dict[str, str]) -> tuple[float, float]:
    """(the prediction, the evaluations' minutes within it)."""
    model = _row_model(cat, row)
    e = _estimate(cat, row, model)
    if row["kind"] == "memory":
        kind = row["memory_kind"] or "device"
        return {"allocated": e.allocated_gib, "reserved": e.reserved_gib,
                "device": e.memory_gib.total}[kind], 0.0
    evals = eval_minutes(model, row, e.tokens_per_s)
    return (e.useful_days or 0.0) * 24 * 60 + evals, evals


def validate_finetune(cat: Catalog) -> list[FineTuneResult]:
    out = []
    for row in load_runs():
        measured = float(row["measured"])
        predicted, evals = _predict(cat, row)
        out.append(FineTuneResult(
            id=row["id"], kind=row["kind"], model=row["model"], method=row["method"],
            gpu=row["gpu"], gpus=int(row["gpus"]), measured=measured, predicted=predicted,
            unit=row["unit"], error=predicted / measured - 1.0, source=row["source"],
            locator=row["locator"], stack=row["stack"] or "megatron",
            memory_kind=row["memory_kind"], eval_minutes=evals))
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
