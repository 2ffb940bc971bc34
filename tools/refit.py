"""Write the constants `gpuplan validate --calibrate` fits into data/efficiency.toml.

The catalog must hold exactly what the documented fitting rule returns (tests/test_validation.py
and tests/test_stack.py check it). Run after a change to the physics or the fit rows:

    python tools/refit.py            # rewrite the fitted values in place
    python tools/refit.py --check    # exit 1 if the catalog differs from the refit

Only the fitted numbers change; notes (which quote rms errors) are reviewed by hand.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gpuplan.catalog import load_catalog
from gpuplan.validation import CALIBRATION_PLAN, STACK_PLAN, calibrate_all

PATH = Path(__file__).resolve().parents[1] / "src" / "gpuplan" / "data" / "efficiency.toml"
# validate reports layer overhead in seconds; the catalog keeps microseconds
KEYS = {"layer_overhead_s": ("layer_overhead_us", lambda v: f"{round(v * 1e6):d}")}


def _fmt(key: str, v: float) -> tuple[str, str]:
    if key in KEYS:
        name, f = KEYS[key]
        return name, f(v)
    return key, f"{v:.2f}" if key != "half_dim" else f"{v:.1f}"


def _set(text: str, table: str, key: str, value: str) -> str:
    head = re.search(rf"^\[{re.escape(table)}\]\n", text, flags=re.M)
    if head is None:
        raise SystemExit(f"no [{table}] in {PATH.name}")
    end = text.find("\n[", head.end())
    end = len(text) if end < 0 else end
    body = text[head.end():end]
    line = re.compile(rf"^{re.escape(key)} = .*$", flags=re.M)
    if line.search(body):
        body = line.sub(f"{key} = {value}", body, count=1)
    else:
        body = f"{key} = {value}\n" + body
    return text[:head.end()] + body + text[end:]


def _unset(text: str, table: str, key: str) -> str:
    """Drop `key` from [table]: a row that inherits states only what differs from its parent
    (tests/test_catalog_schema.py)."""
    head = re.search(rf"^\[{re.escape(table)}\]\n", text, flags=re.M)
    end = text.find("\n[", head.end()) if head else -1
    end = len(text) if end < 0 else end
    if head is None:
        return text
    body = re.sub(rf"^{re.escape(key)} = .*\n", "", text[head.end():end], flags=re.M)
    return text[:head.end()] + body + text[end:]


def main() -> int:
    families, stacks = calibrate_all(load_catalog())
    text = PATH.read_text()
    new = text
    for fam, params, parent in CALIBRATION_PLAN:
        for p in params:
            if fam in families and p in families[fam]:
                name, value = _fmt(p, float(families[fam][p]))
                same = parent in families and _fmt(p, float(families[parent][p]))[1] == value
                new = (_unset(new, f"efficiency.{fam}", name) if same
                       else _set(new, f"efficiency.{fam}", name, value))
    for group, _params in STACK_PLAN:
        for p in ("matmul_scale", "fp8_ratio"):
            new = _set(new, f"stack.{group}", p, f"{float(stacks[group][p]):.2f}")
        fams = ", ".join(f'"{f}"' for f in stacks[group]["fitted_families"])
        new = _set(new, f"stack.{group}", "fitted_families", f"[{fams}]")
    if "--check" in sys.argv:
        return int(new != text)
    PATH.write_text(new)
    print("unchanged" if new == text else f"rewrote {PATH.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
