"""Term-by-term checks of the memory estimate against PyTorch on CPU (#11, #15).

The torch harness (`calibrate.memory`) compares whole-model weights, gradients, optimizer state
and saved activations; this module checks the lines added since, one term at a time, against
tensors built as each stack builds them and counted exactly (bytes of every tensor alive, each
storage once; saved activations caught with `torch.autograd.graph.saved_tensors_hooks`):

- `buffer_terms`: the gradient accumulation / reduction buffer in each stack's dtype (the
  catalog's [memory.STACK] rows) and Megatron-LM's distributed optimizer simulated for every
  rank of dp on one process (`torch_model.MainGrad`, `torch_model.dist_opt_shard`);
- `lora_terms`: LoRA on a frozen bf16 Llama-shaped model with hand-written PEFT-style
  adapters (`torch_model.LoRALinear`): base weights, adapter weights, adapter gradients, the
  adapters' AdamW state and the activations the layers save, under bf16 autocast (Hugging Face
  Trainer's bf16=True) or without;
- `nf4_terms`: the QLoRA base stored in NF4 with double quantization (blocks of 64, 8-bit
  scales in blocks of 256), with bitsandbytes' own `quantize_4bit` when it is installed, else
  by the same layout's exact arithmetic (`nf4_bytes`).

Recompute modes (none, selective, full every k-th layer, torchtitan's per-op SAC, Megatron-LM's
recompute modules) are measured by `calibrate.memory` itself (its `checkpoint` field).
Allocated vs reserved is a CUDA allocator property: not measurable on CPU, not checked here.
`python -m gpuplan.calibrate.torch_terms` prints every term: measured, predicted, error.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..spec import BF16, STACKS, Layout
from .memory import HarnessConfig

__all__ = ["Term", "buffer_terms", "lora_terms", "nf4_terms", "nf4_bytes", "all_terms", "main"]


@dataclass(frozen=True, kw_only=True)
class Term:
    """One line of the estimate, measured and predicted, in bytes."""

    check: str
    term: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted / self.measured - 1.0


def _nbytes(tensors: Any) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        seen.setdefault(t.untyped_storage().data_ptr(), t.numel() * t.element_size())
    return sum(seen.values())


def _breakdown(model: Any, layout: Layout, stacks: Any = None) -> Any:
    from ..estimators.memory import memory_breakdown

    return memory_breakdown(model, layout, runtime_overhead_bytes=0.0, fragmentation=0.0,
                            stacks=stacks)


def catalog_stacks() -> Any:
    """The catalog's [memory.STACK] buffers (data/memory.toml)."""
    from ..catalog import load_catalog
    from ..estimators.buffers import from_table

    return from_table(load_catalog().extra["memory"])


BUFFER_CFG = HarnessConfig(arch="llama", kv_heads=2, precision="bf16", attention="sdpa")


def _train_microbatches(cfg: HarnessConfig, model: Any, m: int) -> None:
    import torch

    region = ["embed"]
    for _ in range(m):
        idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len))
        model(idx, idx, region).backward()


def buffer_terms(stack: str, microbatches: int, dp: int = 1) -> list[Term]:
    """Gradients + accumulation buffer and, with dp > 1, Megatron-LM's distributed optimizer
    (ZeRO-1: every rank keeps the bf16 weights and the full fp32 grad buffer, and fp32 main
    parameters + AdamW moments of its 1/dp range; the most loaded rank is reported)."""
    import torch

    from . import torch_model as tm

    cfg, code = BUFFER_CFG, STACKS.index(stack)
    stacks = catalog_stacks()
    sb = stacks.pick(code)
    torch.manual_seed(0)
    model = tm.Model(cfg).to(torch.bfloat16)
    params = list(model.parameters())
    accum = bool(sb["main_grad_always"]) or microbatches > 1
    wide = float(sb["grad_reduce_bytes"]) > 2
    mg = None
    if (accum and wide) or dp > 1:
        mg = tm.MainGrad(params, torch.float32 if wide else torch.bfloat16, dp if dp > 1 else 0)
    _train_microbatches(cfg, model, microbatches)
    grads = _nbytes([p.grad for p in params if p.grad is not None])
    grads += 0 if mg is None else _nbytes([mg.buffer])
    if dp > 1:
        assert mg is not None
        opt_b = max(_nbytes([main, *_state(opt)]) for main, opt in
                    (tm.dist_opt_shard(mg.buffer, params, dp, r) for r in range(dp)))
    else:
        master = [p.detach().float().clone().requires_grad_(True) for p in params]
        opt = torch.optim.AdamW(master, lr=1e-3)
        for p, m in zip(params, master, strict=True):
            m.grad = (p.main_grad if mg is not None else p.grad).float()
        opt.step()
        opt_b = _nbytes([*master, *_state(opt)])
    lay = replace(cfg.layout(), global_batch=cfg.micro_batch * microbatches * dp, dp=dp,
                  zero=1 if dp > 1 else 0, stack=code, precision=BF16)
    bd = _breakdown(cfg.model_spec(), lay, stacks)
    check = f"{stack} bf16 m={microbatches}" + (f" dist-opt dp={dp}" if dp > 1 else "")
    return [
        Term(check=check, term="weights", measured=_nbytes(params), predicted=float(bd.weights)),
        Term(check=check, term="gradients+grad_accum", measured=grads,
             predicted=float(bd.gradients) + float(bd.grad_accum)),
        Term(check=check, term="optimizer", measured=opt_b, predicted=float(bd.optimizer)),
    ]


