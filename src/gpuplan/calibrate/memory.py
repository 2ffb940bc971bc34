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
- checkpoint 'full' wraps each layer (every `checkpoint_every`-th) in torch.utils.checkpoint
  (non-reentrant): only the layer input is saved; 'selective' checkpoints the core attention
  (scores, softmax, weighted sum); 'mlp' and 'core_attn+mlp' checkpoint those modules
  (Megatron-LM --recompute-modules); 'op' runs torchtitan's per-op policy through selective
  checkpointing (`torch_model.op_sac_context`), whose saved outputs are counted too.
  The recompute working set in backward is not a saved tensor; on CUDA the peak
  (`torch.cuda.max_memory_allocated`) includes it.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..spec import (
    ADAFACTOR,
    ADAMW,
    BF16,
    FP32,
    M_CORE_ATTN,
    M_MLP,
    R_FULL,
    R_MODULES,
    R_NONE,
    R_OP,
    R_SELECTIVE,
    SGD,
    Layout,
    ModelSpec,
)

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
    # 'none', 'selective' (core attention), 'full' (every checkpoint_every-th layer), 'op'
    # (torchtitan per-op SAC), 'mlp' / 'core_attn+mlp' (Megatron-LM --recompute-modules)
    checkpoint: str = "none"
    checkpoint_every: int = 1
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
        rc, mods = {"none": (R_NONE, 1), "selective": (R_SELECTIVE, 1), "full": (R_FULL, 1),
                    "op": (R_OP, 1), "mlp": (R_MODULES, M_MLP),
                    "core_attn+mlp": (R_MODULES, M_CORE_ATTN | M_MLP)}[self.checkpoint]
        return Layout(
            recompute_modules=mods, recompute_every=self.checkpoint_every,
            micro_batch=self.micro_batch, global_batch=self.micro_batch, seq_len=self.seq_len,
            recompute=rc, precision=FP32 if self.precision == "fp32" else BF16,
            optimizer={"adamw": ADAMW, "sgd": SGD, "adafactor": ADAFACTOR}[self.optimizer],
            flash=self.attention == "sdpa", dropout=False,
        )

    def label(self) -> str:
        kv = f"gqa{self.n_kv}" if self.n_kv != self.heads else "mha"
        return (f"{self.arch} {self.precision} {self.optimizer} {self.attention} {kv} "
                f"ckpt={self.checkpoint}{_every(self.checkpoint_every)}"
                f"{' rope' if self.rotary else ''}")


def _every(k: int) -> str:
    return f"/{k}" if k > 1 else ""


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(cfg: HarnessConfig) -> dict[str, Any]:
    """Train one step; bytes of weights, gradients, optimizer state and saved activations."""
    import torch  # optional: only the harness needs it

    from . import torch_model as tm

    torch.manual_seed(cfg.seed)
    dev = torch.device(cfg.device)
    dtype = torch.float32 if cfg.precision == "fp32" else torch.bfloat16
    model = tm.Model(cfg).to(device=dev, dtype=dtype)
    params = list(model.parameters())  # tied weights appear once
    mixed = dtype != torch.float32
    master = [p.detach().float().clone().requires_grad_(True) for p in params] if mixed else params
    opt = tm.make_optimizer(cfg, master)
    idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len), device=dev)
    tgt = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len), device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
    saved = tm.SavedTensors(model)
    with saved.hooks():
        loss = model(idx, tgt, saved.region)
    loss.backward()
    if mixed:
        tm.master_step(opt, params, master)
    else:
        opt.step()
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    acts = saved.by_region()
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

    from ..estimators.memory import (
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
    per_layer = layer_activation_bytes(spec, flash=lay.flash, recompute=lay.recompute,
                                       recompute_modules=lay.recompute_modules,
                                       recompute_every=lay.recompute_every, **kw)
    saved, _live = logits_bytes(spec, **kw)
    return {
        "params": spec.total_params() + pos,
        "weights_bytes": float(bd.weights) + wb * pos,
        "gradients_bytes": float(bd.gradients) + gb * pos,
        "optimizer_bytes": float(bd.optimizer) + ob * pos,
        "layer_activation_bytes": float(np.asarray(per_layer)) * cfg.layers,
        "head_activation_bytes": float(np.asarray(saved)),
        # the allocated peak, what torch.cuda.max_memory_allocated measures
        "total_bytes": float(bd.allocated) + (wb + gb + ob) * pos,
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
        HarnessConfig(arch="llama", kv_heads=2, attention="sdpa", checkpoint="op", rotary=True),
        HarnessConfig(arch="gpt", attention="sdpa", checkpoint="op", precision="bf16"),
        HarnessConfig(arch="llama", kv_heads=2, checkpoint="mlp"),
        HarnessConfig(arch="gpt", checkpoint="core_attn+mlp", precision="bf16"),
        HarnessConfig(arch="llama", layers=4, checkpoint="full", checkpoint_every=2),
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
