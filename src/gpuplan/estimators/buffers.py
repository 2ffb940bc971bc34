"""The buffers each software stack keeps, and the allocator's margin (L3; used by memory.py).

Pure numpy. A `StackBuffers` holds, per software stack (indexed by `Layout.stack`, the codes of
`spec.STACKS`), the values of the catalog table `[memory.STACK]` (data/memory.toml, every row
sourced there):

- grad_reduce_bytes: bytes per element of the gradient accumulation / reduction buffer
  (4 = fp32: Megatron-LM's main_grad with `--accumulate-allreduce-grads-in-fp32`, the default
  for bf16; NeMo's grad_reduce_in_fp32; torchtitan's FSDP2 reduce_dtype float32. 2 = bf16:
  plain FSDP2 without reduce_dtype, DeepSpeed's default communication_data_type);
- main_grad_always: the accumulation buffer exists every step (Megatron's contiguous grad
  buffer), not only when a step accumulates several micro-batches;
- reduce_copy: ZeRO-2/3 copy one layer's unsharded gradient into the reduce dtype before its
  reduce-scatter (FSDP2 with reduce_dtype wider than param_dtype);
- fp8_weight_bytes: FP8 weight copies cached for the step, bytes per parameter (Transformer
  Engine: the fp8 weight and its transpose, 2; torchao's dynamic casts: 0);
- moe_token_buffers: MoE dispatch/combine buffers of tokens x top-k x hidden alive at once;
- loss_fp32_copies: fp32 copies of the logits alive with the loss's log-softmax output
  (torchtitan: cross_entropy(pred.float()), 1; Megatron's fused vocab-parallel cross entropy, 0);
  counted in the `logits` line;
- pp_unsharded_step: with pipeline parallelism and ZeRO-3 the stage's parameters stay gathered
  and its gradients accumulate unsharded, in the reduce dtype, until the step's last
  micro-batch (torchtitan / FSDP2 under torch.distributed.pipelining); see `pp_unsharded`;
- fp8_primary_weights: FP8 recipes keep the weights themselves in FP8 (Megatron-Core
  `fp8_param_gather`, set by every Megatron-Bridge FP8 mixed-precision config): the 16-bit
  weight copy is gone, `fp8_weight_bytes` then counts the FP8 weight and its transpose;
- fp8_input_bytes: bytes per element of the GEMM inputs a linear layer saves for its weight
  gradient under FP8 (Transformer Engine saves the FP8 cast, 1; torchao's Float8Linear saves
  the 16-bit input and casts again in backward, 2);
- swiglu_saved_ffn: SwiGLU MLP tensors saved for backward in units of tokens x ffn (Megatron-
  Core's fused bias-SwiGLU saves its input w1x|w3x and fc2 its input, 3; the unfused PyTorch
  form also saves silu(w1 x), 4: `activations.SWIGLU_SAVED_FFN`);
- compiled_loss: the loss runs under torch.compile (torchtitan >= 2025 with training.compile):
  it saves the 16-bit logits instead of an fp32 log-softmax and makes no fp32 copy. Not a
  catalog column: a run's setting (`with_compiled_loss`; the memory dataset's `compiled_loss`).
- inplace_loss: the loss writes the logits' gradient into the logits tensor during its forward
  and keeps only that 16-bit tensor (Transformer Engine's parallel_cross_entropy,
  transformer_engine/pytorch/cross_entropy.py CrossEntropyFunction: ctx.save_for_backward of
  the _input the Triton forward overwrote; backward scales it in place): no fp32 log-softmax,
  no copy, no separate gradient. A run's setting (`with_inplace_loss`), not a catalog column.
- loss_chunks: the loss runs over this many chunks of the tokens (torchtune's
  CEWithChunkedOutputLoss, 8), so its fp32 tensors (the saved log-softmax and the copies) are
  one chunk's; 1 (the default) is an unchunked loss;
- adapter_bytes: bytes per LoRA adapter weight (4 = fp32, PEFT's autocast_adapter_dtype, the
  default; 2 = the model's bf16, torchtune); gradients and optimizer moments follow it
  (estimators/finetune.py);
- adapter_input: what each LoRA adapter saves of its input (estimators/finetune.py,
  `adapter_input_bytes`): 'autocast' (PEFT under bf16/fp16 autocast, Hugging Face Trainer's
  bf16=True, the default: each adapter casts its input to the adapter dtype, which autocast
  casts back, so every adapter keeps its own copy in the activation dtype), 'adapter' (PEFT
  without autocast: its own copy in the adapter dtype), 'shared' (the adapters take the frozen
  layer's input tensor itself, no dropout: one storage for q, k and v; torchtune's LoRALinear).

- fp8_transpose: the second 1-B FP8 copy of each weight that Transformer Engine keeps beside
  the first for the backward GEMMs -- the transpose of a per-tensor-scaled Float8Tensor, or
  the column-wise data of an MXFP8 tensor -- is kept (True, the default). False where the
  run's FP8 recipe scales per tensor (delayed or current scaling) on an accelerator whose FP8
  GEMMs take any operand layout (catalog `fp8_gemm_any_layout`: Blackwell, compute capability
  10.x): Transformer Engine then makes no transpose and its backward GEMMs read the row-wise
  data (NVIDIA/TransformerEngine v2.16, commit 4220403e8, transformer_engine/pytorch/utils.py
  is_non_tn_fp8_gemm_supported: capability in [10.0, 12.0) or >= 13.0; csrc/quantizer.cpp
  Float8Quantizer / Float8CurrentScalingQuantizer::create_tensor: with_transpose =
  columnwise_usage && !is_non_tn_fp8_gemm_supported; tensor/storage/float8_tensor_storage.py
  update_usage: needs_data_transpose = False there). MXFP8 scales blocks of 32 along the
  reduction axis, so its column-wise data is a second quantization, kept on every GPU. A run's
  setting (`with_fp8_transpose`; `fp8_transpose_kept` resolves it from the recipe and the GPU);
- moment_bytes: bytes per element of the optimizer's moments (AdamW's first and second
  moments, SGD's momentum, Adafactor's factored second moment): 4 = fp32, the default; 2 =
  bf16 (DeepSeek-V3 report, arXiv 2412.19437, section 3.3.3 "Low-Precision Optimizer
  States": AdamW moments in BF16, master weights and gradients kept in FP32; Megatron-Core's
  precision-aware optimizer `--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`). A run's setting
  (`with_moments`, `--moments-dtype`), not a catalog column;
- fp8_act_cache: DeepSeek-V3's low-precision activation caching (section 3.3.3 "Low-Precision
  Activation"; with section 3.3.1's list of what stays in BF16/FP32): under FP8 every linear
  layer caches its input in FP8 (1 B, whatever the stack's fp8_input_bytes); the input of the
  linear after attention is one E5M6 tensor (12 bits, ACT_E5M6_BYTES) that the attention
  backward reads too, so no separate 16-bit attention output is kept; the inputs of the
  SwiGLU in MoE layers (w1 x | w3 x) are cached in FP8 (1 B). Norm inputs, attention's Q, K,
  V and statistics, router probabilities and the dense layers' SwiGLU stay as the stack keeps
  them. A run's setting (`with_activation_cache`, `--activation-cache fp8`); needs FP8;
- ema: where an exponential moving average of the parameters lives: 'none' (the default),
  'gpu' (an fp32 copy of the GPU's parameter shard, sharded like the optimizer state: the
  `ema` line of `other`), 'host' (the same bytes in CPU memory, updated asynchronously after
  each step: DeepSeek-V3 report section 3.2.3 "Exponential Moving Average in CPU"; counted in
  `offloaded`, nothing on the GPU). A run's setting (`with_ema`, `--ema`).

`LEGACY` is the model before stacks were an input (fp32 accumulation only with several
micro-batches, one cached fp8 copy, no token buffers): what `memory_breakdown` uses when no
table is given (the torch harness, tests of the bare formulas).

Allocated vs reserved (PyTorch CUDA semantics, https://pytorch.org/docs/stable/notes/cuda.html):
`allocated` is what the tensors need (torch.cuda.max_memory_allocated); the caching allocator
reserves more (`reserved`, torch.cuda.max_memory_reserved, what torchtitan logs): the margin is
the site's `allocator_fragmentation_<setting>` of allocated; the CUDA context, cuBLAS workspaces
and NCCL buffers (`runtime_overhead_gib`) sit outside the allocator, so what nvidia-smi shows is
reserved + runtime context = `total`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ..spec import STACKS, ModelSpec
from .shapes import act_element_bytes, tokens_per_rank

__all__ = ["StackBuffers", "LEGACY", "BUFFER_LINES", "from_table", "buffer_dtypes",
           "REDUCE_DTYPES", "logits_bytes", "pp_unsharded_grad_bytes", "dualpipe_copies",
           "dualpipe_inflight", "MOMENT_DTYPES", "ACTIVATION_CACHES", "EMA_PLACES",
           "ACT_E5M6_BYTES", "FP8_RECIPES", "fp8_transpose_kept", "fp8_copy_bytes",
           "root_weight_bytes"]

REDUCE_DTYPES = {"fp32": 4.0, "bf16": 2.0}
MOMENT_DTYPES = {"fp32": 4.0, "bf16": 2.0}
# 'stack': the stack's own activation dtypes; 'fp8': DeepSeek-V3's low-precision caching
ACTIVATION_CACHES = ("stack", "fp8")
EMA_PLACES = ("none", "gpu", "host")
# the FP8 scaling recipe: 'auto' (the planner's default, what `gpuplan export megatron` writes:
# MXFP8 on Blackwell, per-tensor delayed scaling elsewhere), 'tensor' (per-tensor delayed or
# current scaling, Transformer Engine's DelayedScaling / Float8CurrentScaling), 'mxfp8'
FP8_RECIPES = ("auto", "tensor", "mxfp8")
# DeepSeek-V3's E5M6 format for the input of the linear after attention: 1 + 5 + 6 = 12 bits
ACT_E5M6_BYTES = 1.5

# The lines of `other`, in the order reports show them (each a MemoryBreakdown field).
BUFFER_LINES = ("logits", "gathered", "grad_bucket", "grad_accum", "fp8_weights", "moe_tokens",
                "ema", "allocator_margin", "runtime_context")


@dataclass(frozen=True, kw_only=True)
class StackBuffers:
    """Per-stack buffer constants, tuples indexed by the stack code."""

    grad_reduce_bytes: tuple[float, ...]
    main_grad_always: tuple[bool, ...]
    reduce_copy: tuple[bool, ...]
    fp8_weight_bytes: tuple[float, ...]
    moe_token_buffers: tuple[float, ...]
    loss_fp32_copies: tuple[float, ...]
    pp_unsharded_step: tuple[bool, ...] = (False,) * len(STACKS)
    fp8_primary_weights: tuple[bool, ...] = (False,) * len(STACKS)
    fp8_input_bytes: tuple[float, ...] = (2.0,) * len(STACKS)
    swiglu_saved_ffn: tuple[float, ...] = (4.0,) * len(STACKS)
    compiled_loss: tuple[bool, ...] = (False,) * len(STACKS)
    inplace_loss: tuple[bool, ...] = (False,) * len(STACKS)
    loss_chunks: tuple[float, ...] = (1.0,) * len(STACKS)
    adapter_bytes: tuple[float, ...] = (4.0,) * len(STACKS)
    adapter_input: tuple[str, ...] = ("autocast",) * len(STACKS)
    moment_bytes: tuple[float, ...] = (4.0,) * len(STACKS)
    fp8_act_cache: tuple[bool, ...] = (False,) * len(STACKS)
    ema: tuple[str, ...] = ("none",) * len(STACKS)
    fp8_transpose: tuple[bool, ...] = (True,) * len(STACKS)

    def pick(self, stack: Any) -> dict[str, Any]:
        """The constants of each configuration's stack (arrays shaped like `stack`)."""
        s = np.asarray(stack, dtype=np.intp)
        return {f.name: np.asarray(getattr(self, f.name))[s] for f in fields(self)}

    def with_grad_reduce(self, dtype: str) -> StackBuffers:
        """Every stack reducing gradients in `dtype` ('fp32' or 'bf16'): the
        `--grad-reduce-dtype` override."""
        n = len(self.grad_reduce_bytes)
        return replace(self, grad_reduce_bytes=(REDUCE_DTYPES[dtype],) * n)

    def with_compiled_loss(self) -> StackBuffers:
        """Every stack running its loss under torch.compile (`compiled_loss`)."""
        return replace(self, compiled_loss=(True,) * len(self.compiled_loss))

    def with_inplace_loss(self) -> StackBuffers:
        """Every stack's loss keeping only the 16-bit logits, overwritten by their gradient
        (`inplace_loss`: Transformer Engine's parallel_cross_entropy)."""
        return replace(self, inplace_loss=(True,) * len(self.inplace_loss))

    def with_moments(self, dtype: str) -> StackBuffers:
        """Every stack keeping the optimizer's moments in `dtype` ('fp32' or 'bf16';
        `moment_bytes`): the `--moments-dtype` option."""
        return replace(self, moment_bytes=(MOMENT_DTYPES[dtype],) * len(self.moment_bytes))

    def with_activation_cache(self, mode: str) -> StackBuffers:
        """Every stack caching activations as `mode` says ('stack' or 'fp8';
        `fp8_act_cache`): the `--activation-cache` option."""
        return replace(self, fp8_act_cache=(mode == "fp8",) * len(self.fp8_act_cache))

    def with_ema(self, place: str) -> StackBuffers:
        """Every stack keeping a parameter EMA at `place` ('none', 'gpu', 'host'; `ema`):
        the `--ema` option."""
        return replace(self, ema=(place,) * len(self.ema))

    def with_fp8_transpose(self, kept: bool) -> StackBuffers:
        """Every stack keeping (True) or not (False) the second 1-B FP8 copy of each weight
        (`fp8_transpose`; `fp8_transpose_kept` says which from the recipe and the GPU)."""
        return replace(self, fp8_transpose=(bool(kept),) * len(self.fp8_transpose))

    def with_adapter_input(self, mode: str) -> StackBuffers:
        """Every stack's LoRA adapters saving their input as `mode` ('autocast', 'adapter',
        'shared'; `adapter_input`)."""
        return replace(self, adapter_input=(mode,) * len(self.adapter_input))


