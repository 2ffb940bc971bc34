"""How the server computes, which sets /api/plan's latency under load: requests run in worker
processes (one per core; threads in one process share a core through the GIL), the JSON
request renders no chart, the catalog is read once per process, and a worker that dies is a
503 followed by a fresh pool -- never a hung server."""

from __future__ import annotations

import asyncio
import os

import pytest
from starlette.testclient import TestClient

from gpuplan.web import adapter, views, worker
from gpuplan.web.adapter import RequestError
from gpuplan.web.app import Api, create_app

PLAN = {"model": "llama3-8b", "tokens": "1T", "deadline_days": 30, "gpu": ["h100-sxm"]}
BAD = {"model": "llama3-8b", "tokens": "1T", "gpu": "h10"}


@pytest.fixture(scope="module")
def threads():
    return TestClient(create_app(), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def processes():
    """The server as `gpuplan serve` runs it: two worker processes, started with the app."""
    with TestClient(create_app(workers=2, processes=True),
                    raise_server_exceptions=False) as client:
        yield client


def _same(doc):
    return {k: v for k, v in doc.items() if k != "elapsed_s"}  # the only per-run field


def test_worker_processes_answer_exactly_as_threads(threads, processes):
    a, b = threads.post("/api/plan", json=PLAN), processes.post("/api/plan", json=PLAN)
    assert a.status_code == b.status_code == 200
    assert _same(a.json()) == _same(b.json())
    a, b = threads.post("/api/plan", json=BAD), processes.post("/api/plan", json=BAD)
    assert a.status_code == b.status_code == 422
    assert a.json() == b.json() and "did you mean 'h100-sxm'" in b.json()["error"]


def test_charts_and_reports_are_computed_in_the_workers(processes):
    r = processes.post("/api/estimate?charts=1", json={"model": "llama3-8b", "gpu": "h100-sxm",
                                                      "gpus": 8})
    assert r.status_code == 200 and r.json()["charts"]["memory"].startswith("<svg")
    r = processes.post("/api/report/tco", json={"system": "dgx-h100", "compare_cloud": True})
    assert r.status_code == 200 and r.text.startswith("<!doctype html>")


def test_the_pool_is_processes_sized_to_the_cores(processes):
    pool = processes.app.state.api.pool
    assert pool is not None  # started and warmed with the app, before the first request
    pids = {pool.submit(worker.ready).result(timeout=60) for _ in range(4)}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert Api().workers == worker.default_workers() == len(os.sched_getaffinity(0))


def test_a_dead_worker_is_a_503_then_a_new_pool_answers():
    api = Api(workers=1, processes=True)

    async def go():
        with pytest.raises(RequestError) as err:
            await api.call(os._exit, 1)  # the worker process dies mid-request
        assert err.value.status == 503 and "\n" not in err.value.message
        return await api.call(adapter.run, "catalog/models", {})

    try:
        assert asyncio.run(go())  # the next request is served
    finally:
        api.close()


def test_outcomes_cross_the_process_boundary():
    """A RequestError keeps its status and line; a bug is its class name, never a traceback."""
    assert worker.unwrap(worker.call(int, "7")) == 7
    with pytest.raises(RequestError) as err:
        worker.unwrap(worker.call(adapter.run, "plan", BAD))
    assert err.value.status == 422 and "did you mean" in err.value.message
    with pytest.raises(RequestError) as err:
        worker.unwrap(worker.call(int, "x"))
    assert err.value.status == 500 and err.value.message.startswith("internal error (ValueError)")


def test_the_json_plan_renders_no_chart(threads, monkeypatch):
    """/api/plan is the search and its JSON; the charts, per-plan estimates and TCO are only
    for ?charts=1 (the page)."""
    def never(*a, **k):
        raise AssertionError("a chart or view computed for a JSON request")

    for name in ("charts", "plan_view", "estimate_body", "_tco_body"):
        monkeypatch.setattr(views, name, never)
    r = threads.post("/api/plan", json=PLAN)
    assert r.status_code == 200 and "charts" not in r.json() and "estimates" not in r.json()


def test_the_catalog_is_read_once_per_process(threads, monkeypatch):
    from gpuplan.catalog import loader

    threads.post("/api/plan", json=PLAN)  # this process has read it (or read it now)
    reads = []
    monkeypatch.setattr(loader, "read_doc", lambda *a, **k: reads.append(a))
    assert threads.post("/api/plan", json=PLAN).status_code == 200
    assert threads.post("/api/tco", json={"system": "dgx-h100"}).status_code == 200
    assert reads == []


def test_serve_runs_worker_processes(run_cli, monkeypatch):
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda application, **k: seen.update(app=application))
    assert run_cli("serve", "--port", "0", "--workers", "3")[0] == 0
    api = seen["app"].state.api
    assert api.processes and api.workers == 3 and api.pool is None  # started with the server


def test_plans_of_one_shape_go_to_one_worker_unless_it_is_busier():
    """`worker.Routed`: a plan goes to the worker that took its request shape last (its search
    cache holds it), unless that worker has more than one call more waiting than the least
    busy one; other calls go to the least busy worker. The shape ignores what only pricing
    and ranking read."""
    import threading
    from collections import OrderedDict

    r = worker.Routed.__new__(worker.Routed)
    r.pools, r.pending, r.affinity, r.lock = [None, None], [0, 0], OrderedDict(), threading.Lock()

    def send(key):
        w = r._choose(key)
        r.pending[w] += 1
        return w

    a = worker.plan_key({"model": "llama3-8b", "tokens": "1T"})
    assert a == worker.plan_key({"model": "llama3-8b", "tokens": "2T", "deadline_days": 9,
                                 "budget_usd": "1M", "objective": "time", "top": 3})
    b = worker.plan_key({"model": "llama3-8b", "tokens": "1T", "gpu": ["h100-sxm"]})
    assert a != b
    assert [send(a), send(b), send(a), send(a)] == [0, 1, 0, 0]  # pending now [3, 1]
    assert send(a) == 1  # worker 0 has 2 more waiting than worker 1: the least busy takes it
    assert send(a) == 1 and send(None) == 0  # the shape follows; other calls: least busy
    r._done(1)
    assert r.pending == [4, 2]
