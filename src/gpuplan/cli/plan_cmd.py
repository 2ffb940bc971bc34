"""`gpuplan plan`: the main job -- what to train on, how, for how long and at what cost."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from . import common_options, positive_int, watts
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
  gpuplan plan --model llama3-70b --tokens 15T --deadline-days 90
  gpuplan plan --model gpt3-175b --tokens 300B --budget-usd 5e6 --export-region cn
  gpuplan plan --model llama3-8b --tokens 1T --gpu h100 --gpu mi300x --objective time
  gpuplan plan --model llama3-70b --tokens 15T --gpu h100 --power-limit-watts 500
  gpuplan plan --scenario startup
  gpuplan plan --model llama3-70b --tokens 15T --deadline-days 90 --export torchtitan
  gpuplan plan --model llama3-8b --tokens 1T --export skypilot --rank 2 -o task.yaml
  gpuplan plan --model llama3-8b --tokens 1T --html plan.html
  gpuplan plan --model llama3-8b --tokens 1T --format csv > plans.csv
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="search every GPU x count x layout x pricing option; rank and explain the best",
        description="Find what to train on: every accelerator in the catalog, GPU counts, "
        "parallel layouts (TP, PP, DP, CP, EP, ZeRO, micro-batch, recompute, precision) and "
        "ways to pay (cloud on-demand, spot, reserved, savings plans, capacity blocks, or "
        "buying), evaluated at once; infeasible options are masked with a reason.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(p)
    add_batch_options(p)
    g = p.add_argument_group("goal and constraints")
    g.add_argument("--tokens", help="tokens to train on (2e12, 2T, 300B)")
    g.add_argument("--deadline-days", type=float, help="finish within this many days (default "
                   "365: without a deadline the cheapest plan is the slowest)")
    g.add_argument("--budget-usd", help="spend at most this much (5e6, 500k): the cloud bill, or "
                   "for owned hardware the purchase price when larger than the run's share")
    g.add_argument("--max-gpus", type=positive_int, help="largest cluster to consider "
                   "(default 16384)")
    g.add_argument("--objective", default="cost", choices=("cost", "time", "energy"))
    g.add_argument("--top", type=positive_int, default=10, help="plans to list")
    g.add_argument("--scenario", help="a preset from the article: startup, research, hyperscale")
    _consider_options(p)
    add_finetune_options(p)
    add_site_options(p)
    x = p.add_argument_group("launch config and report")
    x.add_argument("--export", metavar="TARGET", help="print the launch config of a plan instead "
                   "of the plan: megatron, torchtitan, deepspeed, torchrun, slurm or skypilot")
    x.add_argument("--rank", type=positive_int, help="which plan --export takes (default 1, "
                   "the winner)")
    x.add_argument("-o", "--output", metavar="FILE", help="write the --export output to FILE "
                   "(the plan is printed as usual)")
    add_report_options(x, "plan")
    common_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--workers", type=positive_int, help="processes a large search may use "
                   "(default: up to two idle cores; the same plans with any number)")
    p.add_argument("--no-timing", action="store_true", help=argparse.SUPPRESS)  # golden files
    p.set_defaults(func=run)


def _consider_options(p: Any) -> None:
    """The flags that choose the candidates: hardware, pricing, precision, stack, power."""
    f = p.add_argument_group("what to consider")
    f.add_argument("--gpu", action="append", default=[], help="only these accelerators "
                   "(repeatable)")
    f.add_argument("--vendor", choices=("nvidia", "amd", "intel", "huawei"))
    f.add_argument("--acquisition", default=None, choices=("cloud", "own", "any"))
    f.add_argument("--pricing", action="append", default=[],
                   help="only these pricing modes (repeatable): on-demand, spot, reserved-1y, "
                   "reserved-3y, savings-plan-1y, savings-plan-3y, capacity-block, own")
    f.add_argument("--cloud", action="append", default=[], help="only these clouds")
    f.add_argument("--region", help="only offers in regions starting with this")
    f.add_argument("--export-region", choices=("cn",),
                   help="only accelerators a buyer there may legally obtain (catalog as_of)")
    f.add_argument("--allow-consumer", action="store_true",
                   help="allow GeForce cards beyond one node (excluded by default)")
    f.add_argument("--precision", action="append", default=[],
                   help="precisions to consider (default: bf16 and fp8 where supported)")
    f.add_argument("--stack", help="training software: megatron, nemo, torchtitan, fsdp, "
                   "deepspeed or torchtune (default: each GPU family's best-supported stack)")
    f.add_argument("--confidence", type=float, help="rank on this quantile of time and cost "
                   "against the deadline and budget, e.g. 0.9 for the P90 (default: the median)")
    f.add_argument("--power-limit-watts", type=watts, metavar="W", help="every GPU held to "
                   "this power: peak FLOP/s x (W / TDP)^k, k per family from published figures "
                   "(docs/calibration.md), energy at W; GPUs whose TDP is under W unchanged")


def default_workers() -> int:
    """Processes `plan` may fork for a large search: the usable cores, at most two (the
    search splits well in two; more parts cost more than they save), and one when other
    work already keeps all but one core busy (1-minute load average), where a second
    process would only wait for a core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] > cores - 1
    except (AttributeError, OSError):
        busy = False
    return 1 if busy else max(1, min(2, cores))


