"""What depends only on the catalog, computed once per catalog object (L4).

A single `estimate` looks up the same catalog-derived values on every call: the site
defaults, the platform and hardware row of an accelerator, the efficiency constants and the
prediction interval of a (family, stack) pair. A `Catalog` is not changed once built
(`load_catalog` hands the same object to every caller with the same overlays), so these are
kept per catalog object: `per_catalog(cat, key, build)` returns `build()` the first time a
catalog sees `key` and the same value afterwards. The memo holds the catalog weakly and is
tied to its identity: a new or rebuilt catalog (an overlay, `dataclasses.replace`) starts
empty, and the entries go when the catalog goes. Only values that are read, never modified,
are kept (frozen records of Python numbers, `one_row`, and read-only arrays).

This is not a cache of results: the physics, the rules and the result of every call are
computed for every call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import fields, replace
from functools import partial
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

# id(catalog) -> (a weak reference to it, its memo)
_MEMOS: dict[int, tuple[weakref.ref, dict[Hashable, Any]]] = {}


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _MEMOS.get(key)
    if entry is not None and entry[0] is ref:
        del _MEMOS[key]


def memo_of(cat: Any) -> dict[Hashable, Any]:
    """The memo of one catalog object (empty for a catalog not seen before)."""
    key = id(cat)
    entry = _MEMOS.get(key)
    if entry is not None and entry[0]() is cat:
        return entry[1]
    ref = weakref.ref(cat, partial(_forget, key))
    memo: dict[Hashable, Any] = {}
    _MEMOS[key] = (ref, memo)
    return memo


def per_catalog(cat: Any, key: Hashable, build: Callable[[], T]) -> T:
    """`build()` computed once per catalog object and `key`; errors are raised, not kept."""
    memo = memo_of(cat)
    try:
        return memo[key]  # type: ignore[no-any-return]
    except KeyError:
        value = memo[key] = build()
        return value


def one_row(record: T) -> T:
    """A dataclass of one candidate's arrays (`hardware_table`, `efficiency_for` on one row)
    with each one-element array as its Python number, so the scalar paths read it without
    numpy; a larger array (the per-precision peak table) keeps its one row, read-only."""
    values: dict[str, Any] = {}
    for f in fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        if isinstance(value, np.ndarray):
            if value.size == 1:
                value = value.reshape(-1).tolist()[0]
            else:
                value = value.reshape(-1).copy()
                value.setflags(write=False)
        values[f.name] = value
    return replace(record, **values)  # type: ignore[type-var]
