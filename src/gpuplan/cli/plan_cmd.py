"""`gpuplan plan`: the main job -- what to train on, how, for how long and at what cost."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from . import common_options, positive_int
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
  gpuplan plan --model llama3-70b --tokens 15T --deadline-days 90
  gpuplan plan --model gpt3-175b --tokens 300B --budget-usd 5e6 --export-region cn
  gpuplan plan --model llama3-8b --tokens 1T --gpu h100 --gpu mi300x --objective time
  gpuplan plan --scenario startup
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
    g.add_argument("--deadline-days", type=float, help="finish within this many days")
    g.add_argument("--budget-usd", help="spend at most this much (5e6, 500k): the cloud bill, or "
                   "for owned hardware the purchase price when larger than the run's share")
    g.add_argument("--max-gpus", type=positive_int, help="largest cluster to consider "
                   "(default 16384)")
    g.add_argument("--objective", default="cost", choices=("cost", "time", "energy"))
    g.add_argument("--top", type=positive_int, default=10, help="plans to list")
    g.add_argument("--scenario", help="a preset from the article: startup, research, hyperscale, "
                   "gpt3-one-server")
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
    add_site_options(p)
    common_options(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def build_request(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    from ..catalog import load_catalog
    from ..errors import ConfigError
    from ..search import scenario
    from ..search.evaluate import site_from_catalog
    from ..search.plan import DEFAULT_MAX_GPUS, Request
    from ..search.platforms import Filters
    from ..units import parse_count

    cat = load_catalog(args.catalog)
    scen = scenario.load(cat, args.scenario, "gpuplan plan --help")
    if scen:  # the scenario fills what the flags leave unset
        cat = scenario.with_scenario_price(cat, scen)
        for flag, key in (("model", "model"), ("deadline_days", "deadline_days"),
                          ("budget_usd", "budget_usd"), ("tokens", "tokens"),
                          ("vendor", "vendor"), ("acquisition", "acquisition"),
                          ("export_region", "export_region"), ("max_gpus", "max_gpus")):
            if getattr(args, flag, None) in (None, [], "") and scen.get(key) not in (None, ""):
                setattr(args, flag, scen[key])
        if not args.gpu and scen.get("gpu"):
            g = scen["gpu"]
            args.gpu = list(g) if isinstance(g, list) else [g]
    if args.tokens is None:
        raise ConfigError("--tokens is required: how many tokens to train on (e.g. 15T, 300B)")
    model = resolve_model(args, cat)
    seq = args.seq_len or default_seq_len(model)
    gb = args.global_batch or default_global_batch(seq, 1)
    budget = parse_count(args.budget_usd, "--budget-usd") if args.budget_usd is not None else None
    gpus = tuple(dict.fromkeys(cat.resolve("accelerator", g) for g in args.gpu))
    filters = Filters(gpus=gpus, vendor=args.vendor or "", acquisition=args.acquisition or "any",
                      pricing=tuple(args.pricing), clouds=tuple(c.lower() for c in args.cloud),
                      region=args.region or "", export_region=args.export_region or "",
                      allow_consumer=args.allow_consumer)
    site = site_from_catalog(cat, **scenario.site_overrides(scen, site_overrides(args)))
    precisions = tuple(p.lower() for p in args.precision) or ("bf16", "fp8")
    for p in precisions:
        if p not in ("fp32", "fp16", "bf16", "fp8"):
            raise ConfigError(f"unknown precision '{p}'; choose fp32, fp16, bf16 or fp8")
    req = Request(model=model, tokens=parse_count(args.tokens, "--tokens"), seq_len=seq,
                  global_batch=gb,
                  deadline_days=float(args.deadline_days) if args.deadline_days is not None
                  else None,
                  budget_usd=budget, max_gpus=int(args.max_gpus or DEFAULT_MAX_GPUS),
                  objective=args.objective, top=args.top, filters=filters,
                  precisions=precisions, site=site)
    return cat, req, scen


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


def run(args: argparse.Namespace) -> int:
    from ..report.fmt import dumps, jsonable
    from ..report.plan import render
    from ..search import scenario
    from ..search.plan import search

    t0 = time.perf_counter()
    cat, req, scen = build_request(args)
    result = search(cat, req, progress=_Progress(not args.quiet and not args.json))
    result["elapsed_s"] = time.perf_counter() - t0
    if scen:
        result["scenario"] = {"name": scen["id"], **scen}
        result["scenario_pick"] = jsonable(scenario.pick(cat, req, scen))
    print(dumps(result) if args.json else render(result))
    return 0


