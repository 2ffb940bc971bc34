"""Plain-text tables and JSON-safe conversion (L5). Only this layer and the CLI format output."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any


def jsonable(obj: Any) -> Any:
    """Plain Python values only (no numpy scalars, NaN -> None), so JSON always works."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalar or array
        return jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), indent=2, allow_nan=False)


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], align: str = "") -> str:
    """A fixed-width text table; `align` is one char per column ('l' or 'r'), default left."""
    body = [["" if v is None else str(v) for v in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in body:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=False)]
    al = (align or "l" * len(headers)).ljust(len(headers), "l")

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w)
                         for c, w, a in zip(cells, widths, al, strict=False)).rstrip()

    lines = [fmt(list(headers)), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in body]
    return "\n".join(lines)


def num(x: float | None, digits: int = 3) -> str:
    """Compact human number: 1.23e+21 -> '1.23e21', 989.0 -> '989'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        m, e = f"{x:.{digits - 1}e}".split("e")
        return f"{m}e{int(e)}"
    return f"{x:,.{max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))}f}"


def usd(x: float | None) -> str:
    """The one money format: cents below $100 ($6.88), whole dollars below a million
    ($5,000; $169,420), then millions and billions with two decimals ($2.30M, $1.25B)."""
    if x is None or not math.isfinite(x):
        return "-"
    x = x + 0.0  # no "$-0"
    sign = "-" if x < 0 else ""
    a = abs(x)
    if a >= 1e9:
        return f"{sign}${a / 1e9:,.2f}B"
    if a >= 1e6:
        return f"{sign}${a / 1e6:,.2f}M"
    if a >= 100 or a == 0:
        text = f"{a:,.0f}"
        return f"${text}" if text == "0" else f"{sign}${text}"
    return f"{sign}${a:,.2f}"


def duration(days: float | None) -> str:
    """The one duration format: days for a day or more ('46.8 days'), hours below ('5.2
    hours'), minutes below an hour (a BERT run is not '0.0 days')."""
    if days is None or not math.isfinite(days):
        return "-"
    if days >= 1:
        return f"{days:,.1f} days"
    if days * 24 >= 1:
        return f"{days * 24:,.1f} hours"
    return f"{days * 1440:,.1f} minutes"


def _short(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:,.1f}"


def duration_range(days: float | None, lo: float | None, hi: float | None) -> str:
    """A duration with its P10-P90 range in the same unit: '46.8 days (41-55)'."""
    text = duration(days)
    if days is None or lo is None or hi is None or not all(map(math.isfinite, (days, lo, hi))):
        return text
    scale = 1.0 if days >= 1 else (24.0 if days * 24 >= 1 else 1440.0)
    return f"{text} ({_short(lo * scale)}-{_short(hi * scale)})"


def usd_range(x: float | None, lo: float | None, hi: float | None) -> str:
    """Money with its P10-P90 range: '$2.30M ($1.91M-$2.75M)'."""
    if x is None or lo is None or hi is None:
        return usd(x)
    return f"{usd(x)} ({usd(lo)}-{usd(hi)})"


def pct(x: float | None, digits: int = 1) -> str:
    """A percentage with a fixed number of decimals: 11.27 -> '11.3%' (None -> '-')."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}%"


def gib(x: float | None, digits: int = 1) -> str:
    """GiB (2^30 bytes), the unit of every memory output: '71.2 GiB'."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.{digits}f} GiB"
