"""Step time, tokens/s, MFU (issue #4): invariants, the issue's scaling facts, hardware arrays."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.catalog import load_catalog
from gpuplan.errors import ConfigError
from gpuplan.estimators import comm
from gpuplan.estimators.compute import Efficiency
from gpuplan.estimators.timing import (
    BOTTLENECKS,
    TIMING_PARTS,
    TimingBreakdown,
    gpu_hours,
    step_time,
    training_days,
)
from gpuplan.search.hardware import (
    Platform,
    efficiency_for,
    hardware_for,
    hardware_table,
)
from gpuplan.spec import BF16, FP8, R_FULL, Hardware, Layout, ModelSpec


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


GPT7B = ModelSpec(id="g", name="g", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=16384,
                  vocab=50257)
EFF = Efficiency(matmul_max=0.6, half_dim=200.0, fp8_ratio=0.75, memory_fraction=0.7,
                 layer_overhead_s=5e-4, tp_overlap=0.15)
HW = Hardware(memory_bytes=80e9, memory_bandwidth_bytes_per_s=3.35e12, peak_flops=989e12,
              scale_up_bytes_per_s=450e9, scale_up_latency_s=2e-6, scale_up_domain=8,
              scale_out_bytes_per_s=50e9, scale_out_latency_s=4e-6, gpus_per_node=8,
              tdp_watts=700)

layouts = st.builds(
    lambda tp, pp, dp, cp, zero, rc, mb, m, vpp, seq: Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, zero=zero, recompute=rc, micro_batch=mb,
        global_batch=dp * mb * m, vpp=vpp, seq_len=seq),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 8, 64]),
    st.sampled_from([1, 2]), st.integers(0, 3), st.integers(0, 2), st.integers(1, 2),
    st.integers(1, 32), st.sampled_from([1, 2]), st.sampled_from([2048, 4096]))


@settings(max_examples=60, deadline=None)
@given(layouts)
def test_parts_sum_to_step_and_outputs_are_consistent(lay):
    t = step_time(GPT7B, lay, HW, EFF)
    total = sum(float(getattr(t, p)) for p in TIMING_PARTS)
    assert float(t.step_s) == pytest.approx(total, rel=1e-12)
    assert float(t.tokens_per_s) == pytest.approx(lay.global_batch * lay.seq_len / total)
    assert 0 < float(t.mfu) <= float(t.hfu) < 1
    assert BOTTLENECKS[int(t.bottleneck)] in BOTTLENECKS


@settings(max_examples=40, deadline=None)
@given(layouts, st.floats(1.0, 16.0))
def test_faster_links_and_chips_never_lower_throughput(lay, factor):
    base = float(step_time(GPT7B, lay, HW, EFF).tokens_per_s)
    for field in ("scale_out_bytes_per_s", "scale_up_bytes_per_s", "peak_flops",
                  "memory_bandwidth_bytes_per_s"):
        hw = replace(HW, **{field: getattr(HW, field) * factor})
        assert float(step_time(GPT7B, lay, hw, EFF).tokens_per_s) >= base * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(layouts, st.integers(2, 8))
def test_more_micro_batches_never_lower_throughput(lay, k):
    """step = m * (per micro-batch work) + (terms fixed in m), so tokens/s rises with m."""
    bigger = replace(lay, global_batch=lay.global_batch * k)
    assert float(step_time(GPT7B, bigger, HW, EFF).tokens_per_s) >= \
        float(step_time(GPT7B, lay, HW, EFF).tokens_per_s) * (1 - 1e-12)


def test_timing_parts_are_every_seconds_field_but_the_total():
    fields = {f for f in TimingBreakdown.__dataclass_fields__ if f.endswith("_s")}
    assert set(TIMING_PARTS) == fields - {"step_s", "tokens_per_s"}


def test_vectorized_grid_equals_scalar_evaluations():
    tp = np.array([1, 2, 4, 8])[:, None]
    dp = np.array([1, 8, 64])[None, :]
    grid = step_time(GPT7B, Layout(tp=tp, dp=dp, global_batch=512, micro_batch=1), HW, EFF)
    assert grid.step_s.shape == (4, 3)
    for i, t in enumerate([1, 2, 4, 8]):
        for j, d in enumerate([1, 8, 64]):
            one = step_time(GPT7B, Layout(tp=t, dp=d, global_batch=512, micro_batch=1), HW, EFF)
            assert float(one.step_s) == pytest.approx(grid.step_s[i, j], rel=1e-12)


def test_training_days_and_gpu_hours_by_hand():
    assert float(training_days(86400e6, 1e6)) == pytest.approx(1.0)
    assert float(gpu_hours(3600e3, 1e3, 64)) == pytest.approx(64.0)


# --- the scaling facts, on the real catalog -------------------------------------------


def _tps(cat, gpu, lay, model=GPT7B, **kw):
    hw = hardware_for(cat, gpu, precision="bf16", **kw)
    eff = efficiency_for(cat, hw.family)
    return float(step_time(model, lay, hw, eff).tokens_per_s[0])


def test_rtx4090_on_pcie_scales_worse_than_a100_on_nvlink_for_tp8(cat):
    """Scaling efficiency of tp=8 over one GPU (same micro-batches): PCIe 4.0 (32 GB/s per
    direction) against NVLink 3 (300 GB/s) -- the 4090 must lose clearly more (by > 20%).
    Micro-batches of 4 x 4096 tokens keep the fixed per-layer overhead small, so the gap is
    the link's."""
    one = Layout(tp=1, global_batch=32, micro_batch=4, seq_len=4096)
    tp8 = Layout(tp=8, global_batch=32, micro_batch=4, seq_len=4096)
    eff = {g: _tps(cat, g, tp8) / (8 * _tps(cat, g, one)) for g in ("rtx-4090", "a100-80gb")}
    assert eff["rtx-4090"] < eff["a100-80gb"] < 1.0
    assert eff["rtx-4090"] < 0.8 * eff["a100-80gb"]  # a clear gap, not a rounding difference


