"""`gpuplan validate`: predict every published training run and print the error (L6)."""

from __future__ import annotations

import argparse
from typing import Any

from . import common_options

EPILOG = """examples:
  gpuplan validate
  gpuplan validate --family h100
  gpuplan validate --json
  gpuplan validate --cross-validate # each source predicted by a fit that never saw it
  gpuplan validate --calibrate      # refit the efficiency constants (prints, writes nothing)
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="predict published training runs and print the error per run and per family",
        description="Predicts every run in the package's published_runs.csv from its stated "
        "configuration (unknown details filled with the defaults named in the file) and prints "
        "predicted vs published tokens/s per GPU or step time, the error, and the median and "
        "worst absolute error overall and per accelerator family. Runs whose configuration "
        "is unknown are shown but kept out of the summary.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--family", help="only runs on this accelerator family (a100, h100, ...)")
    p.add_argument("--cross-validate", action="store_true",
                   help="leave-one-source-out: predict each publication's runs with constants "
                   "refitted without that publication (slower, a few seconds)")
    p.add_argument("--calibrate", action="store_true",
                   help="refit the per-family efficiency constants on the fit runs and print "
                   "them beside the catalog's values")
    common_options(p)
    p.set_defaults(func=run)


def _filter(results: list[Any], family: str | None) -> list[Any]:
    if not family:
        return results
    from ..errors import UnknownIdError

    known = sorted({r.family for r in results})
    if family.lower() not in known:
        raise UnknownIdError("family", family, known, "gpuplan validate")
    return [r for r in results if r.family == family.lower()]


def _payload(results: list[Any]) -> dict[str, Any]:
    from ..validation import summary

    overall = summary(results)
    return {
        "runs": [{"id": r.id, "metric": r.metric, "published": r.published,
                  "predicted": r.predicted, "error_pct": r.error_pct, "family": r.family,
                  "gpu": r.gpu, "status": r.status, "fit": r.fit,
                  "source_metric": r.source_metric, "source_value": r.source_value,
                  "bottleneck": r.bottleneck, "efficiency_guess": r.efficiency_guess}
                 for r in results],
        "n": overall["n"],
        "median_abs_error_pct": overall["median_abs_error_pct"],
        "worst_abs_error_pct": overall["worst_abs_error_pct"],
        "per_family": overall["per_family"],
        "holdout": summary(results, subset="holdout"),
        "excluded": [r.id for r in results if r.status != "known"],
    }


def _fmt(x: float | None) -> str:
    from ..report.fmt import num

    return num(x) if x is not None else "-"


def _text(data: dict[str, Any]) -> str:
    from ..report.fmt import num, table

    rows = [(r["id"], r["family"], r["metric"].replace("_per_gpu", "/gpu"), num(r["published"]),
             num(r["predicted"]), f"{r['error_pct']:+.1f}%", r["fit"],
             "" if r["status"] == "known" else "excluded") for r in data["runs"]]
    out = [table(rows, ("run", "family", "metric", "published", "predicted", "error", "used as",
                        "note"), align="llrrrrll")]
    fam_rows = [(f, s["n"], f"{_fmt(s['median_abs_error_pct'])}%",
                 f"{_fmt(s['worst_abs_error_pct'])}%") for f, s in data["per_family"].items()]
    fam_rows.append(("all", data["n"], f"{_fmt(data['median_abs_error_pct'])}%",
                     f"{_fmt(data['worst_abs_error_pct'])}%"))
    h = data["holdout"]
    fam_rows.append(("hold-out only", h["n"], f"{_fmt(h['median_abs_error_pct'])}%",
                     f"{_fmt(h['worst_abs_error_pct'])}%"))
    out += ["", "absolute error over runs with a known configuration:",
            table(fam_rows, ("family", "runs", "median", "worst"), align="lrrr")]
    if data["excluded"]:
        out.append(f"excluded (configuration unknown, see notes in published_runs.csv): "
                   f"{', '.join(data['excluded'])}")
    return "\n".join(out)


def _calibration_text(cat: Any) -> str:
    from ..report.fmt import table
    from ..search.hardware import efficiency_rows
    from ..validation import calibrate

    rows: list[tuple[str, str, str, str]] = []
    current = efficiency_rows(cat)
    for family, fit in calibrate(cat).items():
        now = current.get(family, {})
        for k in ("matmul_max", "half_dim", "layer_overhead_s", "fp8_ratio"):
            if k not in fit:
                continue
            cur = now.get("layer_overhead_us", 0.0) * 1e-6 if k == "layer_overhead_s" \
                else now.get(k)
            rows.append((family, k, f"{fit[k]:.6g}", "-" if cur is None else f"{cur:.6g}"))
        rows.append((family, "rms log error", f"{fit['rms_log_error']:.3f}",
                     f"({fit['runs']} runs)"))
    return table(rows, ("family", "constant", "fitted", "catalog"), align="llrr")


def run(args: argparse.Namespace) -> int:
    from ..catalog import load_catalog
    from ..report.fmt import dumps
    from ..validation import cross_validate, validate_runs

    cat = load_catalog(args.catalog)
    if args.calibrate:
        print(_calibration_text(cat))
        return 0
    results = cross_validate(cat) if args.cross_validate else validate_runs(cat)
    data = _payload(_filter(results, args.family))
    data["mode"] = "leave-one-source-out" if args.cross_validate else "catalog constants"
    if args.json:
        print(dumps(data))
    else:
        if args.cross_validate:
            print("leave-one-source-out: every run predicted by constants fitted without its "
                  "source (column 'used as' is ignored)\n")
        print(_text(data))
    return 0