def _same(v: Any) -> tuple[Any, ...]:
    return (v,) * len(STACKS)


LEGACY = StackBuffers(grad_reduce_bytes=_same(4.0), main_grad_always=_same(False),
                      reduce_copy=_same(False), fp8_weight_bytes=_same(1.0),
                      moe_token_buffers=_same(0.0), loss_fp32_copies=_same(0.0))


def from_table(rows: dict[str, dict[str, Any]]) -> StackBuffers:
    """A StackBuffers from the catalog's [memory.STACK] rows (one per name of STACKS)."""
    r = [rows[name] for name in STACKS]
    return StackBuffers(
        grad_reduce_bytes=tuple(REDUCE_DTYPES[x["grad_reduce_dtype"]] for x in r),
        main_grad_always=tuple(bool(x["main_grad_always"]) for x in r),
        reduce_copy=tuple(bool(x["reduce_copy"]) for x in r),
        fp8_weight_bytes=tuple(float(x["fp8_weight_bytes_per_param"]) for x in r),
        moe_token_buffers=tuple(float(x["moe_token_buffers"]) for x in r),
        loss_fp32_copies=tuple(float(x["loss_fp32_copies"]) for x in r),
        pp_unsharded_step=tuple(bool(x.get("pp_unsharded_step", False)) for x in r),
        fp8_primary_weights=tuple(bool(x.get("fp8_primary_weights", False)) for x in r),
        fp8_input_bytes=tuple(float(x.get("fp8_input_bytes", 2.0)) for x in r),
        swiglu_saved_ffn=tuple(float(x.get("swiglu_saved_ffn", 4.0)) for x in r),
        loss_chunks=tuple(float(x.get("loss_chunks", 1.0)) for x in r),
        adapter_bytes=tuple(REDUCE_DTYPES[x.get("adapter_dtype", "fp32")] for x in r),
        adapter_input=tuple(str(x.get("adapter_input", "autocast")) for x in r))


