"""Activation offload of the first N layers of each pipeline stage (#11): `--offload-layers N`
with `--offload activations`, Megatron-Core's cpu_offloading_num_layers (estimators/recompute.py
cites the code). Megatron-Bridge's Llama 3 70B (40 or 20 of 80 layers) and Llama 3.1 405B (95
of 126) recipes on GB200/GB300 run it; published_runs.csv records it as 'activations:N'."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuplan import api
from gpuplan.calibrate.memory_fit import offload_field
from gpuplan.cli import main
from gpuplan.errors import CatalogError, ConfigError
from gpuplan.estimators.memory import memory_breakdown
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.spec import O_ACTIVATIONS, O_OPTIMIZER, Layout

# Megatron-Bridge's LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG (published_runs.csv notes)
RUN = dict(gpu="gb200", model="llama3-70b", gpus=64, zero=3, micro_batch=2, global_batch=256,
           seq_len=8192, precision="fp8", stack="nemo", grad_reduce_dtype="bf16")


def _mem(cat, model, **kw):
    site = site_from_catalog(cat)
    lay = Layout(**{"dp": 8, "zero": 3, "micro_batch": 1, "global_batch": 16, "seq_len": 4096,
                    **kw})
    return memory_breakdown(model, lay, runtime_overhead_bytes=site.runtime_overhead_bytes,
                            fragmentation=site.fragmentation, stacks=site.stack_buffers)


def _f(x):
    return float(np.asarray(x).reshape(-1)[0])


def test_each_offloaded_layer_moves_one_layer_of_activations(cat):
    """pp 1, 80 equal layers: at the peak (the backward's start) N layers hold N layers' saved
    activations on the host (Transformer Engine's default synchronizer keeps at most 80 - N
    layers on the GPU and reloads a layer only after a resident one is freed:
    recompute.offloaded_layers_bytes cites the code), and all N cross the host link (N/80 of
    the traffic of offloading every layer), to 1e-9 relative (the same float formula evaluated
    two ways); N = 79 leaves two layers on the GPU (recompute.ACT_OFFLOAD_RESIDENT) as
    offloading every layer does."""
    m = cat.model("llama3-70b")
    none = _mem(cat, m)
    every = _mem(cat, m, offload=O_ACTIVATIONS)
    saved = _f(none.activations) - _f(every.activations)  # all but two layers
    per_layer = saved / 78.0
    for n in (2, 20, 40):
        part = _mem(cat, m, offload=O_ACTIVATIONS, offload_layers=n)
        assert _f(part.offloaded) == pytest.approx(n * per_layer, rel=1e-9)
        assert _f(none.activations) - _f(part.activations) == pytest.approx(
            n * per_layer, rel=1e-9)
        assert _f(part.host_traffic) == pytest.approx(_f(every.host_traffic) * n / 80, rel=1e-9)
    last = _mem(cat, m, offload=O_ACTIVATIONS, offload_layers=79)
    assert _f(last.total) == pytest.approx(_f(every.total), rel=1e-12)
    one = _mem(cat, m, offload=O_ACTIVATIONS, offload_layers=1)  # the first layer
    assert _f(one.offloaded) == pytest.approx(per_layer, rel=1e-9)
    assert _f(one.total) < _f(none.total)
    assert _f(one.host_traffic) == pytest.approx(_f(every.host_traffic) / 80, rel=1e-9)
    # without the activations part, N changes nothing
    opt = _mem(cat, m, offload=O_OPTIMIZER)
    assert _f(_mem(cat, m, offload=O_OPTIMIZER, offload_layers=40).total) == _f(opt.total)


def test_the_count_is_per_pipeline_stage(cat):
    """pp 4: 20 layers a rank; N counts each rank's layers (Megatron-Core's handler counts the
    layer groups of its own TransformerBlock forward), so N = 10 offloads half of each rank's
    layers and N >= 19 is the whole-stage offload."""
    m = cat.model("llama3-70b")
    kw = dict(pp=4, dp=2, global_batch=16)
    none, every = _mem(cat, m, **kw), _mem(cat, m, offload=O_ACTIVATIONS, **kw)
    half = _mem(cat, m, offload=O_ACTIVATIONS, offload_layers=10, **kw)
    assert _f(half.host_traffic) == pytest.approx(_f(every.host_traffic) / 2, rel=1e-9)
    assert _f(none.activations) > _f(half.activations) > _f(every.activations)
    most = _mem(cat, m, offload=O_ACTIVATIONS, offload_layers=60, **kw)
    assert _f(most.total) == pytest.approx(_f(every.total), rel=1e-12)


def test_the_recipes_fit_better_and_the_estimate_says_so(cat):
    """The 70B GB200 recipe (40 of 80 layers) predicts 373.2 GiB per GPU with every activation
    on the GPU and 207.8 GiB with its offload (to 0.05 GiB, the printed rounding; caching
    allocator margin 0.14, docs/calibration.md); the step
    time is not shorter than without offload; the text and the JSON layout echo name it."""
    none = api.estimate(catalog=cat, **RUN)
    part = api.estimate(catalog=cat, offload="activations", offload_layers=40, **RUN)
    assert none.memory_gib.total == pytest.approx(373.24, abs=0.05)
    assert part.memory_gib.total == pytest.approx(207.76, abs=0.05)
    assert part.step_time_s >= none.step_time_s
    assert part.layout.offload_layers == 40


def test_cli_flag_text_and_json(capsys):
    args = ["estimate", "--gpu", "gb200", "--model", "llama3-70b", "--gpus", "64", "--zero",
            "3", "--micro-batch", "2", "--global-batch", "256", "--seq-len", "8192",
            "--precision", "fp8", "--stack", "nemo", "--offload", "activations",
            "--offload-layers", "40"]
    main(args)
    assert "offloaded to CPU: activations (first 40 layers per stage)" in capsys.readouterr().out
    main([*args, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["offload_layers"] == 40
    assert out["layout"]["offload_parts"] == ["activations"]


def test_host_memory_is_checked_against_the_offloaded_layers(cat):
    """DGX H100 has 256 GiB of RAM per GPU: every layer's activations at micro-batch 2 need
    more, the first 20 layers' fit."""
    kw = dict(gpu="h100-sxm", model="llama3-70b", gpus=8, zero=3, micro_batch=2,
              global_batch=128, seq_len=8192, offload="activations", catalog=cat)
    with pytest.raises(ConfigError, match="of host memory per GPU"):
        api.estimate(**kw)
    assert api.estimate(offload_layers=20, **kw).step_time_s > 0


