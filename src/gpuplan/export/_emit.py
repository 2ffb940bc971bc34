"""Tiny TOML and YAML writers for the flat configs the exporters produce (L5).

Enough for scalars, lists of scalars, nested mappings and literal blocks; no dependency on a
YAML library in the core. Tests parse every output back (tomllib, PyYAML where installed).
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@-]+$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is JSON-escaped text


def toml_table(name: str, values: dict[str, Any], notes: dict[str, str] | None = None) -> str:
    """`[name]` with one `key = value` a line; `notes[key]` becomes a trailing comment."""
    lines = [f"[{name}]"]
    for key, value in values.items():
        line = f"{key} = {toml_value(value)}"
        if notes and key in notes:
            line += f"  # {notes[key]}"
        lines.append(line)
    return "\n".join(lines)


def yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS and not _numeric(text):
        return text
    return json.dumps(text)  # a YAML double-quoted scalar accepts JSON escapes


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def yaml_lines(values: dict[str, Any], indent: int = 0) -> list[str]:
    """Block-style YAML: nested dicts indent by two, multi-line text as a `|` literal."""
    pad = " " * indent
    out: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict):
            out.append(f"{pad}{key}:")
            out += yaml_lines(value, indent + 2)
        elif isinstance(value, str) and "\n" in value:
            out.append(f"{pad}{key}: |")
            out += [f"{pad}  {ln}".rstrip() for ln in value.rstrip("\n").split("\n")]
        elif isinstance(value, list | tuple):
            out.append(f"{pad}{key}: [" + ", ".join(yaml_scalar(v) for v in value) + "]")
        else:
            out.append(f"{pad}{key}: {yaml_scalar(value)}")
    return out
