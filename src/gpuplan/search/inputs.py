"""The numeric inputs of `tco` (and the site flags of `plan` and `estimate`), checked by one
rule (L4). Light on purpose: the CLI reads the flag names when it builds its parser."""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError

FRACTIONS = {"utilization", "maintenance", "install", "residual", "load_factor",
             "host_load_factor", "reuse"}
FLAG_NAMES = {"spot_rate": "spot-interruptions"}
MAX_VALUE = 1e12  # any money or rate input above this is a typo, not a price
MAX_YEARS = 100.0
# Smallest lives and shares of use costed: below them a cost per used GPU-hour divides by
# hours so few that it overflows (1e-320 years), and no one prices hardware that way.
MIN_YEARS = 1 / 365.25  # one day
MIN_UTILIZATION = 0.01  # 1% of the hours


def flag_name(name: str) -> str:
    """The CLI flag of an input name (a `gpuplan tco` flag's dest): spot_rate is
    --spot-interruptions, the others their dest with dashes."""
    return "--" + FLAG_NAMES.get(name, name.replace("_", "-"))


def input_bounds(name: str) -> tuple[float, float, bool]:
    """The range `check_input` accepts for `name`: (minimum, maximum, minimum excluded), for
    the CLI's flag types and so the web schema (a whole --nodes is checked, not stated)."""
    lo, hi = 0.0, MAX_VALUE
    if name in FRACTIONS:
        hi = 1.0
    if name == "pue":
        lo = 1.0
    if name == "utilization":
        lo = MIN_UTILIZATION
    if name == "years":
        lo, hi = MIN_YEARS, MAX_YEARS
    return lo, hi, name == "nodes"


def check_input(name: str, value: Any, flag: str | None = None) -> float:
    """One numeric input, checked: finite, >= 0, in range (every input at most MAX_VALUE, so
    products of them stay finite); -0 becomes 0. `name` picks the rule
    (a `gpuplan tco` input name), `flag` the flag the message names (default: `name`'s)."""
    flag = flag or flag_name(name)
    try:
        v = float(value) + 0.0  # -0.0 + 0.0 == +0.0
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"{flag} must be a number >= 0, got {value}; fix the value")
    if name in FRACTIONS and v > 1:
        raise ConfigError(f"{flag} must be a fraction between 0 and 1, got {value}; "
                          f"write 0.7 for 70%")
    if name == "pue" and v < 1:
        raise ConfigError(f"{flag} must be at least 1 (facility power / IT power), got {value}")
    if name == "utilization" and v <= 0:
        raise ConfigError(f"{flag} must be more than 0, got {v:g}: an owned cluster that does "
                          f"no useful work has no cost per GPU-hour; give the share of hours "
                          f"it trains, e.g. 0.7")
    if name in ("years", "nodes") and v <= 0:
        raise ConfigError(f"{flag} must be more than 0, got {value}")
    if name == "utilization" and v < MIN_UTILIZATION:
        raise ConfigError(f"{flag} must be at least {MIN_UTILIZATION:g} (1% of the hours), "
                          f"got {value}")
    if name == "years" and v < MIN_YEARS:
        raise ConfigError(f"{flag} must be at least 1/365.25 (one day), got {value}")
    if name == "nodes" and v != int(v):
        raise ConfigError(f"{flag} must be a whole number, got {value}")
    if name == "years" and v > MAX_YEARS:
        raise ConfigError(f"{flag} must be at most {MAX_YEARS:g}, got {value}")
    if v > MAX_VALUE:
        raise ConfigError(f"{flag} must be at most {MAX_VALUE:g}, got {value}; fix the value")
    return v
