"""Text and JSON for `gpuplan validate` (L5).

Every error figure carries its sample: in-sample (fit rows predicted by the constants fitted on
them), out-of-sample (hold-out rows, or any row under leave-one-source-out cross-validation) or
mixed (both together). Percentages are printed with one decimal (`fmt.pct`), the precision
docs/calibration.md quotes them at. Summaries count the current runs (the newest release of each
configuration, calibrate/releases.py) unless `all_releases`; older releases print, marked.
"""

from __future__ import annotations

from typing import Any

from ..validation import RunResult, counted, summary
from .fmt import num, pct, table

MODES = {False: "catalog constants", True: "leave-one-source-out"}
SAMPLE_WORDS = {"in": "in-sample", "out": "out-of-sample", "mixed": "mixed in/out-of-sample"}


def to_json(results: list[RunResult], cross_validated: bool = False,
            all_releases: bool = False) -> dict[str, Any]:
    """Per-run results and the error summaries; the top-level median and worst are over every
    known current run (every known run with `all_releases`; `releases` says which, `sample`
    which kind), `fit_rows` and `holdout` split them. Each run says its `release`, whether it
    is `current` and, if not, which run of its configuration's newest release
    `superseded_by`."""
    overall = summary(results, all_releases=all_releases)
    return {
        "mode": MODES[cross_validated],
        "runs": [{"id": r.id, "metric": r.metric, "published": r.published,
                  "predicted": r.predicted, "error_pct": r.error_pct, "family": r.family,
                  "gpu": r.gpu, "status": r.status, "fit": r.fit, "sample": r.sample,
                  "source_metric": r.source_metric, "source_value": r.source_value,
                  "bottleneck": r.bottleneck, "efficiency_guess": r.efficiency_guess,
                  "release": r.release, "current": r.current, "superseded_by": r.superseded_by,
                  **_memory_keys(r)}
                 for r in results],
        "n": overall["n"],
        "median_abs_error_pct": overall["median_abs_error_pct"],
        "worst_abs_error_pct": overall["worst_abs_error_pct"],
        "sample": overall["sample"],
        "per_family": overall["per_family"],
        "fit_rows": summary(results, subset="fit", all_releases=all_releases),
        "holdout": summary(results, subset="holdout", all_releases=all_releases),
        "excluded": [r.id for r in results if r.status != "known"],
        "releases": "all" if all_releases else "newest",
        "superseded": [r.id for r in results if not r.current],
        "memory_fit": memory_fit_summary(results, all_releases),
    }


def _memory_keys(r: RunResult) -> dict[str, Any]:
    m = r.memory
    return {"fits": m.fits if m else None, "memory_gib": m.memory_gib if m else None,
            "reserved_gib": m.reserved_gib if m else None,
            "gpu_memory_gib": m.capacity_gib if m else None,
            "memory_refused": (m.refused or None) if m else None,
            "memory_settings": r.memory_settings or None,
            "memory_unmodelled": r.memory_unmodelled or None}


def memory_fit_summary(results: list[RunResult], all_releases: bool = False) -> dict[str, Any]:
    """Of the known runs counted (the current ones; every release with `all_releases`): how
    many the memory model predicts fit their GPUs (reserved + runtime context <= GPU memory,
    as `gpuplan estimate`), and which do not (every one of them ran), with and without their
    memory settings recorded from a source (column `memory_settings`)."""
    known = [r for r in counted(results, all_releases) if r.status == "known" and r.memory]
    bad = [r for r in known if r.memory and r.memory.fits is False]
    return {"n": len(known), "fit": sum(1 for r in known if r.memory and r.memory.fits),
            "not_fit": [r.id for r in bad],
            "not_fit_recorded": [r.id for r in bad if r.memory_settings == "recorded"],
            "refused": [r.id for r in known if r.memory and r.memory.fits is None],
            "releases": "all" if all_releases else "newest"}