def buffer_dtypes(precision: str, grad_reduce_bytes: float, fp8_primary: bool = False
                  ) -> dict[str, str]:
    """The element type of each line of `other` for one configuration ('-' where the line is not
    tensors: the allocator's margin and the runtime context). With FP8 primary weights the
    ZeRO-3 gather moves the FP8 weights (Megatron-Core fp8_param_gather): `gathered` is fp8."""
    half = "fp32" if precision == "fp32" else ("bf16" if precision in ("bf16", "fp8") else
                                               "fp16")
    reduce = "fp32" if grad_reduce_bytes >= 4 else half
    # the 16-bit logits and head inputs beside the loss's fp32 log-softmax (logits_bytes)
    logits = "fp32" if half == "fp32" else f"{half}+fp32"
    gathered = "fp8" if fp8_primary and precision == "fp8" else half
    return {"logits": logits, "gathered": gathered, "grad_bucket": reduce, "grad_accum": reduce,
            "fp8_weights": "fp8", "moe_tokens": half, "ema": "fp32", "allocator_margin": "-",
            "runtime_context": "-"}


def fp8_transpose_kept(recipe: str, any_layout: bool) -> bool:
    """Whether Transformer Engine keeps a second 1-B FP8 copy of each weight (`fp8_transpose`):
    not for a per-tensor recipe ('tensor') on an accelerator whose FP8 GEMMs take any layout
    (`any_layout`, the catalog's `fp8_gemm_any_layout`); always for MXFP8 (its column-wise
    data) and for 'auto' (MXFP8 on Blackwell, per-tensor with a transpose elsewhere)."""
    return not (recipe == "tensor" and any_layout)


