"""Uneven pipeline stages (issue #11): the vectorized split against a reference loop, the stages
memory and timing use, published layouts that must be accepted, bad input, and `plan`'s search
over uneven pp, vpp and cp with an exact exclusion tally."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuplan import api
from gpuplan.errors import ConfigError
from gpuplan.estimators.memory import memory_breakdown, stage_breakdowns
from gpuplan.estimators.shapes import most_params, pipeline_stages, stage_layers
from gpuplan.rules import first_broken
from gpuplan.spec import Layout, ModelSpec
from gpuplan.validation import load_runs, run_spec

NO_OVERHEAD = dict(runtime_overhead_bytes=0.0, fragmentation=0.0)


def reference_split(L: int, pp: int, vpp: int, first: int = 0, last: int = 0) -> list[int]:
    """Decoder layers of every rank, by a plain loop over (virtual) stages: even when pp*vpp
    divides L; else L + 2 units (embedding and loss count as one layer each) over pp*vpp
    virtual stages, the first ones one more, stage v on rank v % pp; explicit ends leave the
    rest to the other ranks, the earlier ones one more."""
    if first or last:
        ranks = [0] * pp
        others = [k for k in range(pp) if not (k == 0 and first) and not (k == pp - 1 and last)]
        rest = L - first - last
        for j, k in enumerate(others):
            ranks[k] = rest // len(others) + (1 if j < rest % len(others) else 0)
        if first:
            ranks[0] = first
        if last:
            ranks[pp - 1] = last
        return ranks
    S = pp * vpp
    if L % S == 0:
        return [L // pp] * pp
    units = [(L + 2) // S + (1 if v < (L + 2) % S else 0) for v in range(S)]
    units[0] -= 1  # the embedding
    units[-1] -= 1  # the loss
    ranks = [0] * pp
    for v, u in enumerate(units):
        ranks[v % pp] += u
    return ranks


def model(layers: int, **kw) -> ModelSpec:
    base = dict(id="m", name="m", layers=layers, hidden=512, heads=8, kv_heads=8, ffn=2048,
                vocab=32000)
    return ModelSpec(**{**base, **kw})


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 130), st.integers(1, 40), st.sampled_from([1, 2, 3, 4, 8]))
def test_vectorized_split_matches_the_reference_loop(L, pp, vpp):
    """The formulas (first, second, last rank) equal the loop's; the ranks add up to the
    layers, none is negative, the middle ones hold a layer at least, and the second rank is
    the busiest middle one."""
    lay = Layout(pp=pp, vpp=vpp)
    m = model(L)
    if first_broken(lay, m) is not None:
        return
    ref = reference_split(L, pp, vpp)
    first, second, last = (float(x) for x in stage_layers(m, pp, vpp))
    assert sum(ref) == L and min(ref) >= 0
    assert (first, last) == (ref[0], ref[-1])
    if pp >= 3:
        assert min(ref[1:-1]) >= 1 and second == max(ref[1:-1]) == ref[1]
    else:
        assert second == 0.0


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 130), st.integers(2, 24), st.integers(0, 130), st.integers(0, 130))
@example(5, 4, 0, 0)  # the default split leaves the last stage no decoder layer
def test_explicit_first_and_last_match_the_reference_loop(L, pp, first, last):
    lay = Layout(pp=pp, first_stage_layers=first, last_stage_layers=last)
    m = model(L)
    if first_broken(lay, m) is not None:
        with pytest.raises(ConfigError):
            lay.check(m)
        return
    ref = reference_split(L, pp, 1, first, last)
    got = [float(x) for x in stage_layers(m, pp, 1, first, last)]
    # the default split (first = last = 0) counts embedding and loss as a layer each, so with
    # pp close to the layer count an end stage may hold no decoder layer (L 5, pp 4: 1,2,2,0),
    # as test_vectorized_split_matches_the_reference_loop allows; explicit ends leave every stage
    # one at least (but for pp 2 with both ends given)
    least = 0 if not (first or last) else 1 - (pp == 2 and bool(first) and bool(last))
    assert sum(ref) == L and min(ref) >= least
    assert (got[0], got[2]) == (ref[0], ref[-1])
    if pp >= 3:
        assert got[1] == max(ref[1:-1]) == ref[1]


def test_a_grid_and_a_scalar_give_the_same_split():
    """The table lookup a large grid uses equals the formulas a single layout uses."""
    m = model(126)
    pp = np.tile(np.arange(1, 33), 200)
    vpp = np.repeat([1, 2, 4, 8], pp.size // 4)
    grid = stage_layers(m, pp, vpp)
    for i in range(0, pp.size, 97):
        one = stage_layers(m, int(pp[i]), int(vpp[i]))
        assert [float(g[i]) for g in grid] == [float(x) for x in one]


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 130), st.integers(2, 32), st.sampled_from([1, 2, 4]))
def test_busiest_stage_holds_at_least_the_even_share(L, pp, vpp):
    """Parameters: the busiest rank holds at least the mean (all parameters / pp); memory:
    the reported GPU is the largest of the three ranks and no less than any of them."""
    m = model(L)
    lay = Layout(pp=pp, vpp=vpp, global_batch=64)
    if first_broken(lay, m) is not None:
        return
    placed = pipeline_stages(m, 1, pp, 1, vpp)
    assert float(most_params(*placed)) >= m.total_params() / pp * (1 - 1e-12)
    bd = memory_breakdown(m, lay, **NO_OVERHEAD)
    totals = [float(b.total) for b in stage_breakdowns(m, lay, **NO_OVERHEAD)]
    assert float(bd.total) == max(totals)


def test_interleaved_last_stage_holds_more_than_one_micro_batch():
    """Megatron-LM's interleaved warm-up: the last rank holds (pp*vpp - pp + 1)/vpp
    micro-batches of its layers, not one."""
    from gpuplan.estimators.memory import inflight_microbatches

    assert float(inflight_microbatches(8, 1, 64, 7)) == 1.0
    assert float(inflight_microbatches(8, 4, 64, 7)) == pytest.approx((32 - 8 + 1) / 4)
    assert float(inflight_microbatches(8, 4, 64, 0)) == pytest.approx(8 + 7 / 4)
    assert float(inflight_microbatches(8, 1, 64, 1)) == 7.0


# --- published layouts -------------------------------------------------------------------------

@pytest.mark.parametrize("kw, split", [
    (dict(model="llama3-405b", gpus=16384, tp=8, pp=16, global_batch=2048), (7, 8, 7)),
    (dict(model="llama3-405b", gpus=1024, tp=8, pp=8, vpp=8, cp=2, global_batch=512,
          precision="fp8"), (15, 16, 15)),
    (dict(model="bloom-176b", gpus=384, tp=4, pp=12, global_batch=2048, micro_batch=2,
          recompute="full"), (5, 6, 5)),
    (dict(model="deepseek-v3", gpus=2048, pp=16, ep=64, global_batch=15360, seq_len=4096,
          precision="fp8", recompute="selective"), (3, 4, 2)),
])
def test_published_uneven_layouts_are_accepted(cat, kw, split):
    """Issue 11: the layouts production recipes run are estimated, with a finite step."""
    gpu = "h800" if kw["model"] == "deepseek-v3" else "a100-80gb" if "bloom" in kw["model"] \
        else "h100"
    r = api.estimate(gpu=gpu, zero=1, catalog=cat, **kw)
    assert 0 < r.step_time_s < float("inf") and 0 < r.mfu < 1
    m = cat.model(kw["model"])
    got = stage_layers(m, kw["pp"], kw.get("vpp", 1))
    assert tuple(int(x) for x in got) == split


def test_every_known_published_run_is_expressible(cat):
    """Every run of the dataset whose layout is known passes the layout rules."""
    rows = [r for r in load_runs() if r.get("status", "known") == "known"]
    refused = []
    for row in rows:
        rs = run_spec(cat, row)
        problem = first_broken(rs.layout, rs.model, int(row["gpus"]))
        if problem:
            refused.append((row["id"], problem))
    assert len(rows) > 200 and not refused


def test_uneven_stages_slow_the_step_and_the_bubble_follows(cat):
    """126 layers over 16 stages: the slowest stage holds 8 layers (the fixed per-layer time
    counts 8 per micro-batch, not 126/16 = 7.875); the bubble stays (pp - 1)/(m * vpp) of the
    busy time, so it grows with the slowest stage."""
    from gpuplan.estimators import comm
    from gpuplan.estimators.timing import step_time
    from gpuplan.search.hardware import efficiency_for, hardware_for

    def one(x):
        return float(np.asarray(x).reshape(-1)[0])

    m = cat.model("llama3-405b")
    hw = hardware_for(cat, "h100-sxm", precision="bf16")
    eff = efficiency_for(cat, ["h100"])
    lay = Layout(tp=8, pp=16, dp=8, global_batch=256, seq_len=8192)
    t = step_time(m, lay, hw, eff)
    micro = 256 / 8
    # overhead_s also holds the per-step scalar syncs, which sit outside the pipeline's busy
    # time (timing._step_sync_s: 2 tree all-reduces over all 1,024 GPUs)
    sync = 2 * comm.tree_allreduce_latency_s(1024, one(hw.scale_out_latency_s))
    layers = one(t.overhead_s) - sync
    assert layers == pytest.approx(one(eff.layer_overhead_s) * 8 * micro, rel=1e-9)
    busy = layers + sum(one(getattr(t, k)) for k in ("compute_s", "memory_s", "tp_comm_s",
                                                     "cp_comm_s", "ep_comm_s"))
    assert one(t.bubble_s) == pytest.approx(15 / micro * busy, rel=1e-9)


@pytest.mark.parametrize("kw, message", [
    (dict(pp=4, first_stage_layers=200), "must be from 0 (the default split) to the model's "
     "126 layers"),
    (dict(pp=4, first_stage_layers=60, last_stage_layers=65), "leave 1 of the model's 126 "
     "layers for the other 2 pipeline stages"),
    (dict(pp=2, first_stage_layers=60, last_stage_layers=60), "must add up to the model's 126"),
    (dict(pp=1, first_stage_layers=60), "need pipeline parallelism"),
    (dict(pp=1, vpp=2), "--vpp 2 interleaves pipeline stages: it needs --pp 2 or more"),
    (dict(pp=64, vpp=4), "pipeline stages are more than the model's 126 layers"),
])
def test_bad_stage_sizes_are_one_clear_line(cat, kw, message):
    with pytest.raises(ConfigError) as err:
        api.estimate(gpu="h100", model="llama3-405b", tp=1, catalog=cat, **kw)
    assert message in str(err.value) and "\n" not in str(err.value)


# --- plan --------------------------------------------------------------------------------------

def test_plan_searches_uneven_pp_and_vpp_with_an_exact_tally(cat):
    """pp values that do not divide the layers and vpp > 1 are searched; every candidate of
    the grid and every variant (HSDP, op recompute, offload copies of grid rows) is either
    tallied under one reason or physically feasible (nothing lost, nothing counted twice)."""
    from gpuplan.search import plan as planmod
    from gpuplan.search.grid import model_axes

    req = planmod.Request(model=cat.model("llama3-405b"), tokens=15e12, seq_len=8192,
                          global_batch=2048, site=_site(cat))
    counts = np.array([128, 256, 512])
    axes = model_axes(req.model, req.seq_len, counts=counts)
    assert 16 in axes.pp and 126 % 16 and axes.vpp == (1, 2, 4)
    plats = _h100_platforms(cat)
    tally = planmod.Tally()
    smallest = min(p.accelerator.memory_bytes for p in plats)
    table = planmod.layout_table(req, counts, axes, smallest)
    planmod.evaluate_group(req, cat, plats, counts, axes, tally, table)
    variants = table.variant_count(counts)
    assert set(np.unique(table.extra["kind"])) == {0, 1, 2}  # all three kinds are candidates
    assert sum(tally.total.values()) + tally.physically_feasible == (
        counts.size * axes.size + variants)
    assert tally.total["interleave_microbatches"] > 0
    assert tally.total["op_recompute_unneeded"] + tally.total["offload_unneeded"] > 0
    assert ((table.g["pp"] == 16) & (table.g["vpp"] > 1)).any()


def _site(cat):
    from gpuplan.search.evaluate import site_from_catalog

    return site_from_catalog(cat)


def _h100_platforms(cat):
    from gpuplan.search.platforms import Filters, group_by_physics, select_platforms

    plats, _ = select_platforms(cat, Filters(gpus=("h100-sxm",), acquisition="own"))
    return next(iter(group_by_physics(plats).values()))
