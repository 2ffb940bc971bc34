"""The software stack as an input (issue #12): names, per-(family, stack) efficiency fitted on
the calibration set, guesses where a pair has no fit run, FP8 gain per stack, power limit."""

from __future__ import annotations

import json
import math

import pytest

import gpuplan
from gpuplan.errors import ConfigError
from gpuplan.search.hardware import best_stack, efficiency_for, pair_is_guess, stack_row
from gpuplan.spec import STACKS, Layout
from gpuplan.validation import MIN_STACK_RUNS, STACK_PLAN, calibrate_all, load_runs

RUN = dict(model="llama3-8b", gpu="h100-sxm", gpus=8, zero=1, tokens="100B",
           usd_per_gpu_hour=2.0)


def test_stack_names_and_default():
    assert STACKS == ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "torchtune")
    assert Layout().stack == 0


def test_every_run_names_a_known_stack():
    stacks = {r["stack"] for r in load_runs()}
    assert stacks <= set(STACKS) and {"megatron", "nemo", "fsdp"} <= stacks


def test_catalog_stack_constants_are_the_refit(cat):
    """data/efficiency.toml's [stack.NAME] rows hold what `validate --calibrate` fits (no hand
    edits): grid steps are 0.01 (matmul_scale) and 0.02 (fp8_ratio), so equal within 5e-3."""
    _, stacks = calibrate_all(cat)
    for group, _params in STACK_PLAN:
        row = stack_row(cat, group)
        fit = stacks[group]
        assert row["matmul_scale"] == pytest.approx(fit["matmul_scale"], abs=5e-3), group
        assert row["fp8_ratio"] == pytest.approx(fit["fp8_ratio"], abs=5e-3), group
        assert list(row.get("fitted_families", [])) == fit["fitted_families"], group
        assert bool(row["guess"]) == (fit["runs"] < MIN_STACK_RUNS), group


def test_nemo_shares_megatrons_calibration(cat):
    nemo, meg = stack_row(cat, "nemo"), stack_row(cat, "megatron")
    assert (nemo["matmul_scale"], nemo["fp8_ratio"]) == (meg["matmul_scale"], meg["fp8_ratio"])


def test_pairs_without_a_fit_run_are_guesses(cat):
    """B200 never inherits measured status from GB200; torchtitan has no fit run at all."""
    assert not pair_is_guess(cat, "h100", "megatron")
    assert not pair_is_guess(cat, "a100", "fsdp")
    assert not pair_is_guess(cat, "gb200", "nemo")
    assert pair_is_guess(cat, "gb200", "fsdp")  # no FSDP run on GB200
    for stack in STACKS:
        assert pair_is_guess(cat, "b200", stack) and pair_is_guess(cat, "h200", stack)
    assert all(pair_is_guess(cat, f, "torchtitan") for f in ("a100", "h100", "gb200"))
    assert bool(efficiency_for(cat, ["b200"], "megatron").guess[0])


def test_estimate_flags_a_guess_in_result_and_text():
    from gpuplan.report.estimate import render_text

    e = gpuplan.estimate(**{**RUN, "gpu": "b200"})
    assert e.efficiency_is_guess and e.layout.stack == "megatron"
    assert "no published run calibrates b200 under megatron" in render_text(e)
    assert not gpuplan.estimate(**RUN).efficiency_is_guess


def test_fsdp_is_slower_than_megatron_on_the_same_layout():
    """matmul_scale < 1 for fsdp (fitted on llm-foundry): the same layout takes longer."""
    meg = gpuplan.estimate(**RUN)
    fsdp = gpuplan.estimate(**RUN, stack="fsdp")
    assert fsdp.layout.stack == "fsdp"
    assert fsdp.step_time_s > meg.step_time_s * 1.01


def test_fp8_gain_is_fitted_per_stack_not_the_peak_ratio():
    """The end-to-end FP8 gain stays well under the 2x peak ratio and differs by stack."""
    gains = {}
    for stack in ("megatron", "fsdp"):
        bf16 = gpuplan.estimate(**RUN, stack=stack)
        fp8 = gpuplan.estimate(**RUN, stack=stack, precision="fp8")
        gains[stack] = bf16.step_time_s / fp8.step_time_s
    assert all(1.0 < g < 1.9 for g in gains.values()), gains
    assert gains["fsdp"] < gains["megatron"]


def test_unknown_stack_is_one_line():
    with pytest.raises(ConfigError, match="unknown software stack 'megatorn'; choose one of"):
        gpuplan.estimate(**RUN, stack="megatorn")


def test_plan_uses_the_best_supported_stack_and_stack_constrains(cat):
    assert best_stack(cat, "h100") == "megatron" and best_stack(cat, "b200") == "megatron"
    default = gpuplan.plan(model="llama3-8b", tokens="100B", gpu="h100-sxm", max_gpus=64,
                           top=3)
    assert default.stack is None and {p.stack for p in default.plans} == {"megatron"}
    fsdp = gpuplan.plan(model="llama3-8b", tokens="100B", gpu="h100-sxm", max_gpus=64, top=3,
                        stack="fsdp")
    assert fsdp.stack == "fsdp" and {p.stack for p in fsdp.plans} == {"fsdp"}


def test_cli_stack_echo(run_cli):
    code, out, err = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm",
                             "--gpus", "8", "--stack", "torchtitan", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["layout"]["stack"] == "torchtitan" and doc["efficiency_is_guess"]
    code, out, _ = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm",
                           "--gpus", "8", "--stack", "nemo")
    assert code == 0 and "stack nemo" in out


def test_power_limit_runs_slower_by_the_sourced_hopper_law():
    """H100 takes k = ln(835.5/989) / ln(400/700) = 0.301 (H100 NVL against SXM, #12's rule):
    at half its 700 W the compute part takes 2^0.301 = 1.23x as long (exact to 1e-9, the
    same arithmetic); a limit above TDP changes nothing; the estimate carries the factor."""
    full = gpuplan.estimate(**RUN)
    half = gpuplan.estimate(**RUN, power_limit_watts=350)
    above = gpuplan.estimate(**RUN, power_limit_watts=1000)
    compute = {k: dict(e.time_breakdown_s)["compute_s"] for k, e in
               (("full", full), ("half", half))}
    k = math.log(835.5 / 989.0) / math.log(400.0 / 700.0)
    assert compute["half"] / compute["full"] == pytest.approx(2 ** k, rel=1e-9)
    assert (half.power.factor, half.power.basis) == (pytest.approx(0.5 ** k, rel=1e-12),
                                                     "vendor-peak")
    assert full.power is None and above.power.factor == 1.0
    assert half.step_time_s > full.step_time_s
    assert above.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    assert half.energy_kwh < full.energy_kwh * 1.26  # the GPUs draw at most the limit
    with pytest.raises(ConfigError, match="--power-limit-watts"):
        gpuplan.estimate(**RUN, power_limit_watts=0)
