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
- loss_chunks: the loss runs over this many chunks of the tokens (torchtune's
  CEWithChunkedOutputLoss, 8), so its fp32 tensors (the saved log-softmax and the copies) are
  one chunk's; 1 (the default) is an unchunked loss;
- adapter_bytes: bytes per LoRA adapter weight (4 = fp32, PEFT's autocast_adapter_dtype, the
  default; 2 = the model's bf16, torchtune); gradients and optimizer moments follow it
  (estimators/finetune.py).

`LEGACY` is the model before stacks were an input (fp32 accumulation only with several
micro-batches, one cached fp8 copy, no token buffers): what `memory_breakdown` uses when no
table is given (the torch harness, tests of the bare formulas).

Allocated vs reserved (PyTorch CUDA semantics, https://pytorch.org/docs/stable/notes/cuda.html):
`allocated` is what the tensors need (torch.cuda.max_memory_allocated); the caching allocator
reserves more (`reserved`, torch.cuda.max_memory_reserved, what torchtitan logs): the margin is
the site's `allocator_fragmentation_fraction` of allocated; the CUDA context, cuBLAS workspaces
and NCCL buffers (`runtime_overhead_gib`) sit outside the allocator, so what nvidia-smi shows is
reserved + runtime context = `total`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import STACKS, ModelSpec
from .shapes import act_element_bytes, tokens_per_rank

__all__ = ["StackBuffers", "LEGACY", "BUFFER_LINES", "from_table", "buffer_dtypes",
           "REDUCE_DTYPES", "logits_bytes"]

REDUCE_DTYPES = {"fp32": 4.0, "bf16": 2.0}

# The lines of `other`, in the order reports show them (each a MemoryBreakdown field).
BUFFER_LINES = ("logits", "gathered", "grad_bucket", "grad_accum", "fp8_weights", "moe_tokens",
                "allocator_margin", "runtime_context")


@dataclass(frozen=True, kw_only=True)
class StackBuffers:
    """Per-stack buffer constants, tuples indexed by the stack code."""

    grad_reduce_bytes: tuple[float, ...]
    main_grad_always: tuple[bool, ...]
    reduce_copy: tuple[bool, ...]
    fp8_weight_bytes: tuple[float, ...]
    moe_token_buffers: tuple[float, ...]
    loss_fp32_copies: tuple[float, ...]
    loss_chunks: tuple[float, ...] = ()
    adapter_bytes: tuple[float, ...] = ()

    def pick(self, stack: Any) -> dict[str, Any]:
        """The constants of each configuration's stack (arrays shaped like `stack`)."""
        s = np.asarray(stack, dtype=np.intp)
        out = {k: np.asarray(getattr(self, k))[s] for k in
               ("grad_reduce_bytes", "main_grad_always", "reduce_copy", "fp8_weight_bytes",
                "moe_token_buffers", "loss_fp32_copies")}
        chunks = self.loss_chunks or _same(1.0)
        adapters = self.adapter_bytes or _same(4.0)
        return out | {"loss_chunks": np.asarray(chunks)[s],
                      "adapter_bytes": np.asarray(adapters)[s]}

    def with_grad_reduce(self, dtype: str) -> StackBuffers:
        """Every stack reducing gradients in `dtype` ('fp32' or 'bf16'): the
        `--grad-reduce-dtype` override."""
        n = len(self.grad_reduce_bytes)
        return StackBuffers(grad_reduce_bytes=(REDUCE_DTYPES[dtype],) * n,
                            main_grad_always=self.main_grad_always, reduce_copy=self.reduce_copy,
                            fp8_weight_bytes=self.fp8_weight_bytes,
                            moe_token_buffers=self.moe_token_buffers,
                            loss_fp32_copies=self.loss_fp32_copies,
                            loss_chunks=self.loss_chunks, adapter_bytes=self.adapter_bytes)


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
        loss_chunks=tuple(float(x.get("loss_chunks", 1.0)) for x in r),
        adapter_bytes=tuple(REDUCE_DTYPES[x.get("adapter_dtype", "fp32")] for x in r))


def buffer_dtypes(precision: str, grad_reduce_bytes: float) -> dict[str, str]:
    """The element type of each line of `other` for one configuration ('-' where the line is not
    tensors: the allocator's margin and the runtime context)."""
    half = "fp32" if precision == "fp32" else ("bf16" if precision in ("bf16", "fp8") else
                                               "fp16")
    reduce = "fp32" if grad_reduce_bytes >= 4 else half
    return {"logits": "fp32", "gathered": half, "grad_bucket": reduce, "grad_accum": reduce,
            "fp8_weights": "fp8", "moe_tokens": half, "allocator_margin": "-",
            "runtime_context": "-"}


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
    sp: Any = True, precision: Any = 2,
) -> tuple[Any, Any]:
    """(saved, transient) bytes of the output layer on the last stage, one micro-batch.

    saved: final-norm input and LM-head input e*s*b*h each (/t with SP) + fp32 log-softmax
      output kept by the loss, 4*s*b*V/t (Korthikanti et al. 2022, section 4.3: 4sbh/t*(1+V/h));
    transient: the logits in training precision e*s*b*V/t, alive with the loss buffer.
    """
    t = np.asarray(tp)
    e = act_element_bytes(precision)
    t_seq = np.where(np.asarray(sp, bool), t, 1)
    sb = tokens_per_rank(seq_len, micro_batch, cp)
    saved = 2 * model.hidden * e * sb / t_seq + (4.0 * model.vocab) * sb / t
    return saved, (model.vocab * e) * sb / t
