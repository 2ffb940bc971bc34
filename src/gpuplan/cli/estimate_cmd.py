"""`gpuplan estimate`: memory, time and cost of one training configuration."""

from __future__ import annotations

import argparse
from typing import Any

from . import common_options, nonneg_float, positive_int
from .options import (
    add_batch_options,
    add_model_options,
    add_site_options,
    default_global_batch,
    default_seq_len,
    resolve_model,
    site_overrides,
)

EPILOG = """examples:
  gpuplan estimate --model llama2-70b --gpu a100-80gb --gpus 64 --tp 8 --pp 2 --zero 1 \\
      --seq-len 4096 --micro-batch 1 --global-batch 1024 --recompute selective
  gpuplan estimate --model llama3-8b --gpu h100 --gpus 8 --tokens 15T \\
      --offer aws-p5.48xlarge-us-east-1 --pricing reserved-3y
  gpuplan estimate --layers 24 --hidden 2048 --heads 16 --vocab 50257 --gpu rtx-4090 --gpus 1
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "estimate",
        help="memory per GPU, step time, MFU, days and cost of one configuration",
        description="Estimate one training configuration: the per-GPU memory breakdown and "
        "whether it fits (with the knob that would make it fit), step time, tokens/s, MFU, "
        "days to train, GPU-hours, cost, goodput and energy. Memory in GiB (2^30 bytes).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(p)
    add_batch_options(p)
    g = p.add_argument_group("hardware and layout")
    g.add_argument("--gpu", required=True, help="accelerator id or alias (gpuplan catalog gpus)")
    g.add_argument("--gpus", type=positive_int,
                   help="total GPUs (default: tp*pp*cp*dp)")
    g.add_argument("--system", help="owned system that sets node size and fabric (default: the "
                   "catalog system for this GPU)")
    for name, helptext in (("tp", "tensor parallel"), ("pp", "pipeline parallel"),
                           ("cp", "context parallel"), ("ep", "expert parallel (MoE)")):
        g.add_argument(f"--{name}", type=positive_int, default=1, help=f"{helptext} degree")
    g.add_argument("--dp", type=positive_int, help="data parallel degree (default: what is left)")
    g.add_argument("--vpp", type=positive_int, default=1,
                   help="interleaved pipeline stages per GPU (virtual pipeline)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage: 1 optimizer, 2 +gradients, 3 +weights")
    g.add_argument("--fsdp", action="store_true", help="same as --zero 3")
    g.add_argument("--micro-batch", type=positive_int, default=1)
    g.add_argument("--precision", default="bf16", help="fp32, fp16, bf16 or fp8")
    g.add_argument("--optimizer", default="adamw", help="adamw, sgd or adafactor")
    g.add_argument("--recompute", default="none", help="none, selective or full")
    g.add_argument("--offload", action="store_true", help="optimizer state on CPU (ZeRO-Offload)")
    g.add_argument("--no-sp", action="store_true",
                   help="turn off sequence parallelism (on by default whenever tp > 1)")
    g.add_argument("--no-flash-attention", action="store_true",
                   help="materialize attention scores (flash attention is on by default)")
    g.add_argument("--dropout", action="store_true", help="dropout on (saves its masks)")
    c = p.add_argument_group("run and cost")
    c.add_argument("--tokens", help="tokens to train on (2e12, 2T, 300B)")
    c.add_argument("--offer", help="cloud offer id: its price and its network")
    c.add_argument("--usd-per-gpu-hour", type=nonneg_float, help="price per GPU-hour")
    c.add_argument("--pricing", help="on-demand, spot, reserved-1y, reserved-3y, savings-plan "
                   "(-1y/-3y), capacity-block or own")
    add_site_options(p)
    common_options(p)
    p.set_defaults(func=run)


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the command prints, as plain values (shared by text and JSON)."""
    from ..catalog import load_catalog
    from ..errors import ConfigError
    from ..search import single
    from ..spec import OPTIMIZERS, PRECISIONS, RECOMPUTE, Layout, code
    from ..units import parse_count

    cat = load_catalog(args.catalog)
    model = resolve_model(args, cat)
    gpu = cat.accelerator(args.gpu)
    seq = args.seq_len or default_seq_len(model)
    zero = 3 if args.fsdp else args.zero
    if args.fsdp and args.zero not in (0, 3):
        raise ConfigError("--fsdp means --zero 3; drop one of them")
    inner = args.tp * args.pp * args.cp
    if args.dp is None:
        gpus = args.gpus or inner
        if gpus % inner:
            raise ConfigError(f"--gpus {gpus} is not divisible by tp*pp*cp = {inner}; "
                              f"use a multiple of {inner}")
        dp = gpus // inner
    else:
        dp = args.dp
        gpus = args.gpus or inner * dp
    gb = args.global_batch or default_global_batch(seq, dp * args.micro_batch)
    precision = code(PRECISIONS, args.precision.lower(), "precision")
    layout = Layout(tp=args.tp, pp=args.pp, dp=dp, cp=args.cp, ep=args.ep, vpp=args.vpp,
                    zero=zero, micro_batch=args.micro_batch, global_batch=gb, seq_len=seq,
                    recompute=code(RECOMPUTE, args.recompute.lower(), "recompute mode"),
                    precision=precision,
                    optimizer=code(OPTIMIZERS, args.optimizer.lower(), "optimizer"),
                    sp=not args.no_sp, flash=not args.no_flash_attention, offload=args.offload,
                    dropout=args.dropout)
    layout.check(model, gpus)
    tokens = parse_count(args.tokens, "--tokens") if args.tokens else None
    if tokens is not None and tokens <= 0:
        raise ConfigError("--tokens must be more than 0, e.g. 2T")
    if args.offer and args.usd_per_gpu_hour is not None:
        raise ConfigError("give either --offer or --usd-per-gpu-hour, not both")
    overrides = site_overrides(args)
    return single.estimate(cat, model, gpu, layout, gpus=gpus, tokens=tokens, offer=args.offer,
                           system=args.system, usd_per_gpu_hour=args.usd_per_gpu_hour,
                           pricing=args.pricing, overrides=overrides)


def run(args: argparse.Namespace) -> int:
    from ..report.estimate import render
    from ..report.fmt import dumps

    result = build(args)
    print(dumps(result) if args.json else render(result))
    return 0