def test_mfu_falls_as_dp_grows_past_one_node_on_a_thin_fabric(cat):
    """H100 nodes sharing one 100 Gb/s NIC per 8 GPUs (1.5625 GB/s per GPU), weak scaling with
    4 micro-batches per replica: MFU drops once DP leaves the node, and keeps not rising."""
    thin = 12.5e9 / 8
    mfu = []
    for dp in (8, 16, 32, 64):
        hw = hardware_for(cat, "h100-sxm", precision="bf16", scale_out_bytes_per_s=thin)
        lay = Layout(dp=dp, global_batch=4 * dp, micro_batch=1, seq_len=4096, zero=0)
        mfu.append(float(step_time(cat.model("llama3-8b"), lay, hw,
                                   efficiency_for(cat, hw.family)).mfu[0]))
    assert mfu[1] < 0.8 * mfu[0]
    assert mfu[3] <= mfu[2] <= mfu[1]


def test_fp8_on_h100_is_faster_than_bf16_but_less_than_twice(cat):
    m = cat.model("llama3-70b")
    lay = dict(tp=8, pp=1, dp=8, global_batch=256, micro_batch=1, seq_len=8192,
               recompute=R_FULL)
    steps = {}
    for prec, code in (("bf16", BF16), ("fp8", FP8)):
        hw = hardware_for(cat, "h100-sxm", precision=prec)
        steps[prec] = float(step_time(m, Layout(**lay, precision=code), hw,
                                      efficiency_for(cat, hw.family)).step_s[0])
    assert 1.0 < steps["bf16"] / steps["fp8"] < 2.0


@pytest.mark.parametrize("gpu", ["a100-80gb", "mi250x"])
def test_fp8_is_rejected_with_a_clear_message(cat, gpu):
    with pytest.raises(ConfigError, match=rf"^{gpu} has no FP8 tensor cores; "
                                          r"use --precision bf16$"):
        hardware_for(cat, gpu, precision="fp8")


def test_vectorized_table_masks_fp8_where_unsupported(cat):
    hw = hardware_table(cat, [("a100-80gb", None), ("h100-sxm", None), ("mi250x", None)])
    assert hw.peak_flops_by_precision.shape == (3, 4)
    t = step_time(GPT7B, Layout(precision=FP8, global_batch=8), hw,
                  efficiency_for(cat, hw.family))
    assert np.isinf(t.step_s[[0, 2]]).all() and t.tokens_per_s[[0, 2]].tolist() == [0.0, 0.0]
    assert np.isfinite(t.step_s[1]) and t.tokens_per_s[1] > 0


