"""Hypothesis properties of the memory model: sharding never adds memory, recompute ordering,
linearity in the micro-batch, parts summing to the total, vectorized == scalar."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuplan.estimators.memory import layer_activation_bytes, memory_breakdown, stage_breakdowns
from gpuplan.spec import R_FULL, R_NONE, R_SELECTIVE, Layout, ModelSpec

OVERHEAD = dict(runtime_overhead_bytes=2.0**30, fragmentation=0.05)
REL = 1e-9  # float64 round-off only: the comparisons below are exact in real arithmetic


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    heads = draw(st.sampled_from([8, 16, 32]))
    kv = draw(st.sampled_from([1, 2, 4, 8, heads]))
    hidden = heads * draw(st.sampled_from([32, 64, 128]))
    moe = draw(st.booleans())
    return ModelSpec(
        id="h", name="h", layers=draw(st.sampled_from([8, 16, 32])), hidden=hidden,
        heads=heads, kv_heads=kv, ffn=hidden * draw(st.sampled_from([2, 3, 4])),
        vocab=draw(st.sampled_from([1000, 32000, 128000])),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])),
        tied_embeddings=draw(st.booleans()),
        experts=8 if moe else 0, experts_per_token=2 if moe else 0,
        dense_layers=draw(st.sampled_from([0, 1])) if moe else 0,
    )


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    mb = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    return Layout(
        tp=draw(st.sampled_from([1, 2, 4, 8])), pp=draw(st.sampled_from([1, 2, 4, 8])), dp=dp,
        cp=draw(st.sampled_from([1, 2])), ep=1, vpp=1, zero=draw(st.integers(0, 3)),
        micro_batch=mb, global_batch=mb * dp * draw(st.sampled_from([1, 2, 8, 32])),
        seq_len=draw(st.sampled_from([512, 2048, 8192])), recompute=draw(st.integers(0, 2)),
        precision=draw(st.integers(0, 3)), optimizer=draw(st.integers(0, 2)),
        sp=draw(st.booleans()), flash=draw(st.booleans()), offload=draw(st.booleans()),
        dropout=draw(st.booleans()),
    )


def total(model: ModelSpec, lay: Layout) -> float:
    return float(memory_breakdown(model, lay, **OVERHEAD).total)


def not_more(a: float, b: float) -> bool:
    return a <= b * (1 + REL)


@settings(max_examples=150, deadline=None)
@given(models(), layouts(), st.sampled_from(["tp", "pp", "dp", "cp"]))
def test_raising_a_parallel_degree_never_raises_memory(model, lay, knob):
    """Doubling tp, pp, dp or cp (global batch fixed, 1F1B schedule) never raises the per-GPU
    total. Interleaved schedules are excluded: there raising pp really does add activations
    (pp * (1 + (pp - 1)/(pp * vpp)) micro-batches in flight). For pp, dropout is off: with it,
    each of the pp in-flight micro-batches on the first stage also holds an embedding dropout
    mask (s*b*h bytes), which can outweigh one small layer's weights (a real effect). For dp
    and cp under ZeRO-3, the shard group must already hold 2 or more GPUs: going from 1 to 2
    starts the parameter gathers, whose buffers (two layers, one layer of gradients, the root
    unit) can outweigh what sharding saves on a small model -- the same real effect as
    test_memory.py::test_zero3_can_cost_more_than_zero2_on_two_gpus. The same holds for ZeRO-2:
    going from 1 to 2 ranks starts the gradient reduce bucket (one layer's unsharded
    gradients), which can outweigh halving a small stage's gradients. For pp, the layers must
    be alike (no dense layers before MoE ones): rank r of a 1F1B pipeline holds pp - r
    micro-batches, so with one small dense layer on the first stage the busiest rank can become
    the second one, e.g. 16 layers at pp 16 hold 15 MoE layers' activations on rank 1 against
    14 (rank 1) or 8 dense + 8 MoE (rank 0) at pp 8 -- a real effect of the layer mix."""
    if knob == "pp":
        lay = replace(lay, dropout=False)
        assume(not (model.is_moe and model.dense_layers > 0))
    if knob in ("dp", "cp") and lay.zero >= 2 and lay.dp * lay.cp == 1:
        lay = replace(lay, **{knob: 2}, global_batch=lay.global_batch * (2 if knob == "dp" else 1))
    bigger = replace(lay, **{knob: getattr(lay, knob) * 2})
    assume(bigger.pp <= model.layers)  # more stages than layers is not a layout (rules.py)
    assert not_more(total(model, bigger), total(model, lay))


@settings(max_examples=100, deadline=None)
@given(models(), layouts())
def test_raising_ep_never_raises_memory(model, lay):
    """Expert parallelism (MoE models, ep dividing dp) never raises the per-GPU total."""
    if not model.is_moe or lay.dp < 2:
        return
    a, b = replace(lay, ep=1), replace(lay, ep=2)
    assert not_more(total(model, b), total(model, a))


@settings(max_examples=150, deadline=None)
@given(models(), layouts())
def test_raising_zero_stage_never_raises_memory(model, lay):
    """ZeRO 0 -> 1 never raises memory. 1 -> 2 raises no stage's total by more than its
    gradient bucket (one layer's unsharded gradients, alive before their reduce-scatter), and
    not at all for a dense model whose stages hold at least 2 layers (then the halved gradients
    save at least one layer's worth). 2 -> 3 never raises memory when the shard group dp*cp is
    at least 8 and a stage holds at least 8 layers; below that the gathered buffers (two
    layers and the root unit) can outweigh the savings, a real effect tested in
    test_memory.py::test_zero3_can_cost_more_than_zero2_on_two_gpus."""
    assert not_more(total(model, replace(lay, zero=1)), total(model, replace(lay, zero=0)))
    one = stage_breakdowns(model, replace(lay, zero=1), **OVERHEAD)
    two = stage_breakdowns(model, replace(lay, zero=2), **OVERHEAD)
    for a, b in zip(one, two, strict=True):
        bucket = (1 + OVERHEAD["fragmentation"]) * float(b.grad_bucket)
        assert not_more(float(b.total) - bucket, float(a.total))
    if not model.is_moe and model.layers // lay.pp >= 2:
        assert not_more(total(model, replace(lay, zero=2)), total(model, replace(lay, zero=1)))
    if lay.dp * lay.cp >= 8 and model.layers // lay.pp >= 8:
        root_to_layer = model.vocab * model.hidden / model.layer_params(model.is_moe)
        if root_to_layer <= 8:  # the root unit is at most 8 layers' worth
            assert not_more(total(model, replace(lay, zero=3)), total(model, replace(lay, zero=2)))


@settings(max_examples=150, deadline=None)
@given(models(), layouts())
def test_recompute_full_le_selective_le_none(model, lay):
    """Full recompute <= selective <= none, for the per-layer stored bytes and the GPU total."""
    t = [total(model, replace(lay, recompute=r)) for r in (R_FULL, R_SELECTIVE, R_NONE)]
    assert not_more(t[0], t[1]) and not_more(t[1], t[2])
    kw = dict(seq_len=lay.seq_len, micro_batch=lay.micro_batch, tp=lay.tp, cp=lay.cp, sp=lay.sp,
              flash=lay.flash, precision=lay.precision, dropout=lay.dropout)
    per = [float(layer_activation_bytes(model, recompute=r, **kw))
           for r in (R_FULL, R_SELECTIVE, R_NONE)]
    assert per[0] <= per[1] <= per[2]


@settings(max_examples=150, deadline=None)
@given(models(), layouts(), st.sampled_from([2, 3, 4]))
def test_activations_linear_in_micro_batch(model, lay, k):
    """Activations and logits scale exactly with the micro-batch when the number of micro-batches
    per step is held fixed (global batch scaled too), on the same pipeline stage: with pp > 1
    a larger micro-batch can move the peak from the last stage to the first, so stages are
    compared like for like (always, when pp == 1). The per-layer bytes are linear everywhere."""
    a = memory_breakdown(model, lay, **OVERHEAD)
    b = memory_breakdown(model, replace(lay, micro_batch=lay.micro_batch * k,
                                        global_batch=lay.global_batch * k), **OVERHEAD)
    if lay.pp == 1:
        assert int(a.stage) == int(b.stage) == 0
    if int(a.stage) == int(b.stage):
        assert float(b.activations) == pytest.approx(k * float(a.activations), rel=REL)
        assert float(b.logits) == pytest.approx(k * float(a.logits), rel=REL)
    kw = dict(seq_len=lay.seq_len, tp=lay.tp, cp=lay.cp, sp=lay.sp, flash=lay.flash,
              recompute=lay.recompute, precision=lay.precision, dropout=lay.dropout)
    for moe in (False, True):
        one = layer_activation_bytes(model, micro_batch=lay.micro_batch, moe=moe, **kw)
        more = layer_activation_bytes(model, micro_batch=lay.micro_batch * k, moe=moe, **kw)
        assert float(more) == pytest.approx(k * float(one), rel=REL)


@settings(max_examples=150, deadline=None)
@given(models(), layouts())
def test_total_is_sum_of_parts(model, lay):
    bd = memory_breakdown(model, lay, **OVERHEAD)
    assert float(bd.total) == pytest.approx(sum(float(v) for v in bd.parts().values()), rel=REL)
    s = bd.summary()
    assert s["total"] == pytest.approx(sum(v for k, v in s.items() if k != "total"), rel=REL)


@settings(max_examples=20, deadline=None)
@given(models(), st.lists(layouts(), min_size=2, max_size=12))
def test_vectorized_equals_elementwise(model, lays):
    """One call over arrays of configurations gives exactly the per-configuration results."""
    names = [f for f in Layout.__dataclass_fields__]
    grid = Layout(**{f: np.array([getattr(x, f) for x in lays]) for f in names})
    vec = memory_breakdown(model, grid, **OVERHEAD)
    for i, lay in enumerate(lays):
        one = memory_breakdown(model, lay, **OVERHEAD)
        for name, v in one.parts().items():
            assert float(np.asarray(vec.parts()[name])[i]) == float(v), name
        assert int(np.asarray(vec.stage)[i]) == int(one.stage)


def test_blocked_evaluation_equals_one_block(monkeypatch):
    """Large grids are evaluated in blocks of CHUNK configurations; a 2-D broadcast grid cut into
    blocks of 7 gives bit-identical results to one block, in the broadcast shape."""
    from gpuplan.estimators import memory

    model = ModelSpec(id="m", name="m", layers=16, hidden=1024, heads=16, kv_heads=4, ffn=2816,
                      vocab=32000, mlp="swiglu")
    lay = Layout(tp=np.array([1, 2, 4, 8])[:, None], dp=np.array([1, 2, 4, 8, 16])[None, :],
                 pp=2, zero=np.array([0, 3, 1, 2])[:, None], global_batch=64,
                 recompute=np.array([0, 1, 2, 0, 1])[None, :])
    whole = memory._block(model, lay, **OVERHEAD)
    monkeypatch.setattr(memory, "CHUNK", 7)
    blocked = memory.memory_breakdown(model, lay, **OVERHEAD)
    assert np.shape(blocked.total) == (4, 5)
    for name in ("weights", "gradients", "optimizer", "activations", "logits", "gathered",
                 "grad_accum", "overhead", "offloaded", "total", "stage"):
        np.testing.assert_array_equal(getattr(blocked, name),
                                      np.broadcast_to(getattr(whole, name), (4, 5)))


def _state(bd) -> float:
    """Sharded model state on a GPU: weights, gradients, optimizer (on GPU or offloaded) and
    the fp32 accumulation buffer."""
    return float(bd.weights + bd.gradients + bd.optimizer + bd.offloaded + bd.grad_accum)


@settings(max_examples=150, deadline=None)
@given(models(), layouts(), st.sampled_from(["dp", "cp"]))
def test_larger_shard_group_never_raises_sharded_state(model, lay, knob):
    """Issue 10: doubling the shard group dp*cp (same ZeRO stage, global batch kept a multiple)
    never raises any stage's sharded state per GPU. (The ZeRO-3 gather buffers are not state:
    they start when the group first exceeds 1, see test_raising_a_parallel_degree...)"""
    bigger = replace(lay, **{knob: getattr(lay, knob) * 2},
                     global_batch=lay.global_batch * (2 if knob == "dp" else 1))
    for a, b in zip(stage_breakdowns(model, lay, **OVERHEAD),
                    stage_breakdowns(model, bigger, **OVERHEAD), strict=True):
        assert not_more(_state(b), _state(a))


@settings(max_examples=150, deadline=None)
@given(models(), layouts())
def test_full_recompute_never_raises_activation_memory(model, lay):
    """Issue 10: on every stage, full recompute's activations (stored layer inputs plus one
    layer recomputed in backward) never exceed selective's or none's."""
    full, sel, none = (stage_breakdowns(model, replace(lay, recompute=r), **OVERHEAD)
                       for r in (R_FULL, R_SELECTIVE, R_NONE))
    for f, s, n in zip(full, sel, none, strict=True):
        assert not_more(float(f.activations), float(s.activations))
        assert not_more(float(s.activations), float(n.activations))
