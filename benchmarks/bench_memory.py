"""Throughput of the memory model: 1,000,000 random configurations in one vectorized call.

    python benchmarks/bench_memory.py [--n 1000000] [--repeat 3]

Prints configurations per second (best of --repeat). Target: >= 5 million/s on 2 cores.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpuplan.estimators.memory import memory_breakdown
from gpuplan.spec import Layout, ModelSpec

LLAMA2_70B = ModelSpec(id="llama2-70b", name="Llama 2 70B", layers=80, hidden=8192, heads=64,
                       kv_heads=8, ffn=28672, vocab=32000, mlp="swiglu")


def random_layouts(n: int, seed: int = 0) -> Layout:
    rng = np.random.default_rng(seed)
    pick = lambda values: rng.choice(np.asarray(values), n)  # noqa: E731
    mb = pick([1, 2, 4])
    dp = pick([1, 2, 4, 8, 16, 32, 64])
    return Layout(
        tp=pick([1, 2, 4, 8]), pp=pick([1, 2, 4, 5, 8, 10]), dp=dp, cp=pick([1, 2]),
        ep=np.ones(n, int), vpp=pick([1, 1, 2]), zero=pick([0, 1, 2, 3]), micro_batch=mb,
        global_batch=mb * dp * pick([1, 4, 16]), seq_len=pick([2048, 4096, 8192]),
        recompute=pick([0, 1, 2]), precision=pick([0, 1, 2, 3]), optimizer=pick([0, 1, 2]),
        sp=pick([True, False]), flash=pick([True, False]), offload=pick([True, False]),
        dropout=pick([True, False]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lay = random_layouts(args.n)
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        bd = memory_breakdown(LLAMA2_70B, lay, runtime_overhead_bytes=2.0**31, fragmentation=0.05)
        best = min(best, time.perf_counter() - t0)
    assert np.asarray(bd.total).shape == (args.n,)
    print(f"memory_breakdown: {args.n:,} configurations in {best:.3f} s "
          f"= {args.n / best / 1e6:.2f} million configurations/s (best of {args.repeat})")


if __name__ == "__main__":
    main()
