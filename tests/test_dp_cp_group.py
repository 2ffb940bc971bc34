"""Data-parallel collectives run over the dp x cp ranks (#12): gradient reduction, ZeRO-1/2
parameter all-gather and ZeRO-3/FSDP gathers span the data-parallel group WITH context
parallelism (Megatron-Core's dp-cp group, torchtitan's dp_shard x cp `fsdp` mesh dimension;
sources in estimators/comm.py above `dp_cp_group`), cp inside dp at stride tp."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from dp_setup import A_OUT, A_UP, EFF, HW, NIC, OUT, TINY, UP
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.estimators import comm
from gpuplan.estimators.shapes import params_per_gpu
from gpuplan.estimators.timing import TimingBreakdown, step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.spec import Layout, ModelSpec

GPT7B = ModelSpec(id="g", name="g", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=16384,
                  vocab=50257)


def _dp(model, hw=HW, **kw):
    return float(step_time(model, Layout(**kw), hw, EFF).dp_comm_s)


def test_zero1_over_dp_times_cp_by_hand():
    """ZeRO-1, tp 1, cp 4, dp 4 on 8-GPU NVLink nodes: the 16 dp x cp ranks are consecutive
    (stride tp = 1), 8 per node, 2 nodes. One bucket (< 40M parameters), so both collectives
    are exposed whole. Gradient reduce-scatter of B = 2 bytes x params: inside the node
    7/8 B over NVLink + 7 latencies, across the 2 nodes 1/2 of the B/8 shard over the NIC + 1
    latency; the 16-bit parameter all-gather moves the same. NIC bytes per GPU: B/16 each way
    (the dp group alone, 4 ranks at stride 4, would have sent B/4 of 1/2 x 2 nodes, 2 per node).
    """
    B = TINY.total_params() * 2.0
    one = 7 / 8 * B / UP + 7 * A_UP + (2 - 1) / 2 * (B / 8) / OUT + 1 * A_OUT
    got = _dp(TINY, tp=1, cp=4, dp=4, zero=1, micro_batch=1, global_batch=16, seq_len=512)
    assert got == pytest.approx(2 * one, rel=1e-9)


def test_cp_ranks_share_the_node_so_less_crosses_the_network():
    """tp 4, cp 2, dp 2 on 8-GPU nodes (Megatron order tp-cp-ep-dp-pp: each node holds one tp4 x
    cp2 block): the dp x cp group is 4 ranks at stride 4, 2 per node, so the all-reduce of
    ZeRO-0 sends B/2 (not B) across the nodes: 2 x 1/2 B/2 NVLink + 2 latencies, then a
    2-rank ring all-reduce of B/2 on the NIC. `params`: one GPU's tp4 share."""
    B = float(params_per_gpu(TINY, 4, 1, 1)) * 2.0
    hand = 2 * (1 / 2 * B / UP + A_UP) + 2 * (1 / 2) * (B / 2) / OUT + 2 * A_OUT
    got = _dp(TINY, tp=4, cp=2, dp=2, zero=0, micro_batch=1, global_batch=8, seq_len=512)
    assert got == pytest.approx(hand, rel=1e-9)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_cp8_dp1_still_reduces_gradients(zero):
    """CP 8 with dp 1: the 8 CP ranks hold the same weights and see different tokens, so they
    reduce their gradients (and ZeRO gathers its shards) among themselves: DP time > 0."""
    got = _dp(GPT7B, cp=8, dp=1, zero=zero, micro_batch=1, global_batch=2, seq_len=32768)
    assert got > 0.0


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_the_collective_depends_on_dp_times_cp_only(zero):
    """One bucket, exposed whole: cp 8 dp 1 runs the same collective as dp 8 cp 1 (8
    consecutive ranks on one node), to rounding."""
    a = _dp(TINY, cp=8, dp=1, zero=zero, micro_batch=1, global_batch=4, seq_len=2048)
    b = _dp(TINY, cp=1, dp=8, zero=zero, micro_batch=1, global_batch=32, seq_len=2048)
    assert a == pytest.approx(b, rel=1e-12) and a > 0.0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8, 64]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 4, 8]), st.sampled_from([4, 8, 72]))
