"""PyTorch-native FP8 under [stack.torchtitan] (#12; docs/calibration.md, "PyTorch-native
FP8"): torchao's float8 TP all-gathers (1 byte per element, the reduce-scatters 16 bits) and
its tensorwise cast, amax and transpose bytes (torchao's roofline), checked against hand
counts written out here, on the scalar and vectorized paths, and by properties."""

from __future__ import annotations

from dataclasses import fields, replace
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mirror_cases import same
from test_timing_one import _random_case

from gpuplan.catalog import load_catalog
from gpuplan.estimators import comm
from gpuplan.estimators.compute import Efficiency
from gpuplan.estimators.timing import TimingBreakdown, step_time
from gpuplan.estimators.timing_one import mirrors, step_time_one
from gpuplan.search.hardware import efficiency_for, hardware_table, stack_row, with_stack
from gpuplan.spec import BF16, FP8, STACKS, Layout

TORCHTITAN = STACKS.index("torchtitan")


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _eff(**kw):
    """A plain efficiency (no overlap, no per-layer overhead) with the stack's FP8 flags."""
    base = dict(matmul_max=0.6, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.7,
                layer_overhead_s=0.0, attention_ratio=0.6, tp_overlap=0.0)
    return Efficiency(**{**base, **kw})


def _h100(cat):
    return hardware_table(cat, [("h100-sxm", None)])


# --- the catalog's stack rows ------------------------------------------------------------------


def test_only_torchtitan_states_the_torchao_settings(cat):
    """torchtitan states tensorwise casts and float8 TP gathers; every other stack keeps the
    folded fp8_ratio and 16-bit TP collectives (their defaults)."""
    for name in cat.tables()["stack"]:
        row = stack_row(cat, name)
        on = name == "torchtitan"
        assert (row.get("fp8_cast", "folded") == "tensorwise") is on, name
        assert bool(row.get("fp8_tp_gather", False)) is on, name


def test_tensorwise_drops_the_stacks_folded_fp8_ratio(cat):
    """Under fp8_cast = tensorwise the FP8 GEMMs keep the BF16 share of their doubled peak
    (torchao's roofline: pct_achievable_gemm_tops the same for both): the inherited fsdp
    fp8_ratio (fitted with the casts folded in) is not applied; the family's factor stays."""
    tt, fsdp = stack_row(cat, "torchtitan"), stack_row(cat, "fsdp")
    assert fsdp["fp8_ratio"] < 1.0  # else this test proves nothing
    values = {"matmul_max": 0.6, "fp8_ratio": 0.9, "attention_ratio": 1.0}
    assert float(with_stack(values, tt)["fp8_ratio"]) == pytest.approx(0.9, rel=1e-15)
    assert float(with_stack(values, fsdp)["fp8_ratio"]) == pytest.approx(0.9 * fsdp["fp8_ratio"])
    eff = efficiency_for(cat, ["h100"], "torchtitan")
    assert float(eff.fp8_cast[0]) == 1.0 and float(eff.fp8_tp_gather[0]) == 1.0


# --- hand counts -------------------------------------------------------------------------------

# Llama 3 70B (catalog llama3-70b): h 8192, 64 heads of 128, 8 KV heads, SwiGLU ffn 28672, 80
# layers; the torchtitan June-2025 layout: TP 8 inside an HGX node, local batch 16 x 8192.
H, Q, KV, F, LAYERS = 8192, 64 * 128, 8 * 128, 28672, 80
L70 = dict(tp=8, dp=32, zero=3, micro_batch=16, global_batch=512, seq_len=8192, recompute=2,
           stack=TORCHTITAN)