def test_platforms_offer_and_overrides(cat):
    """Offer bandwidth is per instance, split over its GPUs; keyword overrides win."""
    offer = next(o for o in cat.offers.values() if o.count == 8 and o.network_bytes_per_s > 0)
    hw = hardware_for(cat, offer.accelerator, precision="bf16", offer=offer)
    assert float(hw.scale_out_bytes_per_s[0]) == pytest.approx(offer.network_bytes_per_s / 8)
    hw = hardware_for(cat, "h100-sxm", precision="bf16", gpus_per_node=4,
                      scale_out_bytes_per_s=1e9)
    assert hw.gpus_per_node[0] == 4 and hw.scale_up_domain[0] <= 4
    assert hw.scale_out_bytes_per_s[0] == 1e9
    hw = hardware_table(cat, [("rtx-4090", Platform(gpus_per_node=4, scale_up_domain=4,
                                                     scale_out_bytes_per_s=3e9))])
    assert hw.scale_up_bytes_per_s[0] == pytest.approx(32e9)  # PCIe 4.0 x16, one direction


def test_efficiency_default_row_is_flagged_as_a_guess(cat):
    eff = efficiency_for(cat, ["h100", "mi300x", "no-such-family"])
    assert eff.guess.tolist() == [False, True, True]


def test_tp_beyond_the_scale_up_domain_crosses_the_scale_out_link():
    """tp 16 on 8-GPU NVLink domains puts TP collectives on the 50 GB/s NIC (at
    comm.NET_EFFICIENCY of it): ~10.6x the TP time of the same layout inside one 16-GPU domain
    (450 vs 50 x 0.85 GB/s, latency aside), and none of it is hidden across the network."""
    lay = Layout(tp=16, global_batch=8, seq_len=4096)
    model = replace(GPT7B, heads=32, kv_heads=32)
    inside = step_time(model, lay, replace(HW, scale_up_domain=16), EFF)
    across = step_time(model, lay, HW, EFF)
    ratio = float(across.tp_comm_s) / float(inside.tp_comm_s)
    assert 8.0 < ratio < 13.0


def test_bubble_is_the_interleaved_1f1b_fraction_of_busy_time():
    """With communication free, bubble = (pp-1)/(m*vpp) x (compute + memory + overhead)."""
    fast = replace(HW, scale_up_bytes_per_s=1e30, scale_out_bytes_per_s=1e30,
                   scale_up_latency_s=0.0, scale_out_latency_s=0.0)
    t = step_time(GPT7B, Layout(pp=4, vpp=2, global_batch=16, micro_batch=1), fast, EFF)
    busy = float(t.compute_s + t.memory_s + t.overhead_s)
    assert float(t.bubble_s) == pytest.approx(3 / (16 * 2) * busy, rel=1e-9)


def test_moe_all_to_all_splits_between_nvlink_and_the_fabric():
    """A 128-expert top-8 MoE (Qwen3-30B-A3B shape) with EP 16 on 8-GPU nodes, deduplicated
    dispatch (DeepEP / HybridEP; comm.a2a_token_copies): a token crosses the NIC once per
    remote node it has an expert on, 1 - C(64,8)/C(128,8) copies here (not 8 x 8/16 = 4), and
    NVLink once per other GPU of each node hit, 2 x 7 x (1 - C(120,8)/C(128,8)); the two run at
    once (4 per MoE layer per micro-batch, none hidden). EP 8 stays on NVLink and is cheaper."""
    from math import comb
    moe = ModelSpec(id="q", name="q", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
                    vocab=151936, mlp="swiglu", head_dim=128, experts=128,
                    experts_per_token=8, moe_ffn=768)
    lay = Layout(tp=1, pp=1, dp=16, ep=np.array([16, 8]), micro_batch=1, global_batch=32,
                 seq_len=4096)
    t = step_time(moe, lay, HW, EFF)
    tokens = 1 * 4096 * 2048 * 2.0  # mb x s x h x 2 bytes, one copy of the rank's tokens
    nic = (1 - comb(64, 8) / comb(128, 8)) * tokens / (50e9 * comm.NET_EFFICIENCY)
    nvl = 2 * 7 * (1 - comb(120, 8) / comb(128, 8)) * tokens / 450e9
    one = max(nic, nvl) + 7 * 2e-6 + 1 * 4e-6
    assert float(t.ep_comm_s[0]) == pytest.approx(4 * one * 48 * 2, rel=1e-9)
    inside = 7 * (1 - comb(112, 8) / comb(128, 8)) * tokens / 450e9 + 7 * 2e-6
    assert float(t.ep_comm_s[1]) == pytest.approx(4 * inside * 48 * 2, rel=1e-9)
    assert float(t.ep_comm_s[1]) < float(t.ep_comm_s[0])


