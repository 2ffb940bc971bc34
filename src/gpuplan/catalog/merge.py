"""Read catalog files and merge the package data with overlays, field by field.

A later file changes only the fields it writes: `usd_per_hour = {"on-demand" = 40}` replaces
that one price and keeps the other pricing modes. Every value remembers the file that set it
(`Row.origins`, keyed by field path such as 'usd_per_hour.on-demand'). When an overlay changes
values of an existing entry without giving its own `source` / `as_of`, the entry's source names
the overlay file and the fields it set, and its as_of becomes the file's modification date: the
catalog's citation no longer describes the user's numbers.
"""

from __future__ import annotations

import datetime
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CatalogError, quote
from ..userfile import read_text
from .check import did_you_mean
from .schema import NAMED_TABLES, ROW_TABLES, normalize, table_key

PACKAGE_PREFIX = "gpuplan/data/"
DESCRIPTIVE = ("id", "source", "as_of", "notes", "aliases", "name", "unit")


@dataclass(frozen=True)
class Doc:
    """One parsed file: its name for messages, its tables, whether it is a user overlay and
    its modification date (the as_of of values it sets without one)."""

    origin: str
    data: dict[str, Any]
    overlay: bool = False
    date: str = ""


@dataclass
class Row:
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # field path -> file
    origin: str = ""  # the last file that wrote to this entry (for whole-row messages)


def read_doc(path: Path | str, origin: str, overlay: bool) -> Doc:
    """Parse one TOML file; every way it can fail is one CatalogError line."""
    what = f"catalog file '{origin}'"
    text = read_text(path, "catalog file", "give a .toml file", shown=origin)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CatalogError(f"{origin} is not valid TOML: {err}") from None
    except RecursionError:
        raise CatalogError(f"{what} nests tables too deeply") from None
    date = (datetime.date.fromtimestamp(os.stat(path).st_mtime).isoformat()
            if overlay else "")
    return Doc(origin=origin, data=data, overlay=overlay, date=date)


def _merge_entry(row: Row, entry: dict[str, Any], doc: Doc, sourced: bool) -> None:
    """Write one file's entry onto a row: nested tables key by key, the rest field by field.
    `sourced`: the table's rows carry source / as_of."""
    existed = bool(row.values)
    changed: list[str] = []
    for key, value in entry.items():
        old = row.values.get(key)
        if isinstance(value, dict):
            row.values[key] = {**old, **value} if isinstance(old, dict) else dict(value)
            paths = [f"{key}.{k}" for k in value]
        else:
            row.values[key] = value
            paths = [key]
        if key != "id":
            row.origins.update(dict.fromkeys(paths, doc.origin))
        if key not in DESCRIPTIVE:
            changed += paths
    row.origin = doc.origin
    if sourced and doc.overlay and existed and changed:
        if "source" not in entry:
            row.values["source"] = (f"{doc.origin} sets {', '.join(changed)}; other values: "
                                    f"{row.values.get('source', '')}")
            row.origins["source"] = doc.origin
        if "as_of" not in entry and doc.date:
            row.values["as_of"] = doc.date
            row.origins["as_of"] = doc.origin


def _row_entries(doc: Doc, top: str, value: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(value, list):
        raise CatalogError(f"{doc.origin}: '{top}' must be written [[{top}]]")
    out = []
    for entry in value:
        if not isinstance(entry, dict) or "id" not in entry:
            raise CatalogError(f"{doc.origin}: every [[{top}]] needs an id")
        if not isinstance(entry["id"], str) or not entry["id"].strip():
            raise CatalogError(f"{doc.origin}: [[{top}]] id must be non-empty text")
        ident = normalize(entry["id"])
        out.append((ident, {**entry, "id": ident}))
    return out


def _named_entries(doc: Doc, top: str, value: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(value, dict):
        raise CatalogError(f"{doc.origin}: [{top}] must be a table of [{top}.NAME] tables")
    out = []
    for name, entry in value.items():
        if not isinstance(entry, dict):
            raise CatalogError(f"{doc.origin}: {top} {quote(name)} must be a table "
                               f"[{top}.NAME] with fields")
        out.append((table_key(top, name), entry))
    return out


def merge_docs(docs: list[Doc]) -> dict[str, dict[str, Row]]:
    """kind -> id -> merged Row, in file order (package data first, then overlays)."""
    rows: dict[str, dict[str, Row]] = {k: {} for k in (*ROW_TABLES, *NAMED_TABLES)}
    for doc in docs:
        for top, value in doc.data.items():
            if top in ROW_TABLES:
                entries = _row_entries(doc, top, value)
            elif top in NAMED_TABLES:
                entries = _named_entries(doc, top, value)
            else:
                raise CatalogError(
                    f"{doc.origin}: unknown table {quote(top)}"
                    f"{did_you_mean(top, rows)} (tables: {', '.join(rows)})")
            for ident, entry in entries:
                _merge_entry(rows[top].setdefault(ident, Row()), entry, doc,
                             sourced=top != "scenarios")
    return rows
