"""`gpuplan estimate`: memory, time and cost of one training configuration."""

from __future__ import annotations

import argparse
from typing import Any

from . import common_options, nonneg_float, positive_int, watts
from .finetune_flags import add_finetune_options, finetune_args
from .options import (
    add_batch_options,
    add_model_options,
    add_report_options,
    add_site_options,
    model_args,
    print_result,
    site_args,
    wants_json,
    write_html,
)

EPILOG = """examples:
  gpuplan estimate --model llama2-70b --gpu a100-80gb --gpus 64 --tp 8 --pp 2 --zero 1 \\
      --seq-len 4096 --micro-batch 1 --global-batch 1024 --recompute selective
  gpuplan estimate --model llama3-8b --gpu h100 --gpus 8 --tokens 15T \\
      --offer aws-p5.48xlarge-us-east-1 --pricing reserved-3y
  gpuplan estimate --layers 24 --hidden 2048 --heads 16 --vocab 50257 --gpu rtx-4090 --gpus 1
  gpuplan estimate --model llama3-8b --gpu h100 --gpus 16 --tp 2 --export megatron -o run.sh
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
    _layout_flags(g)
    _memory_flags(g)
    _run_flags(p)
    add_finetune_options(p)
    add_site_options(p)
    x = p.add_argument_group("launch config and report")
    x.add_argument("--export", metavar="TARGET", help="print the launch config of this "
                   "configuration instead of the estimate: megatron, torchtitan, deepspeed, "
                   "torchrun, slurm or skypilot")
    x.add_argument("-o", "--output", metavar="FILE", help="write the --export output to FILE "
                   "(the estimate is printed as usual)")
    add_report_options(x, "estimate")
    common_options(p)
    p.set_defaults(func=run)


def _layout_flags(g: Any) -> None:
    """The hardware and its parallel layout."""
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
    for end in ("first", "last"):
        g.add_argument(f"--{end}-stage-layers", type=int, default=0, metavar="N",
                       help=f"decoder layers on the {end} pipeline stage (Megatron-LM's "
                       f"--decoder-{end}-pipeline-num-layers; default 0: even when pp*vpp "
                       "divides the layers, else embedding and loss count as a layer each)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage: 1 optimizer, 2 +gradients, 3 +weights")
    g.add_argument("--fsdp", action="store_true", help="same as --zero 3")
    g.add_argument("--micro-batch", type=positive_int, default=1)


def _memory_flags(g: Any) -> None:
    """Precision, recompute, offload and what each stack keeps in memory."""
    g.add_argument("--precision", default="bf16", help="fp32, fp16, bf16 or fp8")
    g.add_argument("--optimizer", default="adamw", help="adamw, sgd or adafactor")
    g.add_argument("--recompute", default="none",
                   help="none, selective (core attention), full, op (torchtitan per-op) or "
                   "modules (Megatron-LM, with --recompute-modules)")
    g.add_argument("--recompute-modules", metavar="LIST",
                   help="Megatron-LM modules to recompute: core_attn, mlp, moe, moe_act, "
                   "layernorm, mla_up_proj (comma-separated; implies --recompute modules)")
    g.add_argument("--recompute-every", type=positive_int, default=1, metavar="K",
                   help="with --recompute full: checkpoint every K-th layer only")
    g.add_argument("--offload", nargs="?", const="optimizer", default="", metavar="PARTS",
                   help="to host memory: optimizer (alone: the default), params, grads, "
                   "activations (comma-separated)")
    g.add_argument("--offload-layers", type=positive_int, default=0, metavar="N",
                   help="with --offload activations: only the first N layers of each pipeline "
                   "stage (Megatron-Core cpu_offloading_num_layers; default all)")
    g.add_argument("--shard-group", type=positive_int, default=0, metavar="N",
                   help="with --zero: shard within groups of N data-parallel ranks and "
                   "replicate across them (HSDP; default: all ranks)")
    g.add_argument("--no-sp", action="store_true",
                   help="turn off sequence parallelism (on by default whenever tp > 1)")
    g.add_argument("--no-flash-attention", action="store_true",
                   help="materialize attention scores (flash attention is on by default)")
    g.add_argument("--dropout", action="store_true", help="dropout on (saves its masks)")
    g.add_argument("--stack", default="megatron", help="training software: megatron, nemo, "
                   "torchtitan, fsdp, deepspeed or torchtune (default megatron)")
    g.add_argument("--grad-reduce-dtype", choices=("fp32", "bf16"),
                   help="gradient accumulation / reduction buffer dtype (default: the software "
                   "stack's, data/memory.toml; Megatron-LM and NeMo fp32)")
    g.add_argument("--tp-collectives", choices=("overlapped", "blocking"),
                   help="whether tensor-parallel collectives hide behind compute (overlapped: "
                   "Megatron-Core, async TP) or block it (blocking: PyTorch DTensor TP); "
                   "default: the software stack's (blocking under fsdp, torchtitan, torchtune)")
    g.add_argument("--schedule", default="1f1b", choices=("1f1b", "dualpipe", "1f1b-a2a"),
                   help="pipeline schedule: 1f1b (interleaved with --vpp), DeepSeek-V3's "
                   "dualpipe (two stages per rank, pp + 1 micro-batches in flight) or 1f1b-a2a "
                   "(Megatron-Core's --overlap-moe-expert-parallel-comm)")
    g.add_argument("--moe-dispatcher", default="auto",
                   help="MoE token dispatch: flex (deduplicated, DeepEP/HybridEP), alltoall "
                   "(one copy per routed expert) or auto (flex under megatron and nemo, else "
                   "alltoall)")
    g.add_argument("--moments-dtype", choices=("fp32", "bf16"),
                   help="optimizer moments (AdamW m and v) dtype; the master weights stay "
                   "fp32 (default fp32; bf16 as DeepSeek-V3 and Megatron's --exp-avg-dtype)")
    g.add_argument("--activation-cache", choices=("stack", "fp8"),
                   help="fp8 (with --precision fp8): DeepSeek-V3's low-precision cache, every "
                   "linear input in FP8, the attention output in E5M6, MoE SwiGLU inputs in "
                   "FP8 (default stack: as the software stack keeps them)")
    g.add_argument("--ema", choices=("none", "gpu", "host"),
                   help="an fp32 EMA of the parameters: on the GPU, or in host memory as "
                   "DeepSeek-V3 keeps it (default none)")
    g.add_argument("--fp8-recipe", choices=("auto", "tensor", "mxfp8"),
                   help="FP8 scaling: tensor (per-tensor delayed or current scaling; on "
                   "Blackwell Transformer Engine then keeps no FP8 transpose), mxfp8, or auto "
                   "(MXFP8 on Blackwell, per-tensor elsewhere; the default)")


def _run_flags(p: Any) -> None:
    """Tokens, price and power of the run."""
    c = p.add_argument_group("run and cost")
    c.add_argument("--tokens", help="tokens to train on (2e12, 2T, 300B)")
    c.add_argument("--offer", help="cloud offer id: its price and its network")
    c.add_argument("--usd-per-gpu-hour", type=nonneg_float, help="price per GPU-hour")
    c.add_argument("--power-limit-watts", type=watts, help="GPU power cap in watts: peak "
                   "FLOP/s scale with (cap / TDP)^k, k per family from published figures "
                   "(docs/calibration.md)")
    c.add_argument("--pricing", help="on-demand, spot, reserved-1y, reserved-3y, savings-plan "
                   "(-1y/-3y), capacity-block or own")


def estimate_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `gpuplan.api.estimate` keywords of parsed flags (the web adapter uses this too):
    the names are the flags' dests except --no-sp (sp) and --no-flash-attention
    (flash_attention), which the API takes the right way round."""
    return dict(
        gpu=args.gpu, gpus=args.gpus, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep,
        dp=args.dp, vpp=args.vpp, zero=args.zero, fsdp=args.fsdp, micro_batch=args.micro_batch,
        precision=args.precision, optimizer=args.optimizer, recompute=args.recompute,
        offload=args.offload, offload_layers=getattr(args, "offload_layers", 0),
        shard_group=args.shard_group,
        recompute_modules=args.recompute_modules, recompute_every=args.recompute_every,
        sp=not args.no_sp, flash_attention=not args.no_flash_attention,
        dropout=args.dropout, stack=args.stack, first_stage_layers=args.first_stage_layers,
        last_stage_layers=args.last_stage_layers, tokens=args.tokens, offer=args.offer,
        system=args.system,
        usd_per_gpu_hour=args.usd_per_gpu_hour, pricing=args.pricing,
        power_limit_watts=args.power_limit_watts, catalog=args.catalog,
        grad_reduce_dtype=getattr(args, "grad_reduce_dtype", None),
        tp_collectives=getattr(args, "tp_collectives", None),
        schedule=getattr(args, "schedule", "1f1b"),
        moe_dispatcher=getattr(args, "moe_dispatcher", "auto"),
        moments_dtype=getattr(args, "moments_dtype", None),
        activation_cache=getattr(args, "activation_cache", None),
        ema=getattr(args, "ema", None), fp8_recipe=getattr(args, "fp8_recipe", None),
        **model_args(args), **site_args(args), **finetune_args(args))


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..report.estimate import render_text, to_json
    from .export_cmd import check_export_flags, write_or_print

    check_export_flags(args, "estimate")
    result = api.estimate(**estimate_kwargs(args))
    doc = to_json(result) if (wants_json(args) or args.export) else {}
    write_html("estimate", doc, args)
    if args.export:
        from ..export import export, record_from

        record, _ = record_from(doc)
        text = export(record, args.export, source={"from": "`gpuplan estimate`",
                                                   "catalog": tuple(args.catalog)})
        write_or_print(text, args.output, args.force)
        if not args.output:
            return 0
    return print_result("estimate", doc, args, lambda: render_text(result))
