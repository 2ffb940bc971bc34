"""Review mends: the site inputs of plan and estimate keep the same rules as `gpuplan tco`
(`search.inputs.check_input`), whether they come from the API, the CLI or the web."""

from __future__ import annotations

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
