"""`gpuplan` command line (L6): arguments in, text or JSON out, errors as one line + exit 2.

Each command lives in its own module with `register(subparsers)`; modules import numpy and
the estimators inside their `run` functions so that `gpuplan --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from typing import NoReturn

from ..errors import GpuplanError

# module name -> registered by its register(); order is the order in --help
COMMANDS = ("plan_cmd", "estimate_cmd", "tco_cmd", "validate_cmd", "catalog_cmd", "export_cmd",
            "prices_cmd", "serve_cmd")

EPILOG = """examples:
  gpuplan plan --model llama3-70b --tokens 15T --deadline-days 90
  gpuplan estimate --model llama2-70b --gpu a100-80gb --gpus 64 --tp 8 --pp 2 --zero 1
  gpuplan tco --system dgx-h100 --nodes 4 --years 4 --utilization 0.7 --compare-cloud
  gpuplan catalog gpus
  gpuplan catalog show h100-sxm
"""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what is wrong, where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpuplan",
        description="Which GPUs to train a large model on, how to parallelize it, how long it "
        "takes and what it costs. Every figure is sourced (`gpuplan catalog show ID`).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"{__name__}.{name}") is None:  # not written yet
            continue
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser




def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed one usage line
        return int(exc.code or 0)
    if not getattr(args, "func", None):  # plain `gpuplan`: show what it can do
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except GpuplanError as err:
        print(f"gpuplan: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `gpuplan ... | head`
        return 0
    except KeyboardInterrupt:
        print("gpuplan: interrupted", file=sys.stderr)
        return 130


def common_options(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    """Options every command has: --catalog overlays and --json."""
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="overlay a TOML catalog file (repeatable; also $GPUPLAN_CATALOG)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON for scripts")


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def nonneg_float(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def fraction(text: str) -> float:
    v = nonneg_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return v


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
