"""Memory measurement harness: small GPT / Llama models in PyTorch vs `estimate.memory`.

`measure(config)` trains one step of a small model and reports, exactly, the bytes of parameters,
gradients and optimizer state, and the bytes of activations: every tensor saved for backward
during the forward pass, caught with `torch.autograd.graph.saved_tensors_hooks`, counting each
storage once and leaving out parameters and buffers. Saved tensors are attributed to the region
being run: the embedding, the transformer layers, or the head (final norm, LM head, loss).
`predict(config)` gives the same quantities from the estimate; `python -m
gpuplan.calibrate.memory` prints both for a grid of models.

The models match what the estimate assumes; where they differ, on purpose:
- no biases, no dropout (the estimate's defaults); LayerNorm without bias (`bias=False`);
- GPT has learned position embeddings, which ModelSpec does not count: `predict` adds them
  (seq_len * hidden parameters) explicitly so the comparison is of the same model;
- RMSNorm is a fused autograd function that saves its input and the fp32 1/rms, as fused kernels
  (Apex, Transformer Engine) do; `torch.nn.RMSNorm` as composed in eager PyTorch saves two fp32
  copies of its input instead (measured: 8 B per element for a bf16 input, not 2);
- rotary embeddings (off by default) are a fused function saving only the cos/sin tables;
- the estimate ignores norm statistics (mean, 1/rms: s*b floats per norm), the integer token
  ids saved by the embedding and the loss, and the optimizer's `step` counters: each well under
  1% at the sizes tested;
- bf16 runs keep bf16 weights and gradients and an fp32 master copy inside the optimizer
  (Megatron-LM style mixed precision), which is what the estimate's 2 + 2 + 12 B/param means;
- attention 'explicit' materializes the softmax (the non-flash case, K/V repeated to all heads
  for GQA); 'sdpa' calls F.scaled_dot_product_attention. On CPU in torch 2.13 that runs the
  flash kernel, which saves q, k, v (compact with enable_gqa), the output (laid out so that the
  out-projection's input is the same storage) and fp32 log-sum-exp statistics (b*a*s floats):
  exactly what the estimate assumes for flash attention;
- checkpoint 'full' wraps each layer in torch.utils.checkpoint (non-reentrant): only the layer
  input is saved; 'selective' checkpoints the core attention (scores, softmax, weighted sum).
  The recompute working set in backward is not a saved tensor; on CUDA the peak
  (`torch.cuda.max_memory_allocated`) includes it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..spec import ADAFACTOR, ADAMW, BF16, FP32, R_FULL, R_NONE, R_SELECTIVE, SGD, Layout, ModelSpec

__all__ = ["HarnessConfig", "measure", "predict", "compare", "default_grid", "main"]


@dataclass(frozen=True, kw_only=True)
class HarnessConfig:
    """One small model and training setting to measure."""

    arch: str = "gpt"  # 'gpt': GELU, LayerNorm, learned positions; 'llama': SwiGLU, RMSNorm
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 0  # 0 = heads (MHA)
    ffn: int = 0  # 0 = 4*hidden (gpt) or 3*hidden (llama)
    vocab: int = 256
    seq_len: int = 64
    micro_batch: int = 2
    precision: str = "fp32"  # 'fp32' or 'bf16'
    optimizer: str = "adamw"  # 'adamw', 'sgd' (momentum 0.9) or 'adafactor' (torch.optim)
    attention: str = "explicit"  # 'explicit' (softmax saved) or 'sdpa' (flash kernel)
    checkpoint: str = "none"  # 'none', 'selective' (core attention) or 'full' (each layer)
    rotary: bool = False
    tied: bool = False
    device: str = "cpu"
    seed: int = 0

    @property
    def n_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def n_ffn(self) -> int:
        return self.ffn or (4 if self.arch == "gpt" else 3) * self.hidden

    def model_spec(self) -> ModelSpec:
        return ModelSpec(
            id=f"harness-{self.arch}", name="harness", layers=self.layers, hidden=self.hidden,
            heads=self.heads, kv_heads=self.n_kv, ffn=self.n_ffn, vocab=self.vocab,
            mlp="gelu" if self.arch == "gpt" else "swiglu", tied_embeddings=self.tied,
            max_seq_len=self.seq_len,
        )

    def layout(self) -> Layout:
        rc = {"none": R_NONE, "selective": R_SELECTIVE, "full": R_FULL}[self.checkpoint]
        return Layout(
            micro_batch=self.micro_batch, global_batch=self.micro_batch, seq_len=self.seq_len,
            recompute=rc, precision=FP32 if self.precision == "fp32" else BF16,
            optimizer={"adamw": ADAMW, "sgd": SGD, "adafactor": ADAFACTOR}[self.optimizer],
            flash=self.attention == "sdpa", dropout=False,
        )

    def label(self) -> str:
        kv = f"gqa{self.n_kv}" if self.n_kv != self.heads else "mha"
        return (f"{self.arch} {self.precision} {self.optimizer} {self.attention} {kv} "
                f"ckpt={self.checkpoint}{' rope' if self.rotary else ''}")


# --- the PyTorch models (built lazily: torch is optional) ------------------------------------
def _build(cfg: HarnessConfig) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

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

    h, a, kvh = cfg.hidden, cfg.heads, cfg.n_kv
    d = h // a

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
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
            if cfg.attention == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                      enable_gqa=kvh != a)
            if kvh != a:  # repeat K/V to all heads, as Megatron-LM / HF eager attention do
                k, v = k.repeat_interleave(a // kvh, dim=1), v.repeat_interleave(a // kvh, dim=1)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(self.causal, float("-inf")).softmax(dim=-1)
            return att @ v

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, a, d).transpose(1, 2)
            k = self.wk(x).view(b, s, kvh, d).transpose(1, 2)
            v = self.wv(x).view(b, s, kvh, d).transpose(1, 2)
            if cfg.rotary:
                cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
                q, k = RopeFn.apply(q, cos, sin), RopeFn.apply(k, cos, sin)
            if cfg.checkpoint == "selective":
                y = checkpoint(self.core, q, k, v, use_reentrant=False)
            else:
                y = self.core(q, k, v)
            return self.wo(y.transpose(1, 2).reshape(b, s, a * d))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            f = cfg.n_ffn
            self.w1 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)
            if cfg.arch == "llama":
                self.w3 = nn.Linear(h, f, bias=False)

        def forward(self, x: Any) -> Any:
            if cfg.arch == "llama":  # SwiGLU (Shazeer 2020, arXiv 2002.05202)
                return self.w2(F.silu(self.w1(x)) * self.w3(x))
            return self.w2(F.gelu(self.w1(x)))

    def norm() -> Any:
        return nn.LayerNorm(h, bias=False) if cfg.arch == "gpt" else RMSNorm(h)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.attn, self.n2, self.mlp = norm(), Attention(), norm(), MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, h)
            self.pos = nn.Embedding(cfg.seq_len, h) if cfg.arch == "gpt" else None
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.norm = norm()
            self.head = nn.Linear(h, cfg.vocab, bias=False)
            if cfg.tied:
                self.head.weight = self.tok.weight

        def forward(self, idx: Any, targets: Any, region: list[str]) -> Any:
            region[0] = "embed"
            x = self.tok(idx)
            if self.pos is not None:
                x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
            region[0] = "layers"
            for blk in self.blocks:
                x = checkpoint(blk, x, use_reentrant=False) if cfg.checkpoint == "full" else blk(x)
            region[0] = "head"
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, cfg.vocab), targets.view(-1))

    return Model()


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(cfg: HarnessConfig) -> dict[str, Any]:
    """Train one step; bytes of weights, gradients, optimizer state and saved activations."""
    import torch

    torch.manual_seed(cfg.seed)
    dev = torch.device(cfg.device)
    dtype = torch.float32 if cfg.precision == "fp32" else torch.bfloat16
    model = _build(cfg).to(device=dev, dtype=dtype)
    params = list(model.parameters())  # tied weights appear once
    mixed = dtype != torch.float32
    master = [p.detach().float().clone().requires_grad_(True) for p in params] if mixed else params
    if cfg.optimizer == "adamw":
        opt: Any = torch.optim.AdamW(master, lr=1e-3)
    elif cfg.optimizer == "sgd":
        opt = torch.optim.SGD(master, lr=1e-3, momentum=0.9)
    else:  # factored second moment, no first moment
        opt = torch.optim.Adafactor(master, lr=1e-3)
    idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len), device=dev)
    tgt = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len), device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)

    skip = {t.untyped_storage().data_ptr() for t in [*params, *model.buffers()]}
    region = ["embed"]
    seen: dict[int, tuple[str, int]] = {}

    def pack(t: Any) -> Any:
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.data_ptr() not in seen:
            seen[st.data_ptr()] = (region[0], st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(idx, tgt, region)
    loss.backward()
    if mixed:  # fp32 master step (the gradient is upcast one tensor at a time)
        for p, m in zip(params, master, strict=True):
            m.grad = p.grad.float()
        opt.step()
        for p, m in zip(params, master, strict=True):
            m.grad = None
            p.data.copy_(m.data)
    else:
        opt.step()
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    acts = {r: sum(n for reg, n in seen.values() if reg == r) for r in ("embed", "layers", "head")}
    out: dict[str, Any] = {
        "params": sum(p.numel() for p in params),
        "weights_bytes": _nbytes(params),
        "gradients_bytes": _nbytes(p.grad for p in params),
        "optimizer_bytes": _nbytes(state) + (_nbytes(master) if mixed else 0),
        "layer_activation_bytes": acts["layers"],
        "head_activation_bytes": acts["head"],
        "embed_activation_bytes": acts["embed"],
        "cuda_max_allocated_bytes": None,
    }
    if dev.type == "cuda":
        torch.cuda.synchronize()
        out["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
    return out


def predict(cfg: HarnessConfig) -> dict[str, Any]:
    """The estimate for the same model and setting (one GPU, one micro-batch, no overhead)."""
    import numpy as np

    from ..estimate.memory import (
        layer_activation_bytes,
        logits_bytes,
        memory_breakdown,
        model_state_bytes_per_param,
    )

    spec, lay = cfg.model_spec(), cfg.layout()
    bd = memory_breakdown(spec, lay, runtime_overhead_bytes=0.0, fragmentation=0.0)
    # learned positions (GPT) are not in ModelSpec: add them explicitly, same bytes per param
    pos = cfg.seq_len * cfg.hidden if cfg.arch == "gpt" else 0
    # position embeddings: a (seq_len, hidden) matrix, factored by Adafactor into rows + cols
    ada = (cfg.seq_len + cfg.hidden) / pos if pos else 0.0
    wb, gb, ob = (float(x) for x in model_state_bytes_per_param(lay.precision, lay.optimizer, ada))
    kw = dict(seq_len=cfg.seq_len, micro_batch=cfg.micro_batch, precision=lay.precision)
    per_layer = layer_activation_bytes(spec, flash=lay.flash, recompute=lay.recompute, **kw)
    saved, _live = logits_bytes(spec, **kw)
    return {
        "params": spec.total_params() + pos,
        "weights_bytes": float(bd.weights) + wb * pos,
        "gradients_bytes": float(bd.gradients) + gb * pos,
        "optimizer_bytes": float(bd.optimizer) + ob * pos,
        "layer_activation_bytes": float(np.asarray(per_layer)) * cfg.layers,
        "head_activation_bytes": float(np.asarray(saved)),
        "total_bytes": float(bd.total) + (wb + gb + ob) * pos,
    }


def compare(cfg: HarnessConfig) -> dict[str, Any]:
    """Measured and predicted side by side, with relative errors (predicted / measured - 1)."""
    m, p = measure(cfg), predict(cfg)
    keys = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "layer_activation_bytes",
            "head_activation_bytes")
    err = {k: p[k] / m[k] - 1.0 for k in keys}
    return {"config": asdict(cfg), "measured": m, "predicted": p, "rel_error": err}


def default_grid(device: str = "cpu") -> list[HarnessConfig]:
    """The grid the tests and the CLI use: both archs, fp32/bf16, MHA/GQA, attention, ckpt."""
    base = [
        HarnessConfig(arch="gpt"),
        HarnessConfig(arch="gpt", precision="bf16"),
        HarnessConfig(arch="gpt", attention="sdpa"),
        HarnessConfig(arch="gpt", checkpoint="full"),
        HarnessConfig(arch="gpt", precision="bf16", checkpoint="selective", optimizer="sgd"),
        HarnessConfig(arch="gpt", tied=True, optimizer="sgd"),
        HarnessConfig(arch="llama", kv_heads=2),
        HarnessConfig(arch="llama", kv_heads=2, precision="bf16"),
        HarnessConfig(arch="llama", kv_heads=2, attention="sdpa", precision="bf16"),
        HarnessConfig(arch="llama", kv_heads=1, attention="sdpa", rotary=True),
        HarnessConfig(arch="llama", kv_heads=2, checkpoint="selective"),
        HarnessConfig(arch="llama", checkpoint="full", precision="bf16", optimizer="sgd"),
        HarnessConfig(arch="gpt", optimizer="adafactor"),
        HarnessConfig(arch="llama", kv_heads=2, precision="bf16", optimizer="adafactor"),
    ]
    return [replace(c, device=device) for c in base]


def _fmt_mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.3f}"


def main(argv: list[str] | None = None) -> int:
    """Print predicted vs measured (MiB) for the default grid."""
    from ..report.fmt import table

    ap = argparse.ArgumentParser(prog="python -m gpuplan.calibrate.memory",
                                 description="Predicted vs measured training memory, small models.")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda adds the measured peak)")
    args = ap.parse_args(argv)
    rows = []
    for cfg in default_grid(args.device):
        r = compare(cfg)
        m, p, e = r["measured"], r["predicted"], r["rel_error"]
        rows.append([
            cfg.label(),
            f"{_fmt_mib(p['weights_bytes'])}/{_fmt_mib(m['weights_bytes'])}",
            f"{_fmt_mib(p['optimizer_bytes'])}/{_fmt_mib(m['optimizer_bytes'])}",
            f"{_fmt_mib(p['layer_activation_bytes'])}/{_fmt_mib(m['layer_activation_bytes'])}",
            f"{100 * e['layer_activation_bytes']:+.1f}%",
            f"{_fmt_mib(p['head_activation_bytes'])}/{_fmt_mib(m['head_activation_bytes'])}",
            f"{_fmt_mib(p['total_bytes'])}/{_fmt_mib(m['cuda_max_allocated_bytes'])}",
        ])
    print(table(rows, ["config", "weights MiB pred/meas", "optimizer pred/meas",
                       "layer acts pred/meas", "acts err", "head acts pred/meas",
                       "total pred / cuda peak"], align="lrrrrrr"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
