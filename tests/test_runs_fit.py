"""Every published run that ran should fit its GPUs by gpuplan's memory model (#11).

A run in published_runs.csv published a throughput, so it ran. `validate_runs` predicts each
run's memory per GPU with its recorded configuration -- the layout plus the memory settings
its source states (columns recompute_modules, grad_reduce_dtype, moments_dtype,
activation_cache, offload, first/last_stage_layers; `memory_settings = recorded` with the
locator in notes) -- and applies `gpuplan estimate`'s test (reserved + runtime context <= GPU
memory). Current runs = the newest release of each configuration (calibrate/releases.py).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from gpuplan import api
from gpuplan.calibrate.memory_fit import fp8_recipe, loss_option
from gpuplan.cli import main
from gpuplan.errors import CatalogError
from gpuplan.estimators.buffers import LEGACY
from gpuplan.report.validation import memory_fit_summary, to_json
from gpuplan.search.evaluate import memory_per_gpu, site_from_catalog
from gpuplan.units import GiB
from gpuplan.validation import load_runs, run_spec, validate_runs

# The current known runs still predicted not to fit, each with its predicted memory per GPU
# (reserved + runtime context, GiB) vs the GPU's, and why (`gpuplan validate` prints them).
# Partial activation offload: Megatron-Core's cpu_offloading_num_layers offloads the activations
# of the first k layers; the offload column records it as 'activations:k' (--offload-layers k).
# With it the 405B run on 128 GB200 (95 of 126 layers) fits (123.3 / 185.0 GiB today, was 304.2).
# The loss each source's stack runs (calibrate/memory_fit.py LOSS_SOURCES): llm-foundry's fused
# cross-entropy keeps the bf16 logits only (the MPT-3B runs at 8192 tokens now fit, 79.1 GiB, were
# 86.7) and Megatron-Bridge's perf scripts from 25.11 run Transformer Engine's in-place one (the
# Llama 3 70B runs: GB300 fits, 273.6 / 277.6 GiB, was 282.2; GB200 193.7 GiB, was 202.4).
# The FP8 recipe the notes state (calibrate/memory_fit.py fp8_recipe): per-tensor current
# scaling on Blackwell keeps no FP8 transpose (accelerators' fp8_gemm_any_layout; #11): the
# 405B run 186.4 GiB (was 193.0), the GB200 70B one 192.6 (was 193.7), GB300 272.5 (was 273.6).
# The root (embedding, LM head) is no Transformer Engine module, so it stays 16-bit with no FP8
# copies under FP8 (Megatron-LM gpt_model.py): the 70B runs 194.8 on GB200 and 274.6 on GB300.
# What is left (over by 1.4 and 9.8 GiB) is inside the allocator margin (16.8 and 17.6 GiB).
# Transformer Engine's offload keeps at most 80 - 40 layers' activations on the GPU, the peak
# included (recompute.offloaded_layers_bytes; was 80 - 40 + 1): the GB200 70B run 190.8 (over by
# 5.8 GiB, inside its 17.2 GiB margin), GB300 270.65, the 405B one 123.3.
# Each run's allocator setting is recorded from its recipe (published_runs.csv column allocator:
# the 405B run expandable_segments, Megatron-Bridge v0.5.0 PERF_ENV_VARS; the 70B Megatron FSDP
# run the default caching allocator, v0.4.x), but both settings' margins are still the 10%
# judgement: the measured values by the rule of docs/calibration.md (STAlloc artifact: 0.58 and
# 0.29, full recompute + ZeRO + offload workloads) were tried and not adopted (memory median
# 6.6% -> 34.6%); with them these runs would need about 218 and 279 GiB.
# Published pretraining logs that print both peaks (data/allocator_logs.csv, docs/calibration.md
# 'Allocator margin from published reserved/allocated logs') give 12 caching runs from 8 sources,
# median 0.14: that rule's quorum, so the caching margin is 0.14 (was the 0.10 judgement;
# expandable stays 0.10). With it the caching runs grow by 4% of their tensors: the GB200 70B run
# 190.8 -> 197.7 GiB, and nine current runs that fitted with 0.10 are over by 0.01-5.9 GiB (the
# last nine below; the rule's adoption test is the memory dataset's median, 6.6% -> 5.9%).
NOT_FIT = {
    "mbridge2606-gb200-llama31-405b-256-fp8": "186.4 / 185.0 GiB, recorded (no recompute, no "
    "offload, bf16 grad reduce, TE in-place loss on the last stage only, FP8 current scaling: "
    "no FP8 transpose on Blackwell): the memory model over-predicts by >= 0.8% with every "
    "setting stated",
    "mbridge2604.01-gb200-llama3-70b-64-fp8": "197.7 / 185.0 GiB, recorded (activation offload "
    "of 40 of 80 layers, no recompute, bf16 grad reduce, Megatron FSDP, TE in-place loss, FP8 "
    "current scaling: no FP8 transpose on Blackwell): the memory model over-predicts by >= 6.9% "
    "with every setting stated",
    # over only by the caching margin measured from published logs (0.14; fitted with 0.10)
    "llmfoundry-mpt3b-8xa100-80gb-bf16-s8192": "81.9 / 80.0 GiB, recorded (fused loss; 79.1 "
    "with 0.10)",
    "llmfoundry-mpt3b-8xh100-sxm-bf16-s8192": "81.9 / 79.65 GiB, recorded (79.1 with 0.10)",
    "llmfoundry-mpt3b-8xh100-sxm-fp8-s8192": "81.9 / 79.65 GiB, recorded (79.1 with 0.10)",
    "llmfoundry-mpt30b-8xh100-sxm-bf16-s8192": "79.66 / 79.65 GiB, default settings (76.9 "
    "with 0.10)",
    "nemo2412-h100-gpt3-175b-512-fp8": "81.3 / 79.65 GiB, default settings (78.5 with 0.10)",
    "mbridge2604.01-h100-llama3-70b-64-fp8": "80.7 / 79.65 GiB, default settings (77.9 with "
    "0.10)",
    "mbridge2604.01-gb300-llama3-70b-64-fp8": "280.4 / 277.55 GiB, recorded (activation offload "
    "of 20 of 80 layers; 270.65 with 0.10)",
    "mbridge2604.01-gb300-llama3-70b-64-mxfp8": "283.4 / 277.55 GiB, recorded (273.5 with 0.10)",
    "mbridge2509-gb200-llama31-405b-128-mxfp8": "191.0 / 185.0 GiB, caching recorded (25.09 perf "
    "scripts set expandable segments for current-scaling FP8 only; 184.4 with 0.10)",
}
# Before the memory settings were recorded (defaults: no recompute, the stack's fp32 gradient
# reduction and fp32 moments) 18 of the 104 current known runs were predicted not to fit.
CURRENT_KNOWN = 143


@pytest.fixture(scope="module")
def results(cat):
    return validate_runs(cat)


def _current_known(results):
    return [r for r in results if r.current and r.status == "known"]


def test_recorded_current_runs_fit_except_the_named_gaps(results):
    """Every current known run whose memory settings are recorded from a source fits, but for
    the named gaps; and the runs predicted not to fit are exactly the named ones (a run that
    starts to fit, or stops, must change NOT_FIT)."""
    current = _current_known(results)
    assert len(current) == CURRENT_KNOWN
    bad = {r.id for r in current if r.memory is None or r.memory.fits is not True}
    assert bad == set(NOT_FIT)
    recorded = [r for r in current if r.memory_settings == "recorded" and r.id not in NOT_FIT]
    assert len(recorded) >= 11 and all(r.memory.fits for r in recorded)


@pytest.mark.xfail(strict=True, reason="11 of the 143 current known runs that ran are predicted "
                   "not to fit: " + "; ".join(f"{k}: {v}" for k, v in NOT_FIT.items()))
def test_every_current_known_run_fits(results):
    """#11 done-when: no run recorded as having run is predicted not to fit."""
    assert all(r.memory.fits for r in _current_known(results))


