"""The memory model's shortcuts where nothing is offloaded (estimators/state.py `kept_all`,
memory._offload_acts) give the figures of the general path bit for bit (#12): the same grid
is evaluated alone (every row without offload: the shortcuts) and with one row appended that
offloads the optimizer state and activations (the whole grid then takes the general path);
the grid's rows must be equal, every part of every stage, with no tolerance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators.memory import stage_breakdowns
from gpuplan.spec import O_ACTIVATIONS, O_OPTIMIZER, Layout

OVERHEAD = dict(runtime_overhead_bytes=2.0**30, fragmentation=0.05)


def _grid(experts: int) -> dict[str, np.ndarray]:
    """Every combination of a few values of each field (valid or not: the arithmetic is
    elementwise either way), HSDP shard groups included."""
    ep = (1, 8) if experts else (1,)
    rows = list(itertools.product((1, 4), (1, 2, 8), (1, 2), (2, 16), ep, (0, 1, 2, 3),
                                  (1, 2), (0, 1, 2), (2, 3), (0, 8)))
    names = ("tp", "pp", "vpp", "dp", "ep", "zero", "micro_batch", "recompute", "precision",
             "shard_group")
    cols = np.array(rows, dtype=np.int64).T
    return dict(zip(names, cols, strict=True))


def _stages(model, g: dict[str, np.ndarray], offload) -> tuple:
    lay = Layout(**g, cp=1, global_batch=1024, seq_len=4096, offload=offload)
    with np.errstate(all="ignore"):
        return stage_breakdowns(model, lay, **OVERHEAD)


@pytest.mark.parametrize("model_id", ["deepseek-v3", "llama3-70b", "mixtral-8x7b"])
def test_no_offload_shortcut_equals_general_path(model_id):
    model = load_catalog().model(model_id)
    g = _grid(model.experts if model.is_moe else 0)
    n = g["tp"].size
    plain = _stages(model, g, 0)  # a single offload value of 0: the shortcuts
    zeros = _stages(model, g, np.zeros(n, dtype=np.int64))  # an array of zeros: too
    more = {k: np.append(v, v[-1]) for k, v in g.items()}
    more["zero"][-1] = 3
    general = _stages(model, more, np.append(np.zeros(n, dtype=np.int64),
                                             O_OPTIMIZER | O_ACTIVATIONS))
    for a, b, c in zip(plain, zeros, general, strict=True):
        for f in ("weights", "gradients", "optimizer", "grad_accum", "offloaded",
                  "host_traffic", "activations", "total", "allocated", "zero3_saving"):
            x, y, z = (np.broadcast_to(getattr(s, f), (s.total.size,)) for s in (a, b, c))
            assert np.array_equal(x, z[:n], equal_nan=True), f
            assert np.array_equal(y, z[:n], equal_nan=True), f
    assert np.any(general[0].offloaded[n:] > 0)  # the appended row took the general path