def _cells(s: dict[str, Any] | None) -> tuple[str, str, str]:
    if not s or not s["n"]:
        return "0", "-", "-"
    return str(s["n"]), pct(s["median_abs_error_pct"]), pct(s["worst_abs_error_pct"])


def _summary_table(data: dict[str, Any]) -> str:
    fit, held = data["fit_rows"], data["holdout"]
    families = sorted(set(fit["per_family"]) | set(held["per_family"]))
    rows = [(f, *_cells(fit["per_family"].get(f)), *_cells(held["per_family"].get(f)),
             *_cells(data["per_family"].get(f))) for f in families]
    rows.append(("all", *_cells(fit), *_cells(held), *_cells(data)))
    head = ("family", "fit runs", "median", "worst", "hold-out", "median", "worst",
            "all runs", "median", "worst")
    return table(rows, head, align="lrrrrrrrrr")


def _note(r: dict[str, Any]) -> str:
    if r["status"] != "known":
        return "excluded"
    return f"older release; newest: {r['superseded_by']}" if r["superseded_by"] else ""


def _releases_line(data: dict[str, Any]) -> str:
    old = len(data["superseded"])
    if data["releases"] == "all":
        return (f"every release counted (--all-releases), the {old} runs of older releases "
                "included")
    return (f"summaries count the newest release of each configuration (source series, GPU, "
            f"GPU count, model, precision); the {old} runs of older releases are printed and "
            "not counted (--all-releases counts them)")


def render_text(data: dict[str, Any]) -> str:
    rows = [(r["id"], r["family"], r["metric"].replace("_per_gpu", "/gpu"), num(r["published"]),
             num(r["predicted"]), f"{r['error_pct']:+.1f}%", r["fit"], _note(r))
            for r in data["runs"]]
    out = []
    if data["mode"] == MODES[True]:
        out.append("leave-one-source-out: every run predicted by constants fitted without its "
                   "source, so every figure is out-of-sample ('used as' is the row's role in "
                   "the full fit)\n")
    out.append(table(rows, ("run", "family", "metric", "published", "predicted", "error",
                            "used as", "note"), align="llrrrrll"))
    words = {k: SAMPLE_WORDS[data[k]["sample"] if k != "all" else data["sample"]]
             for k in ("fit_rows", "holdout", "all") if k == "all" or data[k]["n"]}
    out += ["", _releases_line(data), "|error| over runs with a known configuration -- "
            + "; ".join(f"{name}: {words[k]}" for k, name in
                        (("fit_rows", "fit runs"), ("holdout", "hold-out runs"),
                         ("all", "all runs")) if k in words),
            _summary_table(data)]
    if data["excluded"]:
        out.append(f"excluded (configuration unknown, see notes in published_runs.csv): "
                   f"{', '.join(data['excluded'])}")
    if "memory_fit" in data:
        out += _memory_fit_lines(data)
    if "groups" in data:
        out += _group_lines(data)
    return "\n".join(out)


def _memory_fit_lines(data: dict[str, Any]) -> list[str]:
    """How many known runs the memory model predicts fit, and the ones that do not (each ran:
    it published a throughput), with predicted vs GPU memory."""
    mf = data["memory_fit"]
    byid = {r["id"]: r for r in data["runs"]}
    which = "newest release" if mf["releases"] == "newest" else "every release"
    out = ["", f"memory: {mf['fit']} of {mf['n']} known runs ({which}) predicted to fit "
           "(reserved + runtime context <= GPU memory, as `gpuplan estimate`)"]
    if mf["not_fit"]:
        out.append("ran, but predicted not to fit (predicted GiB / GPU GiB; memory settings "
                   "recorded from the source, or the stack's defaults):")
        out += [f"  {i}: {byid[i]['memory_gib']:.1f} / {byid[i]['gpu_memory_gib']:.1f}  "
                + ("recorded" if byid[i]["memory_settings"] else "defaults")
                + (f"; not modelled: {byid[i]['memory_unmodelled']}"
                   if byid[i]["memory_unmodelled"] else "") for i in mf["not_fit"]]
    out += [f"  refused: {i}: {byid[i]['memory_refused']}" for i in mf["refused"]]
    return out


