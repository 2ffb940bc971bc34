"""Bounded load test of the web API on loopback: starts `gpuplan serve` on a free 127.0.0.1 port,
sends N requests (default 2,000) with C concurrent clients (default 8) to /api/estimate and then
M varied requests (default 200) to /api/plan, prints requests/s, p50 and p99, and stops the
server. Nothing leaves this machine.

    PYTHONPATH=src python benchmarks/bench_web.py [--requests 2000] [--plan-requests 200]
        [--concurrency 8] [--workers N] [--threads] [--seed 0]

/api/estimate sends one body (the server caches no estimate). /api/plan sends a seeded random
sequence of bodies: SHAPES (model and filters) x tokens x deadline x budget x objective, so no
two answers need be alike. The same sequence is sent to two servers in turn: one with
GPUPLAN_SEARCH_CACHE=0 (every search computed in full: the baseline) and one as `gpuplan serve`
runs (each worker process keeps the request-independent part of a plan -- the layout table and
each GPU group's fastest layouts, `search/cache.py` -- for later plans of the same shape; the
pricing, constraints, ranking and JSON of every request are computed). Plans whose shape the
worker had not seen (cold: header X-Gpuplan-Search-Cache: miss) and those it had (warm: hit)
are reported separately, with the CPU time the server spent on each (its Server-Timing
header: what the computation costs, whatever else runs on the machine). Two things the served
setting does that the counts reflect: each worker plans the page's default request at start
(`web/worker.py` `rehearse`: llama3-8b, 1T tokens -- the shape of SHAPES[0] -- so with the
cache on, that shape is warm from the first request), and plans are routed to the worker that
last took their shape unless it is busier (`worker.Routed`). Neither caches an answer: every
request is priced, constrained and ranked. `--threads` serves from one process with a thread pool (the server
before worker processes); `--workers` sets the pool size (default: one per core).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESTIMATE = {"model": "llama3-8b", "gpu": "h100-sxm", "gpus": 8, "zero": 3, "tokens": "1T",
            "pricing": "own"}
# request shapes: what the search's request-independent part depends on (search/cache.py)
SHAPES = ({"model": "llama3-8b"}, {"model": "llama2-7b"}, {"model": "llama3-70b"},
          {"model": "llama3-8b", "acquisition": "cloud"},
          {"model": "llama2-13b", "vendor": "nvidia"})
TOKENS = ("100B", "300B", "1T", "2T", "15T")
DEADLINES = (None, 14, 30, 90, 180)
BUDGETS = (None, "20k", "200k", "2M")
OBJECTIVES = ("cost", "time", "energy")


def plan_bodies(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        body = {**rng.choice(SHAPES), "tokens": rng.choice(TOKENS),
                "objective": rng.choice(OBJECTIVES)}
        deadline, budget = rng.choice(DEADLINES), rng.choice(BUDGETS)
        if deadline is not None:
            body["deadline_days"] = deadline
        if budget is not None:
            body["budget_usd"] = budget
        out.append(body)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


THREADED = ("import sys, uvicorn; from gpuplan.web.app import create_app; "
            "uvicorn.run(create_app(workers=int(sys.argv[2]) if sys.argv[2] else None), "
            "host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')")


def start(port: int, workers: int | None, threads: bool, cache: bool = True
          ) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "GPUPLAN_SEARCH_CACHE": "1" if cache else "0"}
    if threads:
        argv = ["-c", THREADED, str(port), str(workers or "")]
    else:
        argv = ["-m", "gpuplan", "serve", "--port", str(port)]
        argv += ["--workers", str(workers)] if workers else []
    proc = subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def worker(port: int, path: str, bodies: list[bytes]) -> list[tuple[float, str, float]]:
    """(latency, search-cache header, the server's CPU seconds for it) of each body, sent one
    after another on one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    out = []
    for body in bodies:
        t0 = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        state = resp.getheader("X-Gpuplan-Search-Cache") or ""
        if resp.status == 422 and b"limit" in data:  # the server's time limit: counted
            state = "over the time limit"
        elif resp.status != 200:
            raise SystemExit(f"{path}: HTTP {resp.status} for {body.decode()}: "
                             f"{data.decode()[:300]}")
        timing = resp.getheader("Server-Timing") or "cpu;dur=nan"
        out.append((time.perf_counter() - t0, state, float(timing.split("dur=")[1]) / 1e3))
    conn.close()
    return out


def _q(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] * 1e3


def _line(label: str, done: list[tuple[float, str, float]], wall: float | None = None) -> str:
    lat, cpu = [t for t, _, _ in done], [c for _, _, c in done if c == c]  # c != c: no header
    rate = f"{len(lat) / wall:8.1f} req/s" if wall else " " * 14
    line = (f"  {label:34s} {len(lat):5d} requests  {rate}  latency p50 {_q(lat, .5):7.1f} ms "
            f"p99 {_q(lat, .99):7.1f} ms")
    return line + (f"; server CPU p50 {_q(cpu, .5):6.1f} ms p99 {_q(cpu, .99):6.1f} ms"
                   if cpu else "")


def run(port: int, path: str, bodies: list[dict], concurrency: int
        ) -> list[tuple[float, str, float]]:
    """Send `bodies` with `concurrency` clients (client i sends bodies i, i+c, ...); print
    requests/s, p50 and p99, and split plans by the search-cache header."""
    raw = [json.dumps(b).encode() for b in bodies]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = [x for f in [pool.submit(worker, port, path, raw[i::concurrency])
                            for i in range(concurrency)] for x in f.result()]
    wall = time.perf_counter() - t0
    print(_line(f"{path} all", done, wall))
    for state, label in (("miss", "cold (shape not cached)"), ("hit", "warm (shape cached)"),
                         ("over the time limit", "over the server's limit")):
        part = [d for d in done if d[1] == state]
        if part:
            print(_line(f"{path} {label}", part))
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--plan-requests", type=int, default=200,
                    help="requests to /api/plan (varied bodies, see SHAPES)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--workers", type=int, help="computations at once (default: one per core)")
    ap.add_argument("--threads", action="store_true",
                    help="a thread pool in the server's process instead of worker processes")
    ap.add_argument("--seed", type=int, default=0, help="of the plan request sequence")
    a = ap.parse_args()
    plans = plan_bodies(a.plan_requests, a.seed)
    shapes = len({json.dumps({k: v for k, v in b.items() if k not in (
        "tokens", "objective", "deadline_days", "budget_usd")}, sort_keys=True) for b in plans})
    print(f"{os.cpu_count()} cores; {a.concurrency} concurrent clients; /api/plan: "
          f"{len(plans)} bodies over {shapes} request shapes (seed {a.seed})")
    print("each worker plans the page's default request at start (llama3-8b, 1T tokens: "
          "web/worker.py rehearse), so with the cache on the shape of SHAPES[0] is warm "
          "from the first request")
    for cache in (False, True):
        port = free_port()
        proc = start(port, a.workers, a.threads, cache)
        print(f"\nserver: {'threads' if a.threads else 'worker processes'}, "
              f"{a.workers or 'one per core'} at once, search cache "
              f"{'on (as gpuplan serve runs)' if cache else 'off (GPUPLAN_SEARCH_CACHE=0)'}")
        try:
            if cache:  # the estimate figures once (no cache is involved)
                worker(port, "/api/estimate", [json.dumps(ESTIMATE).encode()] * 2)  # warm-up
                run(port, "/api/estimate", [ESTIMATE] * a.requests, a.concurrency)
            run(port, "/api/plan", plans, a.concurrency)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
