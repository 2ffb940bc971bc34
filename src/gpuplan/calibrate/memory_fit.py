"""Does each published throughput run fit, by gpuplan's memory model? (issue #11, L5)

A run in ``data/published_runs.csv`` that published a throughput ran, so it fitted its GPUs.
`run_fit` predicts its per-GPU memory with the run's recorded configuration -- the layout, and
the memory settings its source states in their own columns (recompute modules, gradient
reduction dtype, optimizer-moment dtype, activation cache, offload, uneven pipeline stages) and
the loss kernel its stack's code at the benchmark's release runs (`LOSS_SOURCES`) --
and applies the same test as `gpuplan estimate`: ``fits`` when the reserved peak plus the CUDA
runtime context is at most the GPU's memory (`search.evaluate.physics`), i.e. reserved <=
usable. A layout the model refuses is reported with its one-line refusal (``fits`` None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from ..catalog import Catalog
from ..errors import CatalogError, GpuplanError
from ..estimators.buffers import LEGACY
from ..search.evaluate import memory_per_gpu, site_from_catalog, with_allocator
from ..search.single import with_grad_reduce, with_memory_options
from ..spec import Accelerator, Layout, ModelSpec, modules_code, offload_code
from ..units import GiB
from .releases import release_order


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    """A run's predicted memory per GPU (the most loaded stage) against its GPU's memory."""

    fits: bool | None  # None when the layout is refused
    memory_gib: float | None  # reserved + runtime context (the estimate's `total`)
    reserved_gib: float | None  # the caching allocator's peak
    capacity_gib: float  # the GPU's memory
    refused: str = ""  # the model's one-line refusal, '' when it predicts the run


def run_fit(cat: Catalog, model: ModelSpec, layout: Layout, gpus: int, capacity_bytes: float,
            options: tuple[str | None, ...] = (None,) * 6,
            gpu: Accelerator | None = None) -> MemoryFit:
    """`options`: (grad reduce dtype, moments dtype, activation cache, loss, FP8 recipe,
    allocator); None = the stack's (`search.single.with_grad_reduce` / `with_memory_options`,
    as `gpuplan estimate`); loss 'fused' or 'inplace': the loss keeps only the 16-bit logits
    (`LOSS_SOURCES`); the FP8 recipe (`fp8_recipe`) on `gpu` (its `fp8_gemm_any_layout`); the
    allocator setting (`search.evaluate.ALLOCATORS`, None: the default) sets the margin."""
    cap = float(capacity_bytes) / GiB
    try:
        layout.check(model, gpus)
        grad, moments, cache, loss, recipe, alloc = (*options, *(None,) * 6)[:6]
        site = with_allocator(cat, site_from_catalog(cat), alloc)
        site = with_memory_options(with_grad_reduce(site, grad), layout,
                                   moments, cache, None, recipe, gpu=gpu)
        if loss in ("fused", "inplace"):
            sb = site.stack_buffers or LEGACY
            site = replace(site, stack_buffers=sb.with_compiled_loss() if loss == "fused"
                           else sb.with_inplace_loss())
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


# The loss kernel a source's stack runs, where it keeps less than the stack's default (the
# fp32 log-softmax beside the 16-bit logits). A setting of the stack's code at every release
# the source benchmarked, so it is keyed by the source (and its first release), not a column:
#   'fused'   keeps the 16-bit logits for backward and returns a 16-bit gradient: no fp32
#             log-softmax, no fp32 copy (the memory of `StackBuffers.with_compiled_loss`);
#   'inplace' writes the gradient into the 16-bit logits during the forward and keeps only
#             them (`StackBuffers.with_inplace_loss`).
# Each entry: source prefix -> (first release, '' = every one; option; locator).
LOSS_SOURCES = {
    "MosaicML llm-foundry": ("", "fused", (
        "mosaicml/llm-foundry tags v0.2.0 and v0.3.0 (the benchmarks' git_branch, "
        "scripts/train/benchmarking/submit_benchmarks.py at b2a43a147): "
        "llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM, loss_fn defaults to "
        "'fused_crossentropy' (flash_attn.losses.cross_entropy.CrossEntropyLoss) and forward() "
        "passes no labels, so no torch cross-entropy runs; setup.py extra 'gpu' installs "
        "xentropy-cuda-lib (flash-attention v1.0.3 / v1.0.9 csrc/xentropy); Dao-AILab/"
        "flash-attention v1.0.9 flash_attn/losses/cross_entropy.py SoftmaxCrossEntropyLossFn: "
        "ctx.save_for_backward(logits, lse, labels), the bf16 logits and one fp32 lse per "
        "token; backward returns xentropy_cuda_lib.backward's gradient in the logits' dtype")),
    "NVIDIA Megatron-Bridge performance summary": ("25.11", "inplace", (
        "NVIDIA-NeMo/Megatron-Bridge from tag v0.2.0 (docs/releases/software-versions.md: "
        "NeMo Framework 25.11 = Megatron-Bridge 0.2.0; 25.09 = 0.1.0rc3, whose perf scripts "
        "do not set it): "
        "scripts/performance/utils/helpers.py (v0.2.x) and utils/overrides.py (v0.3.0 to "
        "v0.5.1) _set_common_perf_overrides sets recipe.model.cross_entropy_fusion_impl = "
        "'te' (cross_entropy_loss_fusion True: src/megatron/bridge/models/gpt_provider.py); "
        "Megatron-Core then calls Transformer Engine's parallel_cross_entropy, "
        "transformer_engine/pytorch/cross_entropy.py CrossEntropyFunction: the Triton forward "
        "returns _input holding the gradient and ctx.save_for_backward(_input.detach()); "
        "backward scales it in place (element_mul_kernel)")),
}


def loss_option(row: dict[str, str]) -> str | None:
    """The row's loss option ('fused', 'inplace', `LOSS_SOURCES`); None = the stack's."""
    src, release = row.get("source", ""), row.get("release", "").strip()
    for prefix, (first, option, _) in LOSS_SOURCES.items():
        if src.startswith(prefix) and (not first or (
                release and release_order(release) >= release_order(first))):
            return option
    return None


# The FP8 scaling recipe a row's notes state for its run, read from the source's own words as
# `releases.release_from_source` reads the release: "FP8 (current scaling)" or "FP8 delayed
# scaling", or a Megatron-Bridge perf config named *_FP8_CS_* (compute dtype fp8_cs) -> 'tensor'
# (Transformer Engine's Float8CurrentScaling / DelayedScaling, one scale per tensor: on
# Blackwell no FP8 transpose is kept, buffers.fp8_transpose_kept). Notes that name MXFP8 too
# (an MXFP8 run, or a table of "FP8 current scaling / MXFP8 on Blackwell") and rows that state
# no recipe -> None, the planner's 'auto', which keeps the second FP8 copy.
FP8_TENSOR_RECIPE = re.compile(r"\bFP8 \(?(?:current|delayed) scaling\)?|_FP8_CS_")


def fp8_recipe(row: dict[str, str]) -> str | None:
    """'tensor' where an FP8 row's notes state per-tensor scaling alone (`FP8_TENSOR_RECIPE`,
    no MXFP8 named), else None."""
    notes = row.get("notes", "")
    stated = row.get("precision") == "fp8" and FP8_TENSOR_RECIPE.search(notes)
    return "tensor" if stated and "MXFP8" not in notes.upper() else None


def memory_options(row: dict[str, str]) -> tuple[str | None, ...]:
    """(grad reduce dtype, moments dtype, activation cache, loss, FP8 recipe, allocator) of a
    row; None = the stack's (the allocator: the default, `search.evaluate.DEFAULT_ALLOCATOR`).
    The allocator column records the run's PYTORCH_CUDA_ALLOC_CONF from its recipe, with the
    locator in the notes ('expandable' = expandable_segments:True)."""
    grad, moments, cache = (row.get(k, "").strip() or None for k in MEMORY_OPTIONS)
    alloc = row.get("allocator", "").strip() or None
    return grad, moments, cache, loss_option(row), fp8_recipe(row), alloc


def int_field(row: dict[str, str], key: str, default: int = 0) -> int:
    """An integer column of a CSV row (`default` when empty)."""
    v = row.get(key, "").strip()
    return int(v) if v else default
