"""A per-process cache of the request-independent part of `plan` (L4), for long-lived
processes that answer many plans (the web server's workers install one; the CLI does not).

What a search computes splits in two. The layout table (structure, memory per GPU, variants)
and, per physics group, the fastest feasible layout at each GPU count with its exclusion tally
depend on the model, sequence length, global batch, precisions, stack, confidence, filters,
GPU-count cap and site, never on the tokens, deadline, budget, objective or number of plans
shown; pricing, constraints and ranking depend on those. This cache keeps the first part,
keyed by the request with those five fields blanked (`shape_of`; compared by equality, so
two requests share an entry only when every other field is equal) and the catalog object
itself (an entry holds its catalog, so a new catalog never matches an old entry). What comes
back is what the search would compute: the entries are the same arrays, never modified.

Bounded by the bytes of the arrays held (`max_bytes`), least recently used evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

DEFAULT_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class Entry:
    """A search's request-independent work: its catalog, its layout table and per group
    (None: a group without GPU counts) the fastest rows and the tally `evaluate_group` made."""

    catalog: Any
    table: Any  # groups.LayoutTable
    groups: tuple[Any, ...]  # (rows, groups.Tally) | None, per planned group
    variants: tuple[int, ...] = ()  # variant candidates per planned group (LayoutTable's)


def shape_of(req: Any) -> Any:
    """The request without the fields only pricing, constraints and ranking read; None when it
    cannot be a key (a field that is not hashable)."""
    key = replace(req, tokens=1.0, deadline_days=None, budget_usd=None, objective="cost", top=1)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _nbytes(entry: Entry) -> int:
    t = entry.table
    arrays = [*t.g.values(), *t.extra.values(), t.memory_bytes, t.dropped, t.starts,
              *getattr(t, "bounds", {}).values()]
    for sel, fields in getattr(t, "memo", {}).values():  # the variants' row selections
        arrays += [sel, *fields.values()]
    for grp in entry.groups:
        if grp is not None:
            arrays += list(grp[0].values())
    return sum(int(np.asarray(a).nbytes) for a in arrays)


class SearchCache:
    """Entries by request shape, least recently used first; `hits` and `misses` count the
    lookups, `last` is the outcome of the latest one ('hit', 'miss', or None: none yet)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[Any, tuple[Entry, int]] = OrderedDict()
        self.hits = self.misses = 0
        self.last: str | None = None

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.entries.values())

    def get(self, catalog: Any, shape: Any) -> Entry | None:
        found = self.entries.get(shape)
        if found is not None and found[0].catalog is catalog:
            self.entries.move_to_end(shape)
            self.hits += 1
            self.last = "hit"
            return found[0]
        self.misses += 1
        self.last = "miss"
        return None

    def put(self, shape: Any, entry: Entry) -> None:
        size = _nbytes(entry)
        if size > self.max_bytes:
            return
        self.entries[shape] = (entry, size)
        self.entries.move_to_end(shape)
        while self.nbytes > self.max_bytes:
            self.entries.popitem(last=False)


_installed: SearchCache | None = None


def install(cache: SearchCache | None) -> None:
    """Use `cache` for every later search in this process (None: no cache)."""
    global _installed
    _installed = cache


def installed() -> SearchCache | None:
    return _installed
