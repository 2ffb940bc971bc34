"""The time-model settings of a published run (data/published_runs.csv): the pipeline schedule
(`schedule`: empty = 1f1b; 1f1b-a2a where the recipe sets Megatron-Core's
--overlap-moe-expert-parallel-comm) and the MoE token dispatcher (`moe_dispatcher`: empty = auto,
the stack's; flex or alltoall as the recipe sets --moe-token-dispatcher-type); and the power
limit the GPUs ran at (`power_limit_watts`: empty = the catalog part's TDP), applied with the
family's published perf-vs-power exponent (search.power); and the stacks' buffers its time is
predicted with (`run_stacks`: the FP8 recipe its notes state); and the [stack.NAME] settings
its columns record (`stack_settings`: the TP collectives)."""

from __future__ import annotations

import math
from typing import Any

from ..catalog import Catalog
from ..errors import CatalogError
from ..estimators.buffers import fp8_transpose_kept, from_table
from ..search.hardware import TP_COLLECTIVES, stack_row
from ..search.power import power_limited
from ..spec import MOE_DISPATCHERS, SCHEDULES, Accelerator, code
from .memory_fit import fp8_recipe


def time_fields(row: dict[str, str]) -> dict[str, int]:
    """The Layout fields `schedule` and `moe_dispatcher` of a CSV row (codes)."""
    return {"schedule": code(SCHEDULES, row.get("schedule", "").strip() or SCHEDULES[0],
                             "schedule"),
            "moe_dispatcher": code(MOE_DISPATCHERS,
                                   row.get("moe_dispatcher", "").strip() or MOE_DISPATCHERS[0],
                                   "moe_dispatcher")}


# [stack.NAME] settings a run's own column may state (blank: the stack's): the TP collectives
# it ran ("overlapped" with async TP on; docs/calibration.md, "Blocking tensor-parallel
# collectives").
STACK_SETTINGS = {"tp_collectives": TP_COLLECTIVES}


def stack_settings(row: dict[str, str]) -> dict[str, str]:
    """The [stack.NAME] settings the row records (STACK_SETTINGS), each checked; one line
    naming the run for a value outside its choices."""
    out = {}
    for key, choices in STACK_SETTINGS.items():
        value = row.get(key, "").strip()
        if value and value not in choices:
            raise CatalogError(f"published_runs.csv: run '{row.get('id', '?')}': {key} must be "
                               f"one of {', '.join(choices)} or empty; got '{value}'")
        if value:
            out[key] = value
    return out


def run_stack_row(cat: Catalog, stack: str, row: dict[str, str],
                  constants: dict[str, Any] | None = None) -> dict[str, Any]:
    """The [stack.NAME] row a run is predicted under: its stack's, the calibration group's
    `constants` over it, and the settings its own columns record (`stack_settings`)."""
    return {**stack_row(cat, stack), **(constants or {}), **stack_settings(row)}


def power_limit(row: dict[str, str], gpu: Accelerator, hw: Any) -> Any:
    """`hw` as a run held to the row's `power_limit_watts` ran it: peak FLOP/s scaled by the
    family's published perf-vs-power law (search.power), as `estimate --power-limit-watts`
    scales them (search.power.power_limited)."""
    text = row.get("power_limit_watts", "").strip()
    return power_limited(hw, gpu, _watts(row, text, gpu)) if text else hw


def _watts(row: dict[str, str], text: str, gpu: Accelerator) -> float:
    """The column's value: a number of watts above 0 and at most the part's TDP (a GPU cannot
    be set above it), else one line naming the run."""
    try:
        watts = float(text)
    except ValueError:
        watts = math.nan
    if not 0 < watts <= gpu.tdp_watts:  # also false for nan; inf is above any TDP
        raise CatalogError(
            f"published_runs.csv: run '{row.get('id', '?')}': power_limit_watts must be a "
            f"number of watts above 0 and at most {gpu.id}'s TDP ({gpu.tdp_watts:g} W), or "
            f"empty for the TDP; got '{text}'")
    return watts


def run_stacks(cat: Catalog, row: dict[str, str]) -> Any:
    """The stacks' buffers (data/memory.toml [memory.STACK], as the memory model reads them) a
    run's time is predicted with: the FP8 recipe its notes state (`memory_fit.fp8_recipe`;
    none stated: the planner's 'auto') sets which parameter gathers move FP8
    (estimators/buffers.py fp8_param_gathers)."""
    rows = cat.extra.get("memory")
    sb = from_table(rows) if rows else None
    recipe = fp8_recipe(row)
    if sb is None or recipe is None:
        return sb
    return sb.with_fp8_transpose(fp8_transpose_kept(
        recipe, cat.accelerator(row["gpu"]).fp8_gemm_any_layout))