def fp8_param_gathers(fp8: Any, primary: Any, transpose: Any, any_layout: Any
                      ) -> tuple[Any, Any]:
    """(the distributed optimizer's parameter all-gather, ZeRO-3's per-layer gathers) move FP8
    data, 1 B per parameter: where the run is FP8 and the stack keeps FP8 primary weights
    (`fp8_primary_weights`, Megatron-Core fp8_param_gather; the memory model's FP8 weights).
    Megatron-LM (NVIDIA/Megatron-LM @ d98e8a6, megatron/core/distributed/
    param_and_grad_buffer.py group_params_for_buffers: "param_dtype: storage dtype (torch.uint8
    for FP8/NVFP4 parameters)") gathers per-tensor-scaled FP8 parameters as uint8; MXFP8
    parameters it gathers in BF16 under the distributed optimizer ("For MXFP8 param: Create a
    shared buffer for param AG and grad RS ... store params in bf16", re-quantized after the
    gather, optimizer/distrib_optimizer.py _copy_main_params_to_param_buffer), and as 1-B
    row-wise data (forward) and column-wise data (backward) under Megatron FSDP
    (distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py: the model weight buffer is
    uint8 for float8 groups, with a transpose buffer for MXFP8; MXFP8's E8M0 scales, 1 B per
    32 elements, are not counted).
    MXFP8 is taken to be the recipe where the transpose is kept (`transpose`, i.e. not
    --fp8-recipe tensor) on an accelerator whose FP8 GEMMs take any layout (`any_layout`:
    Blackwell, where the planner's 'auto' recipe is MXFP8; `fp8_transpose_kept`)."""
    on = np.asarray(fp8) & np.asarray(primary, dtype=bool)
    mxfp8 = np.asarray(transpose, dtype=bool) & np.asarray(any_layout, dtype=bool)
    return on & ~mxfp8, on


