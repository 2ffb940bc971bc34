"""The command lines that reproduce a result (L5): one home for `gpuplan estimate ...`.

`estimate_args(record, ...)` names, as `gpuplan estimate` flags (argparse dests, which are also
the `gpuplan.api.estimate` keywords and the web's request fields), everything a plan row or an
estimate record needs to be computed again: the model, GPU and count, every layout degree that
is not 1, ZeRO, batch, sequence, precision, recompute, offload, tokens, the offer or system,
the pricing mode, a power limit, and the site assumptions its cost rests on. `shell_line`
writes any such mapping as one shell-quoted line. Plan text, plan JSON (`reproduce`), export
headers and the web page all use these two, so the line a user copies is the one the tests run.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..api import MODEL_FLAGS

# site assumptions that set a run's days and cost, by pricing mode: plan JSON assumption key
# -> estimate flag
_OWN = (("own_years", "years"), ("own_utilization", "utilization"),
        ("electricity_usd_per_kwh", "electricity"), ("pue", "pue"))
_SPOT = (("spot_interruptions_per_instance_hour", "interruptions"),)
_COMMITTED = (("commitment_reuse_utilization", "reuse"),)


def number(value: float) -> str:
    """A number as a flag value that reads back exactly: '0.7', '1.5e+13', never rounded."""
    short = f"{value:.6g}"
    if float(short) == value:
        return short
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def site_args(assumptions: Mapping[str, Any], pricing: str) -> dict[str, Any]:
    """The site flags a `pricing` run's days and cost depend on, from a plan's assumptions
    (`PlanResult.assumptions` as JSON): owning -- years, utilization, electricity, PUE; spot --
    interruptions; a commitment -- the reuse of its idle hours; on-demand and capacity blocks
    none; and in every mode the allocator and a power limit (`plan --power-limit-watts`)."""
    pairs: tuple[tuple[str, str], ...] = ()
    if pricing == "own":
        pairs = _OWN
    elif pricing == "spot":
        pairs = _SPOT
    elif pricing.startswith(("reserved", "savings-plan")):
        pairs = _COMMITTED
    out = {flag: assumptions[key] for key, flag in pairs if assumptions.get(key) is not None}
    if assumptions.get("allocator") not in (None, "caching"):  # every row's memory margin
        out["allocator"] = assumptions["allocator"]
    if assumptions.get("power_limit_watts") is not None:  # every row's speed and energy
        out["power_limit_watts"] = assumptions["power_limit_watts"]
    return out


def model_args(model_id: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The model flags that name the model again: the explicit shape or the config.json path
    as the request gave them, else the catalog id of the result."""
    given = given or {}
    if given.get("layers") is not None:
        return {k: given[k] for k in MODEL_FLAGS if given.get(k) not in (None, False, "")}
    model = str(given.get("model") or "")
    if model.endswith(".json") or "/" in model:
        return {"model": model}
    return {"model": model_id or "MODEL"}


def estimate_args(rec: Mapping[str, Any], *, model: Mapping[str, Any] | None = None,
                  site: Mapping[str, Any] | None = None, catalog: Sequence[str] = ()
                  ) -> dict[str, Any]:
    """`gpuplan estimate` flags (dests) for a flat record: a plan row with the plan's `model`
    and `tokens`, or an estimate's layout merged in. `model`: the request's model flags
    (see `model_args`); `site`: site flags to state; `catalog`: overlay files."""
    out = model_args(str(rec.get("model") or ""), model)
    out.update(gpu=rec["gpu"], gpus=rec["gpus"])
    for name in ("tp", "pp", "cp", "ep", "vpp"):
        if (rec.get(name) or 1) > 1:
            out[name] = rec[name]
    for name in ("first_stage_layers", "last_stage_layers"):
        if rec.get(name):
            out[name] = rec[name]
    out.update(zero=rec.get("zero") or 0, micro_batch=rec["micro_batch"],
               global_batch=rec["global_batch"], seq_len=rec["seq_len"],
               precision=rec.get("precision") or "bf16",
               recompute=rec.get("recompute") or "none")
    if rec.get("offload_parts"):
        out["offload"] = ",".join(rec["offload_parts"])
    elif rec.get("offload"):
        out["offload"] = True
    if rec.get("offload_layers"):
        out["offload_layers"] = rec["offload_layers"]
    if rec.get("shard_group"):
        out["shard_group"] = rec["shard_group"]
    if rec.get("recompute_modules"):
        out["recompute_modules"] = ",".join(rec["recompute_modules"])
    if (rec.get("recompute_every") or 1) > 1:
        out["recompute_every"] = rec["recompute_every"]
    out.update(_run_options(rec))
    if rec.get("tokens"):
        out["tokens"] = number(rec["tokens"])
    if rec.get("offer"):
        out["offer"] = rec["offer"]
    elif rec.get("system"):
        out["system"] = rec["system"]
    if rec.get("pricing"):
        out["pricing"] = rec["pricing"]
    if rec.get("power_limit_watts") is not None:  # an estimate's (a plan's: in `site`)
        out["power_limit_watts"] = number(rec["power_limit_watts"])
    out.update({k: v if isinstance(v, str) else number(v) for k, v in (site or {}).items()
                if v is not None})
    if catalog:
        out["catalog"] = list(catalog)
    return out


def _run_options(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The layout echo's stack, schedule, dispatcher and memory options that differ from
    `gpuplan estimate`'s defaults (the dispatcher: from the stack's auto choice)."""
    out = {k: rec[k] for k, default in (("stack", "megatron"), ("schedule", "1f1b"),
                                        ("moments_dtype", "fp32"),
                                        ("activation_cache", "stack"), ("ema", "none"))
           if rec.get(k) not in (None, default)}
    if rec.get("fp8_transpose") is False:  # only a per-tensor recipe drops it (buffers.py)
        out["fp8_recipe"] = "tensor"
    if rec.get("allocator") not in (None, "caching"):  # the memory margin's setting
        out["allocator"] = rec["allocator"]
    auto = "flex" if rec.get("stack", "megatron") in ("megatron", "nemo") else "alltoall"
    if rec.get("moe_dispatcher") not in (None, auto):
        out["moe_dispatcher"] = rec["moe_dispatcher"]
    return out


def shell_line(command: str, args: Mapping[str, Any],
               flags: Mapping[str, str] | None = None) -> str:
    """`gpuplan COMMAND --flag value ...` (shell-quoted). A list repeats its flag, True is a
    bare switch, None / False / [] are left out; `flags` maps a name to its flag where that is
    not `--` + the name with dashes."""
    words = ["gpuplan", *command.split("/")]
    for name, value in args.items():
        if value is None or value is False or value == []:
            continue
        flag = (flags or {}).get(name) or "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
            continue
        for v in value if isinstance(value, list | tuple) else [value]:
            words += [flag, str(v)]
    return " ".join(shlex.quote(w) for w in words)


def estimate_command(rec: Mapping[str, Any], **kw: Any) -> str:
    """The `gpuplan estimate ...` line that reproduces `rec` (keywords of `estimate_args`)."""
    return shell_line("estimate", estimate_args(rec, **kw))