def _state(opt: Any) -> list[Any]:
    import torch

    return [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]


LORA_CFG = HarnessConfig(arch="llama", kv_heads=2, precision="bf16", attention="sdpa",
                         seq_len=256, micro_batch=4)


def lora_measure(cfg: HarnessConfig, r: int, targets: str, autocast: bool,
                 peft: bool = False, nf4: bool = False) -> dict[str, int]:
    """One LoRA step on a frozen bf16 model: bytes of each model-state part and of the
    activations saved per region. `peft`: PEFT's own adapters (inject_adapter_in_model,
    fp32 as PEFT's autocast_adapter_dtype makes them) instead of `torch_model.LoRALinear`;
    `nf4`: QLoRA, the layer matrices in bitsandbytes' NF4 (`torch_model.quantize_base`; the
    model-state figures then leave out the quantization state, see `nf4_terms`)."""
    import torch

    from . import torch_model as tm

    torch.manual_seed(cfg.seed)
    model = tm.Model(cfg).to(torch.bfloat16)
    if nf4:
        tm.quantize_base(model)
    if peft:
        model = _peft(model, r, targets)
    else:
        tm.add_lora(model, r, targets)
    trained = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len))
    saved = tm.SavedTensors(model)
    with saved.hooks(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(idx, idx, saved.region)
    loss.backward()
    opt = torch.optim.AdamW(trained, lr=1e-3)
    opt.step()
    acts = saved.by_region()
    return {"base_weights": _nbytes(frozen), "adapter_weights": _nbytes(trained),
            "gradients": _nbytes(p.grad for p in trained),
            "adapter_optimizer": _nbytes(_state(opt)), "activations": acts["layers"],
            "head_activations": acts["head"], "adapter_params": sum(p.numel() for p in trained)}


def _peft(model: Any, r: int, targets: str) -> Any:
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.tuners_utils import cast_adapter_dtype

    from . import torch_model as tm

    names = [*tm.LORA_TARGETS["attn"], *tm.LORA_TARGETS["mlp"]] if targets == "all" else list(
        tm.LORA_TARGETS[targets])
    model.requires_grad_(False)
    model = inject_adapter_in_model(LoraConfig(r=r, lora_alpha=16, target_modules=names,
                                               lora_dropout=0.0), model)
    cast_adapter_dtype(model, "default", autocast_adapter_dtype=True)
    return model


def lora_terms(r: int, targets: str, autocast: bool = True,
               cfg: HarnessConfig = LORA_CFG) -> list[Term]:
    """LoRA terms of the estimate against `lora_measure` (the hand-written adapters), without
    recompute: then the estimate's activations are the layers' saved tensors alone."""
    from ..estimators.buffers import LEGACY
    from ..workload import finetune_spec, with_finetune

    if cfg.checkpoint != "none":
        raise ConfigError(f"lora_terms compares saved tensors with the estimate's activations, "
                          f"which add a recompute working set under checkpoint "
                          f"{cfg.checkpoint!r}; use checkpoint='none'")
    m = lora_measure(cfg, r, targets, autocast)
    spec, lay = cfg.model_spec(), cfg.layout()
    ft = finetune_spec(spec, method="lora", lora_rank=r, lora_targets=targets)
    # the hand-written adapters are PEFT's: each saves its own copy of its input, in bf16 under
    # autocast, in the adapter's fp32 without (buffers.StackBuffers.adapter_input)
    stacks = LEGACY.with_adapter_input("autocast" if autocast else "adapter")
    bd = _breakdown(with_finetune(spec, ft), lay, stacks)
    pred = {k: float(getattr(bd, k)) for k in ("base_weights", "adapter_weights", "gradients",
                                                "adapter_optimizer", "activations")}
    check = f"lora r={r} {targets} {'autocast' if autocast else 'no-autocast'}"
    return [Term(check=check, term=k, measured=m[k], predicted=v) for k, v in pred.items()]


NF4_CFG = HarnessConfig(arch="llama", hidden=1024, heads=8, kv_heads=2, ffn=2816, vocab=256,
                        precision="bf16")


def nf4_bytes(n: int, blocksize: int = 64, blocksize2: int = 256) -> int:
    """Bytes bitsandbytes keeps for an n-element NF4 tensor with double quantization
    (functional.quantize_4bit, compress_statistics=True): n/2 packed bytes, one uint8 scale
    per block of 64, one fp32 scale per 256 of those, the fp32 mean subtracted from the
    scales, and two lookup tables (16 NF4 values, 256 dynamic-map values, fp32)."""
    blocks = math.ceil(n / blocksize)
    return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / blocksize2) + 4 + 4 * (16 + 256)


