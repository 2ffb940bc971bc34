"""Time of ONE configuration's estimate, in process, beside llm-analysis 0.2.2's `train()`.

Run from the repository root:  PYTHONPATH=src python benchmarks/bench_estimate.py
(in an environment that also has llm-analysis 0.2.2 it is timed in the same process; otherwise
in a second process, started once and kept: --la-python, $LLM_ANALYSIS_PYTHON or
benchmarks/.venv-llm-analysis). llm-analysis is never a dependency of gpuplan.

Prints warm microseconds per call: the MEDIAN over ROUNDS interleaved rounds (each round times
every row, llm-analysis included, so a busy machine slows them alike; a round's figure is its
mean per call), and the best round beside it:
  * `timing.step_time` and `memory.memory_breakdown` on a grid of one (the vectorized models),
  * `timing_one.step_time_one` and `memory_one.memory_breakdown_one` (the scalar fast paths;
    equal to the vectorized models to 1e-9, tests/test_timing_one.py, tests/test_memory_one.py),
  * `search.evaluate.physics` (the whole memory + time physics of one configuration, what
    `gpuplan.estimate` runs),
  * the whole public `gpuplan.estimate()` call, catalog already loaded, every call from its
    arguments: the model, GPU and platform looked up, the layout built and checked against
    every rule, memory and step time, the plan's feasibility rules as warnings, the bottleneck,
    the prediction interval and the frozen `Estimate` (catalog-only values -- site defaults,
    the GPU's hardware row, efficiency constants -- are kept per catalog object; no result is
    kept). On the layout as given (ZeRO 0: it does not fit, so the call also searches the
    changes that would make it fit, `search.fit.fit_options`) and with ZeRO-1 (it fits),
  * llm-analysis 0.2.2's `train()` on the same model and layout, at ZeRO 0 and at ZeRO 1 (the
    same configuration as each `estimate()` row; its memory and time, its summary dict),
and each figure's ratio to llm-analysis's at the same ZeRO stage. Issue #12's target: the
single-configuration estimate beats llm-analysis's train().
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpuplan
from gpuplan.catalog import load_catalog
from gpuplan.estimators.memory import memory_breakdown
from gpuplan.estimators.memory_one import memory_breakdown_one
from gpuplan.estimators.timing import step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.search.evaluate import physics, site_from_catalog
from gpuplan.search.hardware import efficiency_for, hardware_for
from gpuplan.spec import Layout

HERE = Path(__file__).resolve().parent
LAYOUT = dict(tp=8, pp=4, dp=8, micro_batch=1, global_batch=512, seq_len=2048)
# GPT-3 175B: llm-analysis 0.2.2 refuses an MLP width that is not a multiple of hidden (Llama's)
MODEL, GPU = "gpt3-175b", "h100-sxm"

LA_RUNNER = r"""
import json, sys, time, logging
from llm_analysis.analysis import train
jobs = json.load(open(sys.argv[1]))
for job in jobs:
    train(log_level="ERROR", **job)
for line in sys.stdin:  # one round per line: the job and the number of calls to time
    i, n = map(int, line.split())
    t = time.perf_counter()
    for _ in range(n):
        train(log_level="ERROR", **jobs[i])
    print(json.dumps({"us": (time.perf_counter() - t) / n * 1e6}), flush=True)