# --- issue #12 terms in the composed step ------------------------------------------------------

FREE_UP = replace(HW, scale_up_bytes_per_s=1e30, scale_up_latency_s=0.0)


def test_dp_reduction_hides_only_behind_the_last_backward_less_its_last_bucket():
    """ZeRO-0, dp 16 over two nodes: exposed DP = reduction - min(0.8 x (2/3) x compute / m,
    reduction x (b-1)/b), with the all-reduce and buckets written out independently."""
    lay = Layout(dp=16, global_batch=16 * 4, micro_batch=1, seq_len=2048)
    t = step_time(GPT7B, lay, FREE_UP, EFF)
    params = GPT7B.total_params()
    b = max(np.ceil(params / 40e6), 1)
    bw, a = 50e9 * comm.NET_EFFICIENCY, 4e-6
    # hierarchical: inside the node free; across, ring all-reduce of 1/8 of the bytes over 2
    total = 2 * (2 - 1) / 2 * params * 2.0 / 8 / bw + b * 2 * (2 - 1) * a
    hidden = min(0.8 * (2 / 3) * float(t.compute_s) / 4, total * (b - 1) / b)
    assert float(t.dp_comm_s) == pytest.approx(total - hidden, rel=1e-9)


def test_one_bucket_leaves_the_whole_reduction_exposed():
    tiny = ModelSpec(id="t", name="t", layers=2, hidden=256, heads=4, kv_heads=4, ffn=1024,
                     vocab=1000)
    lay = Layout(dp=16, global_batch=64, micro_batch=1, seq_len=512)
    t = step_time(tiny, lay, FREE_UP, EFF)
    params = tiny.total_params()
    bw, a = 50e9 * comm.NET_EFFICIENCY, 4e-6
    total = params * 2.0 / 8 / bw + 2 * a  # 2-node ring all-reduce of the 1/8 shard
    assert float(t.dp_comm_s) == pytest.approx(total, rel=1e-9)


def test_step_sync_latency_is_in_the_overhead_part():
    """overhead_s = layer overhead x layers x micro-batches + 2 scalar tree all-reduces over all
    GPUs once per step: 2 x 2 log2(64) x 4 us (the job spans 8 nodes: the network's latency);
    one GPU has no sync."""
    lay = Layout(dp=64, global_batch=64 * 3, micro_batch=1, seq_len=2048)
    t = step_time(GPT7B, lay, HW, EFF)
    layers = 5e-4 * 32 * 3
    assert float(t.overhead_s) == pytest.approx(layers + 2 * 2 * 6 * 4e-6, rel=1e-9)
    one = step_time(GPT7B, Layout(dp=1, global_batch=3, micro_batch=1, seq_len=2048), HW, EFF)
    assert float(one.overhead_s) == pytest.approx(layers, rel=1e-12)


def test_tp_across_nodes_is_not_hidden():
    lay = Layout(tp=16, global_batch=8, seq_len=4096)
    model = replace(GPT7B, heads=32, kv_heads=32)
    across = step_time(model, lay, HW, EFF)
    no_overlap = step_time(model, lay, HW, replace(EFF, tp_overlap=0.0))
    assert float(across.tp_comm_s) == pytest.approx(float(no_overlap.tp_comm_s), rel=1e-12)


def test_dualpipe_bubble_and_all_to_all_overlap():
    """DualPipe: bubble (pp/2 - 1)(2/3)/m x busy; the MoE all-to-all hides behind compute."""
    from gpuplan.spec import S_DUALPIPE
    fast = replace(HW, scale_up_bytes_per_s=1e30, scale_out_bytes_per_s=1e30,
                   scale_up_latency_s=0.0, scale_out_latency_s=0.0)
    t = step_time(GPT7B, Layout(pp=8, global_batch=32, micro_batch=1, schedule=S_DUALPIPE),
                  fast, EFF)
    busy = float(t.compute_s + t.memory_s + t.overhead_s)
    assert float(t.bubble_s) == pytest.approx((8 / 2 - 1) * (2 / 3) / 32 * busy, rel=1e-9)
    moe = ModelSpec(id="q", name="q", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
                    vocab=151936, mlp="swiglu", head_dim=128, experts=128,
                    experts_per_token=8, moe_ffn=768)
    lay = dict(dp=8, ep=8, micro_batch=1, global_batch=32, seq_len=4096)  # EP inside NVLink
    plain = step_time(moe, Layout(**lay), HW, EFF)
    dual = step_time(moe, Layout(**lay, schedule=S_DUALPIPE), HW, EFF)
    assert 0.0 < float(plain.ep_comm_s) < float(plain.compute_s)
    assert float(dual.ep_comm_s) == pytest.approx(0.0, abs=1e-12)


