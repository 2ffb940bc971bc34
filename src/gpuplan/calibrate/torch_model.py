"""The PyTorch side of the memory harness: the small GPT / Llama models and one training step.

Imported only inside the harness functions of `calibrate.memory` and `calibrate.torch_terms`,
so that importing them does not import torch (an optional dependency: the `bench` extra).
Also here: the hand-written LoRA adapter, the NF4 base (bitsandbytes, optional), Megatron's
gradient buffer and distributed-optimizer shard that `torch_terms` measures.
What the models save for backward, and why they differ from stock PyTorch where they do, is in
`calibrate.memory`'s docstring.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

if TYPE_CHECKING:
    from .memory import HarnessConfig

__all__ = ["Model", "make_optimizer", "SavedTensors", "master_step", "op_sac_context",
           "LoRALinear", "add_lora", "quantize_base", "LORA_TARGETS", "MainGrad",
           "dist_opt_shard"]

aten = torch.ops.aten
# torchtitan's per-op SAC save list (torchtitan/models/llama3/infra/parallelize.py, `_save_list`),
# with the CPU flash kernel added: on CPU, F.scaled_dot_product_attention runs
# _scaled_dot_product_flash_attention_for_cpu, the counterpart of the CUDA flash op it lists.
OP_SAC_SAVE = {
    aten.mm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.max.default,
}


def op_sac_context(modes: list[Any]) -> Any:
    """torchtitan's `selective_ac_option = "op"` policy as a checkpoint `context_fn`: save the
    ops of OP_SAC_SAVE except every second matmul of the layer (`mm_count % 2 == 0`, counted
    per checkpointed call), recompute the rest. The forward caching modes go into `modes`,
    whose `.storage` holds what the policy saved (`SavedTensors` counts it)."""

    def context_fn() -> Any:
        meta: dict[str, int] = {"forward": 0, "recompute": 0}

        def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == aten.mm.default:
                meta[mode] += 1
            save = func in OP_SAC_SAVE and not (func == aten.mm.default and meta[mode] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

        fwd, rec = create_selective_checkpoint_contexts(policy)
        modes.append(fwd)
        return fwd, rec

    return context_fn


class RMSNormFn(torch.autograd.Function):
    """Fused-kernel semantics: saves the input and the fp32 1/rms (as Apex / TE do)."""

    @staticmethod
    def forward(ctx: Any, x: Any, w: Any, eps: float) -> Any:
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, rstd)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Any:
        x, w, rstd = ctx.saved_tensors
        xhat, g = x.float() * rstd, gy.float() * w.float()
        gx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        gw = (gy.float() * xhat).sum(dim=tuple(range(gy.dim() - 1)))
        return gx.to(x.dtype), gw.to(w.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x: Any) -> Any:
        return RMSNormFn.apply(x, self.weight, 1e-6)


class RopeFn(torch.autograd.Function):
    """Fused rotary embedding: saves only the (constant) cos/sin tables."""

    @staticmethod
    def forward(ctx: Any, x: Any, cos: Any, sin: Any) -> Any:
        ctx.save_for_backward(cos, sin)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    @staticmethod
    def backward(ctx: Any, gy: Any) -> Any:
        cos, sin = ctx.saved_tensors
        z1, z2 = (gy * sin).chunk(2, dim=-1)
        return gy * cos + torch.cat((z2, -z1), dim=-1), None, None


def norm(cfg: HarnessConfig) -> nn.Module:
    """LayerNorm without bias (GPT) or the fused RMSNorm (Llama)."""
    return nn.LayerNorm(cfg.hidden, bias=False) if cfg.arch == "gpt" else RMSNorm(cfg.hidden)


class Attention(nn.Module):
    """Causal self-attention, MHA or GQA; 'explicit' keeps the softmax, 'sdpa' is flash."""

    def __init__(self, cfg: HarnessConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, a, kvh = cfg.hidden, cfg.heads, cfg.n_kv
        self.a, self.kvh, self.d = a, kvh, h // a
        d = self.d
        self.wq = nn.Linear(h, a * d, bias=False)
        self.wk = nn.Linear(h, kvh * d, bias=False)
        self.wv = nn.Linear(h, kvh * d, bias=False)
        self.wo = nn.Linear(a * d, h, bias=False)
        s = cfg.seq_len
        self.register_buffer("causal", torch.ones(s, s, dtype=torch.bool).triu(1))
        pos = torch.arange(s).float()[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
        self.register_buffer("cos", pos.cos().repeat(1, 2))
        self.register_buffer("sin", pos.sin().repeat(1, 2))

    def core(self, q: Any, k: Any, v: Any) -> Any:
        a, kvh = self.a, self.kvh
        if self.cfg.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kvh != a)
        if kvh != a:  # repeat K/V to all heads, as Megatron-LM / HF eager attention do
            k, v = k.repeat_interleave(a // kvh, dim=1), v.repeat_interleave(a // kvh, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d))
        att = att.masked_fill(self.causal, float("-inf")).softmax(dim=-1)
        return att @ v

    def forward(self, x: Any) -> Any:
        b, s, _ = x.shape
        a, kvh, d = self.a, self.kvh, self.d
        q = self.wq(x).view(b, s, a, d).transpose(1, 2)
        k = self.wk(x).view(b, s, kvh, d).transpose(1, 2)
        v = self.wv(x).view(b, s, kvh, d).transpose(1, 2)
        if self.cfg.rotary:
            cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
            q, k = RopeFn.apply(q, cos, sin), RopeFn.apply(k, cos, sin)
        if self.cfg.checkpoint in ("selective", "core_attn+mlp"):  # Megatron's core_attn
            y = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            y = self.core(q, k, v)
        return self.wo(y.transpose(1, 2).reshape(b, s, a * d))


class MLP(nn.Module):
    """GELU (GPT) or SwiGLU (Llama; Shazeer 2020, arXiv 2002.05202), no biases."""

    def __init__(self, cfg: HarnessConfig) -> None:
        super().__init__()
        h, f = cfg.hidden, cfg.n_ffn
        self.swiglu = cfg.arch == "llama"
        self.w1 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
        if self.swiglu:
            self.w3 = nn.Linear(h, f, bias=False)

    def forward(self, x: Any) -> Any:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: HarnessConfig) -> None:
        super().__init__()
        self.n1, self.attn, self.n2, self.mlp = norm(cfg), Attention(cfg), norm(cfg), MLP(cfg)
        # Megatron-LM --recompute-modules mlp: checkpoint the MLP (its input is kept)
        self.ckpt_mlp = cfg.checkpoint in ("mlp", "core_attn+mlp")

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.n1(x))
        y = self.n2(x)
        return x + (checkpoint(self.mlp, y, use_reentrant=False) if self.ckpt_mlp else self.mlp(y))


class Model(nn.Module):
    """Embedding, `cfg.layers` blocks, final norm, LM head and the loss.

    `forward` writes the region being run ('embed', 'layers', 'head') into `region[0]`, so that
    a saved-tensors hook can attribute what is saved to it. checkpoint 'full' wraps every
    `cfg.checkpoint_every`-th layer (torchtitan's selective_ac_option = "k": the k-th, 2k-th,
    ... layer); 'op' wraps every layer with torchtitan's per-op policy (`op_sac_context`,
    whose saved outputs are in `self.sac_modes`).
    """

    def __init__(self, cfg: HarnessConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.tok = nn.Embedding(cfg.vocab, h)
        self.pos = nn.Embedding(cfg.seq_len, h) if cfg.arch == "gpt" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = norm(cfg)
        self.head = nn.Linear(h, cfg.vocab, bias=False)
        if cfg.tied:
            self.head.weight = self.tok.weight
        self.sac_modes: list[Any] = []

    def _layer(self, i: int, blk: nn.Module, x: Any) -> Any:
        mode, every = self.cfg.checkpoint, getattr(self.cfg, "checkpoint_every", 1)
        if mode == "full" and (i + 1) % every == 0:
            return checkpoint(blk, x, use_reentrant=False)
        if mode == "op":
            return checkpoint(blk, x, use_reentrant=False,
                              context_fn=op_sac_context(self.sac_modes))
        return blk(x)

    def forward(self, idx: Any, targets: Any, region: list[str]) -> Any:
        region[0] = "embed"
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        region[0] = "layers"
        for i, blk in enumerate(self.blocks):
            x = self._layer(i, blk, x)
        region[0] = "head"
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, self.cfg.vocab), targets.view(-1))


def make_optimizer(cfg: HarnessConfig, params: list[Any]) -> Any:
    """AdamW, SGD with momentum 0.9, or Adafactor (factored second moment, no first moment)."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    return torch.optim.Adafactor(params, lr=1e-3)


