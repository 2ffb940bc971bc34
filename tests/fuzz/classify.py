"""Sort a fuzz outcome into classes; every class but 'ok' is a defect.

- traceback: an exception escaped `main()`, or a process printed a traceback / exited 1
- hang: the case ran past the limit (5 CPU s; 20 for the documented slow --cross-validate
  and --residuals)
- nonfinite: inf/NaN or a negative number in an answer (text or JSON) that exited 0
- bad_accepted: an input the generator knows is invalid exited 0
- invariant: an answer that contradicts itself (JSON that does not parse, parts that do not sum
  to the total, a plan over its deadline or budget, a fit that does not fit)
- messy_error: an error that is not one line of at most MAX_ERROR characters
- warning: a Python warning or stray stderr text on a successful run
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from gpuplan.report.finetune import MEMORY_KEYS as FINETUNE_SUBPARTS

from .run import Outcome

CLASSES = ("traceback", "hang", "nonfinite", "bad_accepted", "invariant", "messy_error",
           "warning")
MAX_ERROR = 400
# negative numbers these JSON keys may hold (a shortfall or a signed error is not a defect)
SIGNED_KEYS = re.compile(r"headroom|error|residual|delta|diff|log|change|margin|saving")
_NONFINITE = re.compile(r"(?<![\w.])-?(?:inf|infinity|nan)(?![\w-]|\s+fabric)", re.IGNORECASE)
# a minus sign that starts a number: after a space, '(', '=', ':', ',', '[' or '$', or at the start
_NEGATIVE = re.compile(r"(?:(?:^|[\s(=:,\[])\$?-\$?[0-9]*\.?[0-9]+|\$-[0-9]+)(?![\w])",
                       re.MULTILINE)
# a shell default in an exported launch script (`${NODE_RANK:-0}`), not a negative number
_SHELL_DEFAULT = re.compile(r"\$\{\w+:-[^}\s]*\}")
# text lines where a signed number is meant (headroom shortfalls, validation errors, the free
# text of a catalog row's notes and sources)
_SIGNED_LINE = re.compile(r"headroom|short by|error|residual|worse|better|^\s*(?:notes|source|"
                          r"price_source)\b", re.I)
REL = 1e-6  # relative tolerance of the sum checks: the parts are summed in float64


def classify(o: Outcome) -> list[tuple[str, str]]:
    """(class, detail) for every defect the outcome shows; [] when it is clean."""
    found: list[tuple[str, str]] = []
    if o.exception:
        found.append(("traceback", o.exception))
    elif "Traceback (most recent call last)" in o.stderr or (o.process and o.rc == 1):
        found.append(("traceback", o.stderr.strip().splitlines()[-1][:200] if o.stderr else
                      f"exit {o.rc}"))
    if o.timed_out:
        found.append(("hang", f"over {o.seconds:.1f} s"))
    if o.rc == 0 and o.case.invalid:
        found.append(("bad_accepted", o.case.invalid))
    if o.rc not in (0, None) and not found:
        msg = o.stderr.strip()
        if not msg:
            found.append(("messy_error", f"exit {o.rc} with no message"))
        elif "\n" in msg or len(msg) > MAX_ERROR:
            found.append(("messy_error", f"{len(msg.splitlines())} lines, {len(msg)} chars: "
                          f"{msg[:80]!r}"))
    if o.rc == 0:
        try:
            found += _answer(o)
        except (TypeError, KeyError, AttributeError) as err:  # an answer of an unexpected shape
            found.append(("invariant", f"answer of an unexpected shape: {err!r}"))
        if o.warnings:
            found.append(("warning", o.warnings[0][:160]))
        elif o.stderr.strip():
            found.append(("warning", o.stderr.strip()[:160]))
    return found


def _answer(o: Outcome) -> list[tuple[str, str]]:
    argv = o.case.argv
    if {"-h", "--help", "--version"} & set(argv):  # help and version are text by design
        return []
    if "--json" in argv:
        try:
            data = json.loads(o.stdout)
        except ValueError as err:
            return [("invariant", f"--json printed no JSON: {err}")]
        found = [("nonfinite", f"{path} = {v}") for path, v in _bad_numbers(data)][:1]
        return found + [("invariant", msg) for msg in invariants(argv[0], data)][:1]
    if _format(argv) == "csv":
        return _csv(o.stdout)[:1]
    found = []
    if m := _NONFINITE.search(o.stdout):
        found.append(("nonfinite", _around(o.stdout, m.start())))
    if argv and argv[0] != "validate" and not {"-h", "--help"} & set(argv):
        text = _SHELL_DEFAULT.sub("${}", o.stdout)  # lines are then read from `text`
        for m in _NEGATIVE.finditer(text):
            line = _line(text, m.start())
            if not _SIGNED_LINE.search(line):
                found.append(("nonfinite", f"negative: {line.strip()[:120]!r}"))
                break
    return found


def _format(argv: tuple[str, ...]) -> str:
    """The last --format value of argv ('text' when none)."""
    fmt = "text"
    for i, a in enumerate(argv):
        if a == "--format" and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
    return fmt


def _csv(text: str) -> list[tuple[str, str]]:
    """--format csv: every cell that is a number is finite, and negative only in a column whose
    header is signed (SIGNED_KEYS, e.g. headroom_gib); a row as long as its header."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return [("invariant", "--format csv printed nothing")]
    head, found = rows[0], []
    for r, row in enumerate(rows[1:], 1):
        if len(row) != len(head):
            found.append(("invariant", f"csv row {r} has {len(row)} cells, header {len(head)}"))
        for key, cell in zip(head, row, strict=False):
            try:
                v = float(cell)
            except ValueError:
                continue
            if not math.isfinite(v) or (v < 0 and not SIGNED_KEYS.search(key)):
                found.append(("nonfinite", f"csv row {r} {key} = {cell}"))
    return found


