"""The overlay TOML that `gpuplan prices import` writes (L5)."""

from __future__ import annotations

from ..prices import Imported
from ._emit import toml_value

_ORDER = ("id", "cloud", "instance_type", "accelerator", "count", "region", "usd_per_hour",
          "spot_usd_per_hour_min", "spot_usd_per_hour_max", "spot_observations",
          "network_gbit_per_s", "max_instances", "source", "as_of", "notes")
_OPTIONAL = ("spot_usd_per_hour_min", "spot_usd_per_hour_max", "spot_observations")


def _inline(prices: dict[str, float]) -> str:
    return "{ " + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in prices.items()) + " }"


def render_overlay(imported: Imported, version: str) -> str:
    """`[[offer]]` rows with a comment saying where they came from and what was skipped."""
    lines = [f"# gpuplan {version} overlay: cloud offers from {imported.source}",
             f"# {len(imported.offers)} offer(s); use with `gpuplan plan --catalog THIS.toml`"]
    if imported.skipped_unknown:
        names = ", ".join(f"{k} ({v})" for k, v in sorted(imported.skipped_unknown.items()))
        lines.append(f"# skipped rows of accelerators gpuplan does not know: {names}")
    if imported.skipped_no_gpu:
        lines.append(f"# skipped {imported.skipped_no_gpu} row(s) without accelerators")
    for row in imported.offers:
        lines += ["", "[[offer]]"]
        for key in _ORDER:
            if key in _OPTIONAL and key not in row:
                continue
            value = row[key]
            text = _inline(value) if key == "usd_per_hour" else toml_value(value)
            lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
