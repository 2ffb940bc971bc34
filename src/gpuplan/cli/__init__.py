"""`gpuplan` command line (L6): arguments in, text or JSON out, errors as one line + exit 2.

Each command lives in its own module with `register(subparsers)`; modules import numpy and
the estimators inside their `run` functions so that `gpuplan --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn, TypeVar

from ..errors import GpuplanError, one_line, quote

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
    """argparse, but a usage error is one line (what is wrong, where to look), exit 2; a flag
    given '--' or an empty value is an error, not a silent default."""

    def error(self, message: str) -> NoReturn:
        # argparse repeats the raw value (repr'd, so one line, but maybe 3,000 characters long)
        message = re.sub(r"'((?:[^'\\]|\\.){61,})'(?! \()",
                         lambda m: f"'{m.group(1)[:60]}...' ({len(m.group(1)):,} characters)",
                         message)
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see `{self.prog} --help`)\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.option_strings and action.nargs in (None, argparse.OPTIONAL):
            flag = "/".join(action.option_strings)
            if "--" in arg_strings:  # `--gpu=--`: argparse would drop it and give []
                self.error(f"argument {flag}: '--' is not a value; write the value after {flag}")
            if any(not a.strip() for a in arg_strings):
                self.error(f"argument {flag}: the value is empty; give a value or leave "
                           f"{flag} out")
        return super()._get_values(action, arg_strings)


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
        print(f"gpuplan: error: {one_line(str(err))}", file=sys.stderr)
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


class Bounds(NamedTuple):
    """The range a flag type accepts, for the web schema (`web.adapter.fields`): `minimum`
    and `maximum` inclusive (None: open), or the minimum itself refused when `exclusive`."""

    minimum: float | None
    maximum: float | None = None
    exclusive: bool = False


_Type = TypeVar("_Type", bound=Callable[[str], Any])


def bounded(minimum: float | None, maximum: float | None = None, *,
            exclusive: bool = False) -> Callable[[_Type], _Type]:
    """Marks an argparse type function with the range it accepts, as its `bounds` attribute;
    its return annotation (int or float) says whether a value is an integer or a number."""
    def mark(f: _Type) -> _Type:
        f.bounds = Bounds(minimum, maximum, exclusive)  # type: ignore[attr-defined]
        return f
    return mark


@bounded(1)
def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quote(text)} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quote(text)} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {quote(text)}")
    return v


@bounded(0)
def nonneg_float(text: str) -> float:
    v = _finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {quote(text)}")
    return v + 0.0  # -0 becomes 0


@bounded(0, exclusive=True)
def positive_float(text: str) -> float:
    v = _finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {quote(text)}")
    return v


@bounded(0, 1)
def fraction(text: str) -> float:
    v = nonneg_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {quote(text)}")
    return v


MAX_WATTS = 10_000.0  # a power cap per GPU: 7x the largest TDP in the catalog (GB300, 1,400 W)


@bounded(0, MAX_WATTS, exclusive=True)
def watts(text: str) -> float:
    """A GPU power cap in watts: above 0 and at most MAX_WATTS (a typed 1e30 is a typo)."""
    v = positive_float(text)
    if v > MAX_WATTS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_WATTS:,.0f} W per GPU, got {quote(text)}")
    return v


@bounded(1)
def pue(text: str) -> float:
    v = _finite(text)
    if v < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 1 (facility power / IT power), got {quote(text)}")
    return v


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
