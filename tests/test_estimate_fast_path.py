"""`gpuplan.estimate` takes the scalar fast path (`timing_one.step_time_one`) for its one
configuration; with the fast path switched off (its predicate `timing_one.mirrors` forced to
False, so the vectorized `timing.step_time` answers) every field of the result is the same,
numbers to 1e-9 relative (the fast path's stated agreement, tests/test_timing_one.py); the same
holds for the scalar memory path (`memory_one`, tests/test_memory_one.py) (#12)."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest

import gpuplan
from gpuplan.catalog import load_catalog
from gpuplan.estimators import memory_one, timing_one

CASES = [
    dict(gpu="h100-sxm", model="llama3-70b", gpus=256, tp=8, pp=4, micro_batch=1,
         global_batch=512, seq_len=4096, tokens="1T", offer=None),
    dict(gpu="h100-sxm", model="llama3-8b", gpus=96, tp=2, pp=3, vpp=2, micro_batch=2,
         global_batch=256, seq_len=4096, recompute="full", recompute_every=2, zero=3,
         shard_group=8, tokens="100B"),
    dict(gpu="h800", model="deepseek-v3", gpus=2048, tp=1, pp=16, ep=64, micro_batch=1,
         global_batch=15360, seq_len=4096, precision="fp8", zero=1,
         tokens="14.8T"),
    dict(gpu="a100-80gb", model="llama3-8b", gpus=8, tp=1, micro_batch=1, global_batch=64,
         seq_len=2048, zero=3, offload="optimizer,params", recompute="modules",
         recompute_modules="core_attn,mlp", system=None),
    dict(gpu="h100-sxm", model="llama3-8b", gpus=8, micro_batch=4, global_batch=64,
         seq_len=2048, method="lora", samples=100000),
    dict(gpu="h100-sxm", model="llama3-70b", gpus=64, tp=8, pp=4, first_stage_layers=18,
         last_stage_layers=16, micro_batch=1, global_batch=128, seq_len=8192, recompute="op"),
]


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isinf(a):
            return (math.isnan(a) and math.isnan(b)) or a == b
        return a == pytest.approx(b, rel=1e-9, abs=1e-300)
    return a == b


def _estimate(cat, case):
    args = {k: v for k, v in case.items() if v is not None}
    return gpuplan.estimate(catalog=cat, **args)


def _spy(monkeypatch, module) -> list[int]:
    """Count the calls of `module._read` (the fast path's entry), still answering as before."""
    calls: list[int] = []
    real = module._read

    def spy(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(module, "_read", spy)
    return calls


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-{c['gpu']}")
def test_estimate_is_the_same_with_and_without_the_fast_path(cat, case, monkeypatch):
    calls = _spy(monkeypatch, timing_one)
    fast = _estimate(cat, case)
    assert calls, "the single-configuration path did not take the fast path"
    monkeypatch.setattr(timing_one, "mirrors", lambda *a, **k: False)
    calls.clear()
    slow = _estimate(cat, case)
    assert not calls
    assert _same(asdict(fast), asdict(slow))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-{c['gpu']}")
def test_estimate_is_the_same_with_and_without_the_scalar_memory_path(cat, case, monkeypatch):
    """The memory of the one configuration comes from `memory_one.memory_breakdown_one`; with
    it switched off (its reader answers None, so `memory.memory_breakdown` answers) every
    field of the result is the same, numbers to 1e-9 relative (tests/test_memory_one.py)."""
    calls = _spy(monkeypatch, memory_one)
    fast = _estimate(cat, case)
    assert calls, "the single-configuration path did not take the scalar memory path"
    monkeypatch.setattr(memory_one, "_read", lambda *a: None)
    slow = _estimate(cat, case)
    assert _same(asdict(fast), asdict(slow))
