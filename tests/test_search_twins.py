"""The HSDP verdict of pruned ZeRO-3 rows, settled without the time model (search/twins.py):
plans equal to timing those rows, each verdict equal to the one the time model gives."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan import api
from gpuplan.report import plan as report_plan
from gpuplan.search import plan as planmod
from gpuplan.search import prune, twins
from gpuplan.search.timed import filled, time_many
from gpuplan.search.variants import FLOOR_MARGIN

# searches with ZeRO-3 rows that have HSDP copies and are pruned (dense and MoE models)
CASES = [
    dict(model="llama3-70b", tokens="15T", deadline_days=90, gpu=["h100-sxm", "a100-80gb",
                                                                 "h200", "mi300x"]),
    dict(model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm", "h800", "b200"],
         max_gpus=4096),
    dict(model="gpt3-175b", tokens="300B", gpu=["h100-sxm", "a100-80gb", "mi300x"]),
]


def _json(**ask) -> dict:
    d = report_plan.to_json(api.plan(**ask))
    d.pop("elapsed_s", None)
    return d


@pytest.mark.parametrize("ask", CASES, ids=[c["model"] for c in CASES])
def test_settled_plans_equal_plans_timing_the_twins(monkeypatch, ask):
    """With the verdicts settled (rows skipped), the whole plan JSON -- ranked plans, Pareto
    front, bests, tallies with the HSDP exclusion count, why-not, outlook -- equals that of the
    search that times every pruned ZeRO-3 row the HSDP rule reads, and that of no pruning."""
    monkeypatch.setattr(twins, "MIN_ROWS", 0)  # every job settles (small ones time by default)
    monkeypatch.setattr(prune, "stats", prune.Stats())
    settled = _json(**ask)
    assert prune.stats.settled > 0 and not prune.stats.fell_back
    monkeypatch.setattr(twins, "ENABLED", False)
    assert _json(**ask) == settled
    monkeypatch.setattr(prune, "ENABLED", False)
    assert _json(**ask) == settled


def _time_model_verdicts(req, table, jobs, kept, timings, deferred) -> list[np.ndarray]:
    """Per job, the deferred rows that `variants.hsdp_twins` returns when they are timed:
    dp time showing and floor_s within FLOOR_MARGIN of the count's fastest step."""
    out = []
    for i, d in enumerate(deferred):
        if d is None:
            out.append(np.zeros(0, dtype=np.int64))
            continue
        g = filled(table, {k: v for k, v in d.items() if k != "floor_lb"})
        t = time_many(req, [(g, jobs[i][1], None)])[0]
        floor = (t.full("compute_s") + t.full("memory_s") + t.full("overhead_s")
                 + t.full("optimizer_s"))
        best = twins.best_at(kept[i], timings[i], d["gpus"]) * (1 + FLOOR_MARGIN)
        assert np.all(np.isfinite(t.full("step_s")))  # skipped rows run, as counted
        out.append(d["row"][(t.full("dp_comm_s") > 0) & (floor <= best)])
    return out


@pytest.mark.parametrize("ask", CASES[:2], ids=[c["model"] for c in CASES[:2]])
def test_each_settled_verdict_equals_the_time_model(monkeypatch, ask):
    """Every row `twins.settle` decides gets the verdict the time model gives it (the rows it
    calls busy are exactly those the HSDP rule would time a copy of), and most were decided
    without timing them (both ways: floor above, ceiling below)."""
    original = twins.settle
    seen = {"rows": 0, "busy": 0, "unsure": 0}

    def checked(req, table, jobs, kept, timings, deferred):
        busy, unsure = original(req, table, jobs, kept, timings, deferred)
        want = _time_model_verdicts(req, table, jobs, kept, timings, deferred)
        for got, exp in zip(busy, want, strict=True):
            assert np.array_equal(np.sort(got), np.sort(exp))
            seen["busy"] += exp.size
        seen["rows"] += sum(d["row"].size for d in deferred if d is not None)
        seen["unsure"] += unsure
        return busy, unsure

    monkeypatch.setattr(twins, "settle", checked)
    monkeypatch.setattr(twins, "MIN_ROWS", 0)
    api.plan(**ask)
    assert seen["rows"] > 1000 and 0 < seen["busy"] < seen["rows"]
    assert seen["unsure"] < seen["rows"] / 10


def test_a_broken_ceiling_falls_back_to_timing_every_row(monkeypatch):
    """A ceiling below the real floor (a physics change it does not mirror) is caught by the
    guard on the rows timed: the search then times every row, and the plan is unchanged."""
    ask = CASES[0]
    want = _json(**ask)
    monkeypatch.setattr(twins, "MIN_ROWS", 0)
    original = twins.ceilings
    monkeypatch.setattr(twins, "ceilings", lambda *a: original(*a) * 0.5)
    monkeypatch.setattr(prune, "stats", prune.Stats())
    assert _json(**ask) == want
    assert prune.stats.fell_back


def test_only_twins_whose_copy_fits_are_relevant():
    """`twins.relevant` keeps a ZeRO-3 grid row exactly when the table holds its HSDP copy and
    that copy fits the group's GPU memory."""
    from types import SimpleNamespace

    from gpuplan.search.groups import LayoutTable

    g = {"gpus": np.array([16, 16, 16, 16]), "zero": np.array([3, 3, 1, 3]),
         "row": np.array([0, 1, 2, -2])}
    extra = {"kind": np.array([0, 0, 1]), "twin": np.array([0, 1, 2]),
             "memory_bytes": np.array([50e9, 90e9, 10e9])}
    table = LayoutTable(g={"gpus": np.full(3, 16)}, starts=np.array([0, 3]), position={16: 0},
                        tp_values=np.array([1]), dropped=np.zeros((1, 1, 3)),
                        memory_bytes=np.zeros(3), extra=extra)
    clock = SimpleNamespace(hw=SimpleNamespace(memory_bytes=np.array([80e9])))
    assert twins.relevant(g, clock, table).tolist() == [True, False, False, False]


# --- offload copies sized as the groups read them (variants.LAZY, variants.size_read) ---

LAZY_CASES = [
    dict(model="llama2-70b", tokens="2T", gpu=["a100-80gb", "h100-sxm", "l40s"],
         max_gpus=64),
    dict(model="deepseek-v3", tokens="14.8T", gpu=["h100-sxm", "h800", "b200"],
         max_gpus=4096),
]


@pytest.mark.parametrize("ask", LAZY_CASES, ids=[c["model"] for c in LAZY_CASES])
def test_lazily_sized_offload_copies_equal_sizing_them_all(monkeypatch, ask):
    """Sizing an offload copy only when a group reads its memory gives the plan JSON of sizing
    every copy with the table (tallies of OOM, host memory and unneeded offload included);
    and the shortcut ran: some copies were sized, others never needed it."""
    from gpuplan.search import groups, variants

    tables = []
    original = groups.layout_table

    def kept(*a, **k):
        tables.append(original(*a, **k))
        return tables[-1]

    monkeypatch.setattr(variants, "LAZY_MIN", 0)  # lazy however few (large tables only)
    monkeypatch.setattr(groups, "layout_table", kept)
    monkeypatch.setattr(planmod, "layout_table", kept)
    lazy = _json(**ask)
    ex = tables[0].extra
    offload = ex["kind"] == 2
    assert ex["pending"][offload].any() and not ex["pending"][offload].all()
    monkeypatch.setattr(variants, "LAZY", ())
    assert _json(**ask) == lazy
