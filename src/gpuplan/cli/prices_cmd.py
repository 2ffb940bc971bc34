"""`gpuplan prices import`: cloud prices from a SkyPilot catalog CSV, as a catalog overlay."""

from __future__ import annotations

import argparse
from typing import Any

from . import common_options

EPILOG = """examples:
  gpuplan prices import ~/.sky/catalogs/v7/aws/vms.csv -o aws-prices.toml
  gpuplan prices import vms.csv --cloud gcp --as-of 2026-08-01 -o gcp.toml --force
  gpuplan prices import may/aws/vms.csv jun/aws/vms.csv -o aws.toml   # spot spread over dates
  gpuplan catalog validate aws-prices.toml
  gpuplan plan --model llama3-8b --tokens 1T --catalog aws-prices.toml
"""


def register(sub: Any) -> None:
    p = sub.add_parser("prices", help="import cloud prices (SkyPilot catalog CSV) as an overlay",
                       description="Cloud prices from files users already keep.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    psub = p.add_subparsers(dest="prices_command", metavar="WHAT", required=True)
    imp = psub.add_parser(
        "import", help="SkyPilot vms.csv -> [[offer]] overlay TOML",
        description="Read a SkyPilot catalog CSV (InstanceType, AcceleratorName, "
        "AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region, "
        "AvailabilityZone) and write one [[offer]] per GPU instance type and region: on-demand "
        "price, spot price as the median over zones (and over snapshots, when several files "
        "of one cloud are given, oldest first) with its spread (spot_usd_per_hour_min/max and "
        "spot_observations, shown by `plan`), the files as the source and the newest date as "
        "as_of. Use the result with --catalog.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("file", nargs="+", help="SkyPilot catalog CSV (e.g. "
                     "catalogs/v7/aws/vms.csv); several snapshots of one cloud, oldest first, "
                     "give the spot spread over dates")
    imp.add_argument("-o", "--output", metavar="FILE", help="overlay TOML to write "
                     "(default: print it)")
    imp.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    imp.add_argument("--cloud", help="cloud of the file (default: its folder name, e.g. aws)")
    imp.add_argument("--as-of", help="date of the (newest) prices, YYYY-MM-DD (default: the "
                     "newest file's modification date)")
    common_options(imp, json_flag=False)
    imp.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    import sys

    from .. import __version__
    from ..catalog import load_catalog
    from ..catalog.schema import DATE
    from ..errors import ConfigError, quote
    from ..export._overlay import render_overlay
    from ..prices import read_skypilot_csv
    from ..userfile import display_path
    from .export_cmd import write_or_print

    if args.as_of and not DATE.fullmatch(args.as_of):
        raise ConfigError(f"--as-of must be a date YYYY-MM-DD, got {quote(args.as_of)}")
    imported = read_skypilot_csv(args.file, load_catalog(args.catalog), cloud=args.cloud,
                                 as_of=args.as_of)
    if not imported.offers:
        raise ConfigError(f"{', '.join(display_path(f) for f in args.file)} has no GPU rows "
                          "gpuplan knows; nothing to import")
    write_or_print(render_overlay(imported, __version__), args.output, args.force)
    if args.output:
        skipped = sum(imported.skipped_unknown.values())
        print(f"wrote {len(imported.offers)} offer(s) to {display_path(args.output)}"
              + (f"; skipped {skipped} row(s) of unknown accelerators" if skipped else ""),
              file=sys.stderr)
    return 0
