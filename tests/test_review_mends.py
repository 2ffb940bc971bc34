"""Review mends: the site inputs of plan and estimate keep the same rules as `gpuplan tco`
(`search.inputs.check_input`), whether they come from the API, the CLI or the web."""

from __future__ import annotations

import json
import math
import warnings

import pytest

import gpuplan
from gpuplan.errors import ConfigError

ESTIMATE = dict(model="llama3-8b", gpu="h100", gpus=8)
PLAN = dict(model="llama3-8b", tokens="1T")


@pytest.mark.parametrize("flags, message", [
    (dict(pue=0.5, years=0), "--years must be more than 0, got 0"),
    (dict(pue=0.5), "--pue must be at least 1 (facility power / IT power), got 0.5"),
    (dict(years=101), "--years must be at most 100, got 101"),
    (dict(utilization=1.5), "--utilization must be a fraction between 0 and 1, got 1.5; "
                            "write 0.7 for 70%"),
    (dict(reuse=-0.1), "--reuse must be a number >= 0, got -0.1; fix the value"),
    (dict(grid_intensity=float("nan")), "--grid-intensity must be a number >= 0, got nan; "
                                        "fix the value"),
    (dict(interruptions=1e16), "--interruptions must be at most 1e+12, got 1e+16; "
                               "fix the value"),
    (dict(electricity="cheap"), "--electricity must be a number, got 'cheap'"),
])
@pytest.mark.parametrize("call", [gpuplan.estimate, gpuplan.plan], ids=["estimate", "plan"])
def test_api_site_flags_keep_the_tco_rules(call, flags, message):
    """The bug: `estimate(..., pue=0.5, years=0)` was accepted (only argparse checked them)."""
    with pytest.raises(ConfigError) as err:
        call(**(ESTIMATE if call is gpuplan.estimate else PLAN), **flags)
    assert str(err.value) == message


def test_api_site_flags_in_range_still_run():
    """The checked values reach the site unchanged (-0 becomes 0, as in tco)."""
    e = gpuplan.estimate(**ESTIMATE, tokens="1T", pue=1.0, years=4, electricity=-0.0,
                         utilization=0.7, grid_intensity=0.4, interruptions=0.05, reuse=0.3)
    assert e.feasible and e.energy_kwh is not None and e.energy_kwh > 0


@pytest.mark.parametrize("argv, message", [
    (("plan", *("--model", "llama3-8b", "--tokens", "1T"), "--years", "1000"),
     "--years must be at most 100, got 1000.0"),
    (("estimate", *("--model", "llama3-8b", "--gpu", "h100", "--gpus", "8"),
      "--electricity", "1e300"), "--electricity must be at most 1e+12, got 1e+300; fix the value"),
])
def test_cli_site_flags_keep_the_tco_rules(run_cli, argv, message):
    code, out, err = run_cli(*argv)
    assert (code, out, err) == (2, "", f"gpuplan: error: {message}\n")


# Issue 10 leftovers: a day of life and 1% of the hours at least; every input at most 1e12, so
# a cost per used GPU-hour never overflows (these printed a numpy RuntimeWarning).
@pytest.mark.parametrize("argv, message", [
    (("tco", "--system", "dgx-h100", "--nodes", "1", "--years=1e-320"),
     "--years must be at least 1/365.25 (one day), got 1e-320"),
    (("tco", "--system", "dgx-h100", "--nodes", "1", "--utilization", "0.001"),
     "--utilization must be at least 0.01 (1% of the hours), got 0.001"),
    (("plan", "--model", "llama3-8b", "--tokens", "1T", "--utilization", "1e-320"),
     "--utilization must be at least 0.01 (1% of the hours), got 1e-320"),
    (("plan", "--model", "llama3-8b", "--tokens", "1T", "--years", "0.001"),
     "--years must be at least 1/365.25 (one day), got 0.001"),
    (("plan", "--model", "llama3-8b", "--tokens", "1T", "--electricity", "1e300"),
     "--electricity must be at most 1e+12, got 1e+300; fix the value"),
])
def test_tiny_life_and_use_and_huge_money_are_refused(run_cli, argv, message):
    code, out, err = run_cli(*argv)
    assert (code, out, err) == (2, "", f"gpuplan: error: {message}\n")


def _numbers(doc):
    if isinstance(doc, dict):
        doc = list(doc.values())
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return [doc] if isinstance(doc, float) else []


def test_the_smallest_and_largest_inputs_allowed_stay_finite(run_cli):
    """At the stated bounds (a day, 1%, 1e12 USD) every number is finite and numpy silent."""
    bounds = ("--years", str(1 / 365.25), "--utilization", "0.01", "--price", "1e12",
              "--electricity", "1e12", "--staff", "1e12", "--colocation", "1e12",
              "--pue", "1e12")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli("tco", "--system", "dgx-h100", "--nodes", "1", *bounds,
                                 "--compare-cloud", "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert 0 < doc["usd_per_gpu_hour"] < math.inf
    numbers = _numbers(doc)  # the cloud rows and break-evens too
    assert len(numbers) > 20 and all(math.isfinite(x) for x in numbers)
