"""The time-model settings of a published run (data/published_runs.csv): the pipeline schedule
(`schedule`: empty = 1f1b; 1f1b-a2a where the recipe sets Megatron-Core's
--overlap-moe-expert-parallel-comm) and the MoE token dispatcher (`moe_dispatcher`: empty = auto,
the stack's; flex or alltoall as the recipe sets --moe-token-dispatcher-type)."""

from __future__ import annotations

from ..spec import MOE_DISPATCHERS, SCHEDULES, code


def time_fields(row: dict[str, str]) -> dict[str, int]:
    """The Layout fields `schedule` and `moe_dispatcher` of a CSV row (codes)."""
    return {"schedule": code(SCHEDULES, row.get("schedule", "").strip() or SCHEDULES[0],
                             "schedule"),
            "moe_dispatcher": code(MOE_DISPATCHERS,
                                   row.get("moe_dispatcher", "").strip() or MOE_DISPATCHERS[0],
                                   "moe_dispatcher")}