def test_partial_activation_offload_runs(results):
    """The 12 runs (every release) whose recipes offload the activations of some layers
    (offload 'activations:N'): the 405B one (95 of 126 layers, expandable segments) fits, with
    their memory per GPU to 0.05 GiB (the printed rounding); with the measured caching margin
    (0.14) the GB300 70B ones (20 of 80) are over by 2.9-4.0 GiB and the GB200 70B ones (40 of
    80) by the NOT_FIT figure, and by 206.6 GiB in 25.09, whose perf
    scripts kept Megatron-Core's native loss (fp32 log-softmax) rather than TE's in-place one.
    Rows whose notes state FP8 current scaling alone keep no FP8 transpose on Blackwell; the
    25.11 rows' table names "FP8 current scaling / MXFP8 on Blackwell" and keeps it."""
    rows = {r["id"]: r for r in load_runs()}
    part = [r for r in results if rows[r.id]["offload"].startswith("activations:")]
    assert len(part) == 12
    want = {("activations:95", True, "tensor"): (123.3, True),
            ("activations:40", False, "tensor"): (206.62, False),
            ("activations:40", True, "tensor"): (197.70, False),
            ("activations:40", True, None): (198.83, False),
            ("activations:20", True, "tensor"): (280.44, False),
            ("activations:20", True, None): (281.57, False)}
    for r in part:
        te_loss = rows[r.id]["release"] >= "25.11"  # LOSS_SOURCES: Megatron-Bridge >= 25.11
        offload = rows[r.id]["offload"]
        key = (offload, te_loss or offload == "activations:95", fp8_recipe(rows[r.id]))
        gib, fits = want[key]
        assert r.memory.memory_gib == pytest.approx(gib, abs=0.05), r.id
        assert r.memory.fits is fits, r.id