def test_tp_collective_time_is_a_16bit_reduce_scatter_plus_a_float8_all_gather(cat):
    """Hand formula, no overlap (tp_overlap 0 leaves it all exposed): per layer per micro-batch
    6 all-reduce-equivalents (4 + 2 repeated by full recompute), each a ring reduce-scatter of
    the 16-bit (mb x s x h) activation and an all-gather of it in float8:
    (tp-1)/tp x (2 + 1) bytes x mb s h / bw + 2 (tp-1) alpha. Tolerance 1e-12 relative."""
    model, hw = cat.model("llama3-70b"), _h100(cat)
    bw, alpha = float(hw.scale_up_bytes_per_s[0]), float(hw.scale_up_latency_s[0])
    tokens, tp = 16 * 8192, 8
    one = (tp - 1) / tp * 3.0 * tokens * H / bw + 2 * (tp - 1) * alpha
    lay = Layout(precision=FP8, **L70)
    on = step_time(model, lay, hw, _eff(fp8_tp_gather=1.0))
    assert float(on.tp_comm_s[0]) == pytest.approx(one * 6 * LAYERS, rel=1e-12)
    # 16-bit gathers (a stack without the flag, or BF16): the ring all-reduce, 4 bytes
    off = (tp - 1) / tp * 4.0 * tokens * H / bw + 2 * (tp - 1) * alpha
    for eff, prec in ((_eff(), FP8), (_eff(fp8_tp_gather=1.0), BF16)):
        t = step_time(model, replace(lay, precision=prec), hw, eff)
        assert float(t.tp_comm_s[0]) == pytest.approx(off * 6 * LAYERS, rel=1e-12)


def test_cast_bytes_follow_torchaos_roofline_count(cat):
    """Hand count, written out (docs/calibration.md): per token per layer over the TP group,
    GEMM inputs 2h + q + f (cast before their float8 gather: r = 1) and output gradients
    q + 2 kv + 2f + 2h, 6 bytes each, the inputs twice under full recompute; weights on the
    rank (attention + SwiGLU MLP) / tp, 8 + 5 bytes (recompute) per micro-batch. The memory
    part grows by exactly their time at HBM bandwidth x memory_fraction. 1e-12 relative."""
    model, hw = cat.model("llama3-70b"), _h100(cat)
    lay = Layout(precision=FP8, **L70)
    fwd, bwd = 2 * H + Q + F, Q + 2 * KV + 2 * F + 2 * H
    tokens_rank = 512 * 8192 / 32 / 8  # tokens per step per rank (the TP group's / tp)
    operands = tokens_rank * 6.0 * (2 * fwd + bwd) * LAYERS
    weights = (H * (Q + 2 * KV) + Q * H + 3 * H * F) / 8 * LAYERS * (8.0 + 5.0) * 1
    seconds = (operands + weights) / (float(hw.memory_bandwidth_bytes_per_s[0]) * 0.7)
    on = step_time(model, lay, hw, _eff(fp8_cast=1.0, fp8_tp_gather=1.0))
    off = step_time(model, lay, hw, _eff(fp8_tp_gather=1.0))
    assert float(on.memory_s[0] - off.memory_s[0]) == pytest.approx(seconds, rel=1e-12)
    assert float(on.compute_s[0]) == float(off.compute_s[0])  # casts are memory-bound only
    bf16 = replace(lay, precision=BF16)  # nothing is cast in BF16
    assert float(step_time(model, bf16, hw, _eff(fp8_cast=1.0)).memory_s[0]) \
        == float(step_time(model, bf16, hw, _eff()).memory_s[0])


def test_without_float8_gathers_each_tp_rank_casts_the_gathered_inputs(cat):
    """r = tp when the module inputs are gathered in 16 bits and cast after: the four shared
    operands (attention and MLP inputs; output- and down-projection gradients) cost tp x."""
    model, hw = cat.model("llama3-70b"), _h100(cat)
    lay = Layout(precision=FP8, **{**L70, "recompute": 0})
    gathered = step_time(model, lay, hw, _eff(fp8_cast=1.0, fp8_tp_gather=1.0)).memory_s[0]
    local = step_time(model, lay, hw, _eff(fp8_cast=1.0)).memory_s[0]
    extra = 512 * 8192 / 32 / 8 * 6.0 * 4 * H * (8 - 1) * LAYERS
    bw = float(hw.memory_bandwidth_bytes_per_s[0]) * 0.7
    assert float(local - gathered) == pytest.approx(extra / bw, rel=1e-12)


# --- the scalar fast path ----------------------------------------------------------------------


def test_fast_path_equals_the_vectorized_model_under_torchtitan(cat):
    """The random configurations of test_timing_one, every one under [stack.torchtitan]'s
    efficiency (fp8_cast and fp8_tp_gather on); field by field to 1e-9 relative."""
    rng = np.random.default_rng(2)
    seen = set()
    for _ in range(300):
        model, lay, hw, _, traffic = _random_case(cat, rng)
        lay = replace(lay, stack=TORCHTITAN)
        eff = efficiency_for(cat, hw.family, "torchtitan")
        assert mirrors(model, lay, hw, eff, traffic)
        seen.add((int(lay.precision) == FP8, int(lay.tp) > 1))
        with np.errstate(all="ignore"):
            vec = step_time(model, lay, hw, eff, traffic)
        one = step_time_one(model, lay, hw, eff, traffic)
        for f in fields(TimingBreakdown):
            v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
            assert same(o, v), (f.name, o, v, model.id, lay)
    assert (True, True) in seen  # FP8 with TP was compared


