"""Text and JSON of `gpuplan estimate` results (L5): every sentence of an estimate is here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..search.results import Estimate, FitOption
from . import finetune as ftr
from .fmt import duration, duration_range, gib, jsonable, num, pct, table, usd, usd_range
from .reasons import MICRO_BATCH_TOO_SMALL, infeasible, warning_message


def fit_phrase(o: FitOption) -> str:
    """'fits with --recompute full (71.2 GiB of 80.0 GiB)'."""
    used = f"({gib(o.memory_gib)} of {gib(o.capacity_gib)})"
    if o.knob == "gpus":
        return f"needs >= {o.gpus} GPUs with --zero 3 {used}"
    if o.knob == "gpus+full":
        return f"needs >= {o.gpus} GPUs with --zero 3 --recompute full {used}"
    return f"fits with {o.flags} {used}"


def _header(r: Estimate) -> list[str]:
    lay = r.layout
    return [
        f"{r.model} ({r.params / 1e9:.1f}B parameters"
        + (f", {r.active_params / 1e9:.1f}B active" if r.active_params != r.params else "")
        + f") on {r.gpus} x {r.gpu} ({r.platform}, {r.gpus_per_node} per node)",
        f"layout: tp {lay.tp}  pp {lay.pp}" + (f" (x{lay.vpp} interleaved)" if lay.vpp > 1 else "")
        + f"  cp {lay.cp}  ep {lay.ep}  dp {lay.dp}  zero {lay.zero}"
        + (f" (shard group {lay.shard_group})" if lay.shard_group else "") + "  "
        f"micro-batch {lay.micro_batch}  global batch {lay.global_batch} x "
        f"{lay.seq_len} tokens ({lay.microbatches} micro-batches)",
        f"        {lay.precision}  {lay.optimizer}  recompute {lay.recompute}"
        + (f" ({','.join(lay.recompute_modules)})" if lay.recompute_modules else "")
        + (f" every {lay.recompute_every} layers" if lay.recompute_every > 1 else "") + "  "
        f"SP {'on' if lay.sp else 'off'}  flash attention {'on' if lay.flash else 'off'}"
        + _offloaded(lay) + f"  stack {lay.stack}"
        + (f"  TP collectives {lay.tp_collectives}" if lay.tp > 1 else "")
        + (f"  schedule {lay.schedule}" if getattr(lay, "schedule", "1f1b") != "1f1b" else ""),
        *_memory_options(lay),
    ]


def _memory_options(lay: Any) -> list[str]:
    """The run's memory options that differ from the defaults (estimators/buffers.py)."""
    parts = []
    if getattr(lay, "moments_dtype", "fp32") != "fp32":
        parts.append(f"optimizer moments {lay.moments_dtype} (master weights fp32)")
    if getattr(lay, "activation_cache", "stack") != "stack":
        parts.append(f"activation cache {lay.activation_cache} (DeepSeek-V3)")
    if getattr(lay, "ema", "none") != "none":
        parts.append(f"parameter EMA fp32 on the {'GPU' if lay.ema == 'gpu' else 'host'}")
    if not getattr(lay, "fp8_transpose", True) and lay.precision == "fp8":
        parts.append("FP8 per-tensor scaling, no FP8 weight transpose (non-TN FP8 GEMMs)")
    return [f"        {'  '.join(parts)}"] if parts else []


def _offloaded(lay: Any) -> str:
    parts = tuple(getattr(lay, "offload_parts", ())) or (("optimizer",) if lay.offload else ())
    if not parts:
        return ""
    if parts == ("optimizer",):
        return "  optimizer offloaded to CPU"
    n = int(getattr(lay, "offload_layers", 0) or 0)
    names = [f"{p} (first {n} layers per stage)" if p == "activations" and n else p
             for p in parts]
    return f"  offloaded to CPU: {', '.join(names)}"


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "other", "total")


