"""Where the web computes: a bounded pool of worker processes, one per core by default.

A plan is about a quarter of a second of numpy over a few hundred thousand candidates, most
of it in small Python-level steps that hold the GIL: threads in one process share one core, so
eight concurrent plans on a thread pool wait about eight times as long as one. Worker
processes use every core; each reads the catalog, builds the request parsers and plans the
page's default request once, when it starts (`warm`, `rehearse`), not per request. No answer
is cached: every request is priced, constrained and ranked anew; each worker keeps the
request-independent part of its plans (the layout table and each GPU group's fastest
layouts, `search.cache`) for later plans of the same request shape (model, sequence, batch,
filters, site...) with other tokens, deadline, budget or objective. GPUPLAN_SEARCH_CACHE=0
turns that off (the benchmark's baseline); the outcome of each call says whether its plan
search found its shape there (`cache_state`) and the CPU time it took.

`call(fn, *args)` runs in a worker and returns a picklable outcome instead of raising, so a
`RequestError` (status and the CLI's line) or a bug's class name crosses the process boundary
unchanged; the thread pool (`processes=False`, tests and embedding) runs the same function.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import OrderedDict
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from .adapter import RequestError

# ("ok", value, cache state, CPU seconds) | ("error", status, message) | ("bug", class name)
Outcome = tuple[Any, ...]
CACHE_BYTES = 256 << 20  # per worker process (`search.cache.SearchCache`)


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _exit_with(parent: int) -> None:
    """Ends this worker once the server that started it is gone, however it ended."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def warm() -> None:
    """Once per worker process: leave Ctrl-C to the server (which stops the pool), end with the
    server, import the library, read the catalog and build each command's request fields."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    from .. import api  # noqa: F401  (the library and its estimators, imported once)
    from ..catalog import load_catalog
    from ..report import estimate, plan, tco  # noqa: F401
    from ..search import ownership  # noqa: F401
    from . import adapter, views  # noqa: F401

    load_catalog()
    for command in adapter.COMMANDS:
        adapter.fields(command)
    if os.environ.get("GPUPLAN_SEARCH_CACHE", "1") != "0":
        from ..search import cache

        cache.install(cache.SearchCache(CACHE_BYTES))
    rehearse()


# The page's first request (static/index.html: its default model and tokens)
WARM_PLAN = {"model": "llama3-8b", "tokens": "1T"}


def rehearse() -> None:
    """Plan the page's default request once, at start: a process's first plan costs about a
    third more than the next ones (the allocator's first large blocks, the catalog tables each
    search reads, numpy's first calls), and the page's first answer -- what every visitor asks
    first -- is then in the search cache, when it is on. Never fails the start."""
    from . import adapter

    try:
        adapter.run("plan", dict(WARM_PLAN))
    except Exception:  # noqa: BLE001  (a warm-up; a real request reports its own error)
        pass
    cache_state()  # the rehearsal is no request's


def cache_state() -> str:
    """'hit' or 'miss' for the latest plan search of this process's search cache since the last
    call; '' when the call searched nothing or the process has no cache."""
    from ..search import cache

    store = cache.installed()
    if store is None:
        return ""
    state, store.last = store.last or "", None
    return state


def ready() -> int:
    """A no-op task: the server sends one to each worker at start-up, so none starts later."""
    return os.getpid()


def call(fn: Any, *args: Any) -> Outcome:
    """`fn(*args)` as an outcome tuple (see the module docstring); never raises."""
    cache_state()  # forget an earlier call's
    try:
        c0 = time.thread_time()  # this thread's CPU: the computation alone, whatever the load
        value = fn(*args)
        return ("ok", value, cache_state(), time.thread_time() - c0)
    except RequestError as err:
        return ("error", err.status, err.message)
    except Exception as err:  # a bug: its class name only, no traceback leaves the server
        return ("bug", type(err).__name__)


def unwrap(outcome: Outcome) -> Any:
    """The value of an outcome; RequestError for bad input and for a bug (500, one line)."""
    if outcome[0] == "ok":
        return outcome[1]
    if outcome[0] == "error":
        raise RequestError(outcome[1], outcome[2])
    raise RequestError(500, f"internal error ({outcome[1]}); the same request on the command "
                            "line shows where")


def make_pool(workers: int, processes: bool) -> Executor:
    """`workers` processes (spawned: the server process has threads, so no fork) or threads."""
    if not processes:
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuplan-web")
    return Routed(workers)


class Routed(Executor):
    """Worker processes, each behind an executor of its own, and a choice of worker per call:
    a call with a `key` (a plan's request shape, `plan_key`) goes to the worker that last took
    that key -- its search cache holds the shape, or is filling it -- unless that worker has
    more calls waiting than the least busy one plus one; every other call goes to the least
    busy worker. Plans of one shape then mostly meet the search their worker keeps, and no
    worker waits idle while calls queue on the other."""

    AFFINITY = 1024  # request shapes remembered (least recently used forgotten)

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pools = [ProcessPoolExecutor(max_workers=1, initializer=warm, mp_context=context)
                      for _ in range(workers)]
        self.pending = [0] * workers
        self.affinity: OrderedDict[str, int] = OrderedDict()
        self.lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        key = kwargs.pop("key", None)
        with self.lock:
            w = self._choose(key)
            self.pending[w] += 1
        try:
            fut = self.pools[w].submit(fn, *args, **kwargs)
        except BaseException:
            self._done(w)
            raise
        fut.add_done_callback(lambda _: self._done(w))
        return fut

    def _choose(self, key: str | None) -> int:
        least = min(range(len(self.pools)), key=self.pending.__getitem__)
        w = self.affinity.get(key, least) if key is not None else least
        if self.pending[w] > self.pending[least] + 1:
            w = least
        if key is not None:
            self.affinity[key] = w
            self.affinity.move_to_end(key)
            while len(self.affinity) > self.AFFINITY:
                self.affinity.popitem(last=False)
        return w

    def _done(self, w: int) -> None:
        with self.lock:
            self.pending[w] -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for pool in self.pools:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)


# the request fields only pricing, constraints and ranking read (search.cache.shape_of)
_NOT_SHAPE = ("tokens", "deadline_days", "budget_usd", "objective", "top")


def plan_key(body: dict[str, Any]) -> str:
    """A plan request's shape, as `Routed` routes it: the body without the fields that the
    search cache's key blanks (its shape can still differ from the cache's, e.g. an alias:
    only where the plan is searched depends on it, never its answer)."""
    import json

    return json.dumps({k: v for k, v in body.items() if k not in _NOT_SHAPE}, sort_keys=True,
                      default=str)
