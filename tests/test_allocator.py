"""The allocator margin per allocator setting (#11): reserved - allocated is the catalog
fraction of the run's PyTorch CUDA caching-allocator setting (`search.evaluate.ALLOCATORS`:
'caching', PyTorch's default, and 'expandable', PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True),
recorded per run in published_runs.csv's `allocator` column (docs/calibration.md 'Allocator
margin per allocator setting')."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from gpuplan.errors import ConfigError
from gpuplan.search.evaluate import (
    ALLOCATORS,
    DEFAULT_ALLOCATOR,
    memory_per_gpu,
    site_from_catalog,
    with_allocator,
)
from gpuplan.spec import Layout
from gpuplan.validation import load_runs

SITE_TOML = Path(__file__).resolve().parents[1] / "src" / "gpuplan" / "data" / "site.toml"
LAYOUTS = [Layout(tp=8, global_batch=8), Layout(tp=4, pp=4, dp=4, vpp=2, micro_batch=2,
                                                 global_batch=64),
           Layout(dp=16, zero=3, recompute=2, global_batch=16),
           Layout(tp=2, pp=2, cp=2, dp=4, global_batch=32)]


def _fraction(name: str) -> float:
    """The setting's fraction read straight from site.toml (not through the catalog code)."""
    return float(tomllib.loads(SITE_TOML.read_text())["site"][
        f"allocator_fragmentation_{name}"]["value"])


def _one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@pytest.mark.parametrize("name", ALLOCATORS)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"tp{lay.tp}pp{lay.pp}z{lay.zero}")
def test_reserved_is_tensors_times_one_plus_the_settings_fraction(cat, name, layout):
    """Independent formula: reserved = tensor parts x (1 + fraction) with the fraction read from
    site.toml; the tensor parts are reserved less the margin (rel 1e-12: float rounding)."""
    model = cat.models["llama3-70b"]
    site = site_from_catalog(cat, allocator=name)
    assert site.allocator == name and site.fragmentation == _fraction(name)
    mem = memory_per_gpu(model, layout, site)
    reserved, margin = _one(mem.reserved), _one(mem.allocator_margin)
    assert reserved == pytest.approx((reserved - margin) * (1 + _fraction(name)), rel=1e-12)
    assert _one(mem.total) == pytest.approx(reserved + site.runtime_overhead_bytes, rel=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"tp{lay.tp}pp{lay.pp}z{lay.zero}")
@pytest.mark.parametrize("model_id", ["llama3-8b", "llama3-405b", "deepseek-v3"])
def test_expandable_never_reserves_more_than_caching(cat, layout, model_id):
    """Property: the same tensors under expandable segments never reserve more than under the
    default caching allocator (exactly equal allocated memory)."""
    model = cat.models[model_id]
    caching = memory_per_gpu(model, layout, site_from_catalog(cat, allocator="caching"))
    expand = memory_per_gpu(model, layout, site_from_catalog(cat, allocator="expandable"))
    assert _one(expand.allocated) == _one(caching.allocated)
    assert _one(expand.reserved) <= _one(caching.reserved)


def test_default_is_caching_and_with_allocator_switches(cat):
    site = site_from_catalog(cat)
    assert DEFAULT_ALLOCATOR == "caching" and site.allocator == "caching"
    assert with_allocator(cat, site, None) is site
    exp = with_allocator(cat, site, "expandable")
    assert exp.allocator == "expandable" and exp.fragmentation == _fraction("expandable")


@pytest.mark.parametrize("bad", ["cachin", "expandable_segments:True", ""])
def test_unknown_allocator_is_one_line(cat, bad):
    with pytest.raises(ConfigError) as err:
        site_from_catalog(cat, allocator=bad)
    msg = str(err.value)
    assert "\n" not in msg and repr(bad) in msg and "caching" in msg and "expandable" in msg


def test_recorded_allocator_column():
    """Every recorded setting is a known one with its locator in the notes (Megatron-Bridge's
    recipe version, or the launch script a KempnerForge run names); the two GB200 runs of
    NOT_FIT (test_runs_fit.py) are recorded from their recipes."""
    rows = {r["id"]: r for r in load_runs()}
    recorded = {k: r["allocator"] for k, r in rows.items() if r.get("allocator", "").strip()}
    assert len(recorded) >= 100  # the Megatron-Bridge rows of four known models
    for rid, name in recorded.items():
        assert name in ALLOCATORS, rid
        locator = ("run_one.sbatch" if rid.startswith("kforge-") else "Megatron-Bridge v0.")
        assert f"allocator {name}: {locator}" in rows[rid]["notes"], rid
    assert recorded["mbridge2606-gb200-llama31-405b-256-fp8"] == "expandable"
    assert recorded["mbridge2604.01-gb200-llama3-70b-64-fp8"] == "caching"


def test_allocator_flag_reaches_the_site(cat):
    """`--allocator` (estimate and plan) is a site flag: the site carries the setting."""
    from gpuplan import api

    assert api._site(cat, {"allocator": "expandable"}).allocator == "expandable"
    assert api._site(cat, {}).allocator == DEFAULT_ALLOCATOR
    with pytest.raises(ConfigError):
        api._site(cat, {"allocator": "cachin"})


def test_catalog_expandable_at_most_caching(cat):
    """The data's side of the property: site.toml's expandable margin <= its caching margin."""
    assert _fraction("expandable") <= _fraction("caching")
    assert cat.site_value("allocator_fragmentation_expandable") == _fraction("expandable")


def test_run_fit_applies_the_runs_allocator(cat):
    """The validation's memory fit uses the allocator recorded for the run: on a catalog whose
    expandable margin is half the caching one, the 405B GB200 run (recorded expandable) reserves
    its tensors x (1 + the expandable margin), and x (1 + caching) with the column empty
    (rel 1e-9: float rounding of the same sums)."""
    from dataclasses import replace

    from gpuplan.calibrate.memory_fit import memory_options, run_fit
    from gpuplan.validation import run_spec

    site = dict(cat.site)
    key = "allocator_fragmentation_expandable"
    site[key] = replace(site[key], value=_fraction("caching") / 2)
    half = replace(cat, site=site)
    row = {r["id"]: r for r in load_runs()}["mbridge2606-gb200-llama31-405b-256-fp8"]
    rs = run_spec(half, row)
    gpu = half.accelerators[row["gpu"]]
    fits = {}
    for alloc in ("expandable", ""):
        opts = memory_options({**row, "allocator": alloc})
        fits[alloc] = run_fit(half, rs.model, rs.layout, int(rs.layout.gpus),
                              gpu.memory_bytes, options=opts, gpu=gpu)
    f_exp, f_def = _fraction("caching") / 2, _fraction("caching")
    tensors = fits[""].reserved_gib / (1 + f_def)
    assert fits["expandable"].reserved_gib == pytest.approx(tensors * (1 + f_exp), rel=1e-9)