def _line(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start:end if end >= 0 else None]


def _around(text: str, at: int) -> str:
    return repr(text[max(0, at - 50):at + 30])


def _bad_numbers(data: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Non-finite numbers anywhere, and negative ones outside SIGNED_KEYS."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _bad_numbers(v, f"{path}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _bad_numbers(v, f"{path}[{i}]")
    elif isinstance(data, int | float) and not isinstance(data, bool):
        last = path.rsplit(".", 1)[-1]
        if not math.isfinite(data) or (data < 0 and not SIGNED_KEYS.search(last)):
            yield path, data


def invariants(command: str, data: Any) -> list[str]:
    """What a successful JSON answer must satisfy."""
    if not isinstance(data, dict):
        return []
    if command == "estimate":
        return _estimate(data)
    if command == "plan":
        return _plan(data)
    return []


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-12)


def _estimate(d: dict[str, Any]) -> list[str]:
    out = []
    mem = d.get("memory_gib") or {}
    if any(not isinstance(v, int | float) for v in mem.values()):
        return [f"memory_gib has a null or non-number part: {mem}"]
    # fine-tuning's base_weights / adapter_weights / adapter_optimizer split weights and
    # optimizer further: they are sub-parts, not parts of the total
    parts = sum(v for k, v in mem.items() if k != "total" and k not in FINETUNE_SUBPARTS)
    if mem and not _close(parts, mem["total"]):
        out.append(f"memory parts sum to {parts} != total {mem['total']}")
    if "fits" in d and mem and d["fits"] != (mem["total"] <= d["gpu_memory_gib"] + 1e-9):
        out.append(f"fits={d['fits']} but total {mem['total']} vs {d['gpu_memory_gib']} GiB")
    for key in ("mfu", "goodput"):
        if isinstance(d.get(key), float) and not 0 < d[key] <= 1:
            out.append(f"{key} = {d[key]} outside (0, 1]")
    lay = d.get("layout") or {}
    tps, step = d.get("tokens_per_s"), d.get("step_time_s")
    if lay and isinstance(tps, float) and isinstance(step, float):
        if not _close(tps * step, lay["global_batch"] * lay["seq_len"]):
            out.append(f"tokens/s x step = {tps * step} != batch tokens")
    return out


def _plan(d: dict[str, Any]) -> list[str]:
    out = []
    deadline, budget = d.get("deadline_days"), d.get("budget_usd")
    for i, p in enumerate(d.get("plans") or []):
        days, cost = p.get("time_to_train_days"), p.get("cost_usd")
        if deadline is not None and isinstance(days, float) and days > deadline * (1 + REL):
            out.append(f"plans[{i}] takes {days:.2f} days > deadline {deadline}")
        if budget is not None and isinstance(cost, float):
            spend = max(cost, p.get("cash_up_front_usd") or 0.0)
            if spend > budget * (1 + REL):
                out.append(f"plans[{i}] spends {spend:,.0f} > budget {budget:,.0f}")
        mem, cap = p.get("memory_gib_per_gpu"), p.get("gpu_memory_gib")
        if isinstance(mem, float) and isinstance(cap, float) and mem > cap * (1 + REL):
            out.append(f"plans[{i}] needs {mem:.1f} GiB of {cap:.1f}")
    return out