def memory_rows(memory_gib: Mapping[str, float], gpu_memory_gib: float) -> list[list[str]]:
    """The memory table of an estimate (`memory_gib` as in its JSON): each part and the total,
    then the GPU's memory, in GiB with two decimals (text and HTML reports)."""
    rows = [[k, f"{memory_gib[k]:.2f}"] for k in MEMORY_PARTS]
    return rows + [["GPU memory", f"{gpu_memory_gib:.2f}"]]


BUFFER_WORDS = {
    "logits": "logits and loss (last stage)",
    "gathered": "ZeRO-3 gathered weights",
    "grad_bucket": "gradient reduce bucket",
    "grad_accum": "gradient accumulation buffer",
    "fp8_weights": "FP8 weight copies",
    "moe_tokens": "MoE token buffers",
    "ema": "parameter EMA",
    "allocator_margin": "allocator margin (reserved, not allocated)",
    "runtime_context": "CUDA context, workspaces, NCCL",
}


def _other(r: Estimate) -> list[str]:
    """The lines of `other` that are not zero, and allocated vs reserved."""
    shown = [(BUFFER_WORDS.get(k, k), f"{v:.2f}", d) for k, v, d in r.memory_buffers if v > 0]
    if not shown:
        return []
    return ["", "other, line by line",
            table(shown, ["buffer", "GiB", "dtype"], "lrl"),
            f"allocated {gib(r.allocated_gib)} (the tensors: torch max_memory_allocated); "
            f"reserved {gib(r.reserved_gib)}",
            f"(the tensors + the allocator margin, {pct(100 * r.layout.allocator_fraction, 0)} "
            f"of them under the {r.layout.allocator} allocator, --allocator: torch "
            "max_memory_reserved);", "fits: reserved + runtime context <= GPU memory"]


def _memory(r: Estimate) -> list[str]:
    rows = memory_rows(dataclasses.asdict(r.memory_gib), r.gpu_memory_gib)
    lines = ["", "memory per GPU (most loaded pipeline stage), GiB = 2^30 bytes",
             table(rows, ["part", "GiB"], "lr"), *_other(r)]
    if r.fits:
        return lines + [f"fits, with {gib(r.headroom_gib)} headroom"]
    lines.append(f"DOES NOT FIT: {gib(-r.headroom_gib)} over")
    lines += [f"  - {fit_phrase(s)}" for s in r.suggestions]
    if not r.suggestions:
        lines.append("  - no single change of recompute, ZeRO, offload, micro-batch, TP, PP or "
                     f"GPU count makes it fit; `gpuplan plan --model {r.model} --gpu {r.gpu} "
                     "--tokens N` searches combinations")
    return lines


def _time(r: Estimate) -> list[str]:
    lines = ["", "time per step"]
    if r.step_time_s is None:
        why = infeasible(r.infeasible_reason)
        assert why is not None  # search.single: no step time -> infeasible_reason NO_LINK
        return lines + [why]
    rows = [(k.removesuffix("_s").replace("_", " "), f"{v * 1e3:,.1f}")
            for k, v in r.time_breakdown_s if v > 0]
    rows.append(("step", f"{r.step_time_s * 1e3:,.1f}"))
    lines += [table(rows, ["part", "ms"], "lr"),
              f"tokens/s {num(r.tokens_per_s)} (cluster), {num(r.tokens_per_s_per_gpu)} per GPU;"
              f" MFU {pct(r.mfu * 100, 1)}  HFU {pct(r.hfu * 100, 1)}  bottleneck: {r.bottleneck}"]
    if r.micro_batch_too_small:
        lines.append(f"{MICRO_BATCH_TOO_SMALL} (a larger --micro-batch or --seq-len uses "
                     "the GPU better)")
    if r.efficiency_is_guess:
        lines.append(f"note: no published run calibrates {r.gpu} under {r.layout.stack}; its "
                     "efficiency is a stated guess (see docs/calibration.md)")
    if r.power is not None:
        lines.append(_power_line(r.power))
    return lines