def fp8_copy_bytes(sb: dict[str, Any]) -> Any:
    """Bytes per parameter of the stack's FP8 weight copies (`fp8_weight_bytes`: the FP8 weight,
    1 B, and its transpose, the rest), without the transpose where the run keeps none
    (`fp8_transpose` False): Transformer Engine's 2 -> 1; one cached copy (LEGACY's 1) or none
    (torchao's 0) has no transpose to drop."""
    w = np.asarray(sb["fp8_weight_bytes"], dtype=float)
    return np.where(sb["fp8_transpose"], w, np.minimum(w, 1.0))


def root_weight_bytes(weight_bytes: Any, fp8: Any) -> Any:
    """Bytes per parameter of the root (embedding, final norm, LM head) given the model-state
    weight bytes (`memory.model_state_bytes_per_param`: 3 under FP8, the 16-bit weight and its
    FP8 copy): the root stays in 16 bits with no FP8 copy under FP8 (2), even where the layers'
    weights are FP8 primary weights; as the layers' otherwise. Megatron-Core's embedding is a
    VocabParallelEmbedding and its LM head a tensor_parallel.ColumnParallelLinear, not Transformer
    Engine modules (NVIDIA/Megatron-LM megatron/core/models/gpt/gpt_model.py at d0b3b775, the
    26.06 container's: the head is a TE linear only with the MXFP8 output projection option,
    is_mxfp8_output_proj_active): fp8_model_init (FP8 primary weights) and the FP8 autocast
    reach only the TE linears of the decoder layers."""
    return np.where(fp8, np.asarray(weight_bytes) - 1.0, weight_bytes)


