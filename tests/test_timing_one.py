"""The scalar fast path (`estimators.timing_one.step_time_one`) equals the vectorized model
(`timing.step_time`) on random configurations, field by field, to 1e-9 relative (issue #12)."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from mirror_cases import same, stages, tuned

from gpuplan.catalog import load_catalog
from gpuplan.estimators.buffers import from_table
from gpuplan.estimators.timing import TimingBreakdown, step_time
from gpuplan.estimators.timing_one import mirrors, step_time_one
from gpuplan.search.hardware import efficiency_for, hardware_table
from gpuplan.spec import MOE_DISPATCHERS, RECOMPUTE, STACKS, Layout, moe_dedup

GPUS = ("h100-sxm", "a100-80gb", "gb200", "rtx-4090", "mi300x", "h800")
MODELS = ("llama3-8b", "llama3-70b", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b")
METHODS = ("full", "full", "lora", "qlora", "freeze")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _random_case(cat, rng):
    model = tuned(cat.model(str(rng.choice([m for m in MODELS if m in cat.models]))), rng,
                  METHODS)
    hw = hardware_table(cat, [(str(rng.choice([g for g in GPUS if g in cat.accelerators])),
                               None)])
    if rng.random() < 0.3:
        hw = replace(hw, scale_out_bytes_per_s=hw.scale_out_bytes_per_s * rng.uniform(0.05, 2))
    pp, vpp, first, last = stages(model, rng)
    dp = int(rng.choice([1, 2, 8, 16, 64, 512]))
    cp = int(rng.choice([1, 1, 2]))
    ep = int(rng.choice([e for e in (1, 2, 8, 16, 64) if dp % e == 0])) if model.is_moe else 1
    mb = int(rng.choice([1, 2, 4]))
    rc = int(rng.integers(0, len(RECOMPUTE)))
    lay = Layout(tp=int(rng.choice([1, 2, 4, 8, 16])), pp=pp, dp=dp, ep=ep, cp=cp, vpp=vpp,
                 zero=int(rng.integers(0, 4)), micro_batch=mb,
                 global_batch=dp * mb * int(rng.choice([1, 3, 8, 32])),
                 seq_len=int(rng.choice([1024, 4096, 8192])), recompute=rc,
                 precision=int(rng.integers(0, 4)), optimizer=int(rng.integers(0, 3)),
                 schedule=int(rng.integers(0, 3)), first_stage_layers=first,
                 last_stage_layers=last,
                 shard_group=int(rng.choice([0, 0, 2, 8, 16, 64])) if dp * cp > 1 else 0,
                 recompute_modules=int(rng.integers(1, 64)),  # mla_up_proj too (#11)
                 recompute_every=int(rng.choice([1, 2, 4])),
                 stack=int(rng.integers(0, len(STACKS))),  # auto dispatch follows the stack
                 moe_dispatcher=int(rng.integers(0, len(MOE_DISPATCHERS))))
    traffic = float(rng.choice([0.0, 0.0, 1e9, 4e10]))
    return model, lay, hw, efficiency_for(cat, hw.family), traffic


def test_fast_path_equals_the_vectorized_model_on_random_configurations(cat):
    rng = np.random.default_rng(12)
    dispatches = set()
    sb = from_table(cat.extra["memory"])  # FP8 primary weights under nemo (#12)
    for _ in range(600):
        model, lay, hw, eff, traffic = _random_case(cat, rng)
        stacks = (None, sb, sb.with_fp8_transpose(False))[int(rng.integers(0, 3))]
        assert mirrors(model, lay, hw, eff, traffic)
        if model.is_moe and lay.ep > 1:
            dispatches.add(bool(moe_dedup(lay.moe_dispatcher, lay.stack)))
        with np.errstate(all="ignore"):
            vec = step_time(model, lay, hw, eff, traffic, stacks)
        one = step_time_one(model, lay, hw, eff, traffic, stacks)
        for f in fields(TimingBreakdown):
            v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
            assert same(o, v), (f.name, o, v, model.id, lay)
    assert dispatches == {True, False}  # both MoE dispatchers were compared


def test_fast_path_returns_plain_python_numbers(cat):
    model, lay, hw, eff, _ = _random_case(cat, np.random.default_rng(1))
    one = step_time_one(model, lay, hw, eff)
    assert all(type(getattr(one, f.name)) in (float, int, bool) for f in fields(one))


def test_a_grid_is_outside_the_predicate_and_goes_to_the_vectorized_model(cat):
    """`mirrors` is False for more than one configuration; step_time_one then returns
    timing.step_time's own (array) answer, never a different one."""
    model, lay, hw, eff, traffic = _random_case(cat, np.random.default_rng(3))
    grid = replace(lay, dp=np.array([lay.dp, 2 * lay.dp]),
                   global_batch=np.array([lay.global_batch, 2 * lay.global_batch]))
    assert mirrors(model, lay, hw, eff, traffic)
    assert not mirrors(model, grid, hw, eff, traffic)
    assert not mirrors(model, lay, hw, eff, np.array([0.0, 1e9]))
    with np.errstate(all="ignore"):
        vec = step_time(model, grid, hw, eff, traffic)
    one = step_time_one(model, grid, hw, eff, traffic)
    for f in fields(TimingBreakdown):
        np.testing.assert_array_equal(getattr(one, f.name), getattr(vec, f.name))
