"""The scalar memory path (`estimators.memory_one.memory_breakdown_one`) equals the vectorized
model (`memory.memory_breakdown`) on random configurations, field by field, to 1e-9 relative
(issue #12): every layout dimension (tp, pp, uneven and explicit stages, vpp, cp, ep, ZeRO, HSDP
shard groups, recompute modes and modules, offload parts and the activations of the first N
layers, 1F1B and DualPipe), fine-tuning methods (with each stack's adapter dtype and loss
chunks), precisions (FP8 under each stack's primary weights and GEMM inputs), optimizers, every
software stack, a compiled or in-place loss, and SwiGLU, GELU and squared-ReLU MLPs, and the
run's memory options (BF16 moments, DeepSeek-V3's FP8 activation cache, a parameter EMA on the
GPU or the host) with the mla_up_proj module on MLA models (#11)."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from mirror_cases import same, stages, tuned

from gpuplan.catalog import load_catalog
from gpuplan.estimators import buffers
from gpuplan.estimators.memory import MemoryBreakdown, memory_breakdown
from gpuplan.estimators.memory_one import memory_breakdown_one, mirrors
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.spec import (
    FP8,
    OFFLOAD_PARTS,
    R_MODULES,
    RECOMPUTE,
    S_1F1B,
    S_DUALPIPE,
    STACKS,
    Layout,
)

MODELS = ("llama3-8b", "llama3-70b", "gpt3-175b", "deepseek-v3", "mixtral-8x7b", "bert-large",
          "bloom-176b", "relu2")  # relu2: gpt3-175b with a squared-ReLU MLP (no catalog model)
METHODS = ("full", "full", "full", "lora", "lora-int8", "qlora", "freeze")


def _model(cat, rng):
    name = str(rng.choice(MODELS))
    if name == "relu2":
        return replace(cat.model("gpt3-175b"), mlp="relu2")
    return cat.model(name)


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _offload_layers(model, state, *salt):
    """The activations of the first N layers (0 = all), half the time; drawn from a generator
    of its own so that the cases drawn before it was added stay the same."""
    own = np.random.default_rng([*salt, int(state["state"]["state"] % 2**32)])
    return int(own.integers(1, model.layers)) if own.random() < 0.5 else 0


def _random_case(cat, rng):
    model = tuned(_model(cat, rng), rng, METHODS)
    pp, vpp, first, last = stages(model, rng)
    dp = int(rng.choice([1, 2, 3, 8, 16, 64, 512]))
    cp = int(rng.choice([1, 1, 2]))
    ep = int(rng.choice([e for e in (1, 2, 8, 16, 64) if dp % e == 0])) if model.is_moe else 1
    mb = int(rng.choice([1, 2, 4]))
    zero = int(rng.integers(0, 4))
    lay = Layout(tp=int(rng.choice([1, 2, 4, 8, 16])), pp=pp, dp=dp, ep=ep, cp=cp, vpp=vpp,
                 zero=zero, micro_batch=mb, global_batch=dp * mb * int(rng.choice([1, 3, 8])),
                 seq_len=int(rng.choice([1024, 4096, 8192])),
                 recompute=int(rng.integers(0, len(RECOMPUTE))),
                 precision=int(rng.integers(0, 4)), optimizer=int(rng.integers(0, 3)),
                 sp=bool(rng.random() < 0.8), flash=bool(rng.random() < 0.8),
                 dropout=bool(rng.random() < 0.3), stack=int(rng.integers(0, len(STACKS))),
                 offload=int(rng.integers(0, 1 << len(OFFLOAD_PARTS))) if rng.random() < 0.3
                 else 0, first_stage_layers=first, last_stage_layers=last,
                 offload_layers=_offload_layers(model, rng.bit_generator.state, dp, mb),
                 shard_group=int(rng.choice([0, 0, 2, 8, 16])) if zero and dp * cp > 1 else 0,
                 recompute_modules=int(rng.integers(1, 64)),
                 recompute_every=int(rng.choice([1, 2, 4])),
                 schedule=S_DUALPIPE if rng.random() < 0.25 else S_1F1B)
    return model, lay


@pytest.mark.parametrize("stacks", ["catalog", "legacy", "bf16-reduce"])
def test_scalar_memory_equals_the_vectorized_model_on_random_configurations(cat, stacks):
    """1e-9 relative: both evaluate the same formulas in the same order; only the order of a
    few float operations numpy fuses differently may move the last bits."""
    site = site_from_catalog(cat)
    sb = {"catalog": site.stack_buffers, "legacy": None,
          "bf16-reduce": (site.stack_buffers or buffers.LEGACY).with_grad_reduce("bf16")}[stacks]
    kw = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
              fragmentation=site.fragmentation, stacks=sb)
    compiled = {**kw, "stacks": (sb or buffers.LEGACY).with_compiled_loss()}
    inplace = {**kw, "stacks": (sb or buffers.LEGACY).with_inplace_loss()}
    rng = np.random.default_rng({"catalog": 12, "legacy": 13, "bf16-reduce": 14}[stacks])
    seen = set()
    for _ in range(400 if stacks == "catalog" else 150):
        model, lay = _random_case(cat, rng)
        assert mirrors(lay)
        # a compiled or an in-place loss (StackBuffers.with_compiled_loss / with_inplace_loss)
        u = rng.random()
        case = compiled if u < 0.15 else inplace if u < 0.3 else kw
        opts = ()
        if rng.random() < 0.4:  # the run's memory options (#11: DeepSeek-V3's savings)
            opts = (str(rng.choice(["fp32", "bf16"])), str(rng.choice(["stack", "fp8"])),
                    str(rng.choice(["none", "gpu", "host"])))
            case = {**case, "stacks": (case["stacks"] or buffers.LEGACY).with_moments(opts[0])
                    .with_activation_cache(opts[1]).with_ema(opts[2])}
        with np.errstate(all="ignore"):
            vec = memory_breakdown(model, lay, **case)
        one = memory_breakdown_one(model, lay, **case)
        for f in fields(MemoryBreakdown):
            v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
            assert same(o, v), (f.name, o, v, model.id, lay, u)
        seen |= {("opts", *opts[:2], opts[1] == "fp8" and lay.precision == FP8, model.is_mla)
                 for _ in (1,) if opts} | {("ema", opts[2]) for _ in (1,) if opts}
        seen |= {("mla_up", model.is_mla, bool(lay.recompute_modules & 32)
                  and lay.recompute == R_MODULES)}
        seen |= {("offload_layers", bool(lay.offload & 8), lay.offload_layers > 0)}
        seen |= {("stack", lay.stack, lay.precision == FP8), ("dualpipe", lay.schedule),
                 ("loss", 0 if u < 0.15 else 1 if u < 0.3 else 2), ("mlp", model.mlp),
                 ("tuned", lay.stack, one.tuned)}
    # the generator reaches every stack with and without FP8 and with a fine-tuned model,
    # DualPipe and 1F1B, compiled, in-place and eager losses, each MLP kind
    want = {("stack", s, f8) for s in range(len(STACKS)) for f8 in (False, True)} | {
        ("tuned", s, True) for s in range(len(STACKS))} | {
        ("dualpipe", S_DUALPIPE), ("dualpipe", S_1F1B), ("loss", 0), ("loss", 1), ("loss", 2),
        ("mlp", "swiglu"), ("mlp", "gelu"), ("mlp", "relu2"), ("offload_layers", True, True)}
    if stacks == "catalog":  # and the memory options, on MLA and other models (#11)
        want |= {("ema", e) for e in ("none", "gpu", "host")} | {
            ("opts", "bf16", "fp8", True, True), ("opts", "fp32", "stack", False, True),
            ("opts", "bf16", "fp8", True, False), ("mla_up", True, True)}
    assert want <= seen, sorted(want - seen)


def test_scalar_memory_returns_plain_python_numbers(cat):
    site = site_from_catalog(cat)
    model, lay = _random_case(cat, np.random.default_rng(1))
    one = memory_breakdown_one(model, lay, runtime_overhead_bytes=site.runtime_overhead_bytes,
                               fragmentation=site.fragmentation, stacks=site.stack_buffers)
    assert all(type(getattr(one, f.name)) in (float, int, bool) for f in fields(one))


def test_a_grid_or_a_zero_degree_goes_to_the_vectorized_model(cat):
    """`mirrors` is False for more than one configuration and for a degree below 1; the fast
    path then returns memory.memory_breakdown's own (array) answer, never a different one."""
    model = cat.model("llama3-8b")
    lay = Layout(tp=2, dp=4, micro_batch=1, global_batch=64, seq_len=4096)
    grid = replace(lay, dp=np.array([4, 8]), global_batch=np.array([64, 128]))
    assert mirrors(lay) and mirrors(replace(lay, dp=np.array([4])))
    assert not mirrors(grid) and not mirrors(replace(lay, cp=0))
    kw = dict(runtime_overhead_bytes=1e9, fragmentation=0.05)
    vec = memory_breakdown(model, grid, **kw)
    one = memory_breakdown_one(model, grid, **kw)
    for f in fields(MemoryBreakdown):
        np.testing.assert_array_equal(getattr(one, f.name), getattr(vec, f.name))


def test_scalar_summary_equals_the_breakdowns_own(cat):
    """`memory_one.summary` (no numpy) gives `MemoryBreakdown.summary`'s keys and values, the
    fine-tuning keys included, on scalar breakdowns of random configurations."""
    from gpuplan.estimators.memory_one import summary

    site = site_from_catalog(cat)
    kw = dict(runtime_overhead_bytes=site.runtime_overhead_bytes,
              fragmentation=site.fragmentation, stacks=site.stack_buffers)
    rng = np.random.default_rng(21)
    tuned = 0
    for _ in range(100):
        model, lay = _random_case(cat, rng)
        one = memory_breakdown_one(model, lay, **kw)
        tuned += bool(one.tuned)
        for unit in (1.0, 2.0**30):
            fast, own = summary(one, unit), one.summary(unit)
            assert fast.keys() == own.keys()
            assert all(same(fast[k], own[k]) for k in own), (fast, own)
    assert tuned > 0