POWER_BASIS = {"measured": "fitted to measured throughput under power caps",
                "vendor-peak": "from vendor peaks at two power ratings",
                "assumption": "an assumption (power ~ f^3), no published figure for this family"}


def _power_line(p: Any) -> str:
    """The power limit's factor and where its exponent comes from (search.power)."""
    return (f"power limit {p.limit_watts:,.0f} W of {p.tdp_watts:,.0f} W TDP: peak FLOP/s x "
            f"{p.factor:.3f} = (limit / TDP)^{p.exponent:.3f}, {POWER_BASIS[p.basis]} "
            f"({p.source}; docs/calibration.md)")


def _run(r: Estimate) -> list[str]:
    if r.tokens is None or r.step_time_s is None:
        return []
    lines = ["", f"training on {num(r.tokens)} tokens"]
    if r.time_to_train_days is None:
        return lines + [f"  {infeasible(r.infeasible_reason)}"]
    assert r.goodput is not None  # search.single: set with time_to_train_days
    days = duration_range(r.time_to_train_days, r.time_to_train_days_p10,
                          r.time_to_train_days_p90)
    lines += [f"  {days} wall clock ({duration(r.useful_days)} of useful compute, goodput "
              f"{pct(r.goodput * 100, 1)} after failures and checkpoints)",
              f"  {r.gpu_hours:,.0f} GPU-hours ({r.gpu_hours_p10 or 0:,.0f}-"
              f"{r.gpu_hours_p90 or 0:,.0f}), energy {r.energy_kwh:,.0f} kWh, "
              f"{(r.co2e_kg or 0) / 1000:,.1f} t CO2e"]
    if r.cost_usd is not None:
        lines.append(f"  cost {usd_range(r.cost_usd, r.cost_usd_p10, r.cost_usd_p90)} "
                     f"({r.pricing}, {usd(r.usd_per_gpu_hour)} per GPU-hour)")
    else:
        lines.append("  cost: give --offer ID, --usd-per-gpu-hour X or --pricing own")
    lines.append(f"  ranges are P10-P90 from the validation residuals of {r.interval_group} "
                 "(docs/calibration.md)")
    return lines


def render_text(r: Estimate) -> str:
    lines = (_header(r) + ftr.lines(r.finetune) + _memory(r) + ftr.advice(r.finetune, r.fits)
             + _time(r) + _run(r))
    shown = {"out_of_memory", r.infeasible_reason}  # already said above
    warn = [w for w in r.warnings if w.code not in shown]
    if warn:
        lines += ["", "warnings (`gpuplan plan` would exclude this configuration):"]
        lines += [f"- {warning_message(w)}" for w in warn]
    return "\n".join(lines)


def to_json(r: Estimate) -> dict[str, Any]:
    """The `--json` contract of gpuplan 0.1 plus `feasible`, `infeasible_reason` (a sentence)
    with its code, `warnings` ({code, message}) and `suggestion_detail`."""
    out = jsonable(r)
    out.pop("memory_buffers", None)  # -> memory_buffers_gib: the lines of memory_gib.other
    out["memory_buffers_gib"] = {k: {"gib": v, "dtype": d} for k, v, d in r.memory_buffers}
    out.update(
        memory_detail_gib=dict(r.memory_detail_gib),
        time_breakdown_s=dict(r.time_breakdown_s),
        suggestions=[fit_phrase(s) for s in r.suggestions],
        suggestion_detail=jsonable(r.suggestions),
        infeasible_reason=infeasible(r.infeasible_reason),
        infeasible_code=r.infeasible_reason,
        warnings=[{"code": w.code, "message": warning_message(w)} for w in r.warnings])
    out.pop("finetune", None)
    if r.power is None:
        out.pop("power", None)  # only with --power-limit-watts
    out.update(memory_gib=ftr.memory_json(out["memory_gib"]), **ftr.to_json(r.finetune))
    return out