class SavedTensors:
    """Bytes saved for backward per region, each storage once, parameters and buffers left out.

    Use `with saved.hooks(): loss = model(idx, tgt, saved.region)`; then `by_region()`.
    """

    def __init__(self, model: nn.Module) -> None:
        self.skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(),
                                                               *model.buffers()]}
        self.region = ["embed"]
        self.seen: dict[int, tuple[str, int]] = {}
        self.sac_modes: list[Any] = getattr(model, "sac_modes", [])

    def pack(self, t: Any) -> Any:
        st = t.untyped_storage()
        if st.data_ptr() not in self.skip and st.data_ptr() not in self.seen:
            self.seen[st.data_ptr()] = (self.region[0], st.nbytes())
        return t

    @contextlib.contextmanager
    def hooks(self) -> Any:
        """Count what the forward inside saves; on exit (before backward consumes it) add
        what selective-checkpoint policies saved."""
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
            yield self
        self.sac_saved()

    def sac_saved(self) -> None:
        """Add what selective-checkpoint policies saved (outside saved_tensors_hooks: in the
        caching modes' storage) to the layers, each storage once."""
        for mode in self.sac_modes:
            for per_key in mode.storage.values():
                for out in per_key.values():
                    for t in torch.utils._pytree.tree_leaves(out):
                        t = getattr(t, "val", t)
                        if torch.is_tensor(t):
                            self.region[0] = "layers"
                            self.pack(t)

    def by_region(self) -> dict[str, int]:
        seen = self.seen.values()
        return {r: sum(n for reg, n in seen if reg == r) for r in ("embed", "layers", "head")}


