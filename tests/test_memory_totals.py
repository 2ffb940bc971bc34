"""The search's memory per GPU (#12): `memory.most_loaded_total` and `memory.stage_totals`
compute only what the total sums (and the offloaded bytes and host traffic), without the
full breakdown, and skip DualPipe's terms where no row runs DualPipe. Exact equality with the
full breakdowns, on grids with and without DualPipe rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators import memory
from gpuplan.search import plan as planmod
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.search.grid import model_axes, product
from gpuplan.spec import S_1F1B, S_DUALPIPE


def _grid(model: str, count: int, schedule: str):
    cat = load_catalog()
    req = planmod.Request(model=cat.model(model), tokens=1e12, seq_len=4096,
                          global_batch=1024, site=site_from_catalog(cat))
    axes = model_axes(req.model, req.seq_len, counts=np.array([count]))
    g, _ = product(count, axes)
    layout = planmod._layout(g, req)
    codes = {"1f1b": S_1F1B, "dualpipe": S_DUALPIPE,
             "mixed": np.where(np.arange(g["gpus"].size) % 3 == 0, S_DUALPIPE, S_1F1B)}
    site = req.site
    kw = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
              fragmentation=site.fragmentation, stacks=site.stack_buffers)
    return req.model, replace(layout, schedule=codes[schedule]), kw


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipe", "mixed"])
@pytest.mark.parametrize("model", ["deepseek-v3", "llama3-70b"])
def test_the_totals_equal_the_full_breakdowns(model, schedule):
    m, layout, kw = _grid(model, 64, schedule)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        full = memory.stage_breakdowns(m, layout, **kw)
        totals = memory.stage_totals(m, layout, **kw)
        most = memory.most_loaded_total(m, layout, **kw)
        breakdown = memory.memory_breakdown(m, layout, **kw)
    shape = np.shape(full[0].total)
    assert shape[0] > 1000
    for b, d in zip(full, totals, strict=True):
        assert {"total", "offloaded", "host_traffic", *memory._ALLOCATED} <= set(d)
        for k, v in d.items():
            assert np.array_equal(np.broadcast_to(v, shape), getattr(b, k), equal_nan=True), k
    assert np.array_equal(most, breakdown.total, equal_nan=True)
    assert np.isfinite(most).any()


@pytest.mark.parametrize("model", ["deepseek-v3", "llama3-70b"])
def test_a_mixed_grid_equals_the_scalar_path_row_by_row(model):
    """DualPipe and 1F1B rows of one grid: each row's total as the scalar memory path
    (`memory_one`, equal to the vectorized model to 1e-9) gives it alone."""
    from gpuplan.estimators.memory_one import memory_breakdown_one

    m, layout, kw = _grid(model, 64, "mixed")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        most = memory.most_loaded_total(m, layout, **kw)
    lined = [f for f in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch",
                         "recompute", "precision", "schedule") if np.ndim(getattr(layout, f))]
    rows = np.random.default_rng(0).choice(most.size, 300, replace=False)
    schedules = set()
    for i in rows:
        one = replace(layout, **{f: int(np.asarray(getattr(layout, f))[i]) for f in lined})
        schedules.add(one.schedule)
        want = memory_breakdown_one(m, one, **kw).total
        assert most[i] == pytest.approx(want, rel=1e-9) or not np.isfinite(want)
    assert schedules == {S_1F1B, S_DUALPIPE}
