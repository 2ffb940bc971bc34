"""`gpuplan export`: a launch configuration from a saved plan or estimate."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import common_options, positive_int

EPILOG = """targets: megatron, torchtitan, deepspeed, torchrun, slurm, skypilot

examples:
  gpuplan plan --model llama3-70b --tokens 15T --deadline-days 90 --json > plan.json
  gpuplan export --from plan.json --target megatron
  gpuplan export --from plan.json --target skypilot --rank 2 -o task.yaml
  gpuplan estimate --model llama3-8b --gpu h100 --gpus 8 --json > est.json
  gpuplan export --from est.json --target torchtitan -o llama3_8b.toml
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="launch config (Megatron, torchtitan, DeepSpeed, torchrun, Slurm, "
        "SkyPilot) from a saved plan or estimate",
        description="Write what a training framework or launcher needs to run a plan: "
        "parallel degrees, batch, precision, recompute, nodes, the cloud offer. Reads the JSON "
        "that `gpuplan plan --json` or `gpuplan estimate --json` wrote; prints to standard "
        "output unless -o is given. Each output names the gpuplan version and the prediction "
        "it came from.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, metavar="RESULT.json",
                   help="saved `gpuplan plan --json` or `gpuplan estimate --json` output")
    p.add_argument("--target", required=True, help="megatron, torchtitan, deepspeed, torchrun, "
                   "slurm or skypilot")
    p.add_argument("--rank", type=positive_int, default=1,
                   help="which plan of a plan result (1 = the winner)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    common_options(p, json_flag=False)
    p.set_defaults(func=run)


def read_json(path: str) -> Any:
    import json

    from ..errors import ConfigError
    from ..userfile import display_path, read_text

    text = read_text(path, "result file", "give the file `gpuplan plan --json` or "
                     "`gpuplan estimate --json` wrote", error=ConfigError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"result file '{display_path(path)}' is not JSON ({err.msg} at line "
                          f"{err.lineno}); give what `gpuplan plan --json` or "
                          "`gpuplan estimate --json` wrote") from None
    except RecursionError:
        raise ConfigError(f"result file '{display_path(path)}' is nested too deeply to be a "
                          "gpuplan result") from None


def check_output(output: str | None, force: bool) -> None:
    """Refuse an existing FILE without --force (before any work is done)."""
    from ..errors import ConfigError
    from ..userfile import display_path

    if not output:
        return
    try:
        exists = Path(output).exists()
    except OSError as err:  # a name too long for the OS
        raise ConfigError(f"cannot write '{display_path(output)}': {err.strerror}") from None
    if exists and not force:
        raise ConfigError(f"'{display_path(output)}' exists; add --force to overwrite it")


def check_export_flags(args: argparse.Namespace, what: str) -> None:
    """The launch-config and output flags of `plan` and `estimate` (`what`), checked before any
    work, in one line: -o (and plan's --rank) only with --export, a known target, no file
    overwritten without --force, and no --json/--format when the launch config replaces the
    printed result."""
    from ..errors import ConfigError, UnknownIdError
    from ..export import TARGETS
    from .options import check_format

    rank = getattr(args, "rank", None)
    if not args.export and (args.output or rank):
        raise ConfigError(f"{'-o' if args.output else '--rank'} goes with --export TARGET "
                          "(megatron, torchtitan, deepspeed, torchrun, slurm or skypilot)")
    if args.export and args.export.strip().lower() not in TARGETS:
        raise UnknownIdError("export target", args.export, TARGETS)
    check_output(args.output, args.force)
    check_output(args.html, args.force)
    check_format(args)
    if (args.json or args.format != "text") and args.export and not args.output:
        flag = "--json" if args.json else f"--format {args.format}"
        raise ConfigError(f"--export without -o prints the launch config instead of the "
                          f"{what}, so {flag} has nothing to format; add -o FILE")


def write_or_print(text: str, output: str | None, force: bool) -> None:
    """Print, or write FILE -- never over an existing one without --force. The one write path
    of `export`, `plan --export -o` and `--html` on plan, estimate and tco."""
    from ..errors import ConfigError
    from ..userfile import display_path

    if not output:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    check_output(output, force)
    path = Path(output)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot write '{display_path(output)}': {err.strerror}") from None


def run(args: argparse.Namespace) -> int:
    from ..export import export, record_from

    record, what = record_from(read_json(args.source), args.rank)
    source = {"from": f"{what} of {Path(args.source).name}", "catalog": tuple(args.catalog)}
    write_or_print(export(record, args.target, source=source), args.output, args.force)
    return 0