def _quantized_bytes(w: Any) -> int:
    """Bytes of `w` quantized to NF4 by bitsandbytes (or `nf4_bytes` without it)."""
    try:
        import bitsandbytes.functional as bnbf
    except ImportError:
        return nf4_bytes(w.numel())
    q, st = bnbf.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    return _nbytes([q, st.absmax, st.state2.absmax, st.offset.reshape(1), st.code,
                    st.state2.code])


def nf4_terms(cfg: HarnessConfig = NF4_CFG) -> list[Term]:
    """QLoRA's frozen base: each layer matrix in NF4, embeddings, norms and LM head in bf16
    (bitsandbytes skips them), against `base_weights` of method 'qlora'."""
    import torch

    from ..workload import finetune_spec, with_finetune
    from . import torch_model as tm

    torch.manual_seed(cfg.seed)
    model = tm.Model(cfg).to(torch.bfloat16)
    mats = {id(m.weight) for blk in model.blocks for m in blk.modules()
            if isinstance(m, torch.nn.Linear)}
    kept = [p for p in model.parameters() if id(p) not in mats]
    measured = _nbytes(kept) + sum(_quantized_bytes(m.weight.detach()) for blk in model.blocks
                                   for m in blk.modules() if isinstance(m, torch.nn.Linear))
    spec = cfg.model_spec()
    ft = finetune_spec(spec, method="qlora", lora_rank=8, lora_targets="all", quant="nf4")
    bd = _breakdown(with_finetune(spec, ft), cfg.layout())
    return [Term(check="qlora nf4 double-quant base", term="base_weights", measured=measured,
                 predicted=float(bd.base_weights))]


def all_terms() -> list[Term]:
    """Every check the CLI prints (the tests assert each with its tolerance)."""
    out = [*buffer_terms("megatron", 1), *buffer_terms("megatron", 4),
           *buffer_terms("torchtitan", 1), *buffer_terms("torchtitan", 4),
           *buffer_terms("fsdp", 4), *buffer_terms("deepspeed", 1),
           *buffer_terms("megatron", 2, dp=4)]
    for targets in ("attn", "mlp", "all"):
        out += lora_terms(8, targets)
    out += lora_terms(8, "all", autocast=False)
    return out + nf4_terms()


def main(argv: list[str] | None = None) -> int:
    """Print every term: measured and predicted bytes, error."""
    from ..report.fmt import table

    ap = argparse.ArgumentParser(prog="python -m gpuplan.calibrate.torch_terms",
                                 description="Memory terms: estimate vs PyTorch on CPU.")
    ap.parse_args(argv)
    rows = [[t.check, t.term, f"{t.measured:,.0f}", f"{t.predicted:,.0f}",
             f"{100 * t.error:+.2f}%"] for t in all_terms()]
    print(table(rows, ["check", "term", "measured B", "predicted B", "error"], align="llrrr"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