def grad_accum_bytes(*, mixed: Any, microbatches: Any, grad_bytes: Any, sb: dict[str, Any]
                     ) -> Any:
    """Extra bytes per gradient element of the accumulation buffer over the half gradients:
    reduce dtype minus gradient dtype, when mixed precision and (several micro-batches or a
    stack that always keeps it)."""
    on = np.asarray(mixed) & (sb["main_grad_always"] | (np.asarray(microbatches) > 1))
    return np.where(on, np.maximum(sb["grad_reduce_bytes"] - grad_bytes, 0.0), 0.0)


def grad_bucket_bytes(grad_bytes: Any, sb: dict[str, Any]) -> Any:
    """Bytes per element of one layer's unsharded gradient before its reduce-scatter: the
    gradient, plus its copy in the reduce dtype when the stack makes one and it is wider."""
    wider = sb["grad_reduce_bytes"] > grad_bytes
    return grad_bytes + np.where(sb["reduce_copy"] & wider, sb["grad_reduce_bytes"], 0.0)


def moe_token_bytes(model: ModelSpec, *, tokens: Any, precision: Any) -> Any:
    """One MoE dispatch (or combine) buffer of a layer: tokens * top-k * hidden elements in the
    activation precision; the stack's `moe_token_buffers` says how many are alive at once."""
    routed = model.experts_per_token * model.hidden  # shared experts are not dispatched
    return np.asarray(tokens) * routed * act_element_bytes(precision)


