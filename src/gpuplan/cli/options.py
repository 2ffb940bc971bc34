"""Options shared by `estimate` and `plan`: the model, the batch, the site overrides."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from . import fraction, nonneg_float, positive_float, positive_int, pue

MODEL_HELP = """model: --model ID (a preset, see `gpuplan models`) or --model path/to/config.json
(a Hugging Face config on disk), or explicit --layers --hidden --heads --vocab [--kv-heads --ffn
--mlp]; with explicit flags the defaults are a GELU MLP of 4*hidden, kv-heads = heads and untied
embeddings."""


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model", MODEL_HELP)
    g.add_argument("--model", help="preset id/alias or path to a config.json")
    g.add_argument("--layers", type=positive_int)
    g.add_argument("--hidden", type=positive_int)
    g.add_argument("--heads", type=positive_int)
    g.add_argument("--kv-heads", type=positive_int, help="default: --heads (no GQA)")
    g.add_argument("--ffn", type=positive_int, help="MLP inner size (default: 4*hidden)")
    g.add_argument("--vocab", type=positive_int)
    g.add_argument("--mlp", choices=("gelu", "swiglu"), default="gelu")
    g.add_argument("--tied-embeddings", action="store_true",
                   help="input embedding and LM head share weights (default: untied)")


def add_batch_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("batch")
    g.add_argument("--seq-len", type=positive_int,
                   help="sequence length (default: the model's, at most 8192)")
    g.add_argument("--global-batch", type=positive_int,
                   help="sequences per optimizer step (default: about 4M tokens, rounded to "
                   "a multiple of data-parallel x micro-batch)")


MODEL_FLAGS = ("model", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp",
               "tied_embeddings")


def model_args(args: argparse.Namespace) -> dict[str, Any]:
    """The model and batch flags, named as `gpuplan.api` arguments."""
    return {**{k: getattr(args, k) for k in MODEL_FLAGS},
            "seq_len": args.seq_len, "global_batch": args.global_batch}


def add_site_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("site and reliability (defaults from `gpuplan catalog site`)")
    g.add_argument("--utilization", type=fraction,
                   help="share of an owned cluster's hours doing useful work (default 0.7)")
    g.add_argument("--years", type=positive_float, help="depreciation period of owned hardware")
    g.add_argument("--electricity", type=nonneg_float, help="USD per kWh")
    g.add_argument("--pue", type=pue, help="power usage effectiveness (>= 1)")
    g.add_argument("--grid-intensity", type=nonneg_float, help="kg CO2e per kWh")
    g.add_argument("--interruptions", type=nonneg_float,
                   help="spot interruptions per instance-hour")
    g.add_argument("--reuse", type=fraction,
                   help="utilization at which an unused commitment is reused by others")
    g.add_argument("--allocator", metavar="NAME",
                   help="PyTorch CUDA allocator setting, whose margin reserved - allocated "
                   "is in `gpuplan catalog site`: caching (default, PyTorch's) or expandable "
                   "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")


SITE_FLAGS = ("utilization", "years", "electricity", "pue", "grid_intensity", "interruptions",
              "reuse", "allocator")


def site_args(args: argparse.Namespace) -> dict[str, float | None]:
    """The site flags of `add_site_options`, named as `gpuplan.api` arguments."""
    return {k: getattr(args, k) for k in SITE_FLAGS}


# what `--format csv` prints, by command (the first table of `report.tables.TABLES[kind]`)
CSV_TABLE = {"plan": "the ranked plans", "estimate": "one summary row",
             "tco": "the cost per year by line"}


def add_report_options(p: argparse.ArgumentParser, kind: str) -> None:
    """--html FILE and --force: the self-contained HTML report of plan, estimate and tco;
    --format: the tables as text, CSV or Markdown."""
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report "
                   "(tables, charts, assumptions, sources) to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing output FILE")
    p.add_argument("--format", default="text", choices=("text", "csv", "markdown"),
                   help=f"text (default); csv: {CSV_TABLE[kind]} only, plain values with units "
                   "in the headers (RFC 4180); markdown: every table under a heading")


def check_format(args: argparse.Namespace) -> None:
    """--format and --json both choose what is printed: one of them, in one line."""
    from ..errors import ConfigError

    if args.format != "text" and args.json:
        raise ConfigError(f"--format {args.format} and --json both choose the output; "
                          "give one of them")


def wants_json(args: argparse.Namespace) -> bool:
    """Whether the result's JSON document is needed: --json, --html and --format read it."""
    return bool(args.json or args.html or args.format != "text")


def print_tables(kind: str, doc: dict[str, Any], args: argparse.Namespace) -> None:
    """The --format csv|markdown output (`report.tables`) of a result's JSON document."""
    from ..report.tables import render

    sys.stdout.write(render(kind, doc, args.format))


def print_result(kind: str, doc: dict[str, Any], args: argparse.Namespace,
                 text: Callable[[], str]) -> int:
    """What plan, estimate and tco print once --html is written: --format's tables, --json's
    document or the text report (`text` renders it only when it is printed)."""
    from ..report.fmt import dumps

    if args.format != "text":
        print_tables(kind, doc, args)
    else:
        print(dumps(doc) if args.json else text())
    return 0


def write_html(kind: str, doc: dict[str, Any], args: argparse.Namespace) -> None:
    """The HTML report of a result's JSON to --html FILE (the write path of `export`)."""
    if not getattr(args, "html", None):
        return
    from ..report.html import render_html
    from .export_cmd import write_or_print

    write_or_print(render_html(kind, doc), args.html, args.force)