def test_fit_is_the_estimates_fit(cat, results):
    """A run's memory and fit are `gpuplan estimate`'s with the same settings, to rounding:
    DeepSeek-V3 on 256 GB200 (26.08 recipe: mla_up_proj recompute, bf16 moments and gradient
    reduction) and an FSDP run on H100."""
    by_id = {r.id: r for r in results}
    ds = by_id["mbridge2608-gb200-deepseekv3-256-mxfp8"].memory
    e = api.estimate(gpu="gb200", model="deepseek-v3", gpus=256, pp=4, vpp=4, ep=64,
                     zero=1, global_batch=4096, seq_len=4096, precision="fp8", stack="nemo",
                     recompute="modules", recompute_modules="mla_up_proj",
                     moments_dtype="bf16", grad_reduce_dtype="bf16", catalog=cat)
    assert ds.memory_gib == pytest.approx(e.memory_gib.total, rel=1e-9)
    assert ds.reserved_gib == pytest.approx(e.reserved_gib, rel=1e-9)
    assert (ds.fits, ds.capacity_gib) == (e.fits, pytest.approx(e.gpu_memory_gib, rel=1e-12))
    tt = by_id["torchtitan-h200-llama3-8b-64-fp8"].memory
    e = api.estimate(gpu="h200", model="llama3-8b", gpus=64, zero=3, micro_batch=2,
                     global_batch=128, seq_len=8192, precision="fp8", stack="torchtitan",
                     recompute="op", catalog=cat)
    assert tt.memory_gib == pytest.approx(e.memory_gib.total, rel=1e-9)
    assert tt.fits is e.fits is True