def master_step(opt: Any, params: list[Any], master: list[Any]) -> None:
    """fp32 master step for bf16 weights (the gradient is upcast one tensor at a time)."""
    for p, m in zip(params, master, strict=True):
        m.grad = p.grad.float()
    opt.step()
    for p, m in zip(params, master, strict=True):
        m.grad = None
        p.data.copy_(m.data)


# --- fine-tuning: a hand-written LoRA adapter (#15) --------------------------------------------
LORA_TARGETS = {"attn": ("wq", "wk", "wv", "wo"), "mlp": ("w1", "w2", "w3")}


class LoRALinear(nn.Module):
    """PEFT's LoRA `Linear.forward` (peft 0.21, tuners/lora/layer.py) for lora_dropout = 0:
    y = base(x) + B(A(x cast to the adapter dtype)) * alpha / r, the result cast back to the
    base's dtype; base frozen, A and B in fp32 (PEFT's autocast_adapter_dtype=True), B zero.
    Each adapter casts its own copy of its input, so three q/k/v adapters keep three copies
    (`tests_torch` checks this against PEFT itself when it is installed)."""

    def __init__(self, base: nn.Linear, r: int, alpha: float = 16.0) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_A = nn.Linear(base.in_features, r, bias=False, dtype=torch.float32)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, dtype=torch.float32)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x: Any) -> Any:
        y = self.base(x)
        xa = x.to(self.lora_A.weight.dtype)
        return (y + self.lora_B(self.lora_A(xa)) * self.scaling).to(y.dtype)


