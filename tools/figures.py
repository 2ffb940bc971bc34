"""Rewrite the validation figures quoted in docs/calibration.md (the tables between the
validate-figures markers: newest releases, and every release) and README.md (the out-of-sample
sentence) from what `gpuplan validate --json` and `gpuplan validate --cross-validate --json`
(and the same with --all-releases) compute.

    python tools/figures.py             # rewrite both files
    python tools/figures.py --check     # exit 1 if either quotes other figures
    python tools/figures.py --doc-only  # docs/calibration.md only (README.md is the lead's)

tests/test_calibration_figures.py checks the same figures; this script only saves the typing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gpuplan.catalog import load_catalog
from gpuplan.report.validation import summary_figures
from gpuplan.validation import cross_validate, validate_runs

ROOT = Path(__file__).resolve().parents[1]


def figures(all_releases: bool = False) -> dict[str, tuple[str, int, str, str]]:
    cat = load_catalog()
    return summary_figures(validate_runs(cat), cross_validate(cat), all_releases=all_releases)


def doc_table(f: dict[str, tuple[str, int, str, str]]) -> str:
    rows = ["| figure | sample | runs | median abs error | worst |", "|---|---|---|---|---|"]
    order = [f"{w}, {m}" for m in ("catalog constants", "leave-one-source-out")
             for w in ("fit runs", "hold-out runs", "all known runs")]
    rows += [f"| {k} | {f[k][0]} | {f[k][1]} | {f[k][2]} | {f[k][3]} |" for k in order]
    return "\n".join(rows) + "\n"


def readme_sentence(f: dict[str, tuple[str, int, str, str]]) -> str:
    held, loso = f["hold-out runs, catalog constants"], f["all known runs, leave-one-source-out"]
    fit = f["fit runs, catalog constants"]
    return (f"out of sample, against the newest published release of each configuration, the "
            f"median |error| is {held[2]} over the {held[1]} hold-out runs (worst {held[3]}) and "
            f"{loso[2]} under leave-one-source-out cross-validation over the {loso[1]} known "
            f"runs (worst {loso[3]}); in-sample, over the {fit[1]} current fit runs, {fit[2]} "
            f"(worst {fit[3]})")


def with_table(text: str, marker: str, f: dict[str, tuple[str, int, str, str]]) -> str:
    start = text.index(f"<!-- {marker} -->\n") + len(f"<!-- {marker} -->\n")
    end = text.index(f"<!-- /{marker} -->")
    return text[:start] + doc_table(f) + text[end:]


def main() -> int:
    f = figures()
    doc = ROOT / "docs" / "calibration.md"
    text = doc.read_text(encoding="utf-8")
    new_doc = with_table(with_table(text, "validate-figures", f),
                         "validate-figures-all-releases", figures(all_releases=True))
    readme = ROOT / "README.md"
    rtext = readme.read_text(encoding="utf-8")
    pattern = re.compile(r"out of sample, (?:against .*?)?the median \|error\| is .*?fit runs,\s+"
                         r"[\d.]+%\s+"
                         r"\(worst [\d.]+%\)", re.S)
    if not pattern.search(rtext):
        raise SystemExit("README.md has no out-of-sample sentence to rewrite")
    new_readme = pattern.sub(readme_sentence(f).replace("\\", "\\\\"), rtext, count=1)
    if "--check" in sys.argv:
        return int(new_doc != text or new_readme != rtext)
    doc.write_text(new_doc, encoding="utf-8")
    if "--doc-only" in sys.argv:
        print("README.md not written; its sentence would read:\n" + readme_sentence(f))
    else:
        readme.write_text(new_readme, encoding="utf-8")
    for k, v in f.items():
        print(f"{k:45s} {v[0]:14s} {v[1]:4d} {v[2]:>7s} {v[3]:>8s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
