"""A quantity computed once per distinct combination of the fields it reads (L3 helper, #11).

Not an estimator: it computes nothing itself. The search's grids repeat a few values of each
field over hundreds of thousands of layouts, and some quantities read only a few fields (the
activation bytes of a layer: tp, cp, micro-batch, recompute, precision; the pipeline placement:
tp, pp, ep, vpp). The estimators are elementwise (a layout's figures depend on its own fields
alone), so such a quantity computed on the distinct rows of the fields it reads and gathered
back with each row's number among them is the same, bit for bit, as computed on every row,
at a fraction of the cost. Callers fall back to the plain call where `rows` returns None.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any

import numpy as np

# the Layout fields memory._per_layer reads (a layer's activation bytes, the logits', the MoE
# token buffer) and the ones shapes.pipeline_stages reads; reading any other array field there
# fails loudly (`layout_rows`), so a new read must be added here
PER_LAYER_READS = ("tp", "cp", "micro_batch", "recompute", "precision", "seq_len", "sp", "flash",
                   "dropout", "recompute_modules", "recompute_every")
STAGE_READS = ("tp", "pp", "ep", "vpp", "first_stage_layers", "last_stage_layers")
MIN_ROWS = 4096  # fewer layouts: computed as they are (the index would cost more than it saves)
DENSE = 1 << 20  # the largest mixed-radix key range indexed (a bincount-like table, no sort)
SHARE = 4  # worth it when the rows are at least SHARE times their distinct combinations


def rows(columns: list[Any]) -> tuple[list[Any], np.ndarray] | None:
    """(each column at the distinct rows of `columns`, each row's number among them), or None
    when not worth it or not possible: the columns must be scalars (kept as they are) or 1-D
    integer or bool arrays of one size >= MIN_ROWS, with SHARE times fewer distinct rows."""
    arrays = [np.asarray(c) for c in columns]
    lined = [a for a in arrays if a.ndim]
    if not lined or any(a.ndim != 1 or a.dtype.kind not in "iub" or a.size != lined[0].size
                        for a in lined) or lined[0].size < MIN_ROWS:
        return None
    n, key, span = lined[0].size, np.zeros(lined[0].size, dtype=np.int64), 1
    for a in lined:
        lo, width = int(a.min()), int(a.max()) - int(a.min()) + 1
        if span * width > DENSE:
            return None
        key = key * width + (a.astype(np.int64) - lo)
        span *= width
    present = np.zeros(span, dtype=bool)
    present[key] = True
    number = np.cumsum(present, dtype=np.intp) - 1
    at = number[key]
    k = int(number[-1]) + 1
    if k * SHARE > n:
        return None
    first = np.empty(k, dtype=np.intp)
    first[at] = np.arange(n, dtype=np.intp)  # a row of each combination (any: they are equal)
    return [a[first] if a.ndim else a for a in arrays], at


def layout_rows(layout: Any, reads: tuple[str, ...]) -> tuple[Any, np.ndarray] | None:
    """(`layout` at the distinct rows of its fields `reads`, each row's number among them), or
    None (`rows`). Its other array fields become None, so that reading one fails loudly."""
    found = rows([getattr(layout, k) for k in reads])
    if found is None:
        return None
    cut: dict[str, Any] = {f.name: None for f in fields(layout)
                           if np.ndim(getattr(layout, f.name))}
    cut.update(zip(reads, found[0], strict=True))
    return replace(layout, **cut), found[1]


def gathered(value: Any, at: np.ndarray) -> Any:
    """`value` (an array, a scalar, a tuple or a dataclass of them) computed on distinct rows,
    at every row (`at`: each row's number among them); scalars stay scalars."""
    if is_dataclass(value):
        return replace(value, **{f.name: gathered(getattr(value, f.name), at)  # type: ignore
                                 for f in fields(value)})
    if isinstance(value, tuple):
        return tuple(gathered(v, at) for v in value)
    a = np.asarray(value)
    return a[at] if a.ndim else value


def once(fn: Any, layout: Any, reads: tuple[str, ...], scalars: dict[str, Any]) -> Any:
    """fn(layout), computed once per distinct row of the layout's fields `reads` and gathered
    (the same figures), where every value of `scalars` (what fn reads beside the layout, e.g.
    the stack's buffers) is one value; else fn(layout) itself."""
    found = (layout_rows(layout, reads) if all(np.ndim(v) == 0 for v in scalars.values())
             else None)
    return fn(layout) if found is None else gathered(fn(found[0]), found[1])