@pytest.mark.parametrize("kw, words", [
    (dict(offload="activations", offload_layers=80), "--offload-layers must be from 1 to 79"),
    (dict(offload="activations", offload_layers=-1), "got -1"),
    (dict(offload="optimizer", offload_layers=40), "add --offload activations"),
    (dict(offload_layers=40), "add --offload activations")])
def test_bad_input_is_one_line(cat, kw, words):
    with pytest.raises(ConfigError) as err:
        api.estimate(catalog=cat, **{**RUN, **kw})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_zero_layers(capsys):
    assert main(["estimate", "--gpu", "gb200", "--model", "llama3-70b", "--offload",
                 "activations", "--offload-layers", "0"]) == 2
    err = capsys.readouterr().err
    assert "--offload-layers" in err and "at least 1" in err


def test_the_offload_column():
    """published_runs.csv: part names as --offload, 'activations:N' = --offload-layers N."""
    assert offload_field("") == (0, 0)
    assert offload_field("activations:40") == (O_ACTIVATIONS, 40)
    assert offload_field("optimizer, activations:95") == (O_OPTIMIZER | O_ACTIVATIONS, 95)
    assert offload_field("activations") == (O_ACTIVATIONS, 0)
    for bad in ("optimizer:3", "activations:x"):
        with pytest.raises(CatalogError, match="only activations takes a layer count"):
            offload_field(bad)
