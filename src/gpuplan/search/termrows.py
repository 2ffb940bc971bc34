"""The layout table's rows that share the pruning's bound terms (search/prune.py, #12) (L4).

The bound's layout terms (`prune._layout_terms`: FLOPs, bytes, bubble, all-to-all factors)
read no ZeRO stage: rows that differ in it alone have the same terms, and so, on one group's
clock, the same bounds (`prune.floors`, elementwise). The table holds every layout with each
of the ZeRO stages the memory lets run, so its rows share their terms about five to one, and
a group's rows about three to one. So the grid rows' terms are computed once per `term_ids`
number (on a row of each whose ZeRO stage is nan: a term that read it would be nan, its bound
no bound, and tests/test_termrows.py compares every row with the terms of the row itself),
the variant rows' (copies of ZeRO-3 or no-recompute rows: few share) once each, and a group's
bounds once per number among its rows (`among`), then gathered to each row: the same float64
arithmetic on fewer rows, the same figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# the fields no bound term reads (`prune._layout_terms`)
IGNORED = ("zero", "shard_group", "offload")
# the grid's fields numbered within a run of rows (the grid's fastest axes, after ZeRO)
INNER = ("micro_batch", "recompute", "precision")
SPAN = 1 << 24  # the largest key range numbered by a table of marks (else np.unique's sort)


def _numbered(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each row's number among the distinct keys, in key order; a row of each number)."""
    if key.size == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    if int(key.max()) + 1 > SPAN:
        _, number = np.unique(key, return_inverse=True)
    else:
        present = np.zeros(int(key.max()) + 1, dtype=bool)
        present[key] = True
        number = (np.cumsum(present, dtype=np.intp) - 1)[key]
    first = np.empty(int(number.max()) + 1, dtype=np.intp)
    first[number] = np.arange(key.size, dtype=np.intp)  # a row of each (any: they are equal)
    return number.astype(np.intp), first


def _radix(key: np.ndarray, columns: list[np.ndarray]) -> np.ndarray:
    """key extended by integer columns in mixed radix (each over its own min..max)."""
    for v in columns:
        lo = int(v.min()) if v.size else 0
        width = (int(v.max()) if v.size else 0) - lo + 1
        key = key * width + (v.astype(np.int64) - lo)
    return key


def _grid_ids(g: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(each grid row's number, a row of each number): rows of one number are equal in every
    field but IGNORED. Runs of consecutive rows equal in every field but IGNORED and INNER
    (the grid's order: ZeRO, then INNER), then INNER within a run."""
    n = g["gpus"].size
    new = np.zeros(n, dtype=bool)
    new[:1] = True
    for k, v in g.items():
        if k not in IGNORED and k not in INNER and n:
            new[1:] |= v[1:] != v[:-1]
    run = np.cumsum(new, dtype=np.int64) - 1
    return _numbered(_radix(run, [g[k] for k in INNER]))


def term_ids(table: Any) -> tuple[np.ndarray, np.ndarray]:
    """(each table row's number (its grid rows, then its variant rows), a table row of each
    number, numbered the same way): rows of one number are equal in every field but IGNORED.
    A variant row (a copy of its `twin` with a field changed, search/variants.py) equal to its
    twin but for IGNORED has the twin's number; the others are numbered by their twin's number
    and the values of the fields where they differ from it."""
    g, ex = table.g, table.extra
    grid, first = _grid_ids(g)
    if not ex or ex["gpus"].size == 0:
        return grid, first
    twin = ex["twin"]
    differs = np.zeros(twin.size, dtype=bool)
    changed = []
    for k in g:
        if k not in IGNORED:
            other = ex[k] != g[k][twin]
            if other.any():
                differs |= other
                changed.append(ex[k])
    own = np.flatnonzero(differs)
    code, _ = _numbered(_radix(np.zeros(own.size, dtype=np.int64), [v[own] for v in changed]))
    number, rows = _numbered(grid[twin[own]].astype(np.int64) * (int(code.max(initial=0)) + 1)
                             + code)
    ids = grid[twin]
    ids[own] = first.size + number
    return (np.concatenate([grid, ids]),
            np.concatenate([first, g["gpus"].size + own[rows]]))


def representatives(table: Any, rows: np.ndarray, keys: tuple[str, ...]) -> dict[str, Any]:
    """Fields `keys` of table rows `rows` (grid rows, then variant rows numbered after them),
    IGNORED ones nan."""
    n = table.g["gpus"].size
    grid, extra = rows[rows < n], rows[rows >= n] - n
    out = {k: np.concatenate([table.g[k][grid]] + ([table.extra[k][extra]] if extra.size
                                                   else [])) for k in keys if k not in IGNORED}
    out.update({k: np.full(rows.size, np.nan) for k in IGNORED})
    return out


def among(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct numbers `ids` holds, below `size`, ascending; each id's place among them)."""
    present = np.zeros(size, dtype=bool)
    present[ids] = True
    distinct = np.flatnonzero(present)
    place = np.cumsum(present, dtype=np.intp) - 1
    return distinct, place[ids]
