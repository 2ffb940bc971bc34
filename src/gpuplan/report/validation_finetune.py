"""Text and JSON of `gpuplan validate --finetune` (L5, #15)."""

from __future__ import annotations

from typing import Any

from ..validation_finetune import FineTuneResult, summary
from .fmt import jsonable, pct, table

KINDS = {"memory": "peak memory per GPU", "time": "time to train (MLPerf)"}


def to_json(results: list[FineTuneResult]) -> dict[str, Any]:
    return {"runs": jsonable(results), "summary": jsonable(summary(results))}


def render_text(results: list[FineTuneResult]) -> str:
    rows = [(r.id, r.method, f"{r.gpus}x {r.gpu}", r.stack, _compared(r),
             f"{r.measured:.2f} {r.unit}", f"{r.predicted:.2f} {r.unit}",
             ("+" if r.error >= 0 else "") + pct(r.error * 100, 0))
            for r in results]
    lines = ["fine-tuning runs (data/finetune_runs.csv; validation only, nothing fitted on them)",
             table(rows, ["run", "method", "hardware", "stack", "compared", "published",
                          "predicted", "error"], "lllllrrr"), ""]
    for kind, s in summary(results).items():
        verdict = "meets" if s["meets_target"] else "MISSES"
        lines.append(f"{KINDS[kind]}: {s['runs']} runs, median |error| "
                     f"{pct(s['median_abs_error'] * 100, 0)}, worst "
                     f"{pct(s['worst_abs_error'] * 100, 0)}; {verdict} the "
                     f"{pct(s['target'] * 100, 0)} target")
    lines += ["", "compared: the memory figure the source reports (allocated = torch's peak "
              "allocated/active, reserved, device = + CUDA context); MLPerf times include the "
              "evaluations, as MLPerf clocks them",
              "sources and locators: `gpuplan validate --finetune --json`"]
    return "\n".join(lines)


def _compared(r: FineTuneResult) -> str:
    if r.kind == "memory":
        return r.memory_kind or "device"
    return f"train + {r.eval_minutes:.1f} min eval"
