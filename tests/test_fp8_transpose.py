"""FP8 weight transposes on Blackwell (#11): Transformer Engine keeps no FP8 transpose of a
per-tensor-scaled weight where the GPU's FP8 GEMMs take any operand layout (catalog
`fp8_gemm_any_layout`, compute capability 10.x); MXFP8 keeps its column-wise copy everywhere,
and Hopper keeps the transpose. Checked against an independent parameter count, on random
configurations (the vectorized and scalar paths, and "dropping the transpose never adds
memory"), and on the published runs whose notes state the recipe."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from mirror_cases import same
from test_memory_one import _random_case

from gpuplan import api
from gpuplan.calibrate.memory_fit import fp8_recipe
from gpuplan.errors import ConfigError
from gpuplan.estimators import buffers
from gpuplan.estimators.memory import MemoryBreakdown, memory_breakdown
from gpuplan.estimators.memory_one import memory_breakdown_one
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.spec import FP8
from gpuplan.units import GiB

# NVIDIA's CUDA GPUs page: B200 / GB200 compute capability 10.0, B300 / GB300 10.3; Transformer
# Engine's is_non_tn_fp8_gemm_supported: (10, 0) <= capability < (12, 0) or >= (13, 0)
ANY_LAYOUT = {"b200", "gb200", "b300", "gb300"}

# the 405B run's layout (mbridge2606-gb200-llama31-405b-256-fp8): NeMo, FP8 primary weights
L405 = dict(model="llama3-405b", gpus=256, tp=4, pp=16, vpp=4, zero=1, micro_batch=1,
            global_batch=1536, seq_len=8192, precision="fp8", stack="nemo", recompute="none",
            grad_reduce_dtype="bf16")


def test_the_catalog_flag_is_the_compute_capability_rule(cat):
    got = {a.id for a in cat.accelerators.values() if a.fp8_gemm_any_layout}
    assert got == ANY_LAYOUT


def test_kept_unless_per_tensor_on_an_any_layout_gpu():
    assert [buffers.fp8_transpose_kept(r, a) for r in buffers.FP8_RECIPES
            for a in (False, True)] == [True, True, True, False, True, True]


def test_the_405b_run_loses_one_byte_per_parameter_of_its_busiest_rank(cat):
    """Independent count: the busiest rank (the second; Megatron-LM's split with embedding and
    loss as layers: 126 + 2 over 16 x 4 chunks of 2, rank 1 holds 8 decoder layers) keeps
    8 layers' weights / tp (no ZeRO-3); the transpose is 1 B each, and the allocator margin
    scales it by 1 + fragmentation. Tolerance 1e-9 relative (float rounding)."""
    auto = api.estimate(gpu="gb200", catalog=cat, **L405)
    tensor = api.estimate(gpu="gb200", fp8_recipe="tensor", catalog=cat, **L405)
    h, ffn, q, kv, tp = 16384, 53248, 128 * 128, 8 * 128, 4
    layer = (2 * h * q + 2 * h * kv + 3 * h * ffn) / tp + 2 * h  # attention, SwiGLU, 2 norms
    frag = site_from_catalog(cat).fragmentation
    drop = (1 + frag) * 8 * layer / GiB
    assert auto.memory_gib.total - tensor.memory_gib.total == pytest.approx(drop, rel=1e-9)
    lines = {b[0]: b[1] for b in tensor.memory_buffers}
    assert "fp8_weights" in {b[0] for b in auto.memory_buffers}
    assert lines.get("fp8_weights", 0.0) == 0.0  # NeMo's FP8 primary weight has no copy left
    assert tensor.layout.fp8_transpose is False and auto.layout.fp8_transpose is True


@pytest.mark.parametrize("gpu,recipe", [("h100-sxm", "tensor"), ("h200", "tensor"),
                                        ("gb200", "mxfp8"), ("b200", "auto")])
def test_hopper_and_mxfp8_keep_the_second_copy(cat, gpu, recipe):
    kw = dict(L405, model="llama3-70b", gpus=64, pp=4, vpp=5, global_batch=256)
    base = api.estimate(gpu=gpu, catalog=cat, **kw)
    other = api.estimate(gpu=gpu, fp8_recipe=recipe, catalog=cat, **kw)
    assert other.memory_gib.total == base.memory_gib.total


def test_megatron_bf16_weights_keep_their_fp8_copy_but_not_its_transpose(cat):
    """Without FP8 primary weights (stack megatron) the FP8 copies go from 2 B (weight and
    transpose) to 1 B per parameter: the line halves exactly."""
    kw = dict(L405, stack="megatron")
    a = {b[0]: b[1] for b in api.estimate(gpu="b200", catalog=cat, **kw).memory_buffers}
    t = {b[0]: b[1] for b in api.estimate(gpu="b200", fp8_recipe="tensor", catalog=cat,
                                          **kw).memory_buffers}
    assert t["fp8_weights"] == pytest.approx(a["fp8_weights"] / 2, rel=1e-12)


def test_a_bad_recipe_is_one_line(cat):
    with pytest.raises(ConfigError) as err:
        api.estimate(gpu="gb200", fp8_recipe="nvfp4", catalog=cat, **L405)
    assert "--fp8-recipe must be one of auto, tensor, mxfp8" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("recipe", ["tensor", "mxfp8"])
def test_a_recipe_without_fp8_is_one_line(cat, recipe):
    """A scaling recipe names how FP8 GEMMs are scaled: without --precision fp8 it is a
    contradiction, refused as --activation-cache fp8 is (auto passes: it is the default)."""
    kw = {**L405, "precision": "bf16"}
    with pytest.raises(ConfigError) as err:
        api.estimate(gpu="gb200", fp8_recipe=recipe, catalog=cat, **kw)
    assert f"--fp8-recipe {recipe}" in str(err.value) and "--precision fp8" in str(err.value)
    assert "\n" not in str(err.value)
    assert api.estimate(gpu="gb200", fp8_recipe="auto", catalog=cat, **kw).memory_gib.total > 0


def test_dropping_the_transpose_on_random_configurations(cat):
    """Property, on 200 random configurations of every stack and precision: the scalar path
    equals the vectorized one (1e-9) without the transpose too, and dropping it never adds
    memory; it removes exactly (1 + fragmentation) x the FP8 copies' transpose bytes, which is
    0 unless the precision is FP8 and the stack keeps a transpose (fp8_weight_bytes > 1)."""
    site = site_from_catalog(cat)
    kw = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
              fragmentation=site.fragmentation)
    kept, gone = site.stack_buffers, site.stack_buffers.with_fp8_transpose(False)
    rng = np.random.default_rng(1111)
    moved = 0
    for _ in range(200):
        model, lay = _random_case(cat, rng)
        with np.errstate(all="ignore"):
            vec = memory_breakdown(model, lay, stacks=gone, **kw)
            full = memory_breakdown(model, lay, stacks=kept, **kw)
        one = memory_breakdown_one(model, lay, stacks=gone, **kw)
        for f in fields(MemoryBreakdown):
            v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
            assert same(o, v), (f.name, o, v, model.id, lay)
        t_full, t_gone = float(np.ravel(full.total)[0]), float(np.ravel(vec.total)[0])
        assert t_gone <= t_full * (1 + 1e-12)
        if lay.precision != FP8 or kept.fp8_weight_bytes[lay.stack] <= 1.0:
            assert t_gone == pytest.approx(t_full, rel=1e-12)
        elif int(np.ravel(full.stage)[0]) == int(np.ravel(vec.stage)[0]):
            copy = float(np.ravel(full.fp8_weights)[0]) - float(np.ravel(vec.fp8_weights)[0])
            assert t_full - t_gone == pytest.approx((1 + kw["fragmentation"]) * copy, rel=1e-9)
            moved += copy > 0
    assert moved >= 10  # the generator reaches FP8 on Transformer Engine stacks


@pytest.mark.parametrize("notes,precision,want", [
    ("NVIDIA perf recipe; DGX-GB200 FP8 (current scaling); memory settings: ...", "fp8",
     "tensor"),
    ("DGX-GB200 FP8 current scaling; memory settings: ...", "fp8", "tensor"),
    ("memory settings: LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG (micro batch 2)", "fp8", "tensor"),
    ("NVIDIA perf recipe, short run; DGX-GB200 MXFP8", "fp8", None),
    ("FP8 current scaling / MXFP8 on Blackwell", "fp8", None),  # the table names both
    ("LLAMA31_405B_B200_FP8_CS_BASE_CONFIG (= ..._FP8_MX_...); DGX-B200 MXFP8", "fp8", None),
    ("DGX-GB200 FP8 (current scaling)", "bf16", None),
    ("", "fp8", None),
])
def test_the_recipe_a_run_states(notes, precision, want):
    assert fp8_recipe({"notes": notes, "precision": precision}) == want


def test_the_estimate_says_so_and_its_command_reproduces_it(cat, run_json, run_cli):
    """The text names the recipe's effect, the FP8 gather is labelled fp8 (NeMo's FP8 primary
    weights), the JSON echo carries fp8_transpose, and the printed command repeats the recipe."""
    from gpuplan.report.command import estimate_command

    argv = ["estimate", "--gpu", "gb200", "--model", "llama3-70b", "--gpus", "64", "--zero", "3",
            "--micro-batch", "2", "--global-batch", "256", "--seq-len", "8192", "--precision",
            "fp8", "--stack", "nemo", "--fp8-recipe", "tensor"]
    code, text, _ = run_cli(*argv)
    assert code == 0 and "no FP8 weight transpose" in text
    assert any(ln.startswith("ZeRO-3 gathered weights") and ln.rstrip().endswith("fp8")
               for ln in text.splitlines())
    e = run_json(*argv)
    assert e["layout"]["fp8_transpose"] is False
    line = estimate_command({**e["layout"], "model": "llama3-70b", "gpu": "gb200",
                             "gpus": 64})
    assert "--fp8-recipe tensor" in line
    hopper = run_json(*[a if a != "gb200" else "h100-sxm" for a in argv])
    assert hopper["layout"]["fp8_transpose"] is True