def test_the_sources_loss_is_the_estimators(cat, results):
    """The MPT-3B run is `gpuplan estimate`'s layout with llm-foundry's fused cross-entropy
    (StackBuffers.with_compiled_loss: bf16 logits and gradient, no fp32 log-softmax or copy):
    under the fsdp stack's own loss it would not fit by more (the estimate's figure); with the
    measured caching margin (0.14) it is over by 2.2 GiB even with the fused loss (NOT_FIT)."""
    by_id = {r.id: r for r in results}
    mpt = by_id["llmfoundry-mpt3b-8xh100-sxm-bf16-s8192"].memory
    rs = run_spec(cat, next(r for r in load_runs() if r["id"] == "llmfoundry-mpt3b-8xh100-sxm-"
                            "bf16-s8192"))
    assert rs.memory_options[3] == "fused"
    site = site_from_catalog(cat)
    fused = replace(site, stack_buffers=(site.stack_buffers or LEGACY).with_compiled_loss())
    mem = memory_per_gpu(rs.model, rs.layout, fused)
    assert mpt.memory_gib == pytest.approx(float(np.ravel(mem.total)[0]) / GiB, rel=1e-9)
    assert mpt.fits is False and mpt.memory_gib == pytest.approx(81.88, abs=0.005)
    e = api.estimate(gpu="h100-sxm", layers=32, hidden=2560, heads=20, vocab=50368, gpus=8,
                     zero=3, micro_batch=3, global_batch=144, seq_len=8192, stack="fsdp",
                     tied_embeddings=True, catalog=cat)
    assert e.fits is False and e.memory_gib.total == pytest.approx(89.77, abs=0.005)
    # the Megatron-Bridge perf scripts: TE's in-place loss from 25.11 (v0.2.0), not in 25.09
    rows = {r["id"]: r for r in load_runs()}
    assert loss_option(rows["mbridge2604.01-gb200-llama3-70b-64-fp8"]) == "inplace"
    assert loss_option(rows["mbridge2509-gb200-llama3-70b-64-fp8"]) is None


def test_recorded_settings_name_their_source():
    """A memory-setting column is filled only on rows marked recorded, whose notes give the
    locator; a recompute_modules row says recompute = modules."""
    cols = ("recompute_modules", "grad_reduce_dtype", "moments_dtype", "activation_cache",
            "offload", "first_stage_layers", "last_stage_layers", "memory_unmodelled")
    for r in load_runs():
        if any(r[c].strip() for c in cols):
            assert r["memory_settings"] == "recorded", r["id"]
        if r["memory_settings"]:
            assert r["memory_settings"] == "recorded" and "memory settings: " in r["notes"], r["id"]
        assert (r["recompute"] == "modules") == bool(r["recompute_modules"]), r["id"]


def test_bad_memory_settings_are_one_line(cat):
    row = next(r for r in load_runs() if r["id"] == "mbridge2608-gb200-deepseekv3-256-mxfp8")
    for bad, words in (({"recompute": "none"}, "recompute_modules needs recompute = modules"),
                       ({"recompute_modules": "mla_up"}, "did you mean 'mla_up_proj'"),
                       ({"grad_reduce_dtype": "fp16"}, "--grad-reduce-dtype must be one of")):
        if "grad_reduce_dtype" in bad:
            r = validate_runs(cat, [{**row, **bad}], newest={})[0]
            assert r.memory.fits is None and words in r.memory.refused
            continue
        with pytest.raises(CatalogError) as err:
            run_spec(cat, {**row, **bad})
        msg = str(err.value)
        assert words in msg and "mbridge2608-gb200-deepseekv3-256-mxfp8" in msg
        assert "\n" not in msg


def test_validate_reports_the_fit_count(results, capsys):
    """`validate --json`: per-run fits, memory_gib, reserved_gib, gpu_memory_gib and the
    top-level count; the text prints the count and each run that does not fit."""
    data = to_json(results)
    mf = data["memory_fit"]
    assert (mf["n"], mf["fit"]) == (CURRENT_KNOWN, CURRENT_KNOWN - len(NOT_FIT))
    assert set(mf["not_fit"]) == set(NOT_FIT) and mf["refused"] == []
    assert set(mf["not_fit_recorded"]) <= set(NOT_FIT)
    run = next(r for r in data["runs"] if r["id"] == "mbridge2606-gb200-llama31-405b-256-fp8")
    assert run["fits"] is False and run["memory_settings"] == "recorded"
    assert run["memory_gib"] > run["gpu_memory_gib"] == pytest.approx(185.0, rel=1e-9)
    assert run["reserved_gib"] < run["memory_gib"]
    everyone = memory_fit_summary(results, all_releases=True)
    assert everyone["n"] > CURRENT_KNOWN and everyone["releases"] == "all"
    assert main(["validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_fit"] == mf
    assert main(["validate"]) == 0
    text = capsys.readouterr().out
    assert f"memory: {mf['fit']} of {mf['n']} known runs (newest release) predicted to fit" in text
    assert "mbridge2604.01-gb200-llama3-70b-64-fp8: 197.7 / 185.0" in text
