"""Every catalog table has a typed schema; efficiency rows inherit explicitly (issue #9)."""

from __future__ import annotations

import tomllib

import pytest

from gpuplan.catalog import SCHEMAS, load_catalog, package_data_path
from gpuplan.catalog.schema import EFFICIENCY, FILES, SCENARIO, SITE_VALUES
from gpuplan.search.hardware import EFFICIENCY_FIELDS, efficiency_for


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_every_table_in_every_data_file_has_a_schema():
    for name in set(FILES.values()):
        doc = tomllib.loads(package_data_path(name).read_text())
        assert set(doc) <= set(SCHEMAS), name


def test_efficiency_rows_are_complete_after_inheritance(cat):
    for family, row in cat.table("efficiency").items():
        missing = [k for k, f in EFFICIENCY.items() if f.required and k not in row]
        assert not missing, (family, missing)


def test_inherited_rows_copy_no_numbers():
    """A row that inherits states only what differs from its parent (no copied rows)."""
    raw = tomllib.loads(package_data_path("efficiency.toml").read_text())["efficiency"]
    for family, row in raw.items():
        parent = row.get("inherits")
        if parent:
            same = [k for k in EFFICIENCY_FIELDS if k in row and row[k] == raw[parent].get(k)]
            assert not same, (family, same)


def test_inheritance_chain(cat):
    parents = cat.efficiency_parents()
    assert parents["h200"] == "h100" and parents["gb300"] == "gb200"
    assert parents["gb200"] == "h100"  # fitted matmul_max only; the rest from Hopper
    eff = cat.table("efficiency")
    assert eff["gb300"]["layer_overhead_us"] == eff["h100"]["layer_overhead_us"]
    assert eff["h20"]["guess"] and not eff["gb200"]["guess"]  # guess is never inherited
    assert eff["h200"]["guess"] and eff["b200"]["guess"]  # no fit run of their own (#12)


def test_tp_overlap_comes_from_the_catalog(cat):
    e = efficiency_for(cat, ["h100", "mi300x"])
    assert list(e.tp_overlap) == [cat.table("efficiency")["h100"]["tp_overlap"],
                                  cat.table("efficiency")["default"]["tp_overlap"]]


def test_every_site_value_the_code_reads_has_a_range(cat):
    assert set(cat.site) == set(SITE_VALUES)
    assert cat.site_value("utilization") == 0.7
    assert cat.site["utilization"].notes.startswith("JUDGEMENT")


def test_scenarios_match_their_schema(cat):
    for name, sc in cat.table("scenarios").items():
        assert set(sc) <= set(SCENARIO), name
        assert cat.model(sc["model"]) and cat.system(sc["system"])


def test_site_utilization_feeds_the_plan_default(cat):
    from gpuplan.search.evaluate import site_from_catalog

    assert site_from_catalog(cat).utilization == cat.site_value("utilization")
