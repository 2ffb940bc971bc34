"""The pruning's bound terms computed once per layout-table number of rows equal but for what
no term reads (search/termrows.py, #12): every row's terms and bounds are exactly those of the
row itself, and rows of one number are equal but for those fields."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan import api
from gpuplan.search import prune, termrows
from gpuplan.search.timed import filled


def _captured(monkeypatch, **ask) -> list[tuple]:
    """(req, jobs, table, bounds) of every `prune._bounds` call of one plan."""
    seen: list[tuple] = []
    original = prune._bounds

    def spy(req, jobs, table):
        out = original(req, jobs, table)
        seen.append((req, jobs, table, [b and tuple(x.copy() for x in b) for b in out]))
        return out  # (the search then narrows it to the rows it keeps)

    monkeypatch.setattr(prune, "_bounds", spy)
    api.plan(**ask)
    return seen


@pytest.mark.parametrize("ask", [
    dict(model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm", "b200"], max_gpus=1024),
    dict(model="llama3-70b", tokens="15T", gpu=["a100-80gb", "h100-sxm"], max_gpus=512)])
def test_the_terms_and_bounds_of_every_row_are_its_own(monkeypatch, ask):
    seen = _captured(monkeypatch, **ask)
    assert len(seen) >= 2  # the grid rows and their variants, then the HSDP copies
    checked = 0
    for req, jobs, table, bounds in seen:
        assert table.bounds["floats"].shape[1] * 2 < table.bounds["ids"].size  # rows shared
        for (g, clock, _), b in zip(jobs, bounds, strict=True):
            if b is None:
                continue
            mine = prune.terms_of(req, g, table)
            own = prune._layout_terms(req, filled(table, g))
            assert set(mine) == set(own)
            for k in mine:
                if k not in ("a2a_at", "a2a_pairs"):
                    assert np.array_equal(mine[k], own[k]), k
            if "a2a_at" in own:
                assert np.array_equal(mine["a2a_pairs"][mine["a2a_at"]],
                                      own["a2a_pairs"][own["a2a_at"]])
            step_lb, floor_lb = prune.floors(own, clock.hw, clock.eff, req.model, clock.stack)
            assert np.array_equal(b[0], step_lb) and np.array_equal(b[1], floor_lb)
            checked += g["gpus"].size
    assert checked > 10_000


def test_rows_of_one_number_differ_only_where_no_term_reads(monkeypatch):
    (_, _, table, _), *_ = _captured(monkeypatch, model="deepseek-v3", tokens="14.8T",
                                      gpu=["h100-sxm"], max_gpus=512)
    ids, rows = termrows.term_ids(table)
    n = table.g["gpus"].size
    assert ids.size == n + table.extra["gpus"].size and rows.size == ids.max() + 1
    assert np.array_equal(ids[rows], np.arange(rows.size))
    for k in table.g:
        if k in termrows.IGNORED:
            continue
        every = np.concatenate([table.g[k], table.extra[k]])
        assert np.array_equal(every, every[rows][ids]), k
    zero = np.concatenate([table.g["zero"], table.extra["zero"]])
    assert np.unique(zero[rows][ids] != zero).size == 2  # some rows share across ZeRO


def test_among_numbers_the_distinct_ids():
    ids = np.array([5, 2, 5, 9, 2, 0])
    distinct, place = termrows.among(ids, 10)
    assert np.array_equal(distinct, [0, 2, 5, 9])
    assert np.array_equal(distinct[place], ids)
