"""Helpers shared by the tests that hold a scalar fast path equal to its vectorized model
(tests/test_timing_one.py, tests/test_memory_one.py): random fine-tuning and pipeline
stages drawn from a seeded generator, and the 1e-9 comparison both use."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuplan.workload import finetune_spec, with_finetune


def tuned(model, rng, methods):
    """A fine-tuned copy of `model` for a method drawn from `methods` ('full', 'lora',
    'lora-int8' (LoRA on an int8 base), 'qlora', 'freeze'), or the model itself."""
    method = str(rng.choice(methods))
    if method == "full":
        return model
    if method == "freeze":
        ft = replace(finetune_spec(model, method=method),
                     trainable_layers=int(rng.integers(1, model.layers + 1)))
    else:
        method, quant = {"lora-int8": ("lora", "int8")}.get(method, (method, None))
        ft = finetune_spec(model, method=method, lora_rank=int(rng.choice([8, 16, 64])),
                           lora_targets=str(rng.choice(["attn", "mlp", "all"])), quant=quant)
    return with_finetune(model, ft)


def stages(model, rng):
    """(pp, vpp, first, last): even, uneven default (pp*vpp not dividing the layers) or
    explicit first/last stage sizes."""
    L = model.layers
    pp = int(rng.choice([1, 2, 3, 4, 5, 8]))
    vpp = int(rng.choice([1, 2, 3])) if pp > 1 else 1
    if pp * vpp > L + 2:
        vpp = 1
    first = last = 0
    if pp > 1 and rng.random() < 0.3:
        first = int(rng.integers(0, L // pp + 2))
        last = int(rng.integers(0, L // pp + 2))
    return pp, vpp, first, last


def same(a, b) -> bool:
    """Equal to 1e-9 relative; NaN equals NaN and infinities must match exactly."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == pytest.approx(b, rel=1e-9, abs=1e-300)
