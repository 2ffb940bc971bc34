"""Reading a file the user named: every way it can fail is one line of a GpuplanError (L2).

The catalog overlays, price CSVs and model configs all come from a path typed on a command line
or in an environment variable; a missing file, a folder, a file of the wrong encoding or a path
the OS refuses each become one line saying what is wrong and how to fix it, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from .errors import CatalogError, GpuplanError

__all__ = ["display_path", "read_text"]


def display_path(path: Path | str, limit: int = 80) -> str:
    """A path as messages show it: one line, at most `limit` characters."""
    text = str(path)
    if not text.isprintable():
        text = text.encode("unicode_escape", "replace").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _size(n: int) -> str:
    """A byte limit as a message says it: '16 MiB', else '1,000 bytes'."""
    return f"{n >> 20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"


def read_text(path: Path | str, what: str, hint: str, *, shown: str | None = None,
              error: type[GpuplanError] = CatalogError, encoding: str = "utf-8",
              max_bytes: int | None = None) -> str:
    """The text of `path`, decoded as `encoding` ('utf-8-sig' drops a byte-order mark).

    Messages name the file as "{what} '{shown}'" (`shown` defaults to the path, shortened to
    80 characters); `hint` says what to give instead of a folder, e.g. "give a .toml file".
    A file over `max_bytes` (when given) is refused before it is read.
    """
    name = f"{what} '{shown if shown is not None else display_path(path)}'"
    try:
        if max_bytes is not None and Path(path).stat().st_size > max_bytes:
            raise error(f"{name} is over {_size(max_bytes)}; {hint}")
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{name} does not exist; check the path") from None
    except IsADirectoryError:
        raise error(f"{name} is a folder; {hint}") from None
    except PermissionError:
        raise error(f"{name} cannot be read (permission denied)") from None
    except (OSError, ValueError) as err:  # name too long, embedded NUL, ...
        reason = getattr(err, "strerror", None) or type(err).__name__
        raise error(f"{name} cannot be opened ({reason}); check the path") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        raise error(f"{name} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
