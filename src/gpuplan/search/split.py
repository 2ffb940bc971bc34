"""`plan`'s evaluation over several processes (#11) (L4): the GPU counts dealt out, each
process building the layout table of its counts and evaluating every group on them.

What the evaluation computes for one GPU count -- its layouts, their memory and variants, each
group's checks, step times and fastest row -- depends on that count alone, and the exclusion
tallies add up over counts. So the counts are dealt to `workers` parts of about equal work
(`deal`), parts 1.. run in forked children and part 0 here, and the parts are joined: each
group's fastest rows sorted by GPU count, its tallies replayed part after part, its variant
candidates summed. The same rows and counts as one process computes (tests/test_search_cache.py).
Only with fork (POSIX), in a process without threads, and only for callers that ask (the CLI;
never the web server, whose workers already run one per core); a child that fails is computed
here instead, and no child outlives a search that fails here.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# fewer candidate physics rows than this (GPU counts x layouts per count, all groups): one
# process (a fork costs a few milliseconds, the join a few more)
MIN_ROWS = 2_000_000
# the work part 0 (this process) takes, relative to a child's: it prices, ranks and builds
# the outlook alone afterwards (~0.025 s of deepseek-v3's ~0.8 s of parts), but a child
# pays its page faults after the fork and the pickling (~0.07 s): so a little more here
# (deepseek-v3's parts measured 0.36 + 0.43 s CPU at 0.8, 0.40 + 0.37 s at 1.1; forked, on 2
# cores at load ~1.2: wall 0.548 s at 0.8, 0.525 s at 1.0, 0.524 s at 1.1)
HERE_SHARE = 1.1
STATE_BYTES = 16.0  # mixed-precision AdamW state per parameter, for `deal`'s weights only
MEMORY_SHARE = 0.3  # `deal`'s weight of a row that never fits (memory model only)


def deal(group_counts: list[np.ndarray], axes: Any, global_batch: int, fit_gpus: float,
         workers: int) -> list[np.ndarray]:
    """The distinct GPU counts of the groups dealt to `workers` parts of about equal work
    (part 0 HERE_SHARE of a share), each part sorted, the heaviest count first, each to the
    part it leaves least loaded for its share. A count weighs the groups that search it times
    its (tp, pp, cp, micro-batch) layouts whose degrees divide it and whose data-parallel
    micro-batches divide the global batch (about the rows `grid.product` and the layout rules
    keep: each goes through the memory model) times (MEMORY_SHARE + the share of them that
    may fit, which the time model then takes: min(1, count / `fit_gpus`), `fit_gpus` the
    count at which the model's training state would fit fully sharded). A load balance
    only: any deal gives the same plans."""
    flat = (np.concatenate([np.asarray(c, dtype=np.int64) for c in group_counts])
            if group_counts else np.zeros(0, dtype=np.int64))
    counts, groups = np.unique(flat, return_counts=True)
    inner = [t * p * c for t in axes.tp for p, _ in axes.pipelines() for c in axes.cp]
    weight = [int(k) * sum(1 for d in inner if int(n) % d == 0 for mb in axes.micro_batch
                           if global_batch % (int(n) // d * mb) == 0)
              * (MEMORY_SHARE + min(1.0, int(n) / max(fit_gpus, 1.0)))
              for n, k in zip(counts, groups, strict=True)]
    share = [HERE_SHARE, *[1.0] * (workers - 1)]
    load = [0.0] * workers
    parts: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(counts.size), key=lambda i: -weight[i]):
        j = min(range(workers), key=lambda j: (load[j] + weight[i]) / share[j])
        parts[j].append(int(counts[i]))
        load[j] += weight[i]
    return [np.array(sorted(p), dtype=np.int64) for p in parts]


def run_parts(fn: Callable[[int], Any], parts: int) -> list[Any]:
    """fn(0) here and fn(1..parts-1) in forked children, their results back by pipe (pickled);
    a part whose child fails or sends nothing is computed here."""
    if parts <= 1 or not hasattr(os, "fork") or threading.active_count() > 1:
        return [fn(i) for i in range(parts)]  # forking a threaded process may deadlock
    children: list[tuple[int, int | None, int | None]] = []
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
    try:
        results: list[Any] = [fn(0)]
    except BaseException:
        for _, child, end in children:  # no child outlives a failed search
            if child is not None and end is not None:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                os.close(end)
        raise
    for i, child, end in children:
        results.append(_joined(fn, i, child, end))
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
