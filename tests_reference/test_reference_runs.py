"""published_runs.csv against ../shared/data/published_runs_public.csv (#16): every `public_id`
names a run of the public list, and where both give the same metric the figure is the same
(exactly: both copy the source's printed number)."""

from __future__ import annotations

import csv

from conftest import shared_data

from gpuplan.validation import load_runs

# our metric -> the public list's column holding it
COLUMN = {"tokens_per_s_per_gpu": "tokens_per_sec_per_gpu", "tflops_per_gpu": "tflops_per_gpu",
          "mfu_pct": "mfu_pct", "step_time_s": "step_time_s"}


def _public() -> dict[str, dict[str, str]]:
    with open(shared_data("published_runs_public.csv"), newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_every_public_id_names_a_public_run():
    ref = _public()
    missing = [r["id"] for r in load_runs() if r["public_id"] and r["public_id"] not in ref]
    assert not missing


def test_published_figures_agree_with_the_public_list():
    ref = _public()
    compared, problems = 0, []
    for r in load_runs():
        theirs = ref.get(r["public_id"], {}).get(COLUMN[r["metric"]], "").strip()
        if not theirs:
            continue
        compared += 1
        if float(r["published"]) != float(theirs):
            problems.append(f"{r['id']}: {r['published']} vs {r['public_id']} {theirs}")
    assert not problems, "\n".join(problems)
    assert compared >= 40
