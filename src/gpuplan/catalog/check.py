"""Validate raw catalog rows against their `Field` specs and convert them to code units.

Every message is one line: the file, the entry, the field, what is wrong (with a did-you-mean
for unknown names), and the offending value shortened to a readable length.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import CatalogError, ConfigError, quote, suggest
from ..units import parse_count
from .schema import DATE, Field

LABEL = {"scenarios": "scenario"}


def where(origin: str, kind: str, ident: str) -> str:
    return f"{origin}: {LABEL.get(kind, kind)} '{ident}'"


def shown(value: Any, limit: int = 60) -> str:
    """repr of a value of any type for a message: one line, at most `limit` characters (a
    value known to be text is shown with errors.quote)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(name: str, known: Any) -> str:
    hint = suggest(name, known)
    return f"; did you mean '{hint[0]}'?" if hint else ""


def _number(f: Field, label: str, value: Any, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CatalogError(f"{at}: {label} must be a number, got {shown(value)}")
    v = float(value)
    if not math.isfinite(v) or v < f.low or (f.above and v == f.low) or v > f.high:
        raise CatalogError(f"{at}: {label} must be a finite number {f.range_text()}, "
                           f"got {shown(value)}")
    if f.unit is not None and not math.isfinite(v * f.unit):
        raise CatalogError(f"{at}: {label} = {v:g} overflows when converted to code units; "
                           f"check the unit in the field name")
    return v


def _text(f: Field, key: str, value: Any, at: str) -> str:
    if not isinstance(value, str):
        raise CatalogError(f"{at}: {key} must be text, got {shown(value)}")
    if f.choices and value not in f.choices:
        raise CatalogError(f"{at}: {key} must be one of {', '.join(f.choices)}, "
                           f"got {quote(value)}")
    return value


def _texts(key: str, value: Any, at: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise CatalogError(f"{at}: {key} must be a list of text, got {shown(value)}")
    return value


def _int(f: Field, key: str, value: Any, at: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value < f.low
            or (f.above and value == f.low) or value > f.high):
        raise CatalogError(f"{at}: {key} must be a whole number {f.range_text()}, "
                           f"got {shown(value)}")
    return value


def _map(f: Field, key: str, value: Any, at: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise CatalogError(f"{at}: {key} must be a table such as {{{f.choices[0]} = ...}}, "
                           f"got {shown(value)}")
    for k, v in value.items():
        if k not in f.choices:
            raise CatalogError(f"{at}: {key} has unknown key '{k}'{did_you_mean(k, f.choices)}"
                               f" (allowed: {', '.join(f.choices)})")
        _number(f, f"{key}.{k}", v, at)
    return value


def _count(f: Field, key: str, value: Any, at: str) -> Any:
    if isinstance(value, str):
        try:
            n = parse_count(value, key)
        except ConfigError:
            raise CatalogError(f"{at}: {key} must be a count such as 300B or 1.5e13, "
                               f"got {quote(value)}") from None
        _number(f, key, n, at)
        return value
    return _number(f, key, value, at)


def check_value(f: Field, key: str, value: Any, at: str) -> Any:
    """Type and range check of one raw field; returns it (not yet unit-converted)."""
    if f.kind == "text":
        return _text(f, key, value, at)
    if f.kind == "date":
        if not isinstance(value, str) or not DATE.fullmatch(value):
            raise CatalogError(f"{at}: {key} must be a date YYYY-MM-DD or YYYY-MM, "
                               f"got {shown(value)}")
        return value
    if f.kind == "int":
        return _int(f, key, value, at)
    if f.kind == "num":
        return _number(f, key, value, at)
    if f.kind == "bool":
        if not isinstance(value, bool):
            raise CatalogError(f"{at}: {key} must be true or false, got {shown(value)}")
        return value
    if f.kind == "texts":
        return _texts(key, value, at)
    if f.kind == "text_or_texts":
        return value if isinstance(value, str) else _texts(key, value, at)
    if f.kind == "map":
        return _map(f, key, value, at)
    if f.kind == "count":
        return _count(f, key, value, at)
    raise AssertionError(f.kind)  # pragma: no cover - schema typo


def check_keys(schema: dict[str, Field], raw: dict[str, Any], at: str) -> None:
    """Unknown fields are errors, with the closest known name."""
    for key in raw:
        if key not in schema:
            raise CatalogError(f"{at}: unknown field '{key}'{did_you_mean(key, schema)} "
                               f"(units are part of field names, e.g. memory_gib, peak_tflops)")


def convert(schema: dict[str, Field], raw: dict[str, Any]) -> dict[str, Any]:
    """Checked raw fields -> constructor keywords in code units."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        f = schema[key]
        if f.kind == "map":
            value = {k: float(v) * (f.unit or 1.0) for k, v in value.items()}
        elif f.kind == "num":
            value = float(value) * (f.unit or 1.0)
        elif f.kind == "texts":
            value = tuple(value)
        out[f.to or key] = value
    return out
