"""The scalar fast path (`estimators.timing_one.step_time_one`) equals the vectorized model
(`timing.step_time`) on random configurations, field by field, to 1e-9 relative (issue #12)."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators.timing import TimingBreakdown, step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.search.hardware import efficiency_for, hardware_table
from gpuplan.spec import Layout

GPUS = ("h100-sxm", "a100-80gb", "gb200", "rtx-4090", "mi300x", "h800")
MODELS = ("llama3-8b", "llama3-70b", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _random_case(cat, rng):
    model = cat.model(str(rng.choice([m for m in MODELS if m in cat.models])))
    hw = hardware_table(cat, [(str(rng.choice([g for g in GPUS if g in cat.accelerators])),
                               None)])
    if rng.random() < 0.3:
        hw = replace(hw, scale_out_bytes_per_s=hw.scale_out_bytes_per_s * rng.uniform(0.05, 2))
    pp = int(rng.choice([d for d in (1, 2, 4, 8) if model.layers % d == 0]))
    dp = int(rng.choice([1, 2, 8, 16, 64, 512]))
    ep = int(rng.choice([e for e in (1, 2, 8, 16, 64) if dp % e == 0])) if model.is_moe else 1
    mb = int(rng.choice([1, 2, 4]))
    lay = Layout(tp=int(rng.choice([1, 2, 4, 8, 16])), pp=pp, dp=dp, ep=ep,
                 cp=int(rng.choice([1, 1, 2])), vpp=int(rng.choice([1, 2])),
                 zero=int(rng.integers(0, 4)), micro_batch=mb,
                 global_batch=dp * mb * int(rng.choice([1, 3, 8, 32])),
                 seq_len=int(rng.choice([1024, 4096, 8192])), recompute=int(rng.integers(0, 3)),
                 precision=int(rng.integers(0, 4)), optimizer=int(rng.integers(0, 3)),
                 schedule=int(rng.integers(0, 2)))
    return model, lay, hw, efficiency_for(cat, hw.family)


def _same(a, b) -> bool:
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == pytest.approx(b, rel=1e-9, abs=1e-300)


def test_fast_path_equals_the_vectorized_model_on_random_configurations(cat):
    rng = np.random.default_rng(12)
    for _ in range(300):
        model, lay, hw, eff = _random_case(cat, rng)
        with np.errstate(all="ignore"):
            vec = step_time(model, lay, hw, eff)
        one = step_time_one(model, lay, hw, eff)
        for f in fields(TimingBreakdown):
            v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
            assert _same(o, v), (f.name, o, v, model.id, lay)


def test_fast_path_returns_plain_python_numbers(cat):
    model, lay, hw, eff = _random_case(cat, np.random.default_rng(1))
    one = step_time_one(model, lay, hw, eff)
    assert all(type(getattr(one, f.name)) in (float, int, bool) for f in fields(one))
