"""Fine-tuning requests (L4, #15): what a LoRA/QLoRA/freeze run adds to `estimate` and `plan`.

The method itself travels with the model (`workload.TunedModel`), so memory, timing, the
search and its feasibility rules need nothing else. This module checks the hardware (NF4 and
int8 bases need bitsandbytes' CUDA kernels), sets the plan's filters for a fine-tune (consumer
cards allowed: a fine-tune fits on one card, the reason consumer cards are held back from
pre-training -- no NVLink, no data-center licence for multi-node clusters -- does not bite),
and builds the typed `FineTuneInfo` a report shows. No sentences: reasons are codes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..estimators import finetune as ftm
from ..spec import PRECISIONS, RECOMPUTE, Accelerator, Layout, ModelSpec
from ..units import GiB
from ..workload import FineTune, finetune_of
from .evaluate import Site, memory_per_gpu
from .results import MemoryGiB, PlanRow

# Bases whose dequantization kernels exist only for CUDA (bitsandbytes' NF4 and LLM.int8).
CUDA_ONLY_QUANTS = ("nf4", "int8")
QUANT_PRECISIONS = ("bf16", "fp16")
# Why a fine-tune's plan allows consumer cards by default (a code the report turns into text).
CONSUMER_REASON = "finetune_fits_one_card"


@dataclass(frozen=True, kw_only=True)
class FineTuneInfo:
    """The fine-tuning side of an estimate or a plan (typed; the report writes the sentences)."""

    method: str
    lora_rank: int | None
    lora_targets: str | None
    quant: str
    trainable_params: int
    adapter_params: int
    samples: int | None = None
    epochs: float | None = None
    packing: bool = True
    padding_efficiency: float = 1.0
    tokens_per_epoch: float | None = None
    time_per_epoch_days: float | None = None
    consumer_allowed: str | None = None  # a reason code when the plan allowed consumer cards
    quant_slowdown: float = 1.0
    memory_gib: MemoryGiB | None = None  # the plan's first row (plan only)
    single_gpu: tuple[PlanRow, ...] = ()  # plan only: the best option on one GPU, per platform


def check_kernels(ft: FineTune | None, acc: Accelerator) -> None:
    """NF4/int8 bases need bitsandbytes' CUDA kernels: one line on any other GPU."""
    if ft is not None and ft.quant in CUDA_ONLY_QUANTS and acc.software != "CUDA":
        raise ConfigError(
            f"--quant {ft.quant} (--method {ft.method}) needs bitsandbytes' CUDA kernels; "
            f"{acc.id} runs {acc.software}: use --method lora (a bf16 base) or an NVIDIA GPU")


def check_precision(ft: FineTune | None, precision: str) -> None:
    """An NF4/int8 base is dequantized to 16 bits for every GEMM (bitsandbytes): the training
    precision must be bf16 or fp16."""
    if ft is not None and ft.quant in CUDA_ONLY_QUANTS and precision not in QUANT_PRECISIONS:
        raise ConfigError(f"--quant {ft.quant} (--method {ft.method}) computes in bf16 or fp16 "
                          f"(bitsandbytes dequantizes the base to 16 bits); drop --precision "
                          f"{precision}")


def plan_precisions(ft: FineTune | None, precisions: tuple[str, ...], given: bool
                    ) -> tuple[str, ...]:
    """The precisions a plan searches: a quantized base keeps only bf16/fp16 (the default
    list loses fp8; a list the user gave must not hold anything else)."""
    if ft is None or ft.quant not in CUDA_ONLY_QUANTS:
        return precisions
    if given:
        for p in precisions:
            check_precision(ft, p)
    return tuple(p for p in precisions if p in QUANT_PRECISIONS) or ("bf16",)


def plan_filters(ft: FineTune | None, filters: Any) -> Any:
    """The plan's filters for a fine-tune: NVIDIA only for an NF4/int8 base (a clear line if
    the user asked for another vendor); consumer cards allowed."""
    if ft is None:
        return filters
    changes: dict[str, Any] = {"allow_consumer": True}
    if ft.quant in CUDA_ONLY_QUANTS:
        if filters.vendor and filters.vendor.lower() != "nvidia":
            raise ConfigError(
                f"--quant {ft.quant} (--method {ft.method}) needs bitsandbytes' CUDA kernels; "
                f"--vendor {filters.vendor} has none: use --method lora or --vendor nvidia")
        changes["vendor"] = "nvidia"
    return dataclasses.replace(filters, **changes)


def info(model: ModelSpec, *, tokens: float | None = None, samples: int | None = None,
         epochs: float | None = None, packing: bool = True, padding_efficiency: float = 1.0,
         days: float | None = None,
         consumer_allowed: str | None = None, memory: MemoryGiB | None = None,
         single_gpu: tuple[PlanRow, ...] = ()) -> FineTuneInfo | None:
    """`FineTuneInfo` of a fine-tuned model (None for full training)."""
    ft = finetune_of(model)
    if ft is None:
        return None
    epochs = epochs or 1.0
    return FineTuneInfo(
        method=ft.method, lora_rank=ft.lora_rank if ft.adapters else None,
        lora_targets=ft.lora_targets if ft.adapters else None, quant=ft.quant,
        trainable_params=ftm.trainable_params(model, ft),
        adapter_params=ftm.adapter_params(model, ft), samples=samples, epochs=epochs,
        packing=packing, padding_efficiency=padding_efficiency,
        tokens_per_epoch=tokens / epochs if tokens is not None else None,
        time_per_epoch_days=days / epochs if days is not None else None,
        consumer_allowed=consumer_allowed, quant_slowdown=ftm.quant_slowdown(ft),
        memory_gib=memory, single_gpu=single_gpu)


def row_memory(model: ModelSpec, row: PlanRow, site: Site) -> MemoryGiB:
    """The memory summary (with the fine-tuning keys) of a plan row's layout."""
    layout = Layout(tp=row.tp, pp=row.pp, dp=row.dp, cp=row.cp, ep=row.ep, zero=row.zero,
                    micro_batch=row.micro_batch, global_batch=row.global_batch,
                    seq_len=row.seq_len, recompute=RECOMPUTE.index(row.recompute),
                    precision=PRECISIONS.index(row.precision))
    mem = memory_per_gpu(model, layout, site)
    return MemoryGiB(**{k: float(np.asarray(v).reshape(-1)[0]) / GiB
                        for k, v in mem.summary().items()})
