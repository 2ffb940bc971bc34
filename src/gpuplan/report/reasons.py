"""Sentences for the reason codes of `search.feasibility` and `search.platforms` (L5)."""

from __future__ import annotations

from typing import Any, overload

# Exclusion reasons of `plan` (JSON keys of "excluded"), by feasibility code.
REASONS = {
    "degrees_do_not_divide": "degrees do not divide the GPU count",
    "tp_beyond_scale_up": "TP beyond the scale-up domain",
    "layout_does_not_suit_model": "layout does not suit the model or batch (heads, layers, "
                                  "experts, batch)",
    "interleave_microbatches": "interleaved pipeline (vpp > 1) with micro-batches per step "
                               "not a multiple of pp (Megatron-LM's interleaved schedule)",
    "fp8_unsupported": "FP8 on hardware without it",
    "consumer_beyond_one_node": "consumer GPUs beyond one node (pass --allow-consumer)",
    "out_of_memory": "out of memory",
    "host_memory_exceeded": "offloaded state beyond the node's host memory",
    "op_recompute_unneeded": "per-op recompute where the layout fits without recompute",
    "offload_unneeded": "CPU offload where a layout without it fits",
    "hsdp_unneeded": ("HSDP shard group that cannot beat the fastest layout of its GPU count "
                      "(full sharding's data-parallel traffic hidden, or its compute slower)"),
    "no_link": "no finite step time (traffic over a link the platform lacks)",
    "offer_cap": "more GPUs than the offer provides",
    "no_goodput": "never finishes (failures come faster than a checkpoint and restart)",
    "misses_deadline": "misses the deadline",
    "over_budget": "over budget",
    "no_price_system": "no price for this system",
}

PLATFORM_REASONS = {
    "export_controlled": "export-controlled for China",
    "no_public_price": "own: system has no public price",
    "no_pricing_mode": "offer lacks the requested pricing mode",
}


# Infeasible estimates: why the run cannot happen, where that says more than `reason`.
_INFEASIBLE = {
    "no_link": "cannot run: traffic must cross a link this platform lacks (e.g. more GPUs than "
               "one instance that has no network between instances)",
    "no_goodput": "cannot finish: at this GPU count the cluster fails more often than it can "
                  "checkpoint and restart (goodput 0); use fewer GPUs",
}

MICRO_BATCH_TOO_SMALL = ("the micro-batch is too small to keep the GPU busy: fixed per-layer "
                         "overhead or small matrix multiplies dominate the step")


@overload
def reason(code: str) -> str: ...
@overload
def reason(code: None) -> None: ...


def reason(code: str | None) -> str | None:
    """The sentence of a reason code (None stays None: no reason)."""
    if code is None:
        return None
    if code.startswith("no_price_"):
        return f"no {code.removeprefix('no_price_')} price"
    return REASONS.get(code, code.replace("_", " "))


def infeasible(code: str | None) -> str | None:
    """Why an estimate cannot run or finish, as a sentence (no code: None)."""
    if not code:
        return None
    return _INFEASIBLE.get(code) or reason(code)


def export_status(p: Any, *, rule: bool = True) -> str:
    """An export-controlled platform's status: 'prohibited since 2023-10-17 (rule)', the rule
    left out when `rule` is False."""
    return f"{p.status} since {p.since}" + (f" ({p.rule})" if rule else "")


def platform_entry(p: Any, *, rule: bool = True) -> str:
    """One excluded platform: 'h100-sxm: prohibited since 2023-10-17 (rule)' (see
    `export_status`) or its id."""
    if p.reason == "export_controlled":
        return f"{p.id}: {export_status(p, rule=rule)}"
    return p.id


def warning_message(w: Any) -> str:
    """A plan rule an estimated configuration breaks, with its figures."""
    if w.code == "tp_beyond_scale_up":
        return (f"TP {w.tp} spans more GPUs than the {w.scale_up_domain}-GPU scale-up domain; "
                "`gpuplan plan` excludes such layouts (TP traffic would cross the slower "
                "network)")
    if w.code == "consumer_beyond_one_node":
        return (f"consumer GPUs beyond one node ({w.gpus} GPUs, {w.gpus_per_node} per node): "
                "`gpuplan plan` excludes this unless --allow-consumer")
    if w.code == "offer_cap":
        return f"{w.gpus} GPUs is more than the offer provides ({w.max_gpus:,})"
    if w.code == "out_of_memory":
        return "out of memory: `gpuplan plan` excludes configurations that do not fit"
    return reason(w.code)
