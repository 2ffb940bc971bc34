"""Buffers by software stack, and allocated vs reserved (estimators/buffers.py, #11)."""

import numpy as np
import pytest

from gpuplan import api
from gpuplan.catalog import load_catalog
from gpuplan.estimators.memory import memory_breakdown
from gpuplan.spec import BF16, FP8, R_FULL, R_NONE, STACKS, Layout
from gpuplan.units import GiB

MEGATRON, TORCHTITAN, FSDP = (STACKS.index(s) for s in ("megatron", "torchtitan", "fsdp"))
KW = dict(runtime_overhead_bytes=1.5 * GiB, fragmentation=0.1)


@pytest.fixture(scope="module")
def model():
    return load_catalog().model("llama3-8b")


def test_every_stack_has_a_sourced_row():
    rows = load_catalog().table("memory")
    assert sorted(rows) == sorted(STACKS)
    assert all(r["source"] and r["as_of"] for r in rows.values())


def test_megatron_keeps_fp32_main_grad_even_with_one_microbatch(stacks, model):
    # Megatron-LM dist-opt docs: bf16 params + fp32 grads = 6 + 12/d bytes per parameter
    lay = Layout(dp=8, zero=1, global_batch=8, stack=MEGATRON)
    bd = memory_breakdown(model, lay, stacks=stacks, **KW)
    params = model.total_params()
    state = float(bd.weights + bd.gradients + bd.grad_accum + bd.optimizer)
    assert state == pytest.approx(params * (6 + 12 / 8), rel=1e-12)


def test_fsdp_reduces_in_bf16_without_a_buffer(stacks, model):
    lay = Layout(dp=8, zero=1, global_batch=8, stack=FSDP)
    assert float(memory_breakdown(model, lay, stacks=stacks, **KW).grad_accum) == 0.0


def test_torchtitan_reduce_copy_in_bucket(stacks, model):
    lay = Layout(dp=8, zero=3, global_batch=8, stack=np.array([FSDP, TORCHTITAN]))
    b = memory_breakdown(model, lay, stacks=stacks, **KW).grad_bucket
    assert float(b[1]) == pytest.approx(3 * float(b[0]), rel=1e-12)  # 2 B bf16 + 4 B fp32 copy


def test_fp8_copies_follow_the_stack(stacks, model):
    lay = Layout(dp=1, precision=FP8, stack=np.array([MEGATRON, TORCHTITAN]))
    bd = memory_breakdown(model, lay, stacks=stacks, **KW)
    # Transformer Engine: fp8 weight + transpose, 2 B/param of the decoder layers; the root
    # (untied embedding and LM head, final norm) is no TE module: no copies; torchao: none
    root = 2 * model.vocab * model.hidden + model.hidden
    assert float(bd.fp8_weights[0]) == pytest.approx(2 * (model.total_params() - root),
                                                     rel=1e-12)
    assert float(bd.fp8_weights[1]) == 0.0
    assert float(bd.weights[0]) == pytest.approx(2 * model.total_params(), rel=1e-12)


def test_moe_token_buffers_only_on_moe(stacks):
    cat = load_catalog()
    lay = Layout(dp=8, ep=8, global_batch=8, stack=MEGATRON, seq_len=4096)
    moe = memory_breakdown(cat.model("mixtral-8x7b"), lay, stacks=stacks, **KW)
    dense = memory_breakdown(cat.model("llama3-8b"), lay, stacks=stacks, **KW)
    m = cat.model("mixtral-8x7b")
    assert float(moe.moe_tokens) == pytest.approx(2 * 4096 * m.experts_per_token * m.hidden * 2)
    assert float(dense.moe_tokens) == 0.0


def test_allocated_reserved_total_and_buffers_sum(stacks, model):
    lay = Layout(tp=np.array([1, 2]), dp=4, zero=np.array([[1], [3]]), global_batch=64,
                 precision=np.array([BF16, FP8]), stack=np.array([[MEGATRON], [TORCHTITAN]]))
    bd = memory_breakdown(model, lay, stacks=stacks, **KW)
    parts = sum(np.asarray(v) for v in bd.parts().values())
    np.testing.assert_allclose(parts, bd.total, rtol=1e-12)
    # reserved holds the loss and the layer-backward phases both; allocated their max
    np.testing.assert_allclose(bd.reserved, (bd.allocated + bd.loss_overlap) * 1.1, rtol=1e-12)
    np.testing.assert_allclose(bd.total, bd.reserved + 1.5 * GiB, rtol=1e-12)
    s = bd.summary()
    other = s["total"] - s["weights"] - s["gradients"] - s["optimizer"] - s["activations"]
    np.testing.assert_allclose(sum(np.asarray(v) for v in bd.buffer_lines().values()),
                               other, rtol=1e-12)


def test_allocated_holds_the_larger_of_loss_and_layer_backward(stacks, model):
    """The loss's tensors are freed before the last layer's backward (and its recompute) builds
    its working set: allocated = the tensor parts - min(logits, working set); reserved keeps
    both (the caching allocator keeps the freed blocks). Full recompute: the working set is a
    whole layer's activations less its stored input; without recompute there is none."""
    full = memory_breakdown(model, Layout(recompute=R_FULL, global_batch=8), stacks=stacks, **KW)
    none = memory_breakdown(model, Layout(recompute=R_NONE, global_batch=8), stacks=stacks, **KW)
    for bd in (full, none):
        tensors = sum(float(v) for k, v in bd.parts().items() if k != "overhead")
        assert float(bd.reserved) == pytest.approx(1.1 * tensors, rel=1e-12)
        assert float(bd.allocated) == pytest.approx(tensors - float(bd.loss_overlap), rel=1e-12)
    assert float(none.loss_overlap) == 0.0
    assert 0.0 < float(full.loss_overlap) <= float(full.logits)


def test_estimate_json_explains_other():
    r = api.estimate(model="llama3-70b", gpu="h100", gpus=64, tp=8, pp=2, zero=1,
                     seq_len=4096, global_batch=512, recompute="selective")
    lines = dict((k, (v, d)) for k, v, d in r.memory_buffers)
    assert sum(v for v, _ in lines.values()) == pytest.approx(r.memory_gib.other, rel=1e-12)
    assert lines["grad_accum"][1] == "fp32"
    assert r.reserved_gib > r.allocated_gib
    bf16 = api.estimate(model="llama3-70b", gpu="h100", gpus=64, tp=8, pp=2, zero=1,
                        seq_len=4096, global_batch=512, recompute="selective",
                        grad_reduce_dtype="bf16")
    assert dict((k, v) for k, v, _ in bf16.memory_buffers)["grad_accum"] == 0.0


def test_torchtitan_loss_upcast_adds_one_fp32_logits_copy(stacks, model):
    # torchtitan's loss: cross_entropy(pred.float()): 4*s*b*V bytes more than Megatron's
    lay = Layout(dp=8, zero=3, global_batch=8, seq_len=4096, stack=np.array([MEGATRON,
                                                                              TORCHTITAN]))
    lg = memory_breakdown(model, lay, stacks=stacks, **KW).logits
    assert float(lg[1] - lg[0]) == pytest.approx(4.0 * 4096 * model.vocab, rel=1e-12)
