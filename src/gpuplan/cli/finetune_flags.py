"""The fine-tuning flags of `gpuplan estimate` and `gpuplan plan` (#15), named as the API's
arguments (`gpuplan.api.estimate(method=..., lora_rank=...)`)."""

from __future__ import annotations

import argparse
from typing import Any

from . import positive_float, positive_int

FLAGS = ("method", "lora_rank", "lora_targets", "quant", "samples", "epochs",
         "padding_efficiency")


def add_finetune_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "fine-tuning", "train adapters or the last layers of a frozen model instead of every "
        "weight; give the data as --samples N --seq-len L --epochs E (or --tokens)")
    g.add_argument("--method", default="full", help="full (default: every weight, as in "
                   "pre-training), lora, qlora (LoRA over an NF4 base) or freeze (the last 2 "
                   "layers trained)")
    g.add_argument("--lora-rank", type=positive_int, help="LoRA rank r (default 16)")
    g.add_argument("--lora-targets", help="matrices LoRA adapts: attn, mlp or all (default)")
    g.add_argument("--quant", help="storage of the frozen base: none, nf4 (qlora's), int8, fp8")
    g.add_argument("--samples", type=positive_int, help="training samples per epoch")
    g.add_argument("--epochs", type=positive_float, help="passes over the samples (default 1)")
    g.add_argument("--packing", action="store_true",
                   help="samples packed into full windows (the default)")
    g.add_argument("--no-packing", action="store_true",
                   help="each sample padded to --seq-len (the padding is computed too)")
    g.add_argument("--padding-efficiency", type=positive_float, help="average sample tokens / "
                   "--seq-len (default 1.0: the samples fill their window)")


def finetune_args(args: argparse.Namespace) -> dict[str, Any]:
    """The fine-tuning flags, named as `gpuplan.api` arguments."""
    from ..errors import ConfigError

    if args.packing and args.no_packing:
        raise ConfigError("give either --packing or --no-packing, not both")
    return {k: getattr(args, k, None) for k in FLAGS} | {
        "method": args.method or "full", "packing": not args.no_packing}
