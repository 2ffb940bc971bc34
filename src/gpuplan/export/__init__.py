"""Launch configurations from a plan row or an estimate (L5).

Every target is a module with `render(record, *, source) -> str`, where `record` is the JSON
record `gpuplan plan --json` (one row of `plans`, with the plan's `model` and `tokens`) or
`gpuplan estimate --json` prints, and `source` says where it came from (`{"from": "..."}`).
`export(record, target)` picks the module; `record_from(doc, rank)` takes a whole saved result.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigError, UnknownIdError

# target name -> module (a plain dict until a plugin mechanism is needed)
TARGETS = {
    "megatron": "megatron",
    "torchtitan": "torchtitan",
    "deepspeed": "deepspeed",
    "torchrun": "torchrun",
    "slurm": "slurm",
    "skypilot": "skypilot",
}
_PLAN_KEYS = ("model", "tokens")  # plan-level keys every row inherits


def export(record: dict[str, Any], target: str, *, source: dict[str, Any] | None = None) -> str:
    """The launch configuration for `target`; UnknownIdError (with did-you-mean) if none."""
    name = target.strip().lower()
    if name not in TARGETS:
        raise UnknownIdError("export target", target, TARGETS)
    module = importlib.import_module(f"{__name__}.{TARGETS[name]}")
    text: str = module.render(record, source=source or {"from": "a gpuplan result"})
    return text


def record_from(doc: Any, rank: int = 1) -> tuple[dict[str, Any], str]:
    """(record, description) from a saved `plan --json` (row `rank`, 1-based) or
    `estimate --json` document; ConfigError when it is neither."""
    if not isinstance(doc, dict):
        raise ConfigError("the result is not a JSON object; give what `gpuplan plan --json` "
                          "or `gpuplan estimate --json` wrote")
    if "plans" in doc:
        plans = doc["plans"]
        if not isinstance(plans, list) or not plans:
            raise ConfigError("the plan result has no plans (nothing was feasible); relax the "
                              "plan and save it again")
        if not 1 <= rank <= len(plans):
            raise ConfigError(f"--rank {rank} is out of range: the plan has {len(plans)} "
                              f"plan(s), give 1..{len(plans)}")
        row = plans[rank - 1]
        if not isinstance(row, dict):
            raise ConfigError(f"plan {rank} is not a JSON object")
        extra = {k: doc[k] for k in _PLAN_KEYS if k in doc and k not in row}
        a = doc.get("assumptions")
        if isinstance(a, dict) and "allocator" in a and "allocator" not in row:
            extra["allocator"] = a["allocator"]  # the plan's setting, every row's margin
        if isinstance(a, dict) and a.get("power_limit_watts") is not None:
            extra["power_limit_watts"] = a["power_limit_watts"]  # every row's GPU power
        return {**row, **extra}, f"plan rank {rank}"
    if "layout" in doc and "gpu" in doc:
        if rank != 1:
            raise ConfigError("an estimate has one configuration: drop --rank")
        if doc.get("fits") is False:
            raise ConfigError(_does_not_fit(doc))
        return doc, "estimate"
    raise ConfigError("the result is neither a plan (no 'plans') nor an estimate (no "
                      "'layout'); give what `gpuplan plan --json` or `gpuplan estimate --json` "
                      "wrote")


def _does_not_fit(doc: dict[str, Any]) -> str:
    """The one line for an estimate whose memory does not fit: a launch config for it would
    only run out of memory, so the first fitting knob the estimate found is named instead."""
    mem, cap = doc.get("memory_gib"), doc.get("gpu_memory_gib")
    need = (f" ({mem['total']:.1f} GiB per GPU of {cap:.1f})" if isinstance(mem, dict)
            and isinstance(mem.get("total"), (int, float)) and isinstance(cap, (int, float))
            else "")
    detail = doc.get("suggestion_detail")
    knob = (detail[0].get("flags") if isinstance(detail, list) and detail
            and isinstance(detail[0], dict) else None)
    fix = (f"estimate again with {knob} (it fits) and export that" if isinstance(knob, str)
           else "change the layout until the estimate fits, then export it")
    return f"the configuration does not fit in GPU memory{need}; {fix}"
