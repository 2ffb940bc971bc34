"""`plan`'s evaluation over several processes (#11) (L4): the GPU counts dealt out, each
process building the layout table of its counts and evaluating every group on them.

What the evaluation computes for one GPU count -- its layouts, their memory and variants, each
group's checks, step times and fastest row -- depends on that count alone, and the exclusion
tallies add up over counts. So the counts are dealt to `workers` parts of about equal work
(`deal`), parts 1.. run in forked children and part 0 here, and the parts are joined: each
group's fastest rows sorted by GPU count, its tallies replayed part after part, its variant
candidates summed. The same rows and counts as one process computes (tests/test_search_cache.py).
Only with fork (POSIX) and only for callers that ask (the CLI; never the web server, whose
workers already run one per core); a child that fails is computed here instead.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

# fewer candidate physics rows than this (GPU counts x layouts per count, all groups): one
# process (a fork costs a few milliseconds, the join a few more)
MIN_ROWS = 2_000_000


def deal(group_counts: list[np.ndarray], axes: Any, workers: int) -> list[np.ndarray]:
    """The distinct GPU counts of the groups dealt to `workers` parts of about equal work, each
    part sorted: a count weighs its (tp, pp, cp) layouts that divide it (`grid.product`'s)
    times the groups that search it; the heaviest first, each to the lightest part so far."""
    counts, groups = np.unique(np.concatenate([np.asarray(c, dtype=np.int64)
                                               for c in group_counts] or [[]]).astype(np.int64),
                               return_counts=True)
    inner = [t * p * c for t in axes.tp for p, _ in axes.pipelines() for c in axes.cp]
    weight = [sum(1 for d in inner if int(n) % d == 0) * int(k)
              for n, k in zip(counts, groups, strict=True)]
    load = [0] * workers
    parts: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(counts.size), key=lambda i: -weight[i]):
        j = load.index(min(load))
        parts[j].append(int(counts[i]))
        load[j] += weight[i]
    return [np.array(sorted(p), dtype=np.int64) for p in parts]


def run_parts(fn: Callable[[int], Any], parts: int) -> list[Any]:
    """fn(0) here and fn(1..parts-1) in forked children, their results back by pipe (pickled);
    a part whose child fails or sends nothing is computed here."""
    if parts <= 1 or not hasattr(os, "fork"):
        return [fn(i) for i in range(parts)]
    children = []
    for i in range(1, parts):
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            children.append((i, None, None))
            continue
        if pid == 0:  # the child: compute its part, send it, leave without cleanup
            os.close(read)
            try:
                with os.fdopen(write, "wb") as out:
                    out.write(pickle.dumps(fn(i), protocol=pickle.HIGHEST_PROTOCOL))
            finally:
                os._exit(0)
        os.close(write)
        children.append((i, pid, read))
    results: list[Any] = [fn(0)]
    for i, pid, read in children:
        results.append(_joined(fn, i, pid, read))
    return results


def _joined(fn: Callable[[int], Any], i: int, pid: int | None, read: int | None) -> Any:
    """Part i's result from its child (pid, reading end of its pipe), or computed here."""
    if pid is None or read is None:
        return fn(i)
    with os.fdopen(read, "rb") as src:
        data = src.read()
    os.waitpid(pid, 0)
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 -- a child that died early sent nothing (or half)
        return fn(i)