GROUP_TITLES = {"family": "family", "stack": "stack", "precision": "precision",
                "moe": "MoE/dense", "scale": "scale (GPUs)"}


def _group_lines(data: dict[str, Any]) -> list[str]:
    cov = data.get("interval_coverage")
    which = "every release" if data.get("releases") == "all" else "newest release"
    out = ["", f"by group, known runs, {which} ({SAMPLE_WORDS[data['sample']]}); coverage = "
           "share inside the P10-P90 range, quantiles from the other sources' residuals (every "
           "release)" + ("" if cov else " (run with --cross-validate)")]
    rows = [(GROUP_TITLES[g], k, str(s["n"]), pct(s["median_abs_error_pct"]),
             pct(s["worst_abs_error_pct"]),
             "-" if s["coverage"] is None else pct(s["coverage"] * 100))
            for g, by in data["groups"].items() for k, s in by.items()]
    out.append(table(rows, ("by", "group", "runs", "median", "worst", "coverage"),
                     align="llrrrr"))
    if cov:
        out.append(f"P10-P90 coverage, leave-one-source-out: {pct(cov['coverage'] * 100)} of "
                   f"{cov['n']} runs (target 70-90%)")
    pairs = data.get("fp8_pairs") or []
    if pairs:
        out += ["", "FP8/BF16 gain on paired runs (same source, hardware, model, layout; "
                f"{which} of each pair)"]
        out.append(table([(p["bf16"], p["fp8"], f"{p['published_gain']:.3f}",
                           f"{p['predicted_gain']:.3f}", f"{p['error_pct']:+.1f}%")
                          for p in pairs],
                         ("bf16 run", "fp8 run", "published", "predicted", "error"),
                         align="llrrr"))
    anomalous = data.get("anomalous") or []
    out.append("anomalous runs (column `anomaly`, a written source-based reason; in every "
               "error figure, not in the interval residuals or coverage):"
               + ("" if anomalous else " none"))
    out += [f"  {a['id']}: {a['reason']}" for a in anomalous]
    return out


CONSTANTS = ("matmul_max", "half_dim", "layer_overhead_s", "attention_ratio", "fp8_ratio")


