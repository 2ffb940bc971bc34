"""Cloud offers and site defaults in the package catalog, and the SkyPilot importer check (#2).

Tolerances and ranges are stated where they are used:
- importer: our price equals the SkyPilot catalog row within 0.5% (the catalog prints up to 6
  decimals; 0.5% allows rounding a price to cents, nothing more);
- plausibility ranges for site values are wide on purpose (they catch unit slips such as
  cents vs dollars or GiB vs bytes, not disagreements about the best estimate).
"""

from __future__ import annotations

import math
import re

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.spec import Offer

IMPORT_RTOL = 0.005  # 0.5%: rounding to the cent, see module docstring
SKYPILOT = re.compile(r"SkyPilot catalog (\S+)@([0-9a-f]{40})")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# --- offers ---------------------------------------------------------------------------------


def test_every_offer_resolves_its_accelerator(cat):
    assert len(cat.offers) >= 30
    for offer in cat.offers.values():
        acc = cat.accelerator(offer.accelerator)
        assert acc.id == offer.accelerator, offer.id
        assert offer.count >= 1, offer.id


def test_prices_are_positive_and_per_gpu_hour_plausible(cat):
    """Every published price > 0; on-demand per GPU-hour within $0.10-$20 (catches a per-GPU
    price entered as per-instance or vice versa: an 8-GPU instance is $15-$150/h)."""
    for offer in cat.offers.values():
        assert offer.usd_per_hour, offer.id
        for mode, price in offer.usd_per_hour.items():
            assert price > 0, (offer.id, mode)
        if offer.capacity_block_usd_per_hour is not None:
            assert offer.capacity_block_usd_per_hour > 0, offer.id
        if "on-demand" in offer.usd_per_hour:
            per_gpu = offer.usd_per_hour["on-demand"] / offer.count
            assert 0.10 <= per_gpu <= 20.0, (offer.id, per_gpu)


def price_order_violations(offer: Offer) -> list[str]:
    """Orderings that must hold per instance-hour: spot <= on-demand, reserved-3y <= reserved-1y
    <= on-demand, savings-plan-3y <= savings-plan-1y <= on-demand (where both are present)."""
    p = offer.usd_per_hour
    chains = [("spot", "on-demand"), ("reserved-3y", "reserved-1y"), ("reserved-1y", "on-demand"),
              ("reserved-3y", "on-demand"), ("savings-plan-3y", "savings-plan-1y"),
              ("savings-plan-1y", "on-demand"), ("savings-plan-3y", "on-demand")]
    return [f"{offer.id}: {lo} {p[lo]} > {hi} {p[hi]}"
            for lo, hi in chains if lo in p and hi in p and p[lo] > p[hi]]


def test_price_order_check_catches_a_bad_row():
    bad = Offer(id="x", cloud="c", instance_type="t", accelerator="a", count=8, region="r",
                usd_per_hour={"on-demand": 10.0, "spot": 12.0, "reserved-1y": 6.0,
                              "reserved-3y": 7.0},
                network_bytes_per_s=0.0, max_instances=1, source="s", as_of="2026-01")
    assert len(price_order_violations(bad)) == 2


def test_catalog_prices_are_ordered(cat):
    violations = [v for o in cat.offers.values() for v in price_order_violations(o)]
    assert violations == []
    assert sum("spot" in o.usd_per_hour for o in cat.offers.values()) >= 15


COMMITMENT_MODES = ("reserved-1y", "reserved-3y", "savings-plan-1y", "savings-plan-3y")


def test_p5_carries_sourced_reserved_prices(cat):
    """#5: the p5.48xlarge us-east-1 row has 1-yr and 3-yr reserved prices, strictly ordered
    3y < 1y < on-demand per instance-hour, and every row with a commitment price says in its
    source where that price came from (a row cannot gain one silently)."""
    p = cat.offer("p5").usd_per_hour
    assert {"reserved-1y", "reserved-3y"} <= set(p)
    assert p["reserved-3y"] < p["reserved-1y"] < p["on-demand"]
    for o in cat.offers.values():
        if any(m in o.usd_per_hour for m in COMMITMENT_MODES):
            text = o.source.lower()
            assert "reserved" in text or "savings" in text, o.id


def test_required_offers_exist(cat):
    have = {(o.cloud, o.instance_type, o.region) for o in cat.offers.values()}
    required = [
        ("aws", "p4d.24xlarge", "us-east-1"), ("aws", "p4de.24xlarge", "us-east-1"),
        ("aws", "p5.48xlarge", "us-east-1"), ("aws", "p5en.48xlarge", "us-east-1"),
        ("aws", "p6-b200.48xlarge", "us-east-1"),
        ("gcp", "a2-highgpu-8g", "us-central1"), ("gcp", "a2-ultragpu-8g", "us-central1"),
        ("gcp", "a3-highgpu-8g", "us-central1"), ("gcp", "a3-megagpu-8g", "us-central1"),
        ("gcp", "a4-highgpu-8g", "us-central1"),
        ("azure", "Standard_ND96asr_v4", "eastus"),
        ("azure", "Standard_ND96amsr_A100_v4", "eastus"),
        ("azure", "Standard_ND96isr_H100_v5", "eastus"),
    ]
    missing = [r for r in required if r not in have]
    assert missing == []
    # a second region for some AWS instances
    aws_regions = {(o.instance_type, o.region) for o in cat.offers.values() if o.cloud == "aws"}
    assert len({r for t, r in aws_regions if t == "p5.48xlarge"}) >= 2
    clouds = {o.cloud for o in cat.offers.values()}
    assert {"lambda", "runpod"} <= clouds
    assert clouds & {"coreweave", "nebius"}
    eight_hopper = {(o.cloud, o.accelerator) for o in cat.offers.values() if o.count == 8}
    assert ("nebius", "h200") in eight_hopper or ("coreweave", "h200") in eight_hopper
    by_acc = {o.accelerator for o in cat.offers.values()}
    assert {"mi300x", "l40s", "rtx-4090", "h100-sxm", "h200", "b200", "a100-80gb"} <= by_acc


