"""The plan search's per-distinct-row shortcuts give the figures of the straightforward path
(#11): memory's activation terms and pipeline placement computed once per distinct combination
of the fields they read (estimators/distinct.py), and the layout rules of a GPU count's grid
evaluated on one precision. Exact equality throughout: the same float64 arithmetic on fewer
rows, gathered back, never an approximation."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan import api
from gpuplan.catalog import load_catalog
from gpuplan.estimators import distinct, memory
from gpuplan.report import plan as report_plan
from gpuplan.search import plan as planmod
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.search.grid import model_axes


def test_distinct_rows_rebuild_every_row():
    rng = np.random.default_rng(0)
    n = 3 * distinct.MIN_ROWS
    cols = [rng.integers(1, 5, n), rng.choice([1, 2, 4, 8, 4096], n), 7, rng.integers(0, 2, n)]
    found = distinct.rows(cols)
    assert found is not None
    values, at = found
    assert values[2] == 7  # a scalar stays one
    for got, want in zip(values, cols, strict=True):
        assert np.array_equal(np.broadcast_to(np.asarray(got)[at] if np.ndim(got) else got, n),
                              np.broadcast_to(want, n))
    assert len({tuple(r) for r in np.stack([values[0], values[1], values[3]], axis=1)}) \
        == values[0].size  # each combination once


@pytest.mark.parametrize("cols", [
    [np.arange(10), np.arange(10)],  # too few rows
    [np.arange(2 * distinct.MIN_ROWS)],  # every row distinct: nothing to gain
    [np.full(distinct.MIN_ROWS, 0.5)],  # not integers
    [np.zeros((distinct.MIN_ROWS, 2), dtype=int)],  # not one row axis
])
def test_distinct_rows_decline(cols):
    assert distinct.rows(cols) is None


def test_a_field_the_distinct_call_does_not_list_fails_loudly():
    from gpuplan.spec import Layout

    n = 2 * distinct.MIN_ROWS
    lay = Layout(tp=np.ones(n, dtype=int), dp=np.arange(n))
    with pytest.raises(TypeError):
        distinct.once(lambda x: x.tp * x.dp, lay, ("tp",), {})


def _table(model: str, counts: list[int]):
    cat = load_catalog()
    req = planmod.Request(model=cat.model(model), tokens=1e12, seq_len=4096,
                          global_batch=1024, site=site_from_catalog(cat))
    c = np.array(counts)
    return req, planmod.layout_table(req, c, model_axes(req.model, req.seq_len, counts=c),
                                     24 << 30)


@pytest.mark.parametrize("model", ["mixtral-8x7b", "llama3-70b"])
def test_memory_once_per_distinct_row_equals_every_row(monkeypatch, model):
    """Every part of every stage's breakdown, on the grid and variant rows of a table, is the
    same bit for bit with the distinct-row shortcut and without it."""
    req, table = _table(model, [8, 64, 512])
    site = req.site
    kw = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
              fragmentation=site.fragmentation, stacks=site.stack_buffers)
    rows = {k: v for k, v in table.extra.items()}

    def figures():
        out = []
        for r in ({k: table.g[k] for k in table.g}, rows):
            for lo in range(0, r["gpus"].size, memory.CHUNK):
                lay = planmod._layout({k: v[lo:lo + memory.CHUNK] for k, v in r.items()}, req)
                with np.errstate(all="ignore"):
                    for bd in memory.stage_breakdowns(req.model, lay, **kw):
                        out += [np.asarray(getattr(bd, f)) for f in bd.__dataclass_fields__]
        return out

    assert table.g["gpus"].size >= distinct.MIN_ROWS  # the shortcut is taken
    short = figures()
    monkeypatch.setattr(distinct, "MIN_ROWS", 1 << 62)
    plain = figures()
    assert len(short) == len(plain)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(short, plain, strict=True))


def test_plan_with_the_shortcuts_equals_plan_without(monkeypatch):
    """The whole plan (ranked plans, tallies, outlook: the JSON) is the same without them."""
    ask = dict(model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm", "b200"], max_gpus=2048)

    def plan_json() -> dict:
        d = report_plan.to_json(api.plan(**ask))
        d.pop("elapsed_s", None)
        return d

    short = plan_json()
    monkeypatch.setattr(distinct, "MIN_ROWS", 1 << 62)
    assert short == plan_json()
