"""Units: the code works in bytes, FLOP, seconds, USD and watts; conversions live here (L0)."""

from __future__ import annotations

import math
import re

from .errors import ConfigError, quote

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
TERA, PETA = 1e12, 1e15
HOUR, DAY, YEAR = 3600.0, 86400.0, 365.25 * 86400.0

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*$")


def parse_count(text: str | float | int, what: str = "value") -> float:
    """'2e12', '2T', '300B', '1.5k', 7 -> a float count; a clear error otherwise."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _NUM.match(str(text).replace(",", "").replace("_", ""))
        if not m:
            raise ConfigError(
                f"cannot read {what} {quote(text)}; write a number such as 2e12, 2T, 300B or 1.5M"
            )
        value = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{what} must be a finite number >= 0, got {quote(text)}")
    return value


def gib(nbytes: float) -> float:
    """Bytes to GiB (2^30 bytes): the unit of every memory output."""
    return nbytes / GiB