# --- properties --------------------------------------------------------------------------------

cases = st.tuples(st.sampled_from(["llama3-8b", "llama3-70b"]), st.sampled_from([1, 2, 4, 8]),
                  st.sampled_from([1, 8, 64]), st.integers(1, 4), st.sampled_from([1, 2, 4]),
                  st.sampled_from([2048, 4096, 8192]), st.integers(0, 2), st.integers(0, 3))


def _layout(tp, dp, m, mb, seq, rc, zero, prec):
    return Layout(tp=tp, dp=dp, zero=zero, micro_batch=mb, global_batch=dp * mb * m,
                  seq_len=seq, recompute=rc, precision=prec, stack=TORCHTITAN)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_fp8_never_adds_tp_or_dp_collective_time(cat, case):
    """With the same layout, FP8 under torchtitan's settings moves no more TP or DP bytes than
    BF16: each collective's total (nothing hidden: tp_overlap 0 and the DP and ZeRO-3 overlap
    shares set to 0 here) is at most BF16's."""
    name, tp, dp, m, mb, seq, rc, zero = case
    model, hw = cat.model(name), _h100(cat)
    eff = _eff(fp8_cast=1.0, fp8_tp_gather=1.0)
    with patch.object(comm, "DP_OVERLAP", 0.0), patch.object(comm, "ZERO3_OVERLAP", 0.0):
        f8 = step_time(model, _layout(tp, dp, m, mb, seq, rc, zero, FP8), hw, eff)
        b16 = step_time(model, _layout(tp, dp, m, mb, seq, rc, zero, BF16), hw, eff)
    assert float(f8.tp_comm_s[0]) <= float(b16.tp_comm_s[0]) * (1 + 1e-12)
    assert float(f8.dp_comm_s[0]) <= float(b16.dp_comm_s[0]) * (1 + 1e-12)
    if tp > 1:  # the float8 gathers move strictly less
        assert float(f8.tp_comm_s[0]) < float(b16.tp_comm_s[0])
    one = comm.tp_comm_s(1e8, tp, 4.0, 1, 1, 450e9, 2e-6, 0.5)
    assert float(one) <= float(comm.tp_comm_s(1e8, tp, 4.0, 1, 1, 450e9, 2e-6)) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_fp8_work_is_never_more_than_bf16s_at_llama_scale(cat, case):
    """Llama 3 8B and 70B (hidden 4096 and 8192), 2k-8k tokens a sequence, on H100 under the
    catalog's torchtitan efficiency: the FP8 GEMM saving (half the GEMM time) exceeds the cast
    traffic, so compute + memory-bound time is never more than BF16's, on any layout."""
    name, tp, dp, m, mb, seq, rc, zero = case
    model, hw = cat.model(name), _h100(cat)
    eff = efficiency_for(cat, hw.family, "torchtitan")
    f8 = step_time(model, _layout(tp, dp, m, mb, seq, rc, zero, FP8), hw, eff)
    b16 = step_time(model, _layout(tp, dp, m, mb, seq, rc, zero, BF16), hw, eff)
    assert float(f8.compute_s[0] + f8.memory_s[0]) < float(b16.compute_s[0] + b16.memory_s[0])


@settings(max_examples=40, deadline=None)
@given(cases)
def test_fp8_step_is_never_slower_than_bf16_inside_one_node(cat, case):
    """The same on one node (dp 1: TP only, nothing to hide behind the backward but the TP
    share): the FP8 step is never the slower one. (Across nodes a step whose data-parallel
    traffic outlasts its backward can be: FP8 shortens the compute that hides it.)"""
    name, tp, _, m, mb, seq, rc, zero = case
    model, hw = cat.model(name), _h100(cat)
    eff = efficiency_for(cat, hw.family, "torchtitan")
    f8 = step_time(model, _layout(tp, 1, m, mb, seq, rc, zero, FP8), hw, eff)
    b16 = step_time(model, _layout(tp, 1, m, mb, seq, rc, zero, BF16), hw, eff)
    assert float(f8.step_s[0]) < float(b16.step_s[0])
