"""Honest calibration (issue #16): the fit set follows the documented rule, targets are judged
out of sample only, and the figures quoted in docs/calibration.md and README.md are the ones
`gpuplan validate --json` computes, to the printed decimal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuplan.report.fmt import pct
from gpuplan.report.validation import summary_figures
from gpuplan.validation import (
    calibration_set_reason,
    cross_validate,
    load_runs,
    summary,
)

ROOT = Path(__file__).resolve().parents[1]
# The issue's "done when" (#4), over GPU runs with a known configuration, out of sample.
MEDIAN_TARGET_PCT = 10.0
WORST_TARGET_PCT = 25.0

# Today's out-of-sample figures, as the strict xfails below state them (one decimal, as
# `validate` prints them); test_stated_figures_are_current keeps these honest. Since #12 they
# count each configuration's newest published release (calibrate/releases.py); ALL_RELEASES
# holds the same figures over every release (`validate --all-releases`), as quoted before.
NOW = {
    ("holdout", "median"): "9.9%", ("holdout", "worst"): "93.4%",
    ("cv", "median"): "12.1%", ("cv", "worst"): "103.8%",
}
ALL_RELEASES = {
    ("holdout", "median"): "10.4%", ("holdout", "worst"): "181.4%",
    ("cv", "median"): "11.8%", ("cv", "worst"): "179.5%",
}


@pytest.fixture(scope="module")
def cv(cat):
    return cross_validate(cat)


# --- the fit set ------------------------------------------------------------------------------

def test_every_fit_row_is_in_the_calibration_set():
    """../shared/data/README.md: the calibration set is the public list (column public_id), plus
    llm-foundry's benchmark rows at sequence >= 4,096 and MPT-13B on 8 x H100 BF16. A `fit` row
    outside it would make the fit drift from the documented rule."""
    outside = [r["id"] for r in load_runs() if r["fit"] == "fit" and not calibration_set_reason(r)]
    assert not outside, f"fit rows outside the calibration set: {outside}"


def test_the_calibration_rule_sorts_known_rows():
    """The rule is not vacuous: it names why each of these rows is or is not in the set."""
    rows = {r["id"]: r for r in load_runs()}
    expect = {
        "megatron2021-1.7b-32": "public list",
        "llmfoundry-mpt7b-8xh100-sxm-bf16-s65536": "llm-foundry long context",
        "llmfoundry-mpt13b-8xh100-sxm-bf16": "llm-foundry MPT-13B 8xH100 BF16",
        "llmfoundry-mpt30b-8xa100-80gb-bf16-s2048": "",  # long-context table, but 2,048 tokens
        "llmfoundry-mpt7b-8xh100-sxm-bf16": "",  # 8 x H100 BF16 at 2k, but MPT-7B
        "mbridge2509-h100-llama3-8b-8-fp8": "",  # NVIDIA's per-release tables: validation only
    }
    assert {k: calibration_set_reason(rows[k]) for k in expect} == expect


def test_public_ids_name_one_run_each():
    ids = [r["public_id"] for r in load_runs() if r["public_id"]]
    # 54 of our runs are runs of the public list (MLPerf 5.1 MI350X and 4.0 Gaudi 2 added in #12)
    assert len(ids) == len(set(ids)) == 54
    assert all(re.fullmatch(r"[A-Za-z0-9][\w.\-]*", i) for i in ids)


# --- targets, out of sample only ----------------------------------------------------------------

@pytest.mark.parametrize("all_releases, stated", [(False, NOW), (True, ALL_RELEASES)])
def test_stated_figures_are_current(results, cv, all_releases, stated):
    """The figures the xfail reasons below state are the ones computed today; over every
    release they are the figures stated before the newest-release default."""
    held = summary(results, subset="holdout", all_releases=all_releases)
    loso = summary(cv, all_releases=all_releases)
    assert held["sample"] == loso["sample"] == "out"
    assert (held["n"], loso["n"]) == ((240, 268) if all_releases else (117, 143))
    got = {("holdout", "median"): held["median_abs_error_pct"],
           ("holdout", "worst"): held["worst_abs_error_pct"],
           ("cv", "median"): loso["median_abs_error_pct"],
           ("cv", "worst"): loso["worst_abs_error_pct"]}
    assert {k: pct(v) for k, v in got.items()} == stated


def test_hold_out_median_meets_the_target(results):
    """Met from the recorded MoE dispatcher and all-to-all overlap (#12: 9.9% over the 78
    hold-out runs of the newest releases), missed (10.9% over 91) when the torchtitan Grand
    Teton runs were added, met again (9.5%) since torchtitan's FP8 is modelled as torchao runs
    it (#12; docs/calibration.md, "PyTorch-native FP8")."""
    s = summary(results, subset="holdout")
    assert s["n"] >= 70 and s["sample"] == "out"
    assert s["median_abs_error_pct"] <= MEDIAN_TARGET_PCT


@pytest.mark.xfail(strict=True, reason=(
    f"not met out of sample: worst |error| {NOW['holdout', 'worst']} over the hold-out runs "
    "(Qwen3-235B-A22B MXFP8 on 64 B200, release 25.11: no later release publishes 64 B200)"))
def test_hold_out_worst_meets_the_target(results):
    assert summary(results, subset="holdout")["worst_abs_error_pct"] <= WORST_TARGET_PCT


@pytest.mark.xfail(strict=True, reason=(
    f"not met out of sample: leave-one-source-out median |error| {NOW['cv', 'median']} over "
    "the 143 known runs of the newest releases (each source predicted by constants refitted "
    "without it)"))
def test_cross_validated_median_meets_the_target(cv):
    s = summary(cv)
    assert s["n"] >= 100 and s["sample"] == "out"
    assert s["median_abs_error_pct"] <= MEDIAN_TARGET_PCT


@pytest.mark.xfail(strict=True, reason=(
    f"not met out of sample: leave-one-source-out worst |error| {NOW['cv', 'worst']} "
    "(llm-foundry MPT-1B at 32k tokens on 8 H100: without its source the fsdp group is "
    "unfitted)"))
def test_cross_validated_worst_meets_the_target(cv):
    assert summary(cv)["worst_abs_error_pct"] <= WORST_TARGET_PCT


def test_cross_validation_predicts_each_source_without_its_own_runs(results, cv):
    """Leave-one-source-out returns every known run once, all out of sample; a source that fed
    the fit gets a different prediction once it is left out (so the refit excluded it)."""
    by_id = {r.id: r for r in cv}
    known = {r.id: r for r in results if r.status == "known"}
    assert set(by_id) == set(known) and len(cv) == len(known)
    assert all(r.sample == "out" for r in cv)
    assert {i for i, r in by_id.items() if r.fit == "fit"} == {
        i for i, r in known.items() if r.fit == "fit"}
    assert by_id["megatron2021-1.7b-32"].predicted != known["megatron2021-1.7b-32"].predicted
    # a source with no fit run is predicted by the full refit, as the catalog does
    assert by_id["mbridge2509-h100-llama3-8b-8-fp8"].predicted == pytest.approx(
        known["mbridge2509-h100-llama3-8b-8-fp8"].predicted, rel=0.02)


def test_coarse_moe_fit_run_holds_under_cross_validation(cv):
    """Regression guard, out of sample and within the fit set (replacing a guard on a hold-out
    row by id): the 25.11 GB200 DeepSeek-V3 FP8 fit run, predicted by constants refitted
    without its source, stays within 10% (today +5.7%)."""
    run = next(r for r in cv if r.id == "mbridge2511-gb200-deepseekv3-256-fp8")
    assert run.fit == "fit" and abs(run.error_pct) < 10.0


# --- the figures the documents quote ------------------------------------------------------------

TABLE_ROW = re.compile(r"^\| ([^|]+?) \| (in-sample|out-of-sample|mixed) \| (\d+) \| "
                       r"([\d.]+%) \| ([\d.]+%) \|$", re.M)


@pytest.mark.parametrize("marker, all_releases", [("validate-figures", False),
                                                  ("validate-figures-all-releases", True)])
def test_calibration_doc_figures_match_validate(results, cv, marker, all_releases):
    """docs/calibration.md's current-figures tables (between the validate-figures markers:
    newest releases, the default; and every release) quote every summary `validate --json` and
    `validate --cross-validate --json` print (with `--all-releases` for the second), each with
    its sample, to the decimal."""
    text = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
    start, end = text.index(f"<!-- {marker} -->"), text.index(f"<!-- /{marker} -->")
    text = text[start:end]
    quoted = {m[1]: (m[2], int(m[3]), m[4], m[5]) for m in TABLE_ROW.finditer(text)}
    assert quoted == summary_figures(results, cv, all_releases=all_releases)


def test_interval_verdict_does_not_depend_on_which_runs_are_counted(cat, cv):
    """A run's P10-P90 range comes from every release of the other sources, so the newest-
    release default changes which runs coverage counts, never whether a run is inside."""
    from gpuplan.calibrate.groups import coverage

    now, every = coverage(cat, cv)["inside"], coverage(cat, cv, all_releases=True)["inside"]
    assert len(now) == 141 and len(every) == 264  # the 4 runs flagged `anomaly` are left out
    assert now == {k: every[k] for k in now}


README_OUT = re.compile(r"out of sample, against the newest published release of each "
                        r"configuration, the median \|error\| is ([\d.]+%) over the (\d+) "
                        r"hold-out runs \(worst ([\d.]+%)\) and ([\d.]+%) under "
                        r"leave-one-source-out cross-validation over the (\d+) known runs "
                        r"\(worst ([\d.]+%)\); in-sample, over the (\d+) current fit runs, "
                        r"([\d.]+%) \(worst ([\d.]+%)\)")


def test_readme_figures_match_validate(results, cv):
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = README_OUT.search(text)
    assert m, "README.md states no out-of-sample figure in the expected sentence"
    f = summary_figures(results, cv)
    held = f["hold-out runs, catalog constants"]
    loso = f["all known runs, leave-one-source-out"]
    fit = f["fit runs, catalog constants"]
    assert m.groups() == (held[2], str(held[1]), held[3], loso[2], str(loso[1]), loso[3],
                          str(fit[1]), fit[2], fit[3])


# --- issue #12 targets: by group, out of sample (leave-one-source-out) ---------------------------

GROUP_MEDIAN_TARGET_PCT = 10.0  # every stack and family group with >= 10 runs
ALL_MEDIAN_TARGET_PCT = 8.0  # over all known-configuration runs
FP8_GAIN_TARGET_PCT = 10.0  # FP8/BF16 gain on the paired runs


@pytest.mark.xfail(strict=True, reason=(
    f"not met out of sample: leave-one-source-out median |error| {NOW['cv', 'median']} over "
    "the 143 known runs of the newest releases (target 8%)"))
def test_issue12_all_runs_median(cv):
    assert summary(cv)["median_abs_error_pct"] <= ALL_MEDIAN_TARGET_PCT


@pytest.mark.xfail(strict=True, reason=(
    "not met out of sample: groups (>= 10 newest-release runs) over 10% median |error| under "
    "leave-one-source-out: family gb300 15.5%, h100 15.9%; stack fsdp 23.4%, nemo 12.5% "
    "(a100 9.1%, megatron 7.9%, torchtitan 7.0%, met)"))
def test_issue12_every_large_group_median(cv):
    from gpuplan.calibrate.groups import by_group

    groups = by_group(cv)
    over = {(g, k): s["median_abs_error_pct"] for g in ("family", "stack")
            for k, s in groups[g].items()
            if s["n"] >= 10 and s["median_abs_error_pct"] > GROUP_MEDIAN_TARGET_PCT}
    assert not over, over


@pytest.mark.xfail(strict=True, reason=(
    "not met out of sample: FP8/BF16 gain error +11.1% (llm-foundry MPT-3B, 8 H100), "
    "+16.3% (DeepSeek-V3 on 256 GB300, 25.11: no later release publishes its BF16 run, so "
    "the pair is current) and +15.0% (torchtitan Llama 3 8B on 64 Grand Teton H100, TP 8: "
    "GEMMs 512 wide per rank; the three other torchtitan pairs +0.4% to +2.1%) under "
    "leave-one-source-out"))
def test_issue12_fp8_gain_on_pairs(cv):
    from gpuplan.calibrate.groups import fp8_pairs

    pairs = fp8_pairs(load_runs(), cv)
    assert len(pairs) >= 2
    assert all(abs(p["error_pct"]) <= FP8_GAIN_TARGET_PCT for p in pairs)


MOE_2511_TARGET_PCT = 25.0  # or inside the run's P10-P90 interval


# The issue names the 25.11 runs, so this target keeps all 12 of them, superseded or not (9 are
# superseded by later releases): the newest-release default changes what the summaries count,
# not this test. The P10-P90 range a run is judged against is built from every release of the
# other sources (calibrate.groups.coverage), the same whichever runs are counted.
# A run flagged `anomaly` (a source-stated regression) has no range (it is left out of the
# coverage) and counts as a miss here: a flag explains a miss, it does not meet the target.
@pytest.mark.xfail(strict=True, reason=(
    "not met out of sample: 3 of the 12 25.11 MoE runs are off by more than 25% and outside "
    "their P10-P90 interval under leave-one-source-out: Qwen3-30B-A3B on 16 H100 (+149.0%) "
    "and on 8 B200 (+179.5%) and Qwen3-235B-A22B MXFP8 on 64 B200 (+85.6%, no later release "
    "publishes 64 B200), each flagged with an NVIDIA-stated 25.11 regression (column "
    "`anomaly`: Megatron-Bridge #1998, #1705/#1760)"))
def test_issue12_2511_moe_runs_within_25pct_or_their_interval(cat, cv):
    from gpuplan.calibrate.groups import coverage

    inside = coverage(cat, cv, all_releases=True)["inside"]
    runs = [r for r in cv if r.id.startswith("mbridge2511-") and r.moe]
    assert len(runs) == 12  # DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B, 25.11 tables
    missed = {r.id: round(r.error_pct, 1) for r in runs
              if abs(r.error_pct) > MOE_2511_TARGET_PCT and not inside.get(r.id, False)}
    assert not missed, missed
