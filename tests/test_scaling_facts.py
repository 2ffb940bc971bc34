"""Scaling facts of issue #12 on the real catalog: data-parallel communication that responds to
micro-batches and to the network (one micro-batch per step on a thin network is slower than
four; halving the NIC slows a DP-heavy layout, not a TP-only one inside a node). The scaling
facts of issue #4 are in tests/test_timing.py (PCIe vs NVLink at tp 8, MFU falling past one
node on a thin fabric, FP8 faster than BF16 but less than 2x) and still hold there."""

from __future__ import annotations

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.estimators.timing import step_time
from gpuplan.search.hardware import efficiency_for, hardware_for
from gpuplan.spec import Layout

THIN = 12.5e9  # 100 Gb/s per GPU


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _per_gpu(cat, lay, nic=None, model="llama3-8b"):
    hw = hardware_for(cat, "h100-sxm", precision="bf16", scale_out_bytes_per_s=nic)
    t = step_time(cat.model(model), lay, hw, efficiency_for(cat, hw.family))
    return float(t.tokens_per_s[0]) / float(lay.gpus), t


def test_one_micro_batch_per_step_on_a_thin_network_is_slower_than_four(cat):
    """Llama 3 8B, global batch 1,024 x 4k tokens, ZeRO-1: 1,024 GPUs with one micro-batch each
    against 256 GPUs with four. The gradient reduction runs once per step and hides only behind
    the last micro-batch's backward, so with one micro-batch a quarter of the compute faces the
    same communication: per-GPU throughput must fall clearly (> 10%) on 100 Gb/s per GPU. Issue
    #12 cites about a third at 1,000-GPU scale; our figure is ~19% (stated, not fitted)."""
    one, t1 = _per_gpu(cat, Layout(dp=1024, global_batch=1024, micro_batch=1, seq_len=4096,
                                   zero=1), THIN)
    four, t4 = _per_gpu(cat, Layout(dp=256, global_batch=1024, micro_batch=1, seq_len=4096,
                                    zero=1), THIN)
    assert one < 0.9 * four
    # the reason is exposed DP time, not compute: compute per token is the same
    assert float(t1.dp_comm_s[0]) / float(t1.step_s[0]) > \
        2 * float(t4.dp_comm_s[0]) / float(t4.step_s[0])


def test_halving_the_nic_slows_a_dp_heavy_layout_not_tp_inside_a_node(cat):
    """Llama 3 8B, DP 128 over 16 nodes (one micro-batch): 400 -> 200 Gb/s per GPU is slower
    (by ~3%: > 2%), its exposed DP time about doubles (> 1.5x). TP 8 in one node never touches
    the NIC: identical step time (to 1e-12)."""
    dp_heavy = Layout(dp=128, global_batch=128, micro_batch=1, seq_len=4096, zero=1)
    full, tf = _per_gpu(cat, dp_heavy, 50e9)
    half, th = _per_gpu(cat, dp_heavy, 25e9)
    assert half < 0.98 * full
    assert float(th.dp_comm_s[0]) > 1.5 * float(tf.dp_comm_s[0])
    tp_only = Layout(tp=8, global_batch=8, micro_batch=1, seq_len=4096)
    a, _ = _per_gpu(cat, tp_only, 50e9, model="llama3-70b")
    b, _ = _per_gpu(cat, tp_only, 25e9, model="llama3-70b")
    assert b == pytest.approx(a, rel=1e-12)


def test_more_micro_batches_hide_dp_behind_the_same_last_backward(cat):
    """At fixed GPUs, the exposed DP time does not grow with more micro-batches (the window is
    one micro-batch's backward either way), so its share of the step falls."""
    shares = []
    for m in (1, 4, 16):
        _, t = _per_gpu(cat, Layout(dp=256, global_batch=256 * m, micro_batch=1, seq_len=4096,
                                    zero=1), THIN)
        shares.append(float(t.dp_comm_s[0]) / float(t.step_s[0]))
    assert shares[0] > shares[1] > shares[2]


def test_zero3_reduce_scatters_every_micro_batch(cat):
    """ZeRO-3/FSDP reduce-scatters each micro-batch's gradients (and gathers the parameters
    for each forward and backward), so on a thin network four micro-batches per step pay four
    times the exposed DP time of one (every part scales with m: 4x to 2%), while ZeRO-1's
    once-per-step reduction shrinks to under half its share of the step."""
    def dp_share(zero, gb):
        _, t = _per_gpu(cat, Layout(dp=256, global_batch=gb, micro_batch=1, seq_len=4096,
                                    zero=zero), THIN)
        return float(t.dp_comm_s[0]), float(t.dp_comm_s[0]) / float(t.step_s[0])
    (z3_one, z3_share1), (z3_four, z3_share4) = dp_share(3, 256), dp_share(3, 1024)
    assert z3_four == pytest.approx(4 * z3_one, rel=0.02)
    assert z3_share4 > 0.9 * z3_share1
    assert dp_share(1, 1024)[1] < 0.5 * dp_share(1, 256)[1]