"""
ROUNDS = 9
ZEROS = (0, 1)  # llm-analysis's ds_zero of the two estimate() rows


def timed_us(f: Callable[[], Any], n: int) -> float:
    """Microseconds per call over one round of n calls of f."""
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def la_python(given: str | None) -> Path | None:
    for cand in (given, os.environ.get("LLM_ANALYSIS_PYTHON"),
                 str(HERE / ".venv-llm-analysis" / "bin" / "python")):
        if cand and Path(cand).exists():
            return Path(cand)
    return None


def la_job(model, d: Path, zero: int) -> dict:
    """llm-analysis's train() arguments for MODEL under LAYOUT at ZeRO stage `zero` (its model
    read from a file)."""
    cfg = {"name": "gpuplan-bench", "num_layers": model.layers, "n_head": model.heads,
           "hidden_dim": model.hidden, "vocab_size": model.vocab, "max_seq_len": LAYOUT["seq_len"],
           "num_key_value_heads": model.kv_heads, "ffn_embed_dim": model.ffn}
    path = d / "model.json"
    path.write_text(json.dumps(cfg))
    return dict(model_name=str(path), gpu_name="h100-sxm-80gb", total_num_gpus=256,
                tp_size=8, pp_size=4, global_batch_size=512, batch_size_per_gpu=1,
                seq_len=LAYOUT["seq_len"], activation_recomputation=0, ds_zero=zero,
                mlp_gated_linear_units=model.mlp == "swiglu", num_gpus_per_node=8)


def llm_analysis(model, given: str | None, d: Path) -> tuple[Any, str]:
    """(a function: (ZeRO stage, n) -> microseconds per call of one round of n llm-analysis
    train() calls, where it runs), or (None, why not)."""
    jobs = [la_job(model, d, z) for z in ZEROS]
    try:
        import logging

        from llm_analysis.analysis import train
    except ImportError:
        py = la_python(given)
        return (_la_process(py, jobs, d), "own process") if py else (None, "not installed")
    logging.disable(logging.WARNING)
    for job in jobs:
        train(log_level="ERROR", **job)
    return (lambda z, n: timed_us(lambda: train(log_level="ERROR", **jobs[ZEROS.index(z)]), n)
            ), "in process"


def _la_process(py: Path, jobs: list[dict], d: Path) -> Callable[[int, int], float]:
    """llm-analysis in a second process, started once; each call times one round there."""
    spec = d / "jobs.json"
    spec.write_text(json.dumps(jobs))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([str(py), "-c", LA_RUNNER, str(spec)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=d)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def one_round(zero: int, n: int) -> float:
        if n <= 0:  # the end: let the process finish
            proc.stdin.close()
            proc.wait()
            return math.nan
        proc.stdin.write(f"{ZEROS.index(zero)} {n}\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read().strip().splitlines()
            raise RuntimeError(err[-1] if err else f"exit status {proc.wait()}")
        return float(json.loads(line)["us"])

    return one_round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--la-python", help="python of an environment with llm-analysis==0.2.2")
    ap.add_argument("-n", type=int, default=1000, help="calls per round of the fast rows "
                    "(default 1000; the slower rows take a share of it)")
    args = ap.parse_args()
    cat = load_catalog()
    model = cat.model(MODEL)
    hw = hardware_for(cat, GPU, precision="bf16")
    eff = efficiency_for(cat, hw.family)
    lay = Layout(**LAYOUT)
    site = site_from_catalog(cat)
    mem = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
               fragmentation=site.fragmentation, stacks=site.stack_buffers)
    n = args.n
    rows = [
        ("timing.step_time (vectorized, grid of one)", lambda: step_time(model, lay, hw, eff),
         n // 4),
        ("memory.memory_breakdown (vectorized, one)", lambda: memory_breakdown(model, lay, **mem),
         n // 4),
        ("timing_one.step_time_one (scalar fast path)",
         lambda: step_time_one(model, lay, hw, eff), n),
        ("memory_one.memory_breakdown_one (scalar)",
         lambda: memory_breakdown_one(model, lay, **mem), n),
        ("evaluate.physics (memory + time, one config)",
         lambda: physics(model, lay, hw, eff, site), n // 2),
        (ESTIMATE_NOFIT, lambda: gpuplan.estimate(gpu=GPU, model=MODEL, catalog=cat, **LAYOUT),
         n // 20),
        (ESTIMATE_FITS, lambda: gpuplan.estimate(gpu=GPU, model=MODEL, catalog=cat, zero=1,
                                                 **LAYOUT), n // 5)]
    with tempfile.TemporaryDirectory() as d:
        la_fn, where = llm_analysis(model, args.la_python, Path(d))
        times, la = _rounds(rows, la_fn, where, max(n // 4, 1))
    _print(times, la, where)
    return 0


ESTIMATE_NOFIT = "gpuplan.estimate() (zero 0: does not fit, + fit search)"
ESTIMATE_FITS = "gpuplan.estimate() (zero 1: fits)"
LA_ROW = "llm-analysis 0.2.2 train() (zero {z}, {where})"


def _rounds(rows: list[tuple[str, Callable[[], Any], int]], la: Any, where: str, n_la: int
            ) -> tuple[dict[str, list[float]], dict[int, list[float]] | str]:
    """Per-call time of each row in each of ROUNDS interleaved rounds, and llm-analysis's at
    each ZeRO stage (or why there is none)."""
    for _, f, _ in rows:
        f()  # warm: imports, first-call caches
    times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    la_times: dict[int, list[float]] | str = {z: [] for z in ZEROS} if la else where
    for _ in range(ROUNDS):
        for name, f, k in rows:
            times[name].append(timed_us(f, max(k, 1)))
        if la and isinstance(la_times, dict):
            try:
                for z in ZEROS:
                    la_times[z].append(la(z, n_la))
            except RuntimeError as err:
                la, la_times = None, f"failed: {err}"
    if la and where == "own process":
        la(0, 0)
    return times, la_times


def _print(times: dict[str, list[float]], la: dict[int, list[float]] | str, where: str
           ) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    la_med = {z: statistics.median(v) for z, v in la.items()} if isinstance(la, dict) else {}
    print(f"{MODEL} on 256 x {GPU}, " + ", ".join(f"{k} {v}" for k, v in LAYOUT.items())
          + f"; median (best) of {ROUNDS} interleaved rounds, warm, microseconds per call")
    for row, x in med.items():
        z = 0 if row == ESTIMATE_NOFIT else 1
        ratio = f"   {x / la_med[z]:6.2f} x llm-analysis (zero {z})" if la_med else ""
        print(f"  {row:56s} {x:8.1f} ({min(times[row]):7.1f}){ratio}")
    if not la_med:
        print(f"  llm-analysis 0.2.2 train(): {la}")
        return
    for z, x in la_med.items():
        name = LA_ROW.format(z=z, where=where)
        print(f"  {name:56s} {x:8.1f} ({min(la[z]):7.1f})")  # type: ignore[index]
    print(f"  whole estimate() / train(), same configuration: {med[ESTIMATE_FITS] / la_med[1]:.2f}"
          f" when the layout fits (zero 1), {med[ESTIMATE_NOFIT] / la_med[0]:.2f} when it does "
          f"not (zero 0, fit search included)")


if __name__ == "__main__":
    sys.exit(main())