def test_moving_a_factor_from_dp_to_cp_keeps_the_group(tp, dp, cp, f, domain):
    """For fixed GPUs, moving a factor f from dp to cp leaves the DP-collective group (ranks and
    ranks per scale-up domain) unchanged; the group is never smaller than the dp ranks alone,
    and never has fewer ranks per domain than the dp group at stride tp x cp."""
    moved = comm.dp_cp_group(tp, dp, cp * f, domain)
    assert comm.dp_cp_group(tp, dp * f, cp, domain) == moved
    ranks, inside = comm.dp_cp_group(tp, dp, cp, domain)
    assert ranks >= dp and inside >= comm.ranks_inside(tp * cp, dp, domain)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([1, 2, 8]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4, 16]),
       st.sampled_from([1, 2, 4, 8]), st.integers(0, 3), st.integers(1, 4),
       st.sampled_from([0, 2, 4]))
def test_dp_time_shows_exactly_when_dp_times_cp_exceeds_one(tp, pp, dp, cp, zero, m, sg):
    """Whatever the split between dp and cp (and an HSDP shard group dividing dp x cp), the DP
    time is > 0 exactly when dp x cp > 1: moving a factor from dp to cp never makes it vanish."""
    sg = sg if 0 < sg < dp * cp and (dp * cp) % sg == 0 else 0
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, zero=zero, micro_batch=1, global_batch=dp * m,
                 seq_len=4096, shard_group=sg)
    t = step_time(GPT7B, lay, HW, EFF)
    assert (float(t.dp_comm_s) > 0.0) == (dp * cp > 1)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([2, 4, 8, 16]),
       st.integers(0, 3), st.sampled_from([0, 2, 8]), st.sampled_from([8, 72]),
       st.sampled_from([0.05, 1.0]))
def test_scalar_path_equals_the_vectorized_one_with_cp(tp, dp, cp, zero, sg, domain, nic):
    """timing_one mirrors timing on CP-heavy layouts (HSDP shard groups of the dp x cp ranks,
    thin networks, NVL72 domains) to 1e-9 relative, field by field."""
    sg = sg if 0 < sg < dp * cp and (dp * cp) % sg == 0 else 0
    lay = Layout(tp=tp, dp=dp, cp=cp, zero=zero, micro_batch=1, global_batch=dp * 3,
                 seq_len=8192, shard_group=sg)
    hw = replace(HW, scale_up_domain=domain, scale_out_bytes_per_s=NIC * nic)
    vec, one = step_time(GPT7B, lay, hw, EFF), step_time_one(GPT7B, lay, hw, EFF)
    for f in fields(TimingBreakdown):
        v, o = np.asarray(getattr(vec, f.name)).reshape(-1)[0], getattr(one, f.name)
        assert o == pytest.approx(v, rel=1e-9, abs=0.0), f.name


def test_cli_cp8_dp1_times_dp_traffic_and_bad_groups_stay_one_line(run_cli, run_json):
    """Through `estimate`: CP 8 on one 8-GPU node shows DP time in its JSON breakdown; a shard
    group that does not divide the dp x cp ranks, or degrees that miss the GPU count, are
    one-line errors (exit 2), not tracebacks."""
    base = ("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--seq-len", "65536",
            "--zero", "3")
    doc = run_json(*base, "--gpus", "8", "--cp", "8", "--global-batch", "1")
    assert doc["layout"]["dp"] == 1 and doc["time_breakdown_s"]["dp_comm_s"] > 0.0
    for argv, words in ((["--gpus", "16", "--cp", "8", "--shard-group", "3"], "dp*cp = 16"),
                        (["--gpus", "8", "--cp", "8", "--dp", "2"], "does not equal"),
                        (["--gpus", "8", "--cp", "3"], "not divisible")):
        code, _, err = run_cli(*base, *argv)
        assert code == 2 and err.count("\n") == 1 and words in err, (argv, err)