def add_lora(model: nn.Module, r: int, targets: str) -> nn.Module:
    """Freeze `model` and put a LoRALinear on each target matrix ('attn', 'mlp' or 'all')."""
    model.requires_grad_(False)
    names = LORA_TARGETS["attn"] + LORA_TARGETS["mlp"] if targets == "all" else LORA_TARGETS[
        targets]
    for blk in model.blocks:
        for part in (blk.attn, blk.mlp):
            for name in names:
                if isinstance(getattr(part, name, None), nn.Linear):
                    setattr(part, name, LoRALinear(getattr(part, name), r))
    return model


def quantize_base(model: nn.Module) -> nn.Module:
    """QLoRA's base: every layer matrix becomes bitsandbytes' Linear4bit in NF4 with double
    quantization and blocks of 64, computing in bf16 (transformers' BitsAndBytesConfig with
    load_in_4bit, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant); embeddings, norms
    and the LM head stay bf16. Needs bitsandbytes (not a dependency of gpuplan)."""
    import bitsandbytes as bnb

    for blk in model.blocks:
        for part in (blk.attn, blk.mlp):
            for name, lin in list(part.named_children()):
                if not isinstance(lin, nn.Linear):
                    continue
                q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=False,
                                      compute_dtype=torch.bfloat16, compress_statistics=True,
                                      quant_type="nf4")
                q.weight = bnb.nn.Params4bit(lin.weight.data, requires_grad=False,
                                             compress_statistics=True, quant_type="nf4",
                                             blocksize=64).to(lin.weight.device)
                setattr(part, name, q)
    return model


# --- gradient buffers as the stacks keep them (#11) --------------------------------------------
def _pad(n: int, k: int) -> int:
    return -(-n // k) * k


class MainGrad:
    """Megatron-LM's contiguous gradient buffer (megatron/core/distributed/
    param_and_grad_buffer.py): one flat `dtype` tensor over every parameter, each parameter's
    `main_grad` a view into it; backward's half-precision `.grad` is added into it and freed
    (the post-accumulate hook stands in for Megatron's grad-accumulation fusion). With the
    distributed optimizer each parameter starts at a multiple of 64 elements and the buffer
    ends at a multiple of lcm(dp, 128) (`_pad_start_of_param_if_needed`,
    `_pad_end_of_bucket_if_needed`)."""

    def __init__(self, params: list[Any], dtype: Any, dp: int = 0) -> None:
        starts, n = [], 0
        for p in params:
            n = _pad(n, 64) if dp else n
            starts.append(n)
            n += p.numel()
        self.buffer = torch.zeros(_pad(n, math.lcm(dp, 128)) if dp else n, dtype=dtype)
        for p, o in zip(params, starts, strict=True):
            p.main_grad = self.buffer[o:o + p.numel()].view_as(p)
            p.register_post_accumulate_grad_hook(self._accumulate)

    @staticmethod
    def _accumulate(p: Any) -> None:
        p.main_grad.add_(p.grad)
        p.grad = None


def dist_opt_shard(buffer: Any, params: list[Any], dp: int, rank: int, lr: float = 1e-3
                   ) -> tuple[Any, Any]:
    """Megatron-LM's distributed optimizer on rank `rank` of `dp`, on one process: the fp32
    main parameters of this rank's 1/dp range of the flat buffer, their AdamW state, one step
    on the range's gradients; returns (main-parameter shard, optimizer)."""
    size = buffer.numel() // dp
    lo = rank * size
    flat = torch.zeros(buffer.numel(), dtype=torch.float32)
    o = 0
    for p in params:  # the parameters' values at their buffer offsets (the param buffer)
        o = _pad(o, 64)
        flat[o:o + p.numel()] = p.detach().float().reshape(-1)
        o += p.numel()
    main = flat[lo:lo + size].clone().requires_grad_(True)
    del flat
    opt = torch.optim.AdamW([main], lr=lr)
    main.grad = buffer[lo:lo + size].float()
    opt.step()
    main.grad = None
    return main, opt
