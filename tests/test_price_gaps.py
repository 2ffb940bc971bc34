"""Issue 14, the catalog's price gaps: commitment prices (AWS Savings Plans, GCP committed use,
Azure reserved), China-region clouds with their currency conversion, and the date check."""

from __future__ import annotations

import re

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.errors import CatalogError


@pytest.mark.parametrize("date", ["2026-01\n", "2026-01-02\n", " 2026-01", "2026-1"])
def test_a_date_with_trailing_text_is_rejected(tmp_path, date):
    """catalog dates are matched whole: a trailing newline is not a date (was accepted)."""
    path = tmp_path / "o.toml"
    path.write_text(f'[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nas_of = {date!r}\n'
                    .replace("'", '"'))
    with pytest.raises(CatalogError, match="as_of must be a date YYYY-MM-DD or YYYY-MM"):
        load_catalog([str(path)])


# --- China-region clouds: CNY list prices converted with a sourced rate ----------------------

CNY = re.compile(r"([a-z0-9-]+) CNY ([0-9.]+)/h")
RATE = re.compile(r"site (usd_per_cny\w*)")  # the site rate a row's source says it used


def test_cny_prices_convert_with_the_site_rate():
    """Every offer whose notes publish CNY prices stores USD = CNY x the site rate its source
    names (usd_per_cny, or usd_per_cny_2023_06 for June 2023 prices), rounded to 6 decimals
    (so 1e-6 absolute); each rate is a sourced, dated site value."""
    cat = load_catalog()
    converted = 0
    for o in cat.offers.values():
        named = RATE.findall(o.source)
        for mode, cny in CNY.findall(o.notes):
            assert len(named) == 1, o.id  # exactly one rate, named in the source
            rate = cat.site[named[0]]
            assert rate.source.strip() and rate.as_of and 0.10 < rate.value < 0.20
            assert o.usd_per_hour[mode] == pytest.approx(float(cny) * rate.value, abs=1e-6), (
                o.id, mode)
            converted += 1
        if o.region.startswith("cn-"):
            assert "CNY" in o.notes and "usd_per_cny" in o.source, o.id
    assert converted >= 12  # AWS China: two offers x five modes; Alibaba: two on-demand


def test_china_region_offers_plan(run_json):
    res = run_json("plan", "--model", "llama3-8b", "--tokens", "100B", "--cloud", "aws-cn",
                   "--pricing", "savings-plan-1y")
    assert res["plans"] and all(p["offer"].endswith("cn-northwest-1") for p in res["plans"])


# --- commitment prices -----------------------------------------------------------------------

DERIVED = {  # offer -> (savings plan mode, the reserved mode its notes say it equals)
    "aws-p4d.24xlarge-us-east-1": {"savings-plan-1y": "reserved-1y",
                                   "savings-plan-3y": "reserved-3y"},
    "aws-p4d.24xlarge-us-west-2": {"savings-plan-1y": "reserved-1y",
                                   "savings-plan-3y": "reserved-3y"},
    "aws-p4de.24xlarge-us-east-1": {"savings-plan-1y": "reserved-1y",
                                    "savings-plan-3y": "reserved-3y"},
    "aws-p5.48xlarge-us-east-1": {"savings-plan-1y": "reserved-1y",
                                  "savings-plan-3y": "reserved-3y"},
    "aws-p5.48xlarge-us-west-2": {"savings-plan-1y": "reserved-1y",
                                  "savings-plan-3y": "reserved-3y"},
}


@pytest.mark.parametrize("ident", sorted(DERIVED))
def test_derived_savings_plans_say_so_and_match_their_basis(ident):
    o = load_catalog().offers[ident]
    assert "DERIVED" in o.notes and "confidence" in o.notes and "savings plans" in o.source
    for sp, reserved in DERIVED[ident].items():
        assert o.usd_per_hour[sp] == o.usd_per_hour[reserved], (ident, sp)


def test_every_aws_savings_plan_is_derived_or_published():
    """A savings-plan price on an AWS row is either the documented derivation (DERIVED) or a
    published rate (the China rows, whose notes say so)."""
    for o in load_catalog().offers.values():
        if o.cloud.startswith("aws") and any(m.startswith("savings-plan") for m in o.usd_per_hour):
            assert o.id in DERIVED or "published Savings Plans rates" in o.notes, o.id


def test_azure_a100_savings_plans_plan(run_json):
    res = run_json("plan", "--model", "llama3-8b", "--tokens", "100B", "--cloud", "azure",
                   "--pricing", "savings-plan-3y")
    assert {p["offer"] for p in res["plans"]} <= {"azure-nd96asr-v4-eastus",
                                                  "azure-nd96amsr-a100-v4-eastus"}
    assert res["plans"]


# GCP committed use (resource-based CUD) for a2-highgpu-8g: monthly figures of the 2026-07-30
# price list (Cyclenerd pricing.yml, months of 730 h), stored per instance-hour to 6 decimals.
GCP_A2_MONTH = {"on-demand": 21452.5684, "reserved-1y": 13514.9691136,
                "reserved-3y": 7508.53662384}


def test_gcp_committed_use_matches_its_price_list():
    o = load_catalog().offers["gcp-a2-highgpu-8g-us-central1"]
    for mode, month in GCP_A2_MONTH.items():
        assert o.usd_per_hour[mode] == pytest.approx(month / 730, abs=1e-6), mode
    assert o.usd_per_hour["reserved-3y"] < o.usd_per_hour["reserved-1y"] < o.usd_per_hour[
        "on-demand"]
    assert "Confidence" in o.notes and "Cyclenerd" in o.source


def test_gcp_committed_use_plans(run_json):
    res = run_json("plan", "--model", "llama3-8b", "--tokens", "100B", "--cloud", "gcp",
                   "--pricing", "reserved-1y")
    assert res["plans"]
    assert {p["offer"] for p in res["plans"]} == {"gcp-a2-highgpu-8g-us-central1"}
    assert {p["pricing"] for p in res["plans"]} == {"reserved-1y"}