def test_aliases_and_units(cat):
    p5 = cat.offer("p5")
    assert (p5.cloud, p5.instance_type, p5.region) == ("aws", "p5.48xlarge", "us-east-1")
    assert cat.offer("P5.48xlarge").id == p5.id
    # 3200 Gbit/s EFA stored as bytes/s: 3200e9 / 8
    assert p5.network_bytes_per_s == pytest.approx(3200e9 / 8)
    assert p5.count == 8 and p5.accelerator == "h100-sxm"


def test_multi_node_offers_have_a_fabric(cat):
    """An offer usable across instances (max_instances != 1) must state its scale-out bandwidth;
    a single box (network 0) must say max_instances = 1, so the search never spans it."""
    for o in cat.offers.values():
        if o.network_bytes_per_s == 0:
            assert o.max_instances == 1, o.id
        else:
            assert o.network_bytes_per_s >= 100e9 / 8, o.id  # at least 100 Gbit/s


def test_every_offer_is_sourced_and_dated(cat):
    for o in cat.offers.values():
        assert o.source.strip() and re.match(r"^\d{4}-\d{2}", o.as_of), o.id


# --- importer tolerance (the snapshot comparison itself is in tests_reference/) -------------


def test_importer_check_detects_a_price_off_by_one_percent(cat):
    """The tolerance is tight enough to catch a 1% error in a real list price (our p5.48xlarge
    on-demand row, imported from the SkyPilot catalog) and loose enough for rounding to cents."""
    o = next(o for o in cat.offers.values()
             if (o.cloud, o.instance_type, o.region) == ("aws", "p5.48xlarge", "us-east-1"))
    od = o.usd_per_hour["on-demand"]
    assert SKYPILOT.search(o.source)
    assert not math.isclose(od * 1.01, od, rel_tol=IMPORT_RTOL)
    assert math.isclose(round(od, 2), od, rel_tol=IMPORT_RTOL)


# --- site defaults --------------------------------------------------------------------------

# name -> (low, high): plausible ranges, wide enough for any real site, narrow enough to catch
# unit slips (cents for dollars, GB for GiB, hours for seconds, percent for fraction).
SITE_RANGES = {
    "electricity_usd_per_kwh": (0.02, 0.40),  # US/EU industrial to retail, in dollars
    "pue": (1.0, 2.0),  # physical lower bound 1; survey averages ~1.5-1.6
    "colocation_usd_per_kw_month": (50, 500),
    "maintenance_fraction_per_year": (0.0, 0.20),
    "depreciation_years": (2, 8),
    "network_usd_per_gpu": (500, 15000),
    "storage_usd_per_gpu": (100, 10000),
    "install_fraction": (0.0, 0.20),
    "staff_usd_per_gpu_year": (50, 5000),
    "residual_value_fraction": (0.0, 0.5),
    "gpu_load_factor": (0.3, 1.0),  # average board power cannot exceed TDP for long
    "grid_kg_co2e_per_kwh": (0.0, 1.2),  # coal is ~1.0
    "spot_interruptions_per_hour": (0.0, 1.0),
    "gpu_mtbf_hours": (1e3, 1e6),
    "checkpoint_bytes_per_s_per_node": (1e8, 1e11),  # 0.1-100 GB/s
    "restart_s": (30, 7200),
    "runtime_overhead_gib": (0.2, 8.0),
    "allocator_fragmentation_caching": (0.0, 1.0),  # reserved - allocated, x allocated
    "allocator_fragmentation_expandable": (0.0, 1.0),
    "reserved_reuse_utilization": (0.0, 1.0),
    "utilization": (0.05, 1.0),
    "usd_per_cny": (0.10, 0.20),  # 5-10 CNY per USD (a CNY-per-USD slip would read ~7)
    "usd_per_cny_2023_06": (0.10, 0.20),
}


def test_site_has_exactly_the_names_other_modules_read(cat):
    assert set(cat.site) == set(SITE_RANGES)


@pytest.mark.parametrize("name", sorted(SITE_RANGES))
def test_site_value_sourced_dated_and_plausible(cat, name):
    sv = cat.site[name]
    low, high = SITE_RANGES[name]
    assert low <= sv.value <= high, (name, sv.value)
    assert sv.source.strip() and sv.unit.strip(), name
    assert re.match(r"^\d{4}-\d{2}", sv.as_of), name
    assert cat.site_value(name) == sv.value


def test_site_judgement_calls_are_labelled(cat):
    """A value whose source is not a publication must say it is a judgement or assumption."""
    for sv in cat.site.values():
        if "judgement" in sv.source.lower() or "assumption" in sv.source.lower():
            assert sv.notes.startswith(("JUDGEMENT", "ASSUMPTION")), sv.name


def test_site_values_match_their_stated_derivations(cat):
    """Llama 3 (arXiv:2407.21783): 419 interruptions in 54 days on 16,384 GPUs; storage 2 TB/s
    for 2,048 nodes. Rounded to the GPU-hour / byte, so 1e-4 relative."""
    assert cat.site_value("gpu_mtbf_hours") == pytest.approx(16384 * 54 * 24 / 419, rel=1e-4)
    assert cat.site_value("checkpoint_bytes_per_s_per_node") == pytest.approx(2e12 / 2048,
                                                                             rel=1e-4)
    assert cat.site_value("spot_interruptions_per_hour") == pytest.approx(0.20 / 730, rel=1e-2)
