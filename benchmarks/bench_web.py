"""Bounded load test of the web API on loopback: starts `gpuplan serve` on a free 127.0.0.1 port,
sends N requests (default 2,000) with C concurrent clients (default 8) to /api/estimate and then
/api/plan, prints requests/s, p50 and p99, and stops the server. Nothing leaves this machine.

    PYTHONPATH=src python benchmarks/bench_web.py [--requests 2000] [--concurrency 8]
        [--workers N] [--threads]

Every request is computed: the server caches no results (the same body is sent each time).
`--threads` serves from one process with a thread pool (the server before worker processes),
for a before/after comparison on the same machine; `--workers` sets the pool size (default:
one per core).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODIES = {
    "/api/estimate": {"model": "llama3-8b", "gpu": "h100-sxm", "gpus": 8, "zero": 3,
                      "tokens": "1T", "pricing": "own"},
    "/api/plan": {"model": "llama3-8b", "tokens": "1T", "deadline_days": 30},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


THREADED = ("import sys, uvicorn; from gpuplan.web.app import create_app; "
            "uvicorn.run(create_app(workers=int(sys.argv[2]) if sys.argv[2] else None), "
            "host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')")


def start(port: int, workers: int | None, threads: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
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


def worker(port: int, path: str, body: bytes, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise SystemExit(f"{path}: HTTP {resp.status}")
        lat.append(time.perf_counter() - t0)
    conn.close()
    return lat


def run(port: int, path: str, requests: int, concurrency: int) -> None:
    body = json.dumps(BODIES[path]).encode()
    worker(port, path, body, 2)  # warm the caches
    per = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        lat = sorted(x for f in [pool.submit(worker, port, path, body, n) for n in per]
                     for x in f.result())
    wall = time.perf_counter() - t0
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3  # noqa: E731
    print(f"{path:14s} {len(lat):6d} requests  {len(lat) / wall:8.1f} req/s  "
          f"p50 {p(0.50):7.1f} ms  p99 {p(0.99):7.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--plan-requests", type=int, default=200,
                    help="requests to /api/plan (each searches ~2M candidates)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--workers", type=int, help="computations at once (default: one per core)")
    ap.add_argument("--threads", action="store_true",
                    help="a thread pool in the server's process instead of worker processes")
    a = ap.parse_args()
    port = free_port()
    proc = start(port, a.workers, a.threads)
    print(f"server: {'threads' if a.threads else 'worker processes'}, "
          f"{a.workers or 'one per core'} at once; {os.cpu_count()} cores")
    try:
        run(port, "/api/estimate", a.requests, a.concurrency)
        run(port, "/api/plan", a.plan_requests, a.concurrency)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
