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

Page faults. After a fork every page of the parent is shared, write-protected in both: the
first write to one faults, and copies it while the other process still maps it. A parent that
has searched before (a second `plan`, the benchmark) holds the freed arrays of that search
in its heap (`heap.keep_freed_memory`), and its part reuses them: deepseek-v3's parent part
faulted ~40,000 times (~160 MiB) at ~2.5 us a copy on this 2-core VM, ~0.09 s of its ~0.46 s;
the same part unforked, none. So a child first returns those free pages to the system
(`heap.release_free`, ~10 ms, on its own core): the parent's pages are then mapped once, and
its writes fault without a copy (~0.9 us each, as many faults; the child's are of fresh
pages, ~1.7 us). In a fresh process (the CLI) the heap is small at the fork, and each process
maps its part's pages anew (parent ~38,000 faults, child ~37,000; one process ~69,000), as
any fresh process does. The join is small: the child's rows pickle to ~55 KiB, unpickled in
~2 ms, merged in well under 1 ms; the rest of the parent's time after the join (~18 ms:
pricing, ranking, the outlook) is the one-process search's too. A child's exit, unmapping its
memory, took ~11 ms after its part arrived: not waited for (`reap`).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import heap

# fewer candidate physics rows than this (GPU counts x layouts per count, all groups): one
# process (a fork costs a few milliseconds, the join a few more)
MIN_ROWS = 2_000_000
# the work part 0 (this process) takes, relative to a child's: it prices, ranks and builds
# the outlook alone afterwards (~0.02 s) and forks (~8 ms), a child releases free memory
# (~10 ms) and pickles; both fault on the pages they write (module docstring). deepseek-v3,
# warm, forked, the child releasing: at 1.1 the parent's part ended 16-30 ms after the
# child's, at 1.0 -7 to +7 ms, at 0.9 ~90 ms before it (the deal is coarse); wall at load
# ~1.2: 0.51-0.52 s at 1.1, 0.51-0.52 s at 1.0, 0.55-0.58 s at 0.9
HERE_SHARE = 1.0
UNREAPED: list[int] = []  # children that sent their part, their exit not yet collected
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
    reap(block=False)
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
                    heap.release_free()  # the parent's free pages its own again (docstring)
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
        data = src.read()  # to the end: the child has closed its end, it is leaving
    UNREAPED.append(pid)
    reap(block=False)
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 -- a child that died early sent nothing (or half)
        return fn(i)


def reap(block: bool) -> None:
    """Collect the exit of the children that sent their part (`UNREAPED`); with `block`,
    wait for each. A child's exit -- unmapping its memory -- takes ~10 ms after it has sent
    everything: the search does not wait for it, a later split search (or `block`) collects
    it, and a process that exits leaves it to the system."""
    for pid in tuple(UNREAPED):
        try:
            done = os.waitpid(pid, 0 if block else os.WNOHANG)[0]
        except ChildProcessError:  # collected elsewhere
            done = pid
        if done:
            UNREAPED.remove(pid)