def calibration_to_json(fit: dict[str, dict[str, Any]],
                        current: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Refitted constants beside the catalog's; the RMS log error is in-sample (over the fit
    rows the constants were fitted on)."""
    fams = {}
    for family, f in fit.items():
        now = current.get(family, {})
        catalog = {k: (now.get("layer_overhead_us", 0.0) * 1e-6 if k == "layer_overhead_s"
                       else now.get(k)) for k in CONSTANTS if k in f}
        fams[family] = {"fitted": {k: f[k] for k in CONSTANTS if k in f}, "catalog": catalog,
                        "rms_log_error": f["rms_log_error"], "runs": f["runs"],
                        "sample": "in"}
    return {"families": fams}


def render_calibration(data: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str, str]] = []
    for family, f in data["families"].items():
        for k, v in f["fitted"].items():
            cur = f["catalog"].get(k)
            rows.append((family, k, f"{v:.6g}", "-" if cur is None else f"{cur:.6g}"))
        rows.append((family, "rms log error (in-sample)", num(f["rms_log_error"]),
                     f"({f['runs']} fit runs)"))
    return table(rows, ("family", "constant", "fitted", "catalog"), align="llrr")


RESIDUALS_HEADER = """\
# Prediction-interval residuals (gpuplan.search.intervals). GENERATED, do not edit: regenerate
# with `gpuplan validate --calibrate --residuals > src/gpuplan/data/residuals.toml`.
# Each row: quantiles of actual / predicted time over the known runs of one (family, stack
# calibration group) of data/published_runs.csv, each run predicted by constants fitted
# without its source (leave-one-source-out); 'pooled' covers every run. Method and coverage:
# docs/calibration.md, "Prediction intervals".
"""


def residuals_toml(table: dict[str, dict[str, Any]], as_of: str) -> str:
    """data/residuals.toml from `calibrate.groups.residual_table`."""
    out = [RESIDUALS_HEADER]
    for key, r in table.items():
        out += [f"[residuals.{key}]", f'family = "{r["family"]}"', f'stack = "{r["stack"]}"',
                f"runs = {r['runs']}", f"p10 = {r['p10']:.3f}", f"p50 = {r['p50']:.3f}",
                f"p90 = {r['p90']:.3f}",
                'source = "gpuplan validate --calibrate --residuals (leave-one-source-out '
                'residuals of data/published_runs.csv)"', f'as_of = "{as_of}"', ""]
    return "\n".join(out)


# --- memory (`gpuplan validate --memory`) ----------------------------------------------------


def memory_to_json(results: list[Any]) -> dict[str, Any]:
    """Per-run memory error (predicted vs measured, of the measured kind) and the summary."""
    from ..validation_memory import memory_summary

    runs = [{"id": r.id, "kind": r.kind, "measured_gib": r.measured_gib,
             "predicted_gib": r.predicted_gib, "error_pct": r.error_pct,
             "total_gib": r.total_gib, "gpu_memory_gib": r.gpu_memory_gib, "fits": r.fits,
             "ran": r.ran, "stack": r.stack, "refused": r.refused or None, "source": r.source}
            for r in results]
    return {"mode": "memory", "runs": runs, **memory_summary(results)}


def render_memory_text(data: dict[str, Any]) -> str:
    rows = [(r["id"], r["stack"], r["kind"], f"{r['measured_gib']:.1f}",
             "-" if r["predicted_gib"] is None else f"{r['predicted_gib']:.1f}",
             "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%",
             "refused" if r["refused"] else ("fits" if r["fits"] else "DOES NOT FIT"))
            for r in data["runs"]]
    out = [table(rows, ("run", "stack", "measured as", "measured GiB", "predicted GiB", "error",
                        "predicted"), align="lllrrrl"),
           "",
           "memory per GPU, predicted allocated, reserved or device (nvidia-smi) memory, as the "
           "run measured it, vs measured; out-of-sample (no constant is fitted on these runs)"]
    if data["n"]:
        out.append(f"|error| over {data['n']} runs: median {pct(data['median_abs_error_pct'])}, "
                   f"worst {pct(data['worst_abs_error_pct'])}")
    ran = data["ran_but_predicted_not_to_fit"]
    out.append(f"runs that ran but are predicted not to fit: {len(ran)}"
               + (f" ({', '.join(ran)})" if ran else ""))
    refused = [r for r in data["runs"] if r["refused"]]
    if refused:
        out.append(f"refused by the model ({len(refused)}, kept out of the summary):")
        out += [f"  {r['id']}: {r['refused']}" for r in refused]
    return "\n".join(out)


def summary_figures(results: list[Any], cv: list[Any],
                    all_releases: bool = False) -> dict[str, tuple[str, int, str, str]]:
    """label -> (sample, runs, median, worst), as `validate --json` and `validate
    --cross-validate --json` compute them (with `--all-releases` if `all_releases`) and
    `validate` prints them: the figures README.md and docs/calibration.md quote
    (tools/figures.py writes them, tests check them)."""
    out = {}
    for mode, data in (("catalog constants", to_json(results, all_releases=all_releases)),
                       ("leave-one-source-out",
                        to_json(cv, cross_validated=True, all_releases=all_releases))):
        for key, what in (("fit_rows", "fit runs"), ("holdout", "hold-out runs"),
                          (None, "all known runs")):
            s = data[key] if key else data
            word = {"in": "in-sample", "out": "out-of-sample", "mixed": "mixed"}[s["sample"]]
            out[f"{what}, {mode}"] = (word, s["n"], pct(s["median_abs_error_pct"]),
                                      pct(s["worst_abs_error_pct"]))
    return out
