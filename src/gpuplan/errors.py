"""One exception root. Every message is one line: what is wrong and how to fix it (L0)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuplanError(Exception):
    """Root of every error gpuplan raises on bad input; the CLI prints str(err) and exits 2."""


class CatalogError(GpuplanError):
    """A catalog or overlay file is malformed (missing column, bad value, unknown unit)."""


class ConfigError(GpuplanError):
    """A requested configuration is invalid (degrees that do not divide, bad flag values)."""


class UnknownIdError(GpuplanError):
    """An id that is in no table; the message suggests the closest known ids."""

    def __init__(self, kind: str, name: str, known: Iterable[str], list_cmd: str = "",
                 canonical: dict[str, str] | None = None) -> None:
        """`known` are the names to match against; `canonical` maps an alias to its id, so
        a suggestion names each entity once, by its id."""
        self.kind, self.name = kind, name
        hits = suggest(name, known, n=8)
        if canonical:
            hits = [canonical.get(h, h) for h in hits]
        self.suggestions = list(dict.fromkeys(hits))[:3]
        msg = f"unknown {kind} {quote(name)}"
        if self.suggestions:
            msg += "; did you mean " + " or ".join(f"'{s}'" for s in self.suggestions) + "?"
        if list_cmd:
            msg += ("; " if not self.suggestions else " ") + f"`{list_cmd}` lists them"
        super().__init__(msg)


def suggest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Closest known ids to a mistyped one (difflib, as SkyPilot does), best first."""
    known = sorted(set(known))
    low = name.lower()
    hits = difflib.get_close_matches(low, known, n=n, cutoff=0.5)
    if not hits:  # a prefix typo like 'h10' -> 'h100-sxm'
        hits = [k for k in known if k.startswith(low)][:n]
    return hits


QUOTE_LIMIT = 60  # characters of a user value a message repeats


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A user-supplied value, safe to put in a one-line message: quoted, control characters
    escaped (a newline cannot split the message), at most `limit` characters of it shown.

    quote("h10") is 'h10'; a newline shows as \\n; a 3,000-character value shows its first
    60 characters and its length.
    """
    text = value if isinstance(value, str) else str(value)
    shown = repr(text[:limit])
    if len(text) > limit:
        shown = f"{shown[:-1]}...{shown[-1]} ({len(text):,} characters)"
    return shown


def one_line(message: str, limit: int = 1000) -> str:
    """The last line of defence for a message: control characters escaped, and any run of
    over 200 characters without a space (a long value nobody quoted) cut to 60."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    words = [w if len(w) <= 200 else f"{w[:60]}...({len(w):,} characters)"
             for w in text.split(" ")]
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit - 3] + "..."
