"""`gpuplan tco`: what owning servers costs per year and per GPU-hour, against renting them."""

from __future__ import annotations

import argparse
from typing import Any

from ..search.inputs import flag_name, input_bounds
from . import bounded, common_options
from .options import add_report_options, check_format, print_result, wants_json, write_html

EXAMPLES = """examples:
  gpuplan tco --system dgx-h100 --nodes 4 --years 4 --utilization 0.7 --electricity 0.12 --pue 1.3
  gpuplan tco --system dgx-h100 --nodes 4 --utilization 0.7 --compare-cloud
  gpuplan tco --system dgx-h100 --nodes 64 --utilization 0.9 --compare-cloud --pricing on-demand
  gpuplan tco --scenario startup
  gpuplan tco --scenario hyperscale --json

Every default comes from the catalog's site values (`gpuplan catalog site`, with sources);
a flag overrides it; a scenario fills what no flag gives. --system also takes a pod
(`gpuplan catalog systems`), e.g. dgx-h100-superpod-512: its system x its nodes (--nodes then
counts pods). A scenario's training job runs through the same estimate as `gpuplan plan`.
Owned costs are all fixed per calendar hour, so the cost per *used* GPU-hour is the yearly
cost divided by the GPU-hours actually used (--utilization).
"""

# site inputs of search.ownership.tco (flag dest -> help); defaults from the catalog's site
SITE_FLAG_HELP = {
    "years": "depreciation period in years", "electricity": "USD per kWh",
    "pue": "power usage effectiveness (facility / IT power, >= 1)",
    "colocation": "USD per kW-month of IT load (0 for an own facility)",
    "maintenance": "support and spares, fraction of capex per year",
    "network": "scale-out network (NICs, switches, optics) USD per GPU",
    "storage": "shared storage USD per GPU", "install": "installation, fraction of hardware",
    "staff": "operations staff USD per GPU-year",
    "residual": "resale value at the end, fraction of the server price",
    "load_factor": "average GPU power as a fraction of TDP",
    "reuse": "fraction of idle committed (reserved / savings-plan) hours other work reuses",
    "grid": "grid carbon intensity, kg CO2e per kWh",
    "spot_rate": "spot interruptions per instance-hour",
}


def number(name: str) -> Any:
    """The flag type of input `name`: a number, marked with the range `search.inputs.
    check_input` accepts (for the web schema); the range itself is checked there, so the CLI,
    the Python API and the web say the same line."""
    lo, hi, exclusive = input_bounds(name)

    @bounded(lo, hi, exclusive=exclusive)
    def number(text: str) -> float:
        return float(text)

    return number


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tco",
        help="total cost of owning servers, per year and per GPU-hour; buy vs rent",
        description="Total cost of ownership of N servers over a depreciation period (servers, "
        "network, storage, installation, power x PUE, colocation, maintenance, staff, residual "
        "value), per year and per used GPU-hour; with --compare-cloud the same GPUs rented in "
        "every pricing mode the catalog has, and the utilization above which owning wins.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--system", help="system or pod id or alias, e.g. dgx-h100 or "
                   "dgx-h100-superpod-512 (`gpuplan catalog systems`)")
    p.add_argument("--nodes", type=number("nodes"), metavar="N",
                   help="number of servers, or of pods with a pod (default 1)")
    p.add_argument("--utilization", type=number("utilization"), metavar="U",
                   help="fraction of the hours the GPUs do useful work, e.g. 0.7 (default: site)")
    p.add_argument("--price", type=number("price"), metavar="USD",
                   help="price of one server (default: the catalog's list price)")
    p.add_argument("--host-load-factor", type=number("host_load_factor"), metavar="F",
                   help="host (CPU, NIC, fans) power as a fraction of its maximum "
                   "(default: the GPU load factor)")
    for dest, text in SITE_FLAG_HELP.items():
        flag = flag_name(dest)
        p.add_argument(flag, dest=dest, type=number(dest), metavar="X",
                       help=text + " (default: site)")
    p.add_argument("--compare-cloud", action="store_true",
                   help="rent the same GPUs in every pricing mode of the catalog's offers")
    p.add_argument("--pricing", action="append", metavar="MODE",
                   help="only these pricing modes (repeatable): on-demand, spot, reserved-1y, "
                   "reserved-3y, savings-plan-1y, savings-plan-3y, capacity-block")
    p.add_argument("--cloud", help="only offers of this cloud (aws, gcp, azure, ...)")
    p.add_argument("--model", help="model id: sizes the checkpoint that prices spot interruptions")
    p.add_argument("--scenario", help="a preset from the article (startup, research, hyperscale, "
                   "gpt3-one-server): prints its assumptions and the honest answer")
    add_report_options(p, "tco")
    common_options(p)
    p.set_defaults(func=run)


def tco_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `tco(...)` keywords of parsed flags (the web adapter uses this too): --pricing and
    --catalog become tuples, --spot-interruptions is `spot_rate`."""
    return dict(system=args.system, nodes=args.nodes, utilization=args.utilization,
                price=args.price, host_load_factor=args.host_load_factor,
                compare_cloud=args.compare_cloud, pricing=tuple(args.pricing or ()),
                cloud=args.cloud, model=args.model, scenario=args.scenario,
                catalog=tuple(args.catalog),
                **{dest: getattr(args, dest) for dest in SITE_FLAG_HELP})


def run(args: argparse.Namespace) -> int:
    from ..report.tco import render_text, to_json
    from ..search.ownership import tco
    from .export_cmd import check_output

    check_output(args.html, args.force)
    check_format(args)
    result = tco(**tco_kwargs(args))
    doc = to_json(result) if wants_json(args) else {}
    write_html("tco", doc, args)
    return print_result("tco", doc, args, lambda: render_text(result))
