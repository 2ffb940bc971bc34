"""The MoE all-to-all term of the pruning's step bound (search/a2a.py, #12):
under 1F1B with comm.EP_OVERLAP = 0 the time model exposes the whole all-to-all, so the bound
adds it to the busy time. The term must be the time model's own `ep_comm_s` (to float64
round-off, regrouped as bytes x (copies / bandwidth)), zero for a dense model, and the plans
with it must equal the plans that time every row (tests/test_search_cache.py checks those)."""

from __future__ import annotations

import numpy as np

from gpuplan import api
from gpuplan.estimators import comm
from gpuplan.search import a2a

# relative tolerance: the bound multiplies the same float64 factors in another order (a few
# ulps, ~1e-16 each); 1e-12 leaves room for that and none for a missing or extra factor
RTOL = 1e-12


def _captured(monkeypatch, **ask) -> list[tuple]:
    """(req, jobs, table) of every `prune.timed_rows` call of one plan."""
    from gpuplan.search import prune

    seen: list[tuple] = []
    original = prune.timed_rows

    def spy(req, jobs, table=None, known=None):
        seen.append((req, jobs, table))
        return original(req, jobs, table, known)

    monkeypatch.setattr(prune, "timed_rows", spy)
    api.plan(**ask)
    return seen


def _a2a_and_ep_comm(req, jobs, table) -> tuple[np.ndarray, np.ndarray]:
    """The bound's all-to-all seconds and the time model's ep_comm_s of every job's rows."""
    from gpuplan.search import prune

    got, want = [], []
    for g, clock, _ in jobs:
        if g["gpus"].size == 0:
            continue
        x = prune.terms_of(req, g, table)
        term = np.broadcast_to(a2a.floor(req.model, x, clock.hw, clock.stack),
                              g["gpus"].shape)
        t = prune.time_many(req, [(prune.filled(table, g), clock, None)])[0]
        got.append(term)
        want.append(t.full("ep_comm_s"))
    return np.concatenate(got), np.concatenate(want)


def test_a2a_term_is_the_time_models_exposed_all_to_all(monkeypatch):
    """Over every row of a DeepSeek-V3 search (EP up to 64, inside and across nodes, both
    dispatchers' stacks), the bound's term equals ep_comm_s, and many rows have one."""
    assert comm.EP_OVERLAP == 0.0  # the premise: 1F1B hides none of the all-to-all
    seen = _captured(monkeypatch, model="deepseek-v3", tokens="14.8T",
                     gpu=["h100-sxm", "b200"], max_gpus=1024)
    got, want = _a2a_and_ep_comm(*seen[0])
    assert np.count_nonzero(want > 0) > 1000
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=0.0)


def test_a2a_term_of_a_dense_model_is_zero(monkeypatch):
    seen = _captured(monkeypatch, model="llama3-8b", tokens="1T", gpu=["h100-sxm"],
                     max_gpus=64)
    got, want = _a2a_and_ep_comm(*seen[0])
    assert got.size > 0 and not got.any() and not want.any()


def test_a2a_term_is_dropped_where_the_all_to_all_may_hide(monkeypatch):
    """With an EP overlap the time model may hide part of the all-to-all: the bound then
    counts none of it (a lower bound must not guess how much is hidden)."""
    monkeypatch.setattr(comm, "EP_OVERLAP", 0.5)
    seen = _captured(monkeypatch, model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm"],
                     max_gpus=512)
    got, _ = _a2a_and_ep_comm(*seen[0])
    assert got.size > 0 and not got.any()
