"""Cloud offers against the SkyPilot catalog snapshot ../shared/data/cloud_gpu_prices.csv
(moved from tests/test_offers_site.py, #16). IMPORT_RTOL 0.5%: rounding a price to cents."""

from __future__ import annotations

import csv
import math
import re

import pytest
from conftest import shared_data

from gpuplan.catalog import load_catalog

IMPORT_RTOL = 0.005
SKYPILOT = re.compile(r"SkyPilot catalog (\S+)@([0-9a-f]{40})")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# --- importer: our rows vs the SkyPilot catalog snapshot ------------------------------------


def _snapshot_rows() -> dict[tuple[str, str, str], dict[str, str]]:
    path = shared_data("cloud_gpu_prices.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {(r["cloud"], r["instance_type"], r["region"]): r for r in rows}


def _price(text: str) -> float | None:
    return float(text) if text.strip() else None


def test_skypilot_sourced_prices_match_the_snapshot(cat):
    """Each offer whose source cites 'SkyPilot catalog PATH@COMMIT' matches the snapshot row with
    the same cloud / instance_type / region: same catalog path and commit, on-demand (and spot
    where we list it) within 0.5%. Where the snapshot has a spot price we omit, the row's notes
    must say why."""
    rows = _snapshot_rows()
    checked = 0
    for o in cat.offers.values():
        m = SKYPILOT.search(o.source)
        if not m:
            continue
        row = rows.get((o.cloud, o.instance_type, o.region))
        assert row is not None, f"{o.id}: no snapshot row {o.cloud}/{o.instance_type}/{o.region}"
        assert (row["catalog_path"], row["catalog_commit"]) == m.groups(), o.id
        assert int(row["accelerator_count"]) == o.count, o.id
        od = _price(row["price_on_demand_usd_per_hour"])
        assert od is not None and "on-demand" in o.usd_per_hour, o.id
        assert math.isclose(o.usd_per_hour["on-demand"], od, rel_tol=IMPORT_RTOL), o.id
        spot = _price(row["price_spot_usd_per_hour"])
        if "spot" in o.usd_per_hour:
            assert spot is not None, f"{o.id}: spot listed but the snapshot has none"
            assert math.isclose(o.usd_per_hour["spot"], spot, rel_tol=IMPORT_RTOL), o.id
        elif spot is not None:
            assert "spot" in o.notes.lower(), f"{o.id}: snapshot spot omitted without a note"
        checked += 1
    assert checked >= 30
