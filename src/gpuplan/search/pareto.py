"""Pareto front of (cost, time) over feasible candidates, vectorized (L4)."""

from __future__ import annotations

import numpy as np


def pareto_front(cost: np.ndarray, days: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points, ordered by increasing days.

    A point is dominated when another is no worse in both objectives and better in one. Sort by
    days (ties by cost); walking in that order, a point is on the front iff its cost is strictly
    below every cost seen before it (a running minimum) -- O(n log n), no Python loop per point.
    """
    cost = np.asarray(cost, dtype=float)
    days = np.asarray(days, dtype=float)
    if cost.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((cost, days))
    c = cost[order]
    prev_min = np.minimum.accumulate(np.concatenate(([np.inf], c[:-1])))
    keep = c < prev_min
    return order[keep]
