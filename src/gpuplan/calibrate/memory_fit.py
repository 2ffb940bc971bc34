"""Does each published throughput run fit, by gpuplan's memory model? (issue #11, L5)

A run in ``data/published_runs.csv`` that published a throughput ran, so it fitted its GPUs.
`run_fit` predicts its per-GPU memory with the run's recorded configuration -- the layout, and
the memory settings its source states in their own columns (recompute modules, gradient
reduction dtype, optimizer-moment dtype, activation cache, offload, uneven pipeline stages) and
the loss kernel its stack's code at the benchmark's release runs (`FUSED_LOSS_SOURCES`) --
and applies the same test as `gpuplan estimate`: ``fits`` when the reserved peak plus the CUDA
runtime context is at most the GPU's memory (`search.evaluate.physics`), i.e. reserved <=
usable. A layout the model refuses is reported with its one-line refusal (``fits`` None).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..catalog import Catalog
from ..errors import CatalogError, GpuplanError
from ..estimators.buffers import LEGACY
from ..search.evaluate import memory_per_gpu, site_from_catalog
from ..search.single import with_grad_reduce, with_memory_options
from ..spec import Layout, ModelSpec, modules_code, offload_code
from ..units import GiB


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    """A run's predicted memory per GPU (the most loaded stage) against its GPU's memory."""

    fits: bool | None  # None when the layout is refused
    memory_gib: float | None  # reserved + runtime context (the estimate's `total`)
    reserved_gib: float | None  # the caching allocator's peak
    capacity_gib: float  # the GPU's memory
    refused: str = ""  # the model's one-line refusal, '' when it predicts the run


def run_fit(cat: Catalog, model: ModelSpec, layout: Layout, gpus: int, capacity_bytes: float,
            options: tuple[str | None, ...] = (None, None, None, None)) -> MemoryFit:
    """`options`: (grad reduce dtype, moments dtype, activation cache, loss); None = the
    stack's (`search.single.with_grad_reduce` / `with_memory_options`, as `gpuplan estimate`);
    loss 'fused': the loss keeps only the 16-bit logits (`FUSED_LOSS_SOURCES`)."""
    cap = float(capacity_bytes) / GiB
    try:
        layout.check(model, gpus)
        grad, moments, cache, loss = (*options, None, None, None, None)[:4]
        site = with_memory_options(with_grad_reduce(site_from_catalog(cat), grad), layout,
                                   moments, cache)
        if loss == "fused":
            site = replace(site, stack_buffers=(site.stack_buffers or LEGACY)
                           .with_compiled_loss())
    except GpuplanError as err:
        return MemoryFit(fits=None, memory_gib=None, reserved_gib=None, capacity_gib=cap,
                         refused=str(err))
    mem = memory_per_gpu(model, layout, site)
    total = float(np.asarray(mem.total).reshape(-1)[0])
    return MemoryFit(fits=bool(total <= capacity_bytes), memory_gib=total / GiB,
                     reserved_gib=float(np.asarray(mem.reserved).reshape(-1)[0]) / GiB,
                     capacity_gib=cap)


# The memory settings a source states beside the layout, each in its own column of
# published_runs.csv (empty = the stack's default): Megatron-LM --recompute-modules (with
# recompute = modules), the parts offloaded to host memory (`gpuplan estimate --offload`;
# 'activations:N' = --offload-layers N, `offload_field`), the
# decoder layers of the first / last pipeline stage (--first-stage-layers, --last-stage-layers),
# and `gpuplan estimate` --grad-reduce-dtype, --moments-dtype and --activation-cache.
MEMORY_OPTIONS = ("grad_reduce_dtype", "moments_dtype", "activation_cache")


def layout_fields(row: dict[str, str]) -> dict[str, int]:
    """The Layout fields of a row's memory settings (recompute modules, offload, stages)."""
    mods = row.get("recompute_modules", "").strip()
    if bool(mods) != (row.get("recompute") == "modules"):
        raise CatalogError("recompute = modules needs recompute_modules (Megatron-LM's names, "
                           "e.g. 'mla_up_proj'), and recompute_modules needs recompute = modules")
    off, n = offload_field(row.get("offload", ""))
    out = {"offload": off, "offload_layers": n,
           "first_stage_layers": int_field(row, "first_stage_layers"),
           "last_stage_layers": int_field(row, "last_stage_layers")}
    return {**out, "recompute_modules": modules_code(mods)} if mods else out


def offload_field(text: str) -> tuple[int, int]:
    """The offload column: part names as `gpuplan estimate --offload` ('optimizer,grads'), the
    activations part optionally with its layer count, 'activations:40' (--offload-layers 40,
    Megatron-Core cpu_offloading_num_layers) -> (offload bitmask, offload_layers)."""
    parts, n = [], 0
    for raw in text.split(","):
        name, sep, count = raw.strip().partition(":")
        if sep:
            if name.strip() != "activations" or not count.strip().isdigit():
                raise CatalogError(f"offload {raw.strip()!r}: only activations takes a layer "
                                   f"count, e.g. 'activations:40'")
            n = int(count)
        parts.append(name)
    return offload_code(",".join(p for p in parts if p.strip())), n


# The sources whose stack computes the loss with a fused cross-entropy kernel that keeps only
# the 16-bit logits for backward and returns a 16-bit gradient -- no fp32 log-softmax, no fp32
# copy of the logits: the memory of `buffers.StackBuffers.with_compiled_loss` (the loss line
# 4 B per logit instead of 10 under the fsdp stack's default). A setting of the stack's code
# at every release the source benchmarked, so it is keyed by the source, not a column.
FUSED_LOSS_SOURCES = {
    "MosaicML llm-foundry": (
        "mosaicml/llm-foundry tags v0.2.0 and v0.3.0 (the benchmarks' git_branch: "
        "scripts/train/benchmarking/submit_benchmarks.py at b2a43a147), "
        "llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM: loss_fn defaults to "
        "'fused_crossentropy' (flash_attn.losses.cross_entropy.CrossEntropyLoss) and forward() "
        "passes no labels, so no torch cross-entropy runs; setup.py extra 'gpu' installs "
        "xentropy-cuda-lib (flash-attention v1.0.3 / v1.0.9 csrc/xentropy); Dao-AILab/"
        "flash-attention v1.0.9 flash_attn/losses/cross_entropy.py SoftmaxCrossEntropyLossFn: "
        "ctx.save_for_backward(logits, lse, labels) -- the bf16 logits and one fp32 lse per "
        "token -- and backward returns xentropy_cuda_lib.backward's gradient in the logits' "
        "dtype"),
}


def loss_option(row: dict[str, str]) -> str | None:
    """'fused' when the row's source is one of `FUSED_LOSS_SOURCES`; None = the stack's."""
    src = row.get("source", "")
    return "fused" if any(src.startswith(k) for k in FUSED_LOSS_SOURCES) else None


def memory_options(row: dict[str, str]) -> tuple[str | None, ...]:
    """(grad reduce dtype, moments dtype, activation cache, loss) of a row; None = the
    stack's."""
    grad, moments, cache = (row.get(k, "").strip() or None for k in MEMORY_OPTIONS)
    return grad, moments, cache, loss_option(row)


def int_field(row: dict[str, str], key: str, default: int = 0) -> int:
    """An integer column of a CSV row (`default` when empty)."""
    v = row.get(key, "").strip()
    return int(v) if v else default