def logits_bytes(
    model: ModelSpec, *, seq_len: Any, micro_batch: Any, tp: Any = 1, cp: Any = 1,
    sp: Any = True, precision: Any = 2, loss_saved_bytes: Any = 4.0,
) -> tuple[Any, Any]:
    """(saved, transient) bytes of the output layer on the last stage, one micro-batch.

    saved: final-norm input and LM-head input e*s*b*h each (/t with SP) + fp32 log-softmax
      output kept by the loss, 4*s*b*V/t (Korthikanti et al. 2022, section 4.3: 4sbh/t*(1+V/h));
      `loss_saved_bytes` per logit (a compiled loss keeps the e-byte logits instead);
    transient: the logits in training precision e*s*b*V/t, alive with the loss buffer (a
      compiled loss: its e-byte gradient).
    """
    t = np.asarray(tp)
    e = act_element_bytes(precision)
    t_seq = np.where(np.asarray(sp, bool), t, 1)
    sb = tokens_per_rank(seq_len, micro_batch, cp)
    saved = 2 * model.hidden * e * sb / t_seq + (loss_saved_bytes * model.vocab) * sb / t
    return saved, (model.vocab * e) * sb / t


def pp_unsharded_grad_bytes(grad_bytes: Any, sb: dict[str, Any]) -> Any:
    """Bytes per element of the unsharded gradients a ZeRO-3 stage accumulates across the
    micro-batches of a pipelined step (`pp_unsharded_step`): FSDP2 upcasts them to its
    reduce dtype when that is wider (FSDPParam.to_accumulated_grad_if_needed: torchtitan's
    float32), else keeps them in the gradient dtype.

    Source: torch/distributed/pipelining/stage.py backward_maybe_with_nosync (an FSDP stage
    runs every micro-batch's backward with set_requires_gradient_sync(False) and
    set_reshard_after_backward(False); the reduce-scatter and reshard run once, after the last
    one); pytorch/torchtitan parallelize_llama.py apply_fsdp (PP: reshard_after_forward =
    False, 'to avoid per-microbatch all-gathers'; commit 9dec370, Dec 2024, and later).
    """
    wider = sb["grad_reduce_bytes"] > grad_bytes
    return np.where(sb["reduce_copy"] & wider, sb["grad_reduce_bytes"], grad_bytes)


# DualPipe (DeepSeek-AI 2024, DeepSeek-V3 Technical Report, arXiv 2412.19437, section 3.2.1,
# Table 2): each rank holds two pipeline stages (one per direction), so "parameter 2x", and
# "activation PP + 1" micro-batches of a stage's layers, against 1F1B's PP. The two copies are
# the same parameters, so their (ZeRO-sharded) optimizer state is kept once, split over the
# ranks that hold either copy (our reading: the report doubles only the parameters); the
# weights, their gradients and FP8 copies are per copy.
_STATE_PARTS = ("weights", "gradients", "grad_accum", "fp8_weights", "zero3_saving")


def dualpipe_copies(state: dict[str, Any], dual: Any) -> dict[str, Any]:
    """A stage's model-state parts, doubled where the schedule is DualPipe (two stages). Where
    no row is DualPipe (the search's grids) and each part is already a float64 array of the
    shape the product would have, x 1.0 is skipped: the same values, shapes and dtypes."""
    dual = np.asarray(dual)
    if not dual.any() and all(isinstance(v, np.ndarray) and v.dtype == np.float64
                              and v.shape == np.broadcast_shapes(v.shape, dual.shape)
                              for n, v in state.items() if n in _STATE_PARTS):
        return dict(state)
    k = np.where(dual, 2.0, 1.0)
    return {n: (v * k if n in _STATE_PARTS else v) for n, v in state.items()}


def dualpipe_inflight(pp: Any, microbatches: Any) -> Any:
    """Micro-batches of one stage's activations a DualPipe rank holds: pp + 1 (Table 2),
    at most the micro-batches of the step, at least one."""
    return np.maximum(np.minimum(np.asarray(pp) + 1.0, microbatches), 1.0)
