"""HSDP shard groups and CPU offload (#11): memory and traffic against formulas written out
here, hypothesis properties, the host-memory limit, bad input and what `plan` now finds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan import api
from gpuplan.errors import ConfigError
from gpuplan.estimators import comm
from gpuplan.estimators.memory import memory_breakdown
from gpuplan.estimators.timing import TIMING_PARTS
from gpuplan.spec import (
    O_ACTIVATIONS,
    O_GRADS,
    O_OPTIMIZER,
    O_PARAMS,
    R_FULL,
    Layout,
    ModelSpec,
    offload_code,
)

OVERHEAD = dict(runtime_overhead_bytes=0.0, fragmentation=0.0)
REL = 1e-12  # float64 round-off only
DENSE = ModelSpec(id="d", name="d", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                  vocab=128256, mlp="swiglu")
MOE = ModelSpec(id="m", name="m", layers=16, hidden=2048, heads=16, kv_heads=4, ffn=8192,
                vocab=32000, mlp="swiglu", experts=16, experts_per_token=2, moe_ffn=1408)


def bd(model: ModelSpec, lay: Layout):
    return memory_breakdown(model, lay, **OVERHEAD)


def test_shard_group_divides_states_by_its_size():
    """ZeRO-3 over a shard group of N of 64 ranks: weights 2 B, gradients 2 B and AdamW state
    12 B per parameter, each divided by N (one micro-batch: no fp32 accumulation)."""
    n = DENSE.total_params()
    for group in (8, 16, 64):
        b = bd(DENSE, Layout(dp=64, zero=3, shard_group=group, global_batch=64))
        assert float(b.weights) == pytest.approx(2 * n / group, rel=REL)
        assert float(b.gradients) == pytest.approx(2 * n / group, rel=REL)
        assert float(b.optimizer) == pytest.approx(12 * n / group, rel=REL)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ModelSpec, Layout]:
    model = draw(st.sampled_from([DENSE, MOE]))
    dp = draw(st.sampled_from([2, 4, 8, 16]))
    ep = draw(st.sampled_from([1, 2])) if model.is_moe else 1
    mb = draw(st.sampled_from([1, 2]))
    lay = Layout(tp=draw(st.sampled_from([1, 2])), pp=draw(st.sampled_from([1, 2])), dp=dp,
                 cp=draw(st.sampled_from([1, 2])), ep=ep, zero=draw(st.integers(1, 3)),
                 micro_batch=mb, global_batch=mb * dp * draw(st.sampled_from([1, 4])),
                 seq_len=4096, recompute=draw(st.integers(0, 2)))
    return model, lay


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_a_shard_group_of_all_ranks_is_plain_zero(case):
    """--shard-group dp*cp is ZeRO over all data-parallel ranks: the same memory and step."""
    from gpuplan.catalog import load_catalog
    from gpuplan.search.evaluate import time_per_step
    from gpuplan.search.hardware import efficiency_for, hardware_for

    model, lay = case
    hsdp = replace(lay, shard_group=lay.dp * lay.cp)
    for a, b in zip(bd(model, lay).parts().values(), bd(model, hsdp).parts().values(),
                    strict=True):
        assert float(a) == pytest.approx(float(b), rel=REL)
    cat = load_catalog()
    hw = hardware_for(cat, "h100-sxm", precision="bf16")
    eff = efficiency_for(cat, hw.family)
    t0, t1 = time_per_step(model, lay, hw, eff), time_per_step(model, hsdp, hw, eff)
    assert float(t1.step_s[0]) == pytest.approx(float(t0.step_s[0]), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.sampled_from([1, 2, 4]))
def test_a_smaller_shard_group_never_lowers_memory(case, div):
    model, lay = case
    ranks = lay.dp * lay.cp
    group = max(ranks // div, 1)
    more = float(bd(model, replace(lay, shard_group=ranks)).total)
    assert float(bd(model, replace(lay, shard_group=group)).total) >= more * (1 - 1e-9)


def test_hsdp_sync_is_group_reduce_scatter_plus_replica_all_reduce():
    """On one link (alpha 0): reduce-scatter 2 B/param in groups of N, all-reduce the 1/N
    shard across R replicas, ZeRO-3 without the parameter all-gather."""
    p, n, r, bw = 1e9, 8, 4, 50e9
    grads = 2 * p
    expected = (n - 1) / n * grads / bw + 2 * (r - 1) / r * (grads / n) / bw
    got = comm.hsdp_grad_sync_s(p, n, r, 3, n, r, bw, 0.0, bw, 0.0)
    assert float(got) == pytest.approx(expected, rel=REL)
    # ZeRO-1/2 all-gather the updated 16-bit parameters inside the group as well
    got2 = comm.hsdp_grad_sync_s(p, n, r, 2, n, r, bw, 0.0, bw, 0.0)
    assert float(got2) == pytest.approx(expected + (n - 1) / n * 2 * p / bw, rel=REL)


def test_hsdp_sends_less_across_nodes():
    """Llama 3 8B on 64 H100s, ZeRO-3, one micro-batch of 1,024 tokens per step (so the
    data-parallel traffic shows): sharding inside each node and replicating across them
    exposes less DP time and the step is shorter; memory is higher."""
    kw = dict(model="llama3-8b", gpu="h100-sxm", gpus=64, zero=3, global_batch=64,
              seq_len=1024)
    full = api.estimate(**kw)
    hsdp = api.estimate(**kw, shard_group=8)
    dp = lambda r: dict(r.time_breakdown_s)["dp_comm_s"]  # noqa: E731
    assert 0 < dp(hsdp) < dp(full)
    assert hsdp.step_time_s < full.step_time_s
    assert hsdp.memory_gib.total > full.memory_gib.total


def test_offload_moves_each_part_to_the_host():
    """ZeRO-3 over 8 ranks, one micro-batch: optimizer 12 B, params 2 B, grads 2 B per param
    / 8 leave the GPU for `offloaded`; the host link carries gradients out and weights back
    (optimizer alone) or, with params offloaded, the weights in for forward and backward."""
    n = DENSE.total_params()
    base = Layout(dp=8, zero=3, global_batch=8, recompute=R_FULL)
    opt = bd(DENSE, replace(base, offload=O_OPTIMIZER))
    assert float(opt.optimizer) == 0.0
    assert float(opt.offloaded) == pytest.approx(12 * n / 8, rel=REL)
    assert float(opt.host_traffic) == pytest.approx((2 + 2) * n / 8, rel=REL)
    state = bd(DENSE, replace(base, offload=O_OPTIMIZER | O_PARAMS | O_GRADS))
    assert float(state.weights) == float(state.gradients) == 0.0
    assert float(state.offloaded) == pytest.approx(16 * n / 8, rel=REL)
    assert float(state.host_traffic) == pytest.approx((2 * 2 + 2) * n / 8, rel=REL)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.integers(0, 15), st.integers(0, 15))
def test_more_offload_never_raises_gpu_memory(case, a, b):
    model, lay = case
    lay = replace(lay, zero=3)
    less = float(bd(model, replace(lay, offload=a)).total)
    more = float(bd(model, replace(lay, offload=a | b)).total)
    assert more <= less * (1 + 1e-9)


def test_offload_time_enters_the_step():
    """Host traffic over a slow host link (1 GB/s) cannot hide behind compute: the step grows
    by offload_s = traffic / bandwidth - the hidden share, and the parts still sum."""
    from gpuplan.catalog import load_catalog
    from gpuplan.search.evaluate import time_per_step
    from gpuplan.search.hardware import efficiency_for, hardware_for

    cat = load_catalog()
    hw = replace(hardware_for(cat, "a100-80gb", precision="bf16"), host_bytes_per_s=1e9)
    eff = efficiency_for(cat, hw.family)
    lay = Layout(dp=8, zero=3, global_batch=8, recompute=R_FULL,
                 offload=O_OPTIMIZER | O_PARAMS | O_GRADS)
    traffic = float(bd(DENSE, lay).host_traffic)
    t = time_per_step(DENSE, lay, hw, eff, traffic)
    base = time_per_step(DENSE, replace(lay, offload=0), hw, eff)
    assert float(t.offload_s[0]) > 0
    assert float(t.offload_s[0]) <= traffic / 1e9
    assert float(t.step_s[0]) > float(base.step_s[0])
    parts = sum(float(np.asarray(getattr(t, k)).reshape(-1)[0]) for k in TIMING_PARTS)
    assert parts == pytest.approx(float(t.step_s[0]), rel=1e-9)


def test_host_memory_limits_are_one_line(run_cli):
    code, _, err = run_cli("estimate", "--model", "gpt3-175b", "--gpu", "a100-80gb",
                           "--gpus", "4", "--system", "dgx-station-a100", "--zero", "3",
                           "--offload", "optimizer,params,grads")
    assert code == 2 and err.count("\n") == 1 and "GiB of host memory per GPU" in err
    code, _, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "ascend-910b",
                           "--gpus", "8", "--zero", "1", "--offload")
    assert code == 2 and err.count("\n") == 1 and "no ram_gib" in err


def test_bad_sharding_and_offload_input(run_cli):
    for argv, words in ((["--zero", "3", "--shard-group", "3"], "does not divide"),
                        (["--shard-group", "4"], "add --zero"),
                        (["--zero", "1", "--offload", "params"], "needs --zero 3"),
                        (["--zero", "1", "--offload", "grads"], "needs --zero 2"),
                        (["--offload", "gpu"], "unknown offload part")):
        code, _, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "h100-sxm",
                               "--gpus", "8", *argv)
        assert code == 2 and err.count("\n") == 1 and words in err, (argv, err)
    assert offload_code(True) == O_OPTIMIZER and offload_code(False) == 0
    assert offload_code("activations,optimizer") == O_OPTIMIZER | O_ACTIVATIONS
    with pytest.raises(ConfigError):
        offload_code(3)


def test_plan_offloads_when_nothing_else_fits():
    """Llama 2 70B on 8 A100-80GB: nothing fits in GPU memory without offload (the plan of
    gpuplan 0.1 said NO FEASIBLE PLAN); now the winner offloads, and the tally names the
    variants it did not need."""
    res = api.plan(model="llama2-70b", tokens="10B", gpu="a100-80gb", max_gpus=8)
    assert res.plans, "a plan was found"
    best = res.plans[0]
    assert best.gpus == 8 and best.offload_parts
    reasons = {e.reason for e in res.excluded}
    assert "out_of_memory" in reasons
    est = api.estimate(model="llama2-70b", gpu="a100-80gb", gpus=8, zero=best.zero,
                       micro_batch=best.micro_batch, recompute=best.recompute,
                       offload=",".join(best.offload_parts), tokens="10B")
    assert est.fits
    assert est.tokens_per_s == pytest.approx(best.tokens_per_s, rel=1e-9)


def test_plan_tries_hsdp_and_op_recompute():
    res = api.plan(model="llama3-70b", tokens="15T", deadline_days=90)
    reasons = {e.reason for e in res.excluded}
    assert {"hsdp_unneeded", "op_recompute_unneeded", "offload_unneeded"} <= reasons
    assert np.isfinite(res.plans[0].cost_usd)


def test_hsdp_pruning_keeps_the_fastest_layout(monkeypatch):
    """The HSDP copies `plan` skips (variants.hsdp_twins: compute + memory + overhead +
    optimizer time of the twin already slower than the fastest row of the GPU count) could not
    have won: with every HSDP copy timed, each count's fastest row is the same, and no timed
    copy runs faster than its twin's floor (the bound the pruning relies on; 1e-9 relative
    for float64 round-off, as variants.FLOOR_MARGIN)."""
    from gpuplan.catalog import load_catalog
    from gpuplan.search import plan as planmod
    from gpuplan.search import variants
    from gpuplan.search.evaluate import site_from_catalog, time_per_step
    from gpuplan.search.grid import model_axes
    from gpuplan.search.platforms import Filters, group_by_physics, select_platforms

    cat = load_catalog()
    req = planmod.Request(model=cat.model("llama3-8b"), tokens=1e12, seq_len=2048,
                          global_batch=256, site=site_from_catalog(cat))
    plats, _ = select_platforms(cat, Filters(gpus=("h100-sxm",), acquisition="own"))
    group = next(iter(group_by_physics(plats).values()))
    counts = np.array([64, 128, 256])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    table = planmod.layout_table(req, counts, axes, group[0].accelerator.memory_bytes)

    def run(twins):
        monkeypatch.setattr(variants, "hsdp_twins", twins)
        tally = planmod.Tally()
        best = planmod.evaluate_group(req, cat, group, counts, axes, tally, table)
        return best, tally

    floors = {}

    def every_busy_twin(g):
        floors.update(zip(g["row"].tolist(), g["floor_s"].tolist(), strict=True))
        return g["row"][(g["row"] >= 0) & (g["dp_exposed"] > 0)]  # -1: not a grid row

    pruned, t1 = run(variants.hsdp_twins)
    full, t2 = run(every_busy_twin)
    assert t1.total["hsdp_unneeded"] > t2.total["hsdp_unneeded"]  # the floor prunes some
    assert t1.physically_feasible < t2.physically_feasible
    for k in ("gpus", "tokens_per_s", "shard_group", "tp", "pp", "zero", "micro_batch"):
        assert np.array_equal(pruned[k], full[k]), k
    ex = table.extra
    hsdp = np.flatnonzero((ex["kind"] == 0) & np.isin(ex["twin"], list(floors)))
    clock = planmod._clock(req, cat, group[0])  # the hardware and stack the plan timed with
    lay = replace(planmod._layout({k: v[hsdp] for k, v in ex.items()}, req), stack=clock.stack)
    t = time_per_step(req.model, lay, clock.hw, clock.eff)
    floor = np.array([floors[int(r)] for r in ex["twin"][hsdp]])
    assert hsdp.size and np.all(np.asarray(t.step_s) >= floor * (1 - 1e-9))
