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
  gpuplan validate --all-releases   # count every release of NVIDIA's per-release tables
  gpuplan validate --calibrate      # refit the efficiency constants (prints, writes nothing)
  gpuplan validate --calibrate --json
  gpuplan validate --finetune       # LoRA/QLoRA memory and MLPerf LoRA time, per run
  gpuplan validate --memory         # memory per GPU vs published measurements (memory_runs.csv)

Every error figure says whether it is in-sample (fit runs, predicted by the constants fitted
on them), out-of-sample (hold-out runs; every run under --cross-validate) or mixed.
The summaries count each configuration's newest published release (source series, GPU, GPU
count, model, precision); older releases are printed, marked "older release", and not counted
unless --all-releases. The fit uses the same `fit` rows either way.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="predict published training runs and print the error per run and per family",
        description="Predicts every run in the package's published_runs.csv from its stated "
        "configuration (unknown details filled with the defaults named in the file) and prints "
        "predicted vs published tokens/s per GPU or step time, the error, and the median and "
        "worst absolute error overall and per accelerator family. Runs whose configuration "
        "is unknown, and runs superseded by a newer software release of the same "
        "configuration, are shown but kept out of the summary.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--family", help="only runs on this accelerator family (a100, h100, ...)")
    p.add_argument("--cross-validate", action="store_true",
                   help="leave-one-source-out: predict each publication's runs with constants "
                   "refitted without that publication (slower, a few seconds)")
    p.add_argument("--all-releases", action="store_true",
                   help="count every software release of a configuration in the summaries "
                   "(default: only its newest release; older ones are printed and marked)")
    p.add_argument("--calibrate", action="store_true",
                   help="refit the per-family efficiency constants on the fit runs and print "
                   "them beside the catalog's values")
    p.add_argument("--finetune", action="store_true",
                   help="predict the published fine-tuning runs (data/finetune_runs.csv: "
                   "LoRA/QLoRA memory, MLPerf Llama 2 70B LoRA time) and print each error")
    p.add_argument("--residuals", action="store_true",
                   help="with --calibrate: print data/residuals.toml (the prediction-interval "
                   "quantiles from leave-one-source-out residuals)")
    p.add_argument("--memory", action="store_true",
                   help="predict the per-GPU memory of the runs in memory_runs.csv (allocated "
                   "or reserved, as each was measured) and count the runs that ran but are "
                   "predicted not to fit")
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


# the as_of date written into data/residuals.toml (the data's date, not today's: reproducible)
RESIDUALS_AS_OF = "2026-11-30"


def check_modes(args: argparse.Namespace) -> None:
    """--memory and --finetune are their own validations: neither takes the main one's flags
    (nor the other); --residuals prints TOML under --calibrate. One line when they clash."""
    from ..errors import ConfigError

    modes = [f"--{m}" for m in ("memory", "finetune") if getattr(args, m)]
    main_flags = [f for f, on in (("--family", args.family is not None),
                                  ("--cross-validate", args.cross_validate),
                                  ("--all-releases", args.all_releases),
                                  ("--calibrate", args.calibrate),
                                  ("--residuals", args.residuals)) if on]
    if len(modes) > 1:
        raise ConfigError("--memory and --finetune are separate validations; give one of them")
    if modes and main_flags:
        raise ConfigError(f"{modes[0]} validates its own data set and takes no {main_flags[0]}; "
                          f"drop {main_flags[0]} or run it without {modes[0]}")
    if args.residuals and not args.calibrate:
        raise ConfigError("--residuals prints the residual table of --calibrate: give "
                          "--calibrate --residuals")
    if args.all_releases and args.calibrate:
        raise ConfigError("--all-releases changes only what the summaries count; --calibrate "
                          "fits the same `fit` rows either way: drop --all-releases")
    if args.residuals and args.json:
        raise ConfigError("--residuals prints TOML (data/residuals.toml), not JSON; drop --json")


def run(args: argparse.Namespace) -> int:
    from ..catalog import load_catalog
    from ..report import validation as rv
    from ..report.fmt import dumps
    from ..search.hardware import efficiency_rows
    from ..validation import calibrate, cross_validate, validate_runs

    check_modes(args)
    cat = load_catalog(args.catalog)
    if args.memory:
        from ..validation_memory import validate_memory

        data = rv.memory_to_json(validate_memory(cat))
        print(dumps(data) if args.json else rv.render_memory_text(data))
        return 0
    if args.finetune:
        from ..report import validation_finetune as rvf
        from ..validation_finetune import validate_finetune

        results_ft = validate_finetune(cat)
        print(dumps(rvf.to_json(results_ft)) if args.json else rvf.render_text(results_ft))
        return 0
    if args.calibrate and args.residuals:
        from ..calibrate.groups import residual_table

        print(rv.residuals_toml(residual_table(cat, cross_validate(cat)), RESIDUALS_AS_OF),
              end="")
        return 0
    if args.calibrate:
        data = rv.calibration_to_json(calibrate(cat), efficiency_rows(cat))
        print(dumps(data) if args.json else rv.render_calibration(data))
        return 0
    from ..calibrate.groups import group_report
    from ..validation import load_runs

    results = cross_validate(cat) if args.cross_validate else validate_runs(cat)
    chosen = _filter(results, args.family)
    data = rv.to_json(chosen, cross_validated=args.cross_validate,
                      all_releases=args.all_releases)
    data.update(group_report(cat, chosen, load_runs(), args.cross_validate, args.all_releases))
    print(dumps(data) if args.json else rv.render_text(data))
    return 0
