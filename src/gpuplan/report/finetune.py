"""The fine-tuning parts of the estimate and plan reports (L5, #15): text and JSON."""

from __future__ import annotations

from typing import Any

from ..search.finetune import CONSUMER_REASON, FineTuneInfo
from .fmt import duration, gib, jsonable, num, table, usd

CONSUMER_REASONS = {
    CONSUMER_REASON: "consumer cards allowed: a fine-tune fits on one card, so the reasons to "
                     "hold them back from pre-training (no NVLink, no data-center licence for "
                     "multi-node clusters) do not apply",
}
MEMORY_KEYS = ("base_weights", "adapter_weights", "adapter_optimizer")


def flags(info: FineTuneInfo | None) -> str:
    """The flags that repeat the method on a `gpuplan estimate` line ('' for full training)."""
    if info is None:
        return ""
    out = f" --method {info.method}"
    if info.lora_rank is not None:
        out += f" --lora-rank {info.lora_rank} --lora-targets {info.lora_targets}"
    if info.quant not in ("none", "nf4"):
        out += f" --quant {info.quant}"
    return out


def _method_line(info: FineTuneInfo) -> str:
    what = {"lora": "LoRA", "qlora": "QLoRA", "freeze": "freeze"}.get(info.method, info.method)
    line = f"fine-tuning: {what}"
    if info.lora_rank is not None:
        line += f" rank {info.lora_rank} on {info.lora_targets} matrices"
    if info.quant != "none":
        line += (f", base stored in {info.quant.upper()} (compute x{info.quant_slowdown:g} for "
                 "dequantization)")
    if info.method == "freeze":
        line += ", the last layers trained"
    return line + f"; {num(info.trainable_params)} trainable parameters"


def _tokens_line(info: FineTuneInfo) -> list[str]:
    if info.samples is None or info.tokens_per_epoch is None:
        return []
    how = "packed" if info.packing else (
        f"padded, {info.padding_efficiency:.0%} of the tokens are real")
    epochs = f"{info.epochs:g} epoch" + ("" if info.epochs == 1 else "s")
    line = (f"data: {info.samples:,} samples x {epochs} = "
            f"{num(info.tokens_per_epoch)} tokens per epoch ({how})")
    if info.time_per_epoch_days is not None:
        line += f"; {duration(info.time_per_epoch_days)} per epoch"
    return [line]


def lines(info: FineTuneInfo | None) -> list[str]:
    """The fine-tuning lines of an estimate or a plan ([] for full training)."""
    if info is None:
        return []
    out = [_method_line(info), *_tokens_line(info)]
    if info.consumer_allowed:
        out.append(CONSUMER_REASONS.get(info.consumer_allowed, info.consumer_allowed))
    if info.memory_gib is not None:
        m = info.memory_gib
        out.append(f"memory of the first option per GPU: base weights {gib(m.base_weights or 0)}, "
                   f"adapters {gib(m.adapter_weights or 0, 2)}, their optimizer "
                   f"{gib(m.adapter_optimizer or 0, 2)}, activations {gib(m.activations)}, total "
                   f"{gib(m.total)}")
    return out


def advice(info: FineTuneInfo | None, fits: bool) -> list[str]:
    """What a fine-tune can change when it does not fit (beside the generic knobs)."""
    if info is None or fits:
        return []
    knobs = ["--recompute full", "a smaller --seq-len or --micro-batch"]
    if info.method == "lora" and info.quant == "none":
        knobs.insert(0, "--method qlora (an NF4 base: about 0.26x the bf16 weights)")
    if info.lora_rank is not None and info.lora_rank > 16:
        knobs.append("a smaller --lora-rank")
    if info.method == "freeze":
        knobs.insert(0, "--method lora or qlora (no optimizer state for whole layers)")
    return ["  for a fine-tune, also: " + "; ".join(knobs)]


def single_gpu_lines(info: FineTuneInfo | None) -> list[str]:
    """A table of the best single-GPU options of a fine-tuning plan ([] if none)."""
    if info is None or not info.single_gpu:
        return []
    rows = [(p.gpu, p.platform, p.pricing, duration(p.time_to_train_days), usd(p.cost_usd),
             f"{p.memory_gib_per_gpu:.0f}/{p.gpu_memory_gib:.0f}", p.recompute, p.micro_batch)
            for p in info.single_gpu]
    return ["", "on one GPU:", table(rows, ["gpu", "where", "pricing", "time", "cost",
                                            "GiB/GPU", "recompute", "mb"], "llllrrlr")]


def to_json(info: FineTuneInfo | None) -> dict[str, Any]:
    """`method` and `finetune` keys of the JSON ({'method': 'full'} for full training)."""
    if info is None:
        return {"method": "full"}
    d = jsonable(info)
    d["consumer_reason"] = CONSUMER_REASONS.get(info.consumer_allowed or "")
    return {"method": info.method, "finetune": d}


def memory_json(memory: dict[str, Any]) -> dict[str, Any]:
    """memory_gib without the fine-tuning keys when they are None (full training)."""
    return {k: v for k, v in memory.items() if not (k in MEMORY_KEYS and v is None)}