class _Progress:
    """A one-line progress bar on stderr, shown only once the search has taken a moment."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or time.perf_counter() - self.t0 < 0.5:
            return
        width = 30
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\rsearching [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        sys.stderr.flush()
        self.shown = True
        if done >= total:
            sys.stderr.write("\r" + " " * (width + 30) + "\r")


def plan_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `gpuplan.api.plan` keywords of parsed flags (the web adapter uses this too)."""
    return dict(
        tokens=args.tokens, deadline_days=args.deadline_days, budget_usd=args.budget_usd,
        max_gpus=args.max_gpus, objective=args.objective, top=args.top, scenario=args.scenario,
        gpu=args.gpu, vendor=args.vendor, acquisition=args.acquisition, pricing=args.pricing,
        cloud=args.cloud, region=args.region, export_region=args.export_region,
        allow_consumer=args.allow_consumer, precision=args.precision, stack=args.stack,
        confidence=args.confidence, power_limit_watts=args.power_limit_watts,
        catalog=args.catalog,
        **model_args(args), **site_args(args), **finetune_args(args))


def request_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the reproduce lines repeat from the request: model flags and overlays."""
    return {**model_args(args), "catalog": list(args.catalog)}


def _export(doc: dict[str, Any], args: argparse.Namespace) -> str:
    from ..errors import ConfigError
    from ..export import export, record_from

    if not doc["plans"]:
        raise ConfigError("no plan is feasible, so there is nothing to export; run without "
                          "--export to see what to relax")
    record, what = record_from(doc, args.rank or 1)
    return export(record, args.export, source={"from": f"{what} of `gpuplan plan`",
                                               "catalog": tuple(args.catalog)})


def run(args: argparse.Namespace) -> int:
    from .. import api
    from ..report.plan import render_text, to_json
    from ..search import heap
    from .export_cmd import check_export_flags, write_or_print

    check_export_flags(args, "plan")
    heap.keep_freed_memory()  # one search, then exit: freed memory reused (search/heap.py)
    quiet = args.quiet or args.json or (args.export and not args.output)
    result = api.plan(progress=_Progress(not quiet), workers=args.workers or default_workers(),
                      **plan_kwargs(args))
    request = request_of(args)
    doc = to_json(result, request=request) if (wants_json(args) or args.export) else {}
    write_html("plan", doc, args)
    if args.export:
        write_or_print(_export(doc, args), args.output, args.force)
        if not args.output:
            return 0
    return print_result("plan", doc, args, lambda: render_text(
        result, timing=not args.no_timing, request=request))
