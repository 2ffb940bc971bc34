"""Time of ONE configuration's step-time estimate, in process, beside llm-analysis 0.2.2.

Run from the repository root:  PYTHONPATH=src python benchmarks/bench_estimate.py
(in an environment that also has llm-analysis 0.2.2 it is timed in the same process; otherwise
in its own process when one is found: --la-python, $LLM_ANALYSIS_PYTHON or
benchmarks/.venv-llm-analysis). llm-analysis is never a dependency of gpuplan.

Prints microseconds per call, all measured in one run (so their ratios hold on a busy machine):
  * `timing.step_time` on a grid of one (the vectorized model),
  * `timing_one.step_time_one` (the scalar fast path; equal to the vectorized model to 1e-9,
    tests/test_timing_one.py),
  * `search.evaluate.physics` (the whole in-process memory + time physics of one
    configuration, what `gpuplan.estimate` runs: vectorized memory, scalar time),
  * the whole public `gpuplan.estimate()` call (catalog already loaded: memory, time, cost),
    on the layout as given (ZeRO 0: it does not fit, so the call also searches the changes
    that would make it fit, `search.fit.fit_options`) and with ZeRO-1 (it fits),
  * llm-analysis 0.2.2's `train()` on the same model and layout,
and each figure's ratio to llm-analysis's. Issue #12's target: the single-configuration
estimate beats llm-analysis's train() (~150 us on the project's machines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpuplan
from gpuplan.catalog import load_catalog
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
job = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
train(log_level="ERROR", **job)
t = time.perf_counter()
for _ in range(n):
    train(log_level="ERROR", **job)
print(json.dumps({"us": (time.perf_counter() - t) / n * 1e6}))
"""


def per_call_us(f, n: int) -> float:
    f()
    best = float("inf")
    for _ in range(3):  # best of three rounds: least disturbed by other processes
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def la_python(given: str | None) -> Path | None:
    for cand in (given, os.environ.get("LLM_ANALYSIS_PYTHON"),
                 str(HERE / ".venv-llm-analysis" / "bin" / "python")):
        if cand and Path(cand).exists():
            return Path(cand)
    return None


def la_job(model, d: Path) -> dict:
    """llm-analysis's train() arguments for MODEL under LAYOUT (its model read from a file)."""
    cfg = {"name": "gpuplan-bench", "num_layers": model.layers, "n_head": model.heads,
           "hidden_dim": model.hidden, "vocab_size": model.vocab, "max_seq_len": LAYOUT["seq_len"],
           "num_key_value_heads": model.kv_heads, "ffn_embed_dim": model.ffn}
    path = d / "model.json"
    path.write_text(json.dumps(cfg))
    return dict(model_name=str(path), gpu_name="h100-sxm-80gb", total_num_gpus=256,
                tp_size=8, pp_size=4, global_batch_size=512, batch_size_per_gpu=1,
                seq_len=LAYOUT["seq_len"], activation_recomputation=0, ds_zero=0,
                mlp_gated_linear_units=model.mlp == "swiglu", num_gpus_per_node=8)


def llm_analysis_in_process(model, n: int) -> float | None:
    """train()'s time in this process, or None when llm-analysis is not importable here."""
    try:
        import logging

        from llm_analysis.analysis import train
    except ImportError:
        return None
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as d:
        job = la_job(model, Path(d))
        return per_call_us(lambda: train(log_level="ERROR", **job), n)


def llm_analysis_us(py: Path, model, n: int) -> float | str:
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "job.json"
        spec.write_text(json.dumps(la_job(model, Path(d))))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        res = subprocess.run([str(py), "-c", LA_RUNNER, str(spec), str(n)], capture_output=True,
                             text=True, env=env, cwd=d)
    if res.returncode:
        return f"failed: {res.stderr.strip().splitlines()[-1] if res.stderr else res.returncode}"
    return float(json.loads(res.stdout.strip().splitlines()[-1])["us"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--la-python", help="python of an environment with llm-analysis==0.2.2")
    ap.add_argument("-n", type=int, default=2000, help="calls per round (default 2000)")
    args = ap.parse_args()
    cat = load_catalog()
    model = cat.model(MODEL)
    hw = hardware_for(cat, GPU, precision="bf16")
    eff = efficiency_for(cat, hw.family)
    lay = Layout(**LAYOUT)
    site = site_from_catalog(cat)
    rows = [("timing.step_time (vectorized, grid of one)",
             per_call_us(lambda: step_time(model, lay, hw, eff), args.n)),
            ("timing_one.step_time_one (scalar fast path)",
             per_call_us(lambda: step_time_one(model, lay, hw, eff), args.n)),
            ("evaluate.physics (memory + time, one config)",
             per_call_us(lambda: physics(model, lay, hw, eff, site), max(args.n // 4, 50))),
            ("gpuplan.estimate() (does not fit: + fit search)",
             per_call_us(lambda: gpuplan.estimate(gpu=GPU, model=MODEL, catalog=cat, **LAYOUT),
                         max(args.n // 50, 10))),
            ("gpuplan.estimate() (zero 1: fits)",
             per_call_us(lambda: gpuplan.estimate(gpu=GPU, model=MODEL, catalog=cat, zero=1,
                                                  **LAYOUT), max(args.n // 20, 20)))]
    la: float | str | None = llm_analysis_in_process(model, max(args.n // 4, 100))
    where = "in process"
    if la is None:
        py = la_python(args.la_python)
        la = llm_analysis_us(py, model, max(args.n // 4, 100)) if py else "not installed"
        where = "own process"
    rows.append((f"llm-analysis 0.2.2 train() ({where})", la))
    print(f"{MODEL} on 256 x {GPU}, " + ", ".join(f"{k} {v}" for k, v in LAYOUT.items()))
    for name, us in rows:
        ratio = f"   {us / la:6.2f} x llm-analysis" if isinstance(la, float) else ""
        print(f"  {name:47s} {us:9.1f} us per call{ratio}" if isinstance(us, float)
              else f"  {name:47s} {us}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
