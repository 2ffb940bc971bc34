"""Data-parallel collectives consistent with the memory model (#12): parameter gathers move FP8
where the stack keeps FP8 primary weights (the memory model's `fp8_primary_weights`, read from
the same buffers.StackBuffers), and routed experts reduce and gather over the expert-data-
parallel group (dp x cp / ep ranks at stride tp x ep, the memory model's expert shard group).
Sources: estimators/buffers.py `fp8_param_gathers`, estimators/dp_comm.py."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from dp_setup import A_OUT, A_UP, EFF, HW, OUT, TINY, UP
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.catalog import load_catalog
from gpuplan.estimators import comm, dp_comm
from gpuplan.estimators.buffers import from_table
from gpuplan.estimators.shapes import pipeline_stages
from gpuplan.estimators.timing import _context, step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.spec import BF16, FP8, MEGATRON, NEMO, Layout, ModelSpec

MOE = ModelSpec(id="m", name="m", layers=4, hidden=512, heads=8, kv_heads=8, ffn=2048,
                vocab=1000, experts=8, experts_per_token=2, moe_ffn=512)
HOPPER = HW
BLACKWELL = replace(HOPPER, fp8_gemm_any_layout=1.0)  # FP8 GEMMs in any layout: MXFP8 'auto'


@pytest.fixture(scope="module")
def sb():
    return from_table(load_catalog().extra["memory"])


def _totals(model, layout, hw, stacks):
    """The DP parts before any overlap: (reduction, ZeRO-1/2 all-gather, ZeRO-3 gathers)."""
    c = _context(layout, hw, stacks)
    placed = pipeline_stages(model, c.tp, c.pp, c.ep, c.vpp, c.first, c.last)
    params = max(float(P.total) for P in placed)
    parts = dp_comm.data_parallel_comm(c, params, dp_comm.busiest_split(placed), 0.0)
    return tuple(float(parts[k][0]) for k in ("dp_reduce", "dp_param_gather", "dp_gather"))


def _rs16(nbytes):
    """Hierarchical reduce-scatter / all-gather of `nbytes` over 16 consecutive ranks on two
    8-GPU NVLink nodes: 7/8 inside + 7 latencies, then 1/2 of the 1/8 shard over the NIC."""
    return 7 / 8 * nbytes / UP + 7 * A_UP + 1 / 2 * (nbytes / 8) / OUT + A_OUT


def test_nemo_fp8_zero1_gathers_one_byte_per_parameter_by_hand(sb):
    """ZeRO-1, tp 1, dp 16 on Hopper, one bucket: NeMo's FP8 primary weights (per-tensor FP8,
    Megatron-Core's uint8 param buffer) are all-gathered at 1 B per parameter; the gradients
    still reduce-scatter at comm.GRAD_REDUCE_BYTES. Megatron-LM without fp8_param_gather
    gathers 2 B."""
    P = TINY.total_params()
    lay = Layout(tp=1, dp=16, zero=1, micro_batch=1, global_batch=16, seq_len=512,
                 precision=FP8, stack=NEMO)
    reduce, gather, gathers = _totals(TINY, lay, HOPPER, sb)
    assert reduce == pytest.approx(_rs16(2.0 * P), rel=1e-12)
    assert gather == pytest.approx(_rs16(1.0 * P), rel=1e-12) and gathers == 0.0
    mega = _totals(TINY, replace(lay, stack=MEGATRON), HOPPER, sb)
    assert mega[1] == pytest.approx(_rs16(2.0 * P), rel=1e-12)


def test_nemo_fp8_zero3_gathers_one_byte_twice_per_microbatch_by_hand(sb):
    """ZeRO-3 (Megatron FSDP), 4 micro-batches: each gathers the parameters before its forward
    and again before its backward, at 1 B per parameter under FP8 primary weights, MXFP8
    included (row-wise data forward, column-wise backward)."""
    P = TINY.total_params()
    lay = Layout(tp=1, dp=16, zero=3, micro_batch=1, global_batch=64, seq_len=512,
                 precision=FP8, stack=NEMO)
    for hw in (HOPPER, BLACKWELL):
        _, gather, gathers = _totals(TINY, lay, hw, sb)
        assert gather == 0.0
        assert gathers == pytest.approx(2 * 4 * _rs16(1.0 * P), rel=1e-12)


def test_mxfp8_zero1_gathers_bf16_per_tensor_on_blackwell_gathers_fp8(sb):
    """Megatron-Core's distributed optimizer gathers MXFP8 parameters in BF16 (a bf16 view of
    the grad buffer, re-quantized after the gather): the planner's 'auto' recipe on Blackwell
    is MXFP8, 2 B; `--fp8-recipe tensor` (no transpose kept) gathers uint8, 1 B."""
    P = TINY.total_params()
    lay = Layout(tp=1, dp=16, zero=1, micro_batch=1, global_batch=16, seq_len=512,
                 precision=FP8, stack=NEMO)
    assert _totals(TINY, lay, BLACKWELL, sb)[1] == pytest.approx(_rs16(2.0 * P), rel=1e-12)
    tensor = sb.with_fp8_transpose(False)
    assert _totals(TINY, lay, BLACKWELL, tensor)[1] == pytest.approx(_rs16(1.0 * P), rel=1e-12)


def test_bf16_runs_gather_16_bits_under_every_stack(sb):
    lay = Layout(tp=1, dp=16, zero=1, micro_batch=1, global_batch=16, seq_len=512,
                 precision=BF16, stack=NEMO)
    assert _totals(TINY, lay, HOPPER, sb) == _totals(TINY, lay, HOPPER, None)


def test_expert_gradients_reduce_over_the_expert_data_parallel_group_by_hand():
    """MoE, tp 1, dp 16, ep 8, ZeRO-0: the dense parameters all-reduce over the 16 dp ranks
    (two 8-GPU nodes); each GPU's routed experts (its 1 of the 8) over the dp / ep = 2 ranks
    holding the same expert, at stride tp x ep = 8: one per node, so over the NIC alone (a
    2-rank ring all-reduce: 2 x 1/2 of the bytes + 2 latencies). One bucket each."""
    P = pipeline_stages(MOE, 1, 1, 8)[0]
    dense, expert = float(P.dense), float(P.expert)
    assert 0 < expert and dense + expert < comm.DP_BUCKET_PARAMS
    lay = Layout(tp=1, dp=16, ep=8, zero=0, micro_batch=1, global_batch=16, seq_len=512)
    reduce, _, _ = _totals(MOE, lay, HOPPER, None)
    Bd, Be = 2.0 * dense, 2.0 * expert
    dense_ar = 2 * (7 / 8 * Bd / UP + 7 * A_UP) + 2 * (1 / 2) * (Bd / 8) / OUT + 2 * A_OUT
    expert_ar = 2 * (1 / 2) * Be / OUT + 2 * A_OUT
    assert reduce == pytest.approx(dense_ar + expert_ar, rel=1e-12)
    # the whole dp group would have all-reduced both together (what ep = 1 does)
    B = Bd + Be
    whole = 2 * (7 / 8 * B / UP + 7 * A_UP) + 2 * (1 / 2) * (B / 8) / OUT + 2 * A_OUT
    assert reduce != pytest.approx(whole, rel=1e-6)


def test_expert_dp_group_by_hand():
    """dp 16, cp 2, ep 8, tp 2 on 8-GPU domains: 4 ranks at stride 16, one per domain."""
    ranks, inside = dp_comm.expert_dp_group(2, 16, 2, 8, 8)
    assert (float(ranks), float(inside)) == (4.0, 1.0)
    ranks, inside = dp_comm.expert_dp_group(1, 64, 1, 2, 8)  # 32 ranks at stride 2: 4 a node
    assert (float(ranks), float(inside)) == (32.0, 4.0)


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4, 8, 16, 64]),
       cp=st.sampled_from([1, 2, 4]), ep=st.sampled_from([1, 2, 4, 8, 16]),
       domain=st.sampled_from([1, 4, 8, 72]))
def test_expert_dp_group_never_larger_than_the_dp_cp_group(tp, dp, cp, ep, domain):
    ranks, inside = dp_comm.expert_dp_group(tp, dp, cp, ep, domain)
    dense, dense_in = comm.dp_cp_group(tp, dp, cp, domain)
    assert 1.0 <= float(ranks) <= float(dense)
    assert 1.0 <= float(inside) <= float(ranks) and float(inside) <= float(dense_in)


LAYOUTS = st.fixed_dictionaries(dict(
    tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 8, 32]),
    cp=st.sampled_from([1, 2]), zero=st.integers(0, 3), micro_batch=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2]), shard_group=st.sampled_from([0, 0, 2]),
    accum=st.sampled_from([1, 4])))


def _layout(d, **kw):
    d = dict(d)
    accum = d.pop("accum")
    if d["shard_group"] >= d["dp"] * d["cp"]:
        d["shard_group"] = 0
    return Layout(**d, global_batch=d["dp"] * d["micro_batch"] * accum, seq_len=2048, **kw)


@settings(max_examples=60, deadline=None)
@given(d=LAYOUTS, blackwell=st.booleans(), transpose=st.booleans())
def test_fp8_primary_weights_never_move_more_dp_bytes_than_bf16_gathers(sb, d, blackwell,
                                                                         transpose):
    """The same FP8 NeMo layout with its FP8 primary weights (the catalog's stacks) and
    without (buffers.LEGACY: 16-bit gathers): no DP part is larger, nor the step."""
    model = load_catalog().model("llama3-8b")
    lay = _layout(d, precision=FP8, stack=NEMO)
    hw = BLACKWELL if blackwell else HOPPER
    stacks = sb if transpose else sb.with_fp8_transpose(False)
    fp8 = _totals(model, lay, hw, stacks)
    bf16 = _totals(model, lay, hw, None)
    assert all(a <= b for a, b in zip(fp8, bf16, strict=True))
    assert float(step_time(model, lay, hw, EFF, stacks=stacks).step_s) <= \
        float(step_time(model, lay, hw, EFF).step_s)


@settings(max_examples=40, deadline=None)
@given(d=LAYOUTS, precision=st.sampled_from([BF16, FP8]), stack=st.sampled_from([0, 1, 2]))
def test_ep1_leaves_the_time_unchanged_bit_for_bit(sb, d, precision, stack):
    """ep = 1: the experts share the dense buffers and the dp x cp group, so the step is the
    one computed without any expert split, exactly (both paths)."""
    model = load_catalog().model("mixtral-8x7b")
    lay = _layout(d, precision=precision, stack=stack)
    got = step_time(model, lay, HOPPER, EFF, stacks=sb)
    one = step_time_one(model, lay, HOPPER, EFF, stacks=sb)
    with pytest.MonkeyPatch.context() as mp:  # no routed experts anywhere
        mp.setattr(dp_comm, "busiest_split", lambda placed, share=1.0: (0.0, 0.0))
        ref = step_time(model, lay, HOPPER, EFF, stacks=sb)
    assert np.asarray(got.step_s).tobytes() == np.asarray(ref.step_s).tobytes()
    assert np.asarray(got.dp_comm_s).tobytes() == np.asarray(ref.dp_comm_s).tobytes()
    assert math.isclose(one.step_s, float(got.step_s), rel_tol=1e-9)
