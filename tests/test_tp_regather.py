"""TP all-gathers repeated in the backward under torchtitan's per-op SAC (#12).

torchtitan's op-SAC save list (torchtitan 820504e, parallelize_llama.py `_save_list`) has no
all_gather, so each layer's 2 sequence-parallel all-gathers run again in the backward:
10 half-collectives per layer and micro-batch instead of 8 (docs/calibration.md, "TP
all-gathers repeated under per-op SAC").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.estimators import comm
from gpuplan.estimators.compute import Efficiency
from gpuplan.estimators.recompute import tp_gathers_repeated
from gpuplan.estimators.timing import step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.spec import (
    BF16,
    DEEPSPEED,
    FP8,
    FSDP_STACK,
    MEGATRON,
    NEMO,
    R_FULL,
    R_NONE,
    R_OP,
    R_SELECTIVE,
    TORCHTITAN,
    Hardware,
    Layout,
    ModelSpec,
)

LLAMA8B = ModelSpec(id="l8", name="l8", layers=32, hidden=4096, heads=32, kv_heads=8,
                    ffn=14336, vocab=128256, mlp="swiglu")
# tp_overlap 0: nothing of the TP time is hidden, so tp_comm_s is the whole TP time
EFF = Efficiency(matmul_max=0.6, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.7,
                 layer_overhead_s=1.5e-4, tp_overlap=0.0)
BW, ALPHA = 450e9, 1.9e-6
HW = Hardware(memory_bytes=96 * 2**30, memory_bandwidth_bytes_per_s=2.4e12, peak_flops=989e12,
              scale_up_bytes_per_s=BW, scale_up_latency_s=ALPHA, scale_up_domain=8,
              scale_out_bytes_per_s=50e9, scale_out_latency_s=4e-6, gpus_per_node=8,
              tdp_watts=700)


def _layout(stack: int, rc: int, tp: int = 8, m: int = 1) -> Layout:
    """The Grand Teton 8B layout: FSDP 8 x TP 8, local batch 12, sequence 8,192."""
    return Layout(tp=tp, dp=8, zero=3, micro_batch=12, global_batch=96 * m, seq_len=8192,
                  recompute=rc, precision=BF16, stack=stack)


def _hand_tp_s(halves: int, tp: int = 8, m: int = 1) -> float:
    """`halves` all-gathers / reduce-scatters of the (12 x 8192 x 4096) BF16 activation per
    layer and micro-batch, each (n-1)/n x bytes / bw + (n-1) alpha (Thakur et al. 2005),
    written out here without comm.py."""
    nbytes = 12 * 8192 * 4096 * 2
    one = (tp - 1) / tp * nbytes / BW + (tp - 1) * ALPHA
    return halves * one * 32 * m


def test_op_sac_under_torchtitan_repeats_the_two_all_gathers():
    """4 forward + 4 backward + 2 repeated all-gathers = 10 half-collectives per layer."""
    t = step_time(LLAMA8B, _layout(TORCHTITAN, R_OP), HW, EFF)
    assert float(t.tp_comm_s) == pytest.approx(_hand_tp_s(10), rel=1e-12)  # float rounding


@pytest.mark.parametrize(("stack", "rc", "halves"), [
    (TORCHTITAN, R_NONE, 8),  # autograd keeps the gathered input of the matmul
    (TORCHTITAN, R_FULL, 12),  # the repeated forward gathers once more
    (TORCHTITAN, R_SELECTIVE, 8),
    (MEGATRON, R_OP, 8),  # the Megatron-Core re-gather is not counted (docs/calibration.md)
    (NEMO, R_OP, 8), (FSDP_STACK, R_OP, 8), (DEEPSPEED, R_OP, 8),
])
def test_other_stacks_and_modes_keep_their_count(stack, rc, halves):
    t = step_time(LLAMA8B, _layout(stack, rc), HW, EFF)
    assert float(t.tp_comm_s) == pytest.approx(_hand_tp_s(halves), rel=1e-12)


def test_regathers_rule_on_scalars_and_arrays():
    assert tp_gathers_repeated(R_OP, TORCHTITAN) == 1.0
    assert tp_gathers_repeated(R_OP, MEGATRON) == 0.0
    got = tp_gathers_repeated(np.array([R_OP, R_NONE, R_OP]), np.array([TORCHTITAN] * 2 + [NEMO]))
    assert got.tolist() == [1.0, 0.0, 0.0]
    assert float(comm.tp_layer_collectives(0.0, 1.0)) == 5.0


@pytest.mark.parametrize("stack", [TORCHTITAN, MEGATRON])
@pytest.mark.parametrize("rc", [R_NONE, R_FULL, R_OP])
def test_scalar_path_agrees(stack, rc):
    eff = Efficiency(matmul_max=0.6, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.7,
                     layer_overhead_s=1.5e-4, tp_overlap=0.15)
    lay = _layout(stack, rc, m=2)
    one, vec = step_time_one(LLAMA8B, lay, HW, eff), step_time(LLAMA8B, lay, HW, eff)
    for part in ("tp_comm_s", "step_s"):
        assert math.isclose(float(getattr(one, part)), float(getattr(vec, part)), rel_tol=1e-9)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), m=st.integers(1, 4),
       rc=st.sampled_from([R_NONE, R_SELECTIVE, R_FULL, R_OP]),
       overlap=st.sampled_from([0.0, 0.15, 0.45]))
def test_repeated_gathers_add_a_quarter_and_never_speed_a_step(tp, m, rc, overlap):
    """Property: torchtitan's TP time is Megatron's x 5/4 under op-SAC (the same otherwise,
    with nothing hidden), and its step is never shorter than the same layout's under a stack
    that repeats nothing, whatever the overlap."""
    lay_tt, lay_mg = _layout(TORCHTITAN, rc, tp, m), _layout(MEGATRON, rc, tp, m)
    tt, mg = step_time(LLAMA8B, lay_tt, HW, EFF), step_time(LLAMA8B, lay_mg, HW, EFF)
    ratio = 1.25 if (rc == R_OP and tp > 1) else 1.0
    assert float(tt.tp_comm_s) == pytest.approx(ratio * float(mg.tp_comm_s), rel=1e-12, abs=0)
    eff = Efficiency(matmul_max=0.6, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.7,
                     layer_overhead_s=1.5e-4, tp_overlap=overlap)
    # Megatron and torchtitan share the compute model at equal Efficiency (stack constants
    # enter through Efficiency, set alike here), so only the TP count differs
    assert float(step_time(LLAMA8B, lay_tt, HW, eff).step_s) \
        >= float(step_time(LLAMA8B, lay_mg, HW, eff).step_s) * (1 - 1e-12)


def test_float8_gathers_are_repeated_in_float8():
    """Under torchtitan FP8 with float8 TP gathers (torchao casts before the all-gather), the
    repeated gathers move 1 byte per element like the first ones: 4 reduce-scatters of the
    BF16 activation + 4 all-gathers and 2 repeated all-gathers of its float8 copy per layer."""
    eff = Efficiency(matmul_max=0.6, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.7,
                     layer_overhead_s=1.5e-4, tp_overlap=0.0, fp8_tp_gather=1.0)
    lay = Layout(tp=8, dp=8, zero=3, micro_batch=12, global_batch=96, seq_len=8192,
                 recompute=R_OP, precision=FP8, stack=TORCHTITAN)
    elems, tp = 12 * 8192 * 4096, 8

    def half(nbytes: float) -> float:  # (n-1)/n x bytes / bw + (n-1) alpha, written out
        return (tp - 1) / tp * nbytes / BW + (tp - 1) * ALPHA

    want = (4 * half(2 * elems) + 6 * half(1 * elems)) * 32
    vec, one = step_time(LLAMA8B, lay, HW, eff), step_time_one(LLAMA8B, lay, HW, eff)
    assert float(vec.tp_comm_s) == pytest.approx(want, rel=1e-12)  # float rounding
    assert math.isclose(float(one.tp_comm_s), float(vec.tp_comm_s), rel_tol=1e-9)