def test_fp8_leaves_the_lm_head_in_16_bits():
    """Under an FP8 recipe the LM head GEMM runs at the 16-bit peak and efficiency (Megatron-
    Core's output layer is not a Transformer Engine module; DeepSeek-V3 section 3.3.1), so a
    larger vocabulary adds the same GEMM time at FP8 as at BF16 (one stage holds the head;
    peak_flops is the FP8 peak there, its half the 16-bit one), while the layers' GEMMs speed
    up. Exact: nothing else in compute_s depends on the vocabulary."""
    big = replace(GPT7B, vocab=4 * GPT7B.vocab)
    lay = dict(global_batch=8, micro_batch=1, seq_len=2048)
    hw8 = replace(HW, peak_flops=2 * HW.peak_flops)

    def compute(model, precision, hw):
        return float(step_time(model, Layout(**lay, precision=precision), hw, EFF).compute_s)

    head16 = compute(big, BF16, HW) - compute(GPT7B, BF16, HW)
    head8 = compute(big, FP8, hw8) - compute(GPT7B, FP8, hw8)
    assert head8 == pytest.approx(head16, rel=1e-9)
    assert compute(GPT7B, FP8, hw8) < compute(GPT7B, BF16, HW)


def test_megatron_all_to_all_overlap_hides_behind_the_paired_micro_batch():
    """Schedule 1f1b-a2a (Megatron-Core --overlap-moe-expert-parallel-comm): the MoE
    all-to-all hides behind (1 - 1/m) of the compute (the first forward and last backward have
    no partner); the bubble stays 1F1B's. On a thin network (EP across two 8-GPU nodes at
    5 GB/s per GPU) the all-to-all outgrows that budget and the excess stays exposed."""
    from gpuplan.spec import S_1F1B_A2A
    moe = ModelSpec(id="q", name="q", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
                    vocab=151936, mlp="swiglu", head_dim=128, experts=128,
                    experts_per_token=8, moe_ffn=768)
    for hw in (HW, replace(HW, scale_out_bytes_per_s=5e9)):
        lay = dict(dp=16, ep=16, micro_batch=1, global_batch=64, seq_len=4096)  # m = 4
        plain = step_time(moe, Layout(**lay), hw, EFF)
        paired = step_time(moe, Layout(**lay, schedule=S_1F1B_A2A), hw, EFF)
        hidden = min(float(plain.ep_comm_s), 0.75 * float(plain.compute_s))
        assert float(paired.ep_comm_s) == pytest.approx(float(plain.ep_comm_s) - hidden,
                                                        rel=1e-9, abs=1e-12)
        assert float(paired.step_s) < float(plain.step_s)
    assert float(paired.ep_comm_s) > 0.0  # the thin network: more than the budget


def test_moe_dispatcher_alltoall_sends_more_than_flex_and_auto_follows_the_stack():
    """Layout.moe_dispatcher: alltoall (Megatron-Core's per-expert all-to-all) moves more MoE
    traffic than flex (deduplicated) once top-8 experts of a token share ranks (EP 16 over two
    8-GPU domains); auto is flex under megatron and nemo and alltoall under torchtitan. Exact
    equalities: the same formula runs in each pair."""
    from gpuplan.spec import D_ALLTOALL, D_FLEX, NEMO, TORCHTITAN
    moe = ModelSpec(id="q", name="q", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
                    vocab=151936, mlp="swiglu", head_dim=128, experts=128,
                    experts_per_token=8, moe_ffn=768)
    lay = dict(dp=16, ep=16, micro_batch=1, global_batch=64, seq_len=4096)

    def ep(**kw):
        return float(step_time(moe, Layout(**lay, **kw), HW, EFF).ep_comm_s)

    assert ep(moe_dispatcher=D_ALLTOALL) > ep(moe_dispatcher=D_FLEX) > 0.0
    assert ep() == ep(moe_dispatcher=D_FLEX) == ep(stack=NEMO)
    assert ep(stack=TORCHTITAN) == ep(moe_dispatcher=D_ALLTOALL)
    assert ep(stack=TORCHTITAN, moe_dispatcher=D_FLEX) == ep(moe_dispatcher=D_FLEX)
