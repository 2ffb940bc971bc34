"""The Pareto front: nothing on it is dominated, and it holds the best of each objective (#6)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.search.pareto import pareto_front

points = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=60)


def brute_front(cost, days):
    n = len(cost)
    return {i for i in range(n)
            if not any((cost[j] <= cost[i] and days[j] <= days[i])
                       and (cost[j] < cost[i] or days[j] < days[i]) for j in range(n))}


@settings(max_examples=200, deadline=None)
@given(points)
def test_front_matches_brute_force(pts):
    cost = np.array([p[0] for p in pts], float)
    days = np.array([p[1] for p in pts], float)
    front = pareto_front(cost, days)
    # duplicates: the fast front keeps one representative of identical points
    got = {(cost[i], days[i]) for i in front}
    want = {(cost[i], days[i]) for i in brute_front(cost, days)}
    assert got == want
    assert len(front) == len(got)
    assert cost.min() in cost[front] and days.min() in days[front]


def test_front_is_sorted_by_days_and_cost_falls():
    cost = np.array([5.0, 3.0, 4.0, 1.0, 9.0])
    days = np.array([1.0, 2.0, 2.0, 5.0, 0.5])
    front = pareto_front(cost, days)
    assert list(front) == [4, 0, 1, 3]
    assert np.all(np.diff(days[front]) > 0) and np.all(np.diff(cost[front]) < 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5), st.integers(0, 5)),
                min_size=1, max_size=40))
def test_fastest_per_count_matches_brute_force(rows):
    """Per GPU count: the highest tokens/s, ties broken by the least memory (#6)."""
    from gpuplan.search.plan import fastest_per_count

    rows = sorted(rows, key=lambda r: r[0])  # the search hands rows over sorted by count
    g = {"gpus": np.array([r[0] for r in rows]), "tokens_per_s": np.array([r[1] for r in rows],
                                                                          float),
         "memory_bytes": np.array([r[2] for r in rows], float), "i": np.arange(len(rows))}
    out = fastest_per_count(g)
    want = {}
    for i, (c, t, m) in enumerate(rows):
        best = want.get(c)
        if best is None or (t, -m) > (rows[best][1], -rows[best][2]):
            want[c] = i
    assert list(out["gpus"]) == sorted(want)
    for c, i in zip(out["gpus"], out["i"], strict=True):
        assert (rows[i][1], rows[i][2]) == (rows[want[c]][1], rows[want[c]][2])
