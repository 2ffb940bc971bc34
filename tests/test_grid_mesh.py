"""The layout table's grid checked unflattened (`grid.mesh`): the layout rules and the
interleave rule broadcast over the grid's axes give, row for row, the masks, the rows kept and
the tallies of the flat grid (`grid.product`) checked row by row (#12)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.search import groups
from gpuplan.search import plan as planmod
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.search.grid import mesh, mesh_rows, model_axes, product

COUNTS = (1, 8, 24, 64, 96, 1024, 65536)


def _request(model: str, seq_len: int) -> planmod.Request:
    cat = load_catalog()
    return planmod.Request(model=cat.model(model), tokens=1e12, seq_len=seq_len,
                           global_batch=1024, site=site_from_catalog(cat))


@pytest.mark.parametrize(("model", "seq_len"), [("deepseek-v3", 4096), ("llama3-70b", 32768),
                                                ("gpt3-175b", 2048)])
def test_the_mesh_rules_equal_the_rules_on_every_row(model, seq_len):
    req = _request(model, seq_len)
    axes = model_axes(req.model, req.seq_len, counts=np.array(COUNTS))
    seen = set()
    for count in COUNTS:
        g, dropped = product(count, axes)
        f, mesh_dropped = mesh(count, axes)
        assert np.array_equal(dropped, mesh_dropped)
        shape = np.broadcast_shapes(*(v.shape for v in f.values()))
        assert int(np.prod(shape)) == g["gpus"].size
        plain = planmod._layout(g, req).valid_mask(req.model)
        broadcast = np.broadcast_to(planmod._layout(f, req).valid_mask(req.model), shape)
        assert np.array_equal(broadcast.reshape(-1), plain)
        seen.update(plain.tolist())
        every = mesh_rows(f, np.ones(shape, dtype=bool))
        assert list(every) == list(g)
        for k, v in g.items():
            assert every[k].dtype == v.dtype and np.array_equal(every[k], v)
        kept = mesh_rows(f, broadcast)
        for k, v in g.items():
            assert np.array_equal(kept[k], v[plain])
    assert seen == {False, True}  # both kinds of rows were compared


def test_the_table_equals_the_flat_grid_checked_row_by_row():
    """The runnable rows and the tallies of what the table dropped, as the flat grid gives."""
    req = _request("deepseek-v3", 4096)
    counts = np.array([8, 64, 96, 1024])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    table = planmod.layout_table(req, counts, axes)
    tp_values = np.asarray(axes.tp)
    rows = []
    for i, count in enumerate(counts):
        g, dropped = product(int(count), axes)
        valid = planmod._layout(g, req).valid_mask(req.model)
        interleaves = (g["vpp"] == 1) | (req.global_batch % (g["dp"] * g["micro_batch"]
                                                             * g["pp"]) == 0)
        tp_at = np.searchsorted(tp_values, g["tp"])
        assert np.array_equal(table.dropped[i, :, 0], dropped)
        assert np.array_equal(table.dropped[i, :, 1],
                              np.bincount(tp_at[~valid], minlength=tp_values.size))
        assert np.array_equal(table.dropped[i, :, 2],
                              np.bincount(tp_at[valid & ~interleaves], minlength=tp_values.size))
        rows.append({k: v[valid & interleaves] for k, v in g.items()})
    assert table.dropped[:, :, 1:].sum() > 0
    for k in rows[0]:
        assert np.array_equal(table.g[k], np.concatenate([r[k] for r in rows]))


def test_a_column_of_some_counts_equals_its_rows_gathered():
    req = _request("deepseek-v3", 4096)
    counts = np.array([8, 24, 64, 96, 1024])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    table = planmod.layout_table(req, counts, axes)
    for some in ([64], [8, 24, 64], [8, 64, 1024], [24, 96], []):
        mine = np.array(some, dtype=np.int64)
        for values in (table.g["tp"], table.memory_bytes):
            assert np.array_equal(table.of(values, mine), values[table.rows(mine)])


@pytest.mark.parametrize("values", [[], [3], [1, 1, 2, 8, 8, 8, 64], [8, 1, 8, 2]])
def test_distinct_values_equal_numpys(values):
    a = np.array(values, dtype=np.int64)
    got = groups._distinct(a)
    assert got.dtype == np.unique(a).dtype and np.array_equal(got, np.unique(a))
