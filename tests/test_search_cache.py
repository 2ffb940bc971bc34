"""The plan search's shortcuts give the answers of the straightforward path (#11, #13):
the per-process search cache (search/cache.py), the outlook on the search's own layout table,
and the row figures computed only for the rows the search keeps. Exact equality throughout:
each shortcut reuses or subsets the same float64 arithmetic, it does not approximate it."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan import api
from gpuplan.catalog import load_catalog
from gpuplan.report import plan as report_plan
from gpuplan.search import cache
from gpuplan.search import plan as planmod

SMALL = dict(model="llama3-8b", gpu=["h100-sxm", "a100-80gb"], max_gpus=256)


def _json(result) -> dict:
    d = report_plan.to_json(result)
    d.pop("elapsed_s", None)
    return d


@pytest.fixture
def store():
    s = cache.SearchCache()
    cache.install(s)
    yield s
    cache.install(None)


def test_cached_plans_equal_computed_plans(store):
    """Varied tokens, deadline, budget and objective on one request shape: the first search
    misses and fills the cache, the others hit it, and every answer equals the one computed
    without a cache (same JSON, tallies included)."""
    asks = [dict(tokens="1T", deadline_days=30), dict(tokens="200B", budget_usd="50k",
                                                      objective="time"),
            dict(tokens="15T", objective="energy"), dict(tokens="2T", deadline_days=3)]
    cached = [_json(api.plan(**SMALL, **a)) for a in asks]
    assert (store.misses, store.hits) == (1, len(asks) - 1)
    cache.install(None)
    assert cached == [_json(api.plan(**SMALL, **a)) for a in asks]


def test_other_shapes_miss(store):
    """What the cached part depends on -- model, sequence, precision, filters, GPU cap --
    makes a different key."""
    api.plan(**SMALL, tokens="1T")
    for change in (dict(model="llama2-7b"), dict(seq_len=4096), dict(precision="bf16"),
                   dict(gpu=["h100-sxm"]), dict(max_gpus=128)):
        api.plan(**{**SMALL, **change}, tokens="1T")
    assert store.hits == 0 and store.misses == 6


def test_entry_belongs_to_its_catalog(store):
    """An entry is used only with the catalog object it was computed from."""
    cat = load_catalog()
    api.plan(**SMALL, tokens="1T")
    shape, (entry, _) = next(iter(store.entries.items()))
    assert entry.catalog is cat
    assert store.get(object(), shape) is None  # another catalog
    assert store.get(cat, shape) is entry


def test_cache_is_bounded():
    """Entries above the byte bound are not kept; older entries are evicted first."""
    tiny = cache.SearchCache(max_bytes=1)
    cache.install(tiny)
    try:
        api.plan(**SMALL, tokens="1T")
        api.plan(**SMALL, tokens="1T")
        assert not tiny.entries and tiny.hits == 0
        roomy = cache.SearchCache()
        cache.install(roomy)
        api.plan(**SMALL, tokens="1T")
        one = roomy.nbytes
        roomy.max_bytes = one + 1  # room for one entry of this size (or less), not two
        api.plan(**{**SMALL, "max_gpus": 128}, tokens="1T")
        assert len(roomy.entries) == 1
        assert next(iter(roomy.entries)).max_gpus == 128  # the newer one stays
    finally:
        cache.install(None)


def test_outlook_on_the_search_table_equals_its_own_tables():
    """`at_size` on the search's layout table (all precisions, variants sized for the
    smallest GPU of the search) gives the SizeResult of a table built for that count alone,
    feasible or not (the reason included)."""
    cat = load_catalog()
    seen = []
    original = planmod.search

    def capture(c, r, progress=None, workers=1):
        seen.append(r)
        return original(c, r)

    planmod.search = capture
    try:
        api.plan(model="llama3-70b", tokens="15T", deadline_days=90,
                 gpu=["h100-sxm", "a100-80gb"], max_gpus=2048)
    finally:
        planmod.search = original
    req = seen[0]
    from gpuplan.search.grid import model_axes
    from gpuplan.search.platforms import group_by_physics, select_platforms

    plats, _ = select_platforms(cat, req.filters)
    groups = list(group_by_physics(plats).values())
    counts = np.concatenate([planmod._group(req, cat, g, min(req.max_gpus, max(
        p.max_gpus or req.max_gpus for p in g))).counts for g in groups])
    axes = model_axes(req.model, req.seq_len, precisions=req.precisions, counts=counts)
    smallest = min(p.accelerator.memory_bytes for g in groups for p in g)
    table = planmod.layout_table(req, counts, axes, smallest)
    from gpuplan.search.single import price_rows

    seen_feasible = set()
    for g in groups:
        plat = g[0]
        modes = [r.mode for r in price_rows([plat], req.site)]
        for gpus in (8, 16, 64, 512, 2048):
            for prec in ("bf16", "fp8"):
                own = planmod.at_size(cat, req, plat, gpus, modes[0], (prec,))
                shared = planmod.at_size(cat, req, plat, gpus, modes[0], (prec,), table)
                assert shared == own, (plat.label, gpus, prec)
                seen_feasible.add(own.feasible)
    assert seen_feasible == {True, False}  # feasible sizes and the reasons of the others


def test_row_figures_of_kept_rows_equal_those_of_every_row():
    """`_described` on the rows the search keeps gives the MFU, bottleneck, small micro-batch
    flag, guess flag and interval factors computed over every timed row, then selected."""
    from gpuplan.search import feasibility as fz
    from gpuplan.search import groups
    from gpuplan.search.evaluate import site_from_catalog
    from gpuplan.search.grid import model_axes
    from gpuplan.search.platforms import Filters, group_by_physics, select_platforms

    cat = load_catalog()
    req = planmod.Request(model=cat.model("llama3-8b"), tokens=1e12, seq_len=8192,
                          global_batch=512, site=site_from_catalog(cat))
    plats, _ = select_platforms(cat, Filters(gpus=("h100-sxm",), acquisition="own"))
    plat = next(iter(group_by_physics(plats).values()))[0]
    counts = np.array([8, 16, 32, 64])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    table = planmod.layout_table(req, counts, axes, plat.accelerator.memory_bytes)
    g = {k: v.copy() for k, v in table.g.items()}
    g["memory_bytes"] = table.memory_bytes.copy()
    g["host_traffic"] = np.zeros(g["gpus"].size)
    clock = groups._clock(req, cat, plat)
    timed, t = groups._timed(req, g, clock, plat.accelerator.id, groups.Tally())
    kept = groups._described(groups.fastest_per_count(dict(timed)), t, clock)
    every = groups._described(dict(timed), t, clock)
    at = np.searchsorted(every["at"], kept["at"])
    assert kept["at"].size == counts.size
    for key in ("mfu", "bottleneck", "small_mb", "guess", "q10", "q90", "q_rank"):
        assert np.array_equal(kept[key], every[key][at]), key
    assert kept["bottleneck"].max() < len(fz.BOTTLENECKS)


def test_web_answers_say_cache_and_cpu(store):
    """With a search cache in the serving process, a plan's answer says whether its shape was
    cached (X-Gpuplan-Search-Cache) and every answer gives the server's CPU time
    (Server-Timing); the cached answer equals the computed one."""
    from starlette.testclient import TestClient

    from gpuplan.web.app import create_app

    client = TestClient(create_app(), raise_server_exceptions=False)
    body = {"model": "llama3-8b", "gpu": ["h100-sxm"], "max_gpus": 64, "tokens": "1T"}
    first = client.post("/api/plan", json=body)
    second = client.post("/api/plan", json={**body, "tokens": "2T", "deadline_days": 60})
    third = client.post("/api/plan", json=body)
    assert [r.headers.get("x-gpuplan-search-cache") for r in (first, second, third)] == [
        "miss", "hit", "hit"]
    a, b = first.json(), third.json()
    a.pop("elapsed_s"), b.pop("elapsed_s")  # the search's own wall time
    assert a == b
    est = client.post("/api/estimate", json={"model": "llama3-8b", "gpu": "h100-sxm",
                                             "gpus": 8})
    assert "x-gpuplan-search-cache" not in est.headers
    for r in (first, second, est):
        assert r.status_code == 200
        assert float(r.headers["server-timing"].split("dur=")[1]) > 0


def test_groups_timed_together_equal_groups_timed_alone(monkeypatch):
    """`evaluate_groups` (groups with the same rows share them and one broadcast call of the
    time model, small groups share calls with a row's own hardware: search/timed.py) gives
    every group exactly the rows and tally of a group timed alone, one call with its own
    hardware each (timed.ALONE = 0): same float64 arithmetic per row, so equal bit for bit."""
    from gpuplan.search import groups, timed
    from gpuplan.search.evaluate import site_from_catalog
    from gpuplan.search.grid import model_axes
    from gpuplan.search.platforms import Filters, group_by_physics, select_platforms

    cat = load_catalog()
    req = planmod.Request(model=cat.model("mixtral-8x7b"), tokens=1e12, seq_len=4096,
                          global_batch=1024, site=site_from_catalog(cat))
    plats, _ = select_platforms(cat, Filters(gpus=("h100-sxm", "a100-80gb", "rtx-4090",
                                                   "h200")))
    planned = [(p, planmod.gpu_counts(p[0].gpus_per_node, 512))
               for p in group_by_physics(plats).values()]
    counts = np.concatenate([c for _, c in planned])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    table = planmod.layout_table(req, counts, axes, min(p.accelerator.memory_bytes
                                                        for p in plats))
    jobs = [(p, c, groups.Tally()) for p, c in planned]
    together = groups.evaluate_groups(req, cat, jobs, table)
    keys = [groups._rows_key(req, cat, p, c, None) for p, c in planned]
    assert len(set(keys)) < len(keys)  # some groups share their rows
    monkeypatch.setattr(timed, "ALONE", 0)
    for (p, c, tally), rows in zip(jobs, together, strict=True):
        alone_tally = groups.Tally()
        alone = groups.evaluate_group(req, cat, p, c, axes, alone_tally, table)
        assert alone.keys() == rows.keys()
        for k in rows:
            assert np.array_equal(alone[k], rows[k]), (p[0].label, k)
        assert alone_tally.log == tally.log
        assert alone_tally.physically_feasible == tally.physically_feasible


def test_variant_memory_is_the_memory_breakdowns(monkeypatch):
    """`variants.most_loaded` (the table's variant rows: total, offloaded bytes and host
    traffic of the most loaded stage, without selecting every part) equals
    `memory.memory_breakdown`'s, bit for bit, on every variant row of a MoE model's table;
    the offload copies' (`variants.LAZY`) once sized as a group reads them (`table.sizer`),
    on a few rows at a time."""
    from gpuplan.search import variants
    from gpuplan.search.evaluate import memory_per_gpu, site_from_catalog
    from gpuplan.search.grid import model_axes

    monkeypatch.setattr(variants, "LAZY_MIN", 0)  # the offload copies sized lazily
    cat = load_catalog()
    site = site_from_catalog(cat)
    req = planmod.Request(model=cat.model("mixtral-8x7b"), tokens=1e12, seq_len=4096,
                          global_batch=1024, site=site)
    counts = np.array([8, 64, 512])
    table = planmod.layout_table(req, counts, model_axes(req.model, req.seq_len, counts=counts),
                                 24 << 30)
    lay = planmod._layout(table.extra, req)
    assert set(np.unique(table.extra["kind"])) == {0, 1, 2}  # every kind of copy
    bd = memory_per_gpu(req.model, lay, site)
    for got, want in zip(variants.most_loaded(req.model, lay, site),
                         (bd.total, bd.offloaded, bd.host_traffic), strict=True):
        assert np.array_equal(got, np.broadcast_to(want, got.shape), equal_nan=True)
    pending = table.extra["pending"]
    assert pending.any() and np.isnan(table.extra["memory_bytes"][pending]).all()
    for rows in np.array_split(np.flatnonzero(pending), 3):
        table.sizer(rows)
    assert not table.extra["pending"].any()
    for k, want in zip(variants.SIZED, (bd.total, bd.offloaded, bd.host_traffic), strict=True):
        assert np.array_equal(table.extra[k], np.broadcast_to(want, bd.total.shape),
                              equal_nan=True)


# --- pruning before the time model (search/prune.py) and the split search (search/split.py) ---

# (model, options): a dense model over many GPUs and prices, a MoE model, constraints that
# bind, one precision, a confidence quantile, ZeRO-3 rows with HSDP copies (llama3-70b)
PRUNE_CASES = [
    dict(model="llama3-70b", tokens="15T", deadline_days=90, gpu=["h100-sxm", "a100-80gb",
                                                                 "h200", "mi300x"]),
    dict(model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm", "h800", "b200"],
         max_gpus=4096),
    dict(model="gpt3-175b", tokens="300B", objective="time", budget_usd="2M",
         precision="bf16"),
    dict(model="mixtral-8x7b", tokens="1T", confidence=0.9, max_gpus=512),
    dict(model="llama3-8b", tokens="1T", gpu=["rtx-4090", "l40s", "v100-sxm2-32gb"],
         allow_consumer=True, max_gpus=64),
]


def _plan_json(monkeypatch, enabled: bool, **ask) -> dict:
    from gpuplan.search import prune

    monkeypatch.setattr(prune, "ENABLED", enabled)
    return _json(api.plan(**ask))


@pytest.mark.parametrize("ask", PRUNE_CASES, ids=[c["model"] for c in PRUNE_CASES])
def test_pruned_plans_equal_plans_timing_every_row(monkeypatch, ask):
    """Skipping the rows provably slower than a timed row of their count changes nothing the
    plan reports: ranked plans, Pareto front, per-GPU bests, tallies (physically feasible and
    every exclusion), why-not, outlook -- the whole JSON. And rows were skipped."""
    from gpuplan.search import prune

    monkeypatch.setattr(prune, "stats", prune.Stats())
    pruned = _plan_json(monkeypatch, True, **ask)
    assert prune.stats.skipped > 0 and not prune.stats.fell_back
    assert pruned == _plan_json(monkeypatch, False, **ask)


def _all_rows_checked(monkeypatch) -> list[int]:
    """Make prune.timed_rows check its bounds against the time model on every row it is
    given (then time them all); returns the list it appends the rows checked to."""
    from gpuplan.search import prune

    checked: list[int] = []

    def every(req, jobs, table=None, known=None):
        bounds = prune._bounds(req, jobs, table)
        jobs = [(prune.filled(table, g), c, key) for g, c, key in jobs]  # every field
        timings = prune.time_many(req, jobs)
        for (g, _, _), t, b in zip(jobs, timings, bounds, strict=True):
            if b is not None:
                assert prune._holds(g, t, b)
                checked.append(int(b[2].sum()))
        return [g for g, _, _ in jobs], timings, [0] * len(jobs), [np.zeros(0, int)] * len(jobs)

    monkeypatch.setattr(prune, "timed_rows", every)
    return checked


@pytest.mark.parametrize("ask", PRUNE_CASES[:4], ids=[c["model"] for c in PRUNE_CASES[:4]])
def test_bound_is_below_every_step(monkeypatch, ask):
    """The bound of `prune.floors` is below the step time (and the compute floor below
    compute + memory + overhead + optimizer) of every row it calls eligible, each of which
    has a finite step, over every row of these searches (the proof the pruning rests on,
    checked on the time model as it is now)."""
    checked = _all_rows_checked(monkeypatch)
    api.plan(**ask)
    assert sum(checked) > 10_000


def test_a_broken_bound_falls_back_to_timing_every_row(monkeypatch):
    """A bound above the real step (a physics change it does not mirror) is caught by the
    guard on the rows timed: the search then times every row, and the plan is unchanged."""
    from gpuplan.search import prune

    ask = PRUNE_CASES[0]
    want = _plan_json(monkeypatch, False, **ask)
    original = prune.floors
    monkeypatch.setattr(prune, "floors", lambda *a: tuple(b * 3.0 for b in original(*a)))
    monkeypatch.setattr(prune, "stats", prune.Stats())
    assert _plan_json(monkeypatch, True, **ask) == want
    assert prune.stats.fell_back


@pytest.fixture
def forks(monkeypatch):
    """The pids os.fork returned here, with forking allowed: split.run_parts does not fork in
    a process with other Python threads (a deadlock risk), and an earlier test of this session
    may have left one (a web test client's portal thread); the children these tests fork run
    only pure computation and pickling, so the guard is lifted for them, and each test asserts
    that it really forked, so that none passes by running every part here."""
    import os
    import threading

    pids: list[int] = []
    fork = os.fork

    def recorded():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "fork", recorded)
    return pids


@pytest.mark.parametrize("ask", PRUNE_CASES[:2], ids=[c["model"] for c in PRUNE_CASES[:2]])
def test_split_search_equals_one_process(monkeypatch, forks, ask):
    """`workers=2` (GPU counts dealt to a forked child and this process, joined) gives the
    plan of one process, whole JSON; forced on these searches (split.MIN_ROWS = 0)."""
    from gpuplan.search import split

    one = _json(api.plan(**ask))
    calls = []
    original = split.run_parts
    monkeypatch.setattr(split, "MIN_ROWS", 0)
    monkeypatch.setattr(split, "run_parts", lambda fn, n: calls.append(n) or original(fn, n))
    assert _json(api.plan(**ask, workers=2)) == one
    assert calls == [2] and len(forks) == 1



def test_a_child_releases_free_memory_before_its_part(monkeypatch, forks):
    """Each forked child returns the free heap it inherited (`heap.release_free`) before it
    computes its part, so that the parent's writes to those pages copy nothing; this process
    releases nothing."""
    import os

    from gpuplan.search import split

    released: list[int] = []
    monkeypatch.setattr(split.heap, "release_free", lambda: released.append(os.getpid()) or True)
    assert split.run_parts(lambda i: (i, list(released)), 2) == [(0, []), (1, forks)]
    assert len(forks) == 1 and released == []



def test_children_that_sent_their_part_are_collected(forks):
    """The search does not wait for a child's exit after its part arrived (`split.UNREAPED`);
    a later split search or `reap(block=True)` collects it: none is left."""
    import os

    from gpuplan.search import split

    assert split.run_parts(lambda i: i, 2) == [0, 1] and len(forks) == 1
    split.reap(block=True)
    assert split.UNREAPED == []
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)  # already collected

def test_split_search_from_a_warm_heap_equals_one_process(monkeypatch, forks):
    """With freed memory kept (`heap.keep_freed_memory`, as the CLI) and a search done before,
    the child inherits a heap full of freed arrays and releases it: the split plan is still
    the one-process plan, whole JSON, searched twice."""
    from gpuplan.search import heap, split

    ask = PRUNE_CASES[0]
    heap.keep_freed_memory()
    one = _json(api.plan(**ask))
    monkeypatch.setattr(split, "MIN_ROWS", 0)
    assert [_json(api.plan(**ask, workers=2)) for _ in range(2)] == [one, one]
    assert len(forks) == 2

def test_a_failed_child_part_is_computed_here(forks):
    """A part whose forked child fails (raises, sends nothing) is computed in this process."""
    import os

    from gpuplan.search import split

    here = os.getpid()

    def part(i):
        if os.getpid() != here:
            raise RuntimeError("child fails")
        return i * 10

    assert split.run_parts(part, 3) == [0, 10, 20]
    assert len(forks) == 2


def test_dealt_counts_cover_every_count_once():
    from gpuplan.search import split
    from gpuplan.search.grid import model_axes

    cat = load_catalog()
    counts = [np.array([8, 16, 32, 64, 128]), np.array([72, 144, 288]), np.array([8, 16])]
    parts = split.deal(counts, model_axes(cat.model("llama3-70b"), 8192), 1024, 64.0, 2)
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == [8, 16, 32, 64, 72, 128, 144, 288]
    assert all(p.size and np.all(np.diff(p) > 0) for p in parts)


def test_a_failure_here_leaves_no_child(forks):
    """When this process's part raises, the children are ended and reaped, and the error
    comes through."""
    import os

    from gpuplan.search import split

    here = os.getpid()

    def part(i):
        if os.getpid() == here:
            raise ValueError("here fails")
        return i

    with pytest.raises(ValueError, match="here fails"):
        split.run_parts(part, 2)
    assert len(forks) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)  # already reaped


OUTLOOK_CASES = [PRUNE_CASES[0], PRUNE_CASES[1], PRUNE_CASES[3],
                 dict(model="llama3-70b", tokens="2T", precision="bf16",
                      gpu=["h100-sxm", "a100-80gb"], max_gpus=1024)]


@pytest.mark.parametrize("ask", OUTLOOK_CASES, ids=[c["model"] for c in OUTLOOK_CASES])
def test_outlook_from_the_search_rows_equals_its_own_evaluation(monkeypatch, forks, ask):
    """The outlook's counts read from the search's own rows of the winner's group
    (`plan.searched_row`) give the SizeResults `at_size` computes for each count itself:
    whole JSON equal; and some counts were read (the shortcut ran), in one process and split
    over two (the rows joined from both parts)."""
    used = []
    original = planmod.searched_row

    def counted(found, gpus, precision):
        row = original(found, gpus, precision)
        used.append(row is not None)
        return row

    monkeypatch.setattr(planmod, "searched_row", counted)
    reused = _json(api.plan(**ask))
    assert any(used)
    from gpuplan.search import split

    monkeypatch.setattr(split, "MIN_ROWS", 0)
    assert _json(api.plan(**ask, workers=2)) == reused and len(forks) == 1
    monkeypatch.setattr(planmod, "REUSE", False)
    used.clear()
    assert _json(api.plan(**ask)) == reused
    assert not any(used)


@pytest.mark.parametrize("ask", PRUNE_CASES[:3], ids=[c["model"] for c in PRUNE_CASES[:3]])
def test_lean_rows_equal_rows_carrying_every_field(monkeypatch, ask):
    """A group's rows carry a few fields (`groups.LEAN`) until the pruning, which gathers the
    others for the rows it times (`timed.filled`): the plan of rows that carry every field
    from the start, whole JSON, with pruning and without."""
    from gpuplan.search import groups, prune

    lean = _json(api.plan(**ask))
    every = (*groups._ROW_KEYS, "shard_group", "offload")
    monkeypatch.setattr(groups, "LEAN", every)
    assert _json(api.plan(**ask)) == lean
    monkeypatch.setattr(prune, "ENABLED", False)
    assert _json(api.plan(**ask)) == lean
