"""gpuplan beside llm-analysis 0.2.2 (cli99/llm-analysis) on the published runs it can express.

Run from the repository root:  python benchmarks/compare_llm_analysis.py

It creates its own virtual environment (benchmarks/.venv-llm-analysis, git-ignored), installs
llm-analysis==0.2.2 there once (the only step that needs the network), then runs llm-analysis
offline in that environment -- one subprocess for all runs, each model given as an explicit
config JSON so nothing is fetched from the Hugging Face Hub -- and prints, per run, the
published figure, gpuplan's prediction and llm-analysis's, with the errors.

llm-analysis can express dense decoders with tp <= 8 on A100/H100 in 16-bit precision (no FP8,
no context parallelism, no MoE all-to-all model here). It is shown twice: as shipped
(flops_efficiency = 1, i.e. ideal hardware, its default) and with flops_efficiency set to
gpuplan's calibrated matmul_max for the family, the closest like-for-like setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import numpy as np

from gpuplan.catalog import load_catalog
from gpuplan.report.fmt import table
from gpuplan.search.hardware import efficiency_rows
from gpuplan.validation import load_runs, published_value, run_spec, validate_runs

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-llm-analysis"
PACKAGE = "llm-analysis==0.2.2"
GPU_NAMES = {"a100-80gb": "a100-sxm-80gb", "a100-40gb": "a100-sxm-40gb",
             "h100-sxm": "h100-sxm-80gb"}
RECOMPUTE = {"none": 0, "selective": 1, "full": 2}

RUNNER = r"""
import json, sys
from llm_analysis.analysis import train
out = {}
for job in json.load(open(sys.argv[1])):
    try:
        d = train(log_level="ERROR", **job["args"])
        out[job["id"]] = d["latency_per_iter"]
    except Exception as err:  # report, do not stop the batch
        out[job["id"]] = f"error: {type(err).__name__}: {err}"
print(json.dumps(out))
"""


def python_in_venv() -> Path:
    py = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not py.exists():
        print(f"creating {VENV} and installing {PACKAGE} ...", file=sys.stderr)
        venv.create(VENV, with_pip=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", PACKAGE], check=True)
    return py


def expressible(cat, row) -> bool:
    rs = run_spec(cat, row)
    lay, m = rs.layout, rs.model
    return (row["status"] == "known" and rs.gpu in GPU_NAMES and not m.is_moe
            and row["precision"] in ("bf16", "fp16") and lay.cp == 1 and lay.tp <= 8)


def job(cat, row, tmp: Path, efficiency: float | None) -> dict:
    rs = run_spec(cat, row)
    m, lay = rs.model, rs.layout
    cfg = {"name": f"gpuplan-{row['id']}", "num_layers": m.layers, "n_head": m.heads,
           "hidden_dim": m.hidden, "vocab_size": m.vocab, "max_seq_len": int(lay.seq_len),
           "num_key_value_heads": m.kv_heads, "ffn_embed_dim": m.ffn}
    path = tmp / f"{row['id']}.json"
    path.write_text(json.dumps(cfg))
    args = dict(model_name=str(path), gpu_name=GPU_NAMES[rs.gpu], total_num_gpus=int(row["gpus"]),
                tp_size=int(lay.tp), pp_size=int(lay.pp), global_batch_size=int(lay.global_batch),
                batch_size_per_gpu=int(lay.micro_batch), seq_len=int(lay.seq_len),
                activation_recomputation=RECOMPUTE[row["recompute"]],
                ds_zero=int(lay.zero), mlp_gated_linear_units=m.mlp == "swiglu",
                num_gpus_per_node=int(row["gpus_per_node"] or 8))
    if efficiency is not None:
        args["flops_efficiency"] = efficiency
    return {"id": row["id"], "args": args}


def run_llm_analysis(py: Path, jobs: list[dict], tmp: Path) -> dict:
    spec = tmp / "jobs.json"
    spec.write_text(json.dumps(jobs))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run([str(py), "-c", RUNNER, str(spec)], capture_output=True, text=True,
                         env=env, check=True, cwd=tmp)
    return json.loads(res.stdout.strip().splitlines()[-1])


def as_metric(cat, row, step_s) -> float | None:
    if isinstance(step_s, str):
        return None
    metric, _ = published_value(run_spec(cat, row))
    if metric == "step_time_s":
        return float(step_s)
    rs = run_spec(cat, row)
    return float(rs.layout.global_batch * rs.layout.seq_len / step_s / rs.layout.gpus)


def main() -> int:
    cat = load_catalog()
    rows = [r for r in load_runs() if expressible(cat, r)]
    ours = {r.id: r for r in validate_runs(cat, rows)}
    eff = efficiency_rows(cat)
    py = python_in_venv()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        shipped = run_llm_analysis(py, [job(cat, r, tmp, None) for r in rows], tmp)
        matched = run_llm_analysis(
            py, [job(cat, r, tmp, eff[ours[r["id"]].family]["matmul_max"]) for r in rows], tmp)
    lines, errs = [], {"gpuplan": [], "llm-analysis": [], "llm-analysis (eff)": []}

    def err(pred: float | None, pub: float) -> str:
        return "-" if pred is None else f"{(pred - pub) / pub * 100:+.0f}%"

    for r in rows:
        g = ours[r["id"]]
        la, lm = as_metric(cat, r, shipped[r["id"]]), as_metric(cat, r, matched[r["id"]])
        for name, v in (("gpuplan", g.predicted), ("llm-analysis", la),
                        ("llm-analysis (eff)", lm)):
            if v is not None:
                errs[name].append(abs((v - g.published) / g.published * 100))
        lines.append((r["id"], g.fit, g.metric.replace("_per_gpu", "/gpu"), f"{g.published:.4g}",
                      f"{g.predicted:.4g}", err(g.predicted, g.published),
                      "-" if la is None else f"{la:.4g}", err(la, g.published),
                      "-" if lm is None else f"{lm:.4g}", err(lm, g.published)))
    print(table(lines, ("run", "gpuplan", "metric", "published", "gpuplan", "err", "llm-an.",
                        "err", "llm-an.(eff)", "err"), align="lllrrrrrrr"))
    print()
    for name, e in errs.items():
        print(f"{name:20s} runs {len(e):3d}  median |error| {np.median(e):5.1f}%  "
              f"worst {np.max(e):6.1f}%")
    failed = {k: v for k, v in shipped.items() if isinstance(v, str)}
    for k, v in failed.items():
        print(f"llm-analysis failed on {k}: {v}")
    hold = [abs(ours[r["id"]].error_pct) for r in rows if ours[r["id"]].fit == "holdout"]
    print(f"{'gpuplan hold-out':20s} runs {len(hold):3d}  median |error| {np.median(hold):5.1f}%  "
          f"worst {np.max(hold):6.1f}%")
    print("\nllm-an. = llm-analysis 0.2.2 as shipped (flops_efficiency 1.0, its default); "
          "(eff) = flops_efficiency set to gpuplan's calibrated matmul_max of the family.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
