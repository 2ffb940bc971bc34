"""The power-limit law of #12 (search.power): k per family from published perf-vs-power figures
under the rule of docs/calibration.md ("Power limit"), the factor capped at 1, bad limits
refused in one line, and the estimate saying which law it used."""

from __future__ import annotations

import json
import math

import pytest

import gpuplan
from gpuplan.errors import ConfigError
from gpuplan.report.estimate import render_text, to_json
from gpuplan.search.power import (
    A100_MEASURED,
    ASSUMED,
    HOPPER_VENDOR,
    PowerPoint,
    fit_exponent,
    power_factor,
    power_law,
)
from gpuplan.validation import load_runs

RUN = dict(model="llama3-8b", gpu="h100-sxm", gpus=8, zero=1, tokens="100B",
           usd_per_gpu_hour=2.0)


def test_fit_recovers_a_known_exponent():
    """Points drawn from ratio = x^0.42 give back 0.42 (to 1e-12: least squares on exact
    points); one point gives ln(ratio) / ln(x)."""
    pts = tuple(PowerPoint(cap_watts=c, tdp_watts=700.0, ratio=(c / 700.0) ** 0.42)
                for c in (300.0, 450.0, 600.0))
    assert fit_exponent(pts) == pytest.approx(0.42, rel=1e-12)
    one = (PowerPoint(cap_watts=350.0, tdp_watts=700.0, ratio=0.8),)
    assert fit_exponent(one) == pytest.approx(math.log(0.8) / math.log(0.5), rel=1e-12)


def test_hopper_law_is_the_catalog_h100_nvl_against_sxm(cat):
    """Rule (2): the vendor point is the catalog's own sourced rows (dense BF16 peak and TDP of
    h100-nvl and h100-sxm), so the law moves if the datasheet figures are corrected."""
    nvl, sxm = cat.accelerator("h100-nvl"), cat.accelerator("h100-sxm")
    k = math.log(nvl.peak_flops["bf16"] / sxm.peak_flops["bf16"]) / math.log(
        nvl.tdp_watts / sxm.tdp_watts)
    assert fit_exponent(HOPPER_VENDOR) == pytest.approx(k, rel=1e-9)
    for family in ("h100", "h100-pcie", "h200"):
        law = power_law(family)
        assert (round(law.exponent, 3), law.basis) == (0.301, "vendor-peak")
    assert cat.accelerator("h100-sxm-hbm2e").family == "h100"  # the 500 W Grand Teton part


def test_a100_law_is_the_measured_training_slowdown():
    """Rule (1): ten points (GPT-3 XL and BLOOM 3B, 175-275 W of 300 W), each slower the lower
    the cap, fit k = 0.877 (three decimals, as docs/calibration.md states it)."""
    assert len(A100_MEASURED) == 10
    for series in (A100_MEASURED[:5], A100_MEASURED[5:]):
        ratios = [p.ratio for p in series]  # caps 275 -> 175 W
        assert all(0 < b < a < 1 for a, b in zip(ratios, ratios[1:], strict=False))
    law = power_law("a100")
    assert (round(law.exponent, 3), law.basis) == (0.877, "measured")


def test_a_family_without_a_source_keeps_the_stated_assumption():
    for family in ("b200", "gb200", "mi300x", "no-such-family"):
        assert power_law(family) is ASSUMED
    assert (ASSUMED.exponent, ASSUMED.basis) == (1.0 / 3.0, "assumption")


@pytest.mark.parametrize("limit", [700.0, 701.0, 10_000.0])
def test_factor_is_capped_at_one(limit):
    assert power_factor(700.0, limit, 0.301) == 1.0


@pytest.mark.parametrize("limit", [0.0, -5.0, float("nan"), float("inf")])
def test_bad_limit_is_refused_in_one_line(limit):
    with pytest.raises(ConfigError, match="--power-limit-watts must be a number above 0") as e:
        power_factor(700.0, limit, 0.301)
    assert "\n" not in str(e.value)


def test_no_published_run_enters_the_law():
    """The law is not fitted on runs: no calibration-set (fit) row is power-limited; the
    power-limited rows (Grand Teton, 500 W) are validation only."""
    rows = [r for r in load_runs() if r.get("power_limit_watts", "").strip()]
    assert rows and all(r["fit"] != "fit" for r in rows)


def test_estimate_text_and_json_state_the_factor_and_its_source():
    e = gpuplan.estimate(**RUN, power_limit_watts=500)
    text = render_text(e)
    assert ("power limit 500 W of 700 W TDP: peak FLOP/s x 0.904 = (limit / TDP)^0.301, from "
            "vendor peaks at two power ratings (NVIDIA H100 datasheet") in text
    doc = json.loads(json.dumps(to_json(e)))
    assert doc["power"]["basis"] == "vendor-peak"
    assert doc["power"]["factor"] == pytest.approx((500 / 700) ** 0.30139, rel=1e-4)
    assert "power" not in to_json(gpuplan.estimate(**RUN))  # only with a limit
    b200 = gpuplan.estimate(**{**RUN, "gpu": "b200"}, power_limit_watts=700)
    assert "an assumption (power ~ f^3)" in render_text(b200)
