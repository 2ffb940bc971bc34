"""The one door from HTTP into gpuplan: `run(command, body) -> dict`.

A request body uses the CLI's flag names with underscores (the argparse dests). Everything the
web layer knows about a command's fields comes from the CLI's own argparse parser
(`fields(command)`), so the API, its OpenAPI schema and the CLI cannot drift apart.

plan, estimate and tco call the library: the body is checked and typed by that parser (so a
bad value gets the CLI's own line), the parsed flags become the API's keywords through the
same function the CLI uses (`plan_kwargs`, `estimate_kwargs`, `tco_kwargs` in `gpuplan.cli`),
and the result goes through `report.*.to_json` -- the CLI's `--json`, byte for byte. The names
are the flags' dests except where those functions say: `no_sp` -> `sp=False`,
`no_flash_attention` -> `flash_attention=False` (estimate) and `spot_interruptions` ->
`spot_rate` (tco; its dest is already `spot_rate`). A `GpuplanError` is a 422 whose message is
the CLI's line (`gpuplan: error: ...`). The catalog listings and validate still run the CLI
in-process and capture what it prints.

Bad input raises `RequestError(status, message)` whose message is the CLI's own one line.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import re
import sys
import tempfile
import threading
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

# request command -> CLI argv prefix; the fields of each come from that parser
COMMANDS: dict[str, tuple[str, ...]] = {
    "plan": ("plan",),
    "estimate": ("estimate",),
    "tco": ("tco",),
    "validate": ("validate",),
    "catalog/gpus": ("catalog", "gpus"),
    "catalog/systems": ("catalog", "systems"),
    "catalog/offers": ("catalog", "offers"),
    "catalog/models": ("models",),
}
# never taken from a request: files on the server, output switches, progress bars, processes
HIDDEN = {"help", "json", "catalog", "quiet", "func", "command", "catalog_command", "what",
          "html", "format", "version", "force", "export", "rank", "workers"}
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")  # an id or alias, never a path
MAX_CONFIG_BYTES = 1 << 20


class RequestError(Exception):
    """Bad input: an HTTP status and one line saying what is wrong (the CLI's line)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, kw_only=True)
class Field:
    """One request field: the CLI flag it stands for and the JSON type it takes."""

    name: str
    flag: str
    kind: str  # boolean, integer, number, string, array
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False  # the minimum itself is refused (e.g. --years > 0)
    help: str = ""


def _kind(action: argparse.Action) -> tuple[str, Any]:
    """The JSON type of a flag and the range its type function accepts (its `bounds`, see
    `gpuplan.cli.bounded`): int and functions returning int are integers, float and functions
    returning float numbers, anything else a string."""
    if isinstance(action, argparse._StoreTrueAction):
        return "boolean", None
    if isinstance(action, argparse._AppendAction):
        return "array", None
    t = action.type
    returns = t if t in (int, float) else (
        typing.get_type_hints(t).get("return") if callable(t) else None)
    if returns not in (int, float):
        return "string", None
    return ("integer" if returns is int else "number"), getattr(t, "bounds", None)


def _names_a_file(a: argparse.Action) -> bool:
    """A flag that reads or writes a server file (future ones too) is never a request field."""
    return str(a.metavar or "").upper() in ("FILE", "PATH", "DIR") or a.dest in (
        "out", "output", "output_dir", "file", "path")


@cache
def _parser(command: str) -> argparse.ArgumentParser:
    from ..cli import build_parser

    p: argparse.ArgumentParser = build_parser()
    for word in COMMANDS[command]:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[word]
    # this copy of the parser (the web's own) raises its usage line instead of exiting
    p.error = lambda message: _raise(  # type: ignore[method-assign]
        f"{p.prog}: error: {message} (see `{p.prog} --help`)")
    return p


@cache
def fields(command: str) -> dict[str, Field]:
    """The request fields of a command, in the order of its --help (from the CLI parser)."""
    out: dict[str, Field] = {}
    for a in _parser(command)._actions:
        if a.dest in HIDDEN or not a.option_strings or _names_a_file(a):
            continue
        kind, bounds = _kind(a)
        lo, hi, exclusive = bounds or (None, None, False)
        choices = tuple(str(c) for c in a.choices) if a.choices else ()
        out[a.dest] = Field(name=a.dest, flag=max(a.option_strings, key=len), kind=kind,
                            choices=choices, minimum=lo, maximum=hi, exclusive_minimum=exclusive,
                            help=(a.help or "").replace("%%", "%"))
    if command in ("plan", "estimate"):
        out["config"] = Field(name="config", flag="--model", kind="object",
                              help="the content of a Hugging Face config.json (instead of model)")
    return out


def _scalar(name: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise RequestError(422, f"field '{name}' takes a string or a number, got "
                                f"{type(v).__name__}")
    return str(v)


def _unknown(command: str, name: str) -> RequestError:
    close = difflib.get_close_matches(name, list(fields(command)), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return RequestError(422, f"unknown field '{name}' for {command}{hint} "
                             f"(GET /openapi.json lists the fields)")


def to_argv(command: str, body: dict[str, Any]) -> list[str]:
    """CLI arguments for a request body (flag names with underscores); `config` excluded."""
    known = fields(command)
    argv = list(COMMANDS[command])
    for name, value in body.items():
        f = known.get(name)
        if f is None:
            raise _unknown(command, name)
        if name == "config" or value is None:
            continue
        if f.kind == "boolean":
            if not isinstance(value, bool):
                raise RequestError(422, f"field '{name}' takes true or false")
            argv += [f.flag] if value else []
            continue
        values = value if isinstance(value, list) else [value]
        if f.kind != "array" and isinstance(value, list):
            raise RequestError(422, f"field '{name}' takes one value, not a list")
        for v in values:
            text = _scalar(name, v)
            if name == "model" and not ID_RE.match(text):
                raise RequestError(422, f"model '{text[:60]}' is not a preset id; send the "
                                        "content of a config.json as the field 'config'")
            argv.append(f"{f.flag}={text}")
    return argv


class _ThreadStreams(io.TextIOBase):
    """sys.stdout/err stand-in: a thread that set a buffer writes there, others pass through."""

    def __init__(self, real: Any, local: threading.local, attr: str) -> None:
        self.real, self.local, self.attr = real, local, attr

    def write(self, s: str) -> int:
        buf = getattr(self.local, self.attr, None)
        return buf.write(s) if buf is not None else self.real.write(s)

    def flush(self) -> None:
        if getattr(self.local, self.attr, None) is None:
            self.real.flush()

    def isatty(self) -> bool:
        return False if getattr(self.local, self.attr, None) is not None else self.real.isatty()


_LOCAL = threading.local()
_INSTALL = threading.Lock()


def _install_streams() -> None:
    with _INSTALL:
        if not isinstance(sys.stdout, _ThreadStreams):
            sys.stdout = _ThreadStreams(sys.stdout, _LOCAL, "out")
        if not isinstance(sys.stderr, _ThreadStreams):
            sys.stderr = _ThreadStreams(sys.stderr, _LOCAL, "err")


def call_cli(argv: list[str]) -> tuple[int, str, str]:
    """`gpuplan.cli.main(argv)` in this thread, its stdout and stderr captured (thread-safe)."""
    from ..cli import main

    _install_streams()
    _LOCAL.out, _LOCAL.err = io.StringIO(), io.StringIO()
    try:
        code = main(argv)
        return code, _LOCAL.out.getvalue(), _LOCAL.err.getvalue()
    finally:
        _LOCAL.out = _LOCAL.err = None


def _config_file(body: dict[str, Any]) -> str | None:
    cfg = body.get("config")
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise RequestError(422, "field 'config' takes the JSON object of a config.json")
    if body.get("model") not in (None, ""):
        raise RequestError(422, "give either 'model' or 'config', not both")
    text = json.dumps(cfg)
    if len(text) > MAX_CONFIG_BYTES:
        raise RequestError(413, "config.json is larger than 1 MiB")
    fd, path = tempfile.mkstemp(prefix="gpuplan-config-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


class _ParseError(Exception):
    pass


def _raise(message: str) -> Any:
    raise _ParseError(message)


def parse(command: str, argv: list[str]) -> argparse.Namespace:
    """The CLI's parser on `argv` (with its command words); RequestError with the CLI's usage
    line (`gpuplan plan: error: ... (see ...)`) when argparse refuses it."""
    p = _parser(command)
    try:
        return p.parse_args(argv[len(COMMANDS[command]):])
    except _ParseError as err:
        raise RequestError(422, str(err)) from None


def call_api(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """The `--json` document of plan, estimate or tco for parsed flags, from the library."""
    if command == "plan":
        from .. import api
        from ..cli.plan_cmd import plan_kwargs, request_of
        from ..report import plan

        return plan.to_json(api.plan(**plan_kwargs(args)), request=request_of(args))
    if command == "estimate":
        from .. import api
        from ..cli.estimate_cmd import estimate_kwargs
        from ..report import estimate

        return estimate.to_json(api.estimate(**estimate_kwargs(args)))
    from ..cli.tco_cmd import tco_kwargs
    from ..report import tco as tco_report
    from ..search.ownership import tco

    return tco_report.to_json(tco(**tco_kwargs(args)))


LIBRARY = ("plan", "estimate", "tco")


def _library(command: str, argv: list[str], path: str | None) -> dict[str, Any]:
    from ..errors import GpuplanError
    from ..report.fmt import jsonable

    args = parse(command, argv)
    try:
        doc = jsonable(call_api(command, args))
    except GpuplanError as err:
        line = f"gpuplan: error: {err}".splitlines()[0]
        raise RequestError(422, line.replace(path, "config.json") if path else line) from None
    if path:  # the reproduce lines name the upload as the user's own config.json
        doc = json.loads(json.dumps(doc).replace(json.dumps(path)[1:-1], "config.json"))
    return doc  # type: ignore[no-any-return]


def run(command: str, body: dict[str, Any]) -> dict[str, Any] | list[Any]:
    """What `gpuplan COMMAND ... --json` prints for this body, parsed; RequestError on bad input."""
    if command not in COMMANDS:
        raise RequestError(404, f"unknown command '{command}'")
    if not isinstance(body, dict):
        raise RequestError(422, "the request body must be a JSON object of CLI flag names")
    argv = to_argv(command, body)
    path = _config_file(body)
    try:
        if path:
            argv.append(f"--model={path}")
        if command in LIBRARY:
            return _library(command, argv, path)
        code, out, err = call_cli(argv + ["--json"])
    finally:
        if path:
            os.unlink(path)
    if code != 0:
        line = err.strip().splitlines()[-1] if err.strip() else f"gpuplan exited with {code}"
        raise RequestError(422, line)
    return json.loads(out)  # type: ignore[no-any-return]
