"""Alpha-beta collective costs (issue #4) against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.estimators import comm

GB = 1e9


def test_ring_allreduce_by_hand():
    """8 GPUs, 1 GB, 300 GB/s per direction, 2 us: 2*7/8*1/300 s + 14*2 us = 5.8333 ms + 28 us."""
    t = comm.ring_allreduce_s(1 * GB, 8, 300 * GB, 2e-6)
    assert float(t) == pytest.approx(2 * 7 / 8 / 300 + 14 * 2e-6, rel=1e-12)


def test_reduce_scatter_all_gather_all_to_all_p2p_by_hand():
    assert float(comm.reduce_scatter_s(4 * GB, 4, 50 * GB, 5e-6)) == pytest.approx(
        3 / 4 * 4 / 50 + 3 * 5e-6)
    assert comm.all_gather_s is comm.reduce_scatter_s
    assert float(comm.all_to_all_s(1 * GB, 16, 25 * GB, 4e-6)) == pytest.approx(
        15 / 16 / 25 + 15 * 4e-6)
    assert float(comm.p2p_s(0.5 * GB, 25 * GB, 4e-6)) == pytest.approx(0.02 + 4e-6)


def test_single_rank_groups_cost_nothing():
    for f in (comm.ring_allreduce_s, comm.reduce_scatter_s, comm.all_to_all_s):
        assert float(f(1 * GB, 1, 1 * GB, 1e-5)) == 0.0


def test_hierarchical_allreduce_by_hand():
    """64 GPUs, 8 per node: RS + AG of 2 GB inside at 450 GB/s, then an all-reduce of the
    2/8 GB shard across 8 nodes at 50 GB/s per GPU (NIC per GPU)."""
    t = comm.hierarchical_allreduce_s(2 * GB, 64, 8, 450 * GB, 2e-6, 50 * GB, 4e-6)
    inner = 2 * (7 / 8 * 2 / 450 + 7 * 2e-6)
    outer = 2 * 7 / 8 * (2 / 8) / 50 + 14 * 4e-6
    assert float(t) == pytest.approx(inner + outer, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 4096), nbytes=st.floats(1e3, 1e11), bw=st.floats(1e9, 1e12))
def test_hierarchy_of_one_is_a_flat_ring(n, nbytes, bw):
    """With one rank per domain the hierarchical all-reduce is the flat ring on the outer link;
    with the whole group inside one domain it is RS + AG on the inner link (= a ring)."""
    flat_out = comm.ring_allreduce_s(nbytes, n, bw, 4e-6)
    assert float(comm.hierarchical_allreduce_s(nbytes, n, 1, 9e12, 1e-6, bw, 4e-6)) == \
        pytest.approx(float(flat_out), rel=1e-9)
    flat_in = comm.ring_allreduce_s(nbytes, n, bw, 1e-6)
    assert float(comm.hierarchical_allreduce_s(nbytes, n, n, bw, 1e-6, 1.0, 1.0)) == \
        pytest.approx(float(flat_in), rel=1e-9)


def test_group_link_and_ranks_inside():
    bw, a = comm.group_link(np.array([8, 16]), 8, 450.0, 1e-6, 50.0, 4e-6)
    assert list(bw) == [450.0, 50.0] and list(a) == [1e-6, 4e-6]
    # dp ranks of stride tp=2 in an 8-GPU domain: 4 per domain; stride 8: 1; capped at dp
    assert list(comm.ranks_inside(np.array([2, 8, 1]), np.array([64, 64, 2]), 8)) == [4, 1, 2]


def test_zero_modes_move_the_same_bytes_as_an_allreduce():
    """ZeRO-1/2: reduce-scatter of gradients + all-gather of parameters; with 16-bit grads and
    params this is the all-reduce volume (Rajbhandari et al. 2020, section 7)."""
    args = (1e9, 16, 1, 1e12, 0.0, 50 * GB, 0.0)
    ar = comm.dp_grad_sync_s(1e9, 16, 0, *args[2:])
    z1 = comm.dp_grad_sync_s(1e9, 16, 1, *args[2:])
    z3 = comm.dp_grad_sync_s(1e9, 16, 3, *args[2:])
    assert float(z1) == pytest.approx(float(ar))
    assert float(z3) == pytest.approx(float(ar) / 2)  # the parameter gather moves to z3 gathers
    g = comm.zero3_gather_s(1e9, 16, np.array([0, 3]), 4, 1, 1e12, 0.0, 50 * GB, 0.0)
    assert g[0] == 0 and g[1] == pytest.approx(2 * 4 * 15 / 16 * 2e9 / (50 * GB))


def test_tp_traffic_per_step_by_hand():
    """GPT-3-like layer, tp 8 on NVLink4: 4 all-reduces of (1 x 2048 x 12288 x 2 bytes) per layer
    per micro-batch, 12 layers per stage, 16 micro-batches."""
    act = 1 * 2048 * 12288 * 2
    t = comm.tp_comm_s(act, 8, comm.tp_layer_collectives(False), 12, 16, 450 * GB, 2e-6)
    one = 2 * 7 / 8 * act / (450 * GB) + 14 * 2e-6
    assert float(t) == pytest.approx(4 * 12 * 16 * one)
    assert float(comm.tp_layer_collectives(True)) == 6  # full recompute repeats 2


def test_exposed_never_negative():
    assert list(comm.exposed(np.array([1.0, 3.0]), 2.0, 0.5)) == [0.0, 2.0]


def test_cp_and_ep_traffic_by_hand():
    """CP ring: (cp-1) K/V sends forward, twice that backward (3 per step of the ring); MoE:
    4 all-to-alls (dispatch + combine, forward + backward) per MoE layer and micro-batch."""
    kv = 64e6
    t = comm.cp_comm_s(kv, 4, 10, 2, 100 * GB, 1e-6)
    assert float(t) == pytest.approx(3 * 3 * (kv / (100 * GB) + 1e-6) * 10 * 2)
    d = 32e6
    t = comm.ep_comm_s(d, 8, 20, 4, 450 * GB, 2e-6)
    assert float(t) == pytest.approx(4 * (7 / 8 * d / (450 * GB) + 7 * 2e-6) * 20 * 4)
    assert float(comm.pp_comm_s(1e6, 1, 1, 8, 1 * GB, 0.0)) == 0.0  # no pipeline, no p2p
    assert float(comm.pp_comm_s(1e6, 4, 2, 8, 1 * GB, 0.0)) == pytest.approx(2 * 2 * 8 * 1e-3)


def test_shared_overlap_never_hides_more_than_the_budget():
    exp = comm.shared_overlap([2.0, 3.0], [2.0, 3.0], 4.0)
    assert sum(float(e) for e in exp) == pytest.approx(1.0)  # 5 s of comm, 4 s of compute
    exp = comm.shared_overlap([2.0, 3.0], [1.0, 0.5], 4.0)
    assert [float(e) for e in exp] == pytest.approx([1.0, 2.5])  # caps bind, budget does not


def test_hierarchical_all_to_all_by_hand():
    """16 EP ranks, 8 per scale-up domain: 7/16 of the buffer goes over the scale-up link and
    8/16 over the scale-out fabric at the same time, so the slower link sets the time (exact);
    with every rank in one domain, or one rank per domain, it is the flat all-to-all."""
    d = 64e6
    t = comm.hierarchical_all_to_all_s(d, 16, 8, 450 * GB, 2e-6, 50 * GB, 5e-6)
    expected = max(7 / 16 * d / (450 * GB), 8 / 16 * d / (50 * GB)) + 7 * 2e-6 + 8 * 5e-6
    assert float(t) == pytest.approx(expected, rel=1e-12)
    inside = comm.hierarchical_all_to_all_s(d, 8, 8, 450 * GB, 2e-6, 50 * GB, 5e-6)
    assert float(inside) == pytest.approx(float(comm.all_to_all_s(d, 8, 450 * GB, 2e-6)))
    spread = comm.hierarchical_all_to_all_s(d, 16, 1, 450 * GB, 2e-6, 50 * GB, 5e-6)
    assert float(spread) == pytest.approx(float(comm.all_to_all_s(d, 16, 50 * GB, 5e-6)))
    # ep_comm_s: 4 of them per MoE layer and micro-batch, through the two-level path
    per_step = comm.ep_comm_s(d, 16, 10, 3, 450 * GB, 2e-6, n_inner=8, bw_outer=50 * GB,
                              alpha_outer=5e-6)
    assert float(per_step) == pytest.approx(4 * expected * 10 * 3, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 256), st.integers(1, 72), st.floats(1e3, 1e9),
       st.floats(1e9, 1e12), st.floats(1e9, 1e12), st.floats(1.0, 4.0))
def test_two_level_all_to_all_is_bounded_and_monotone_in_bandwidth(n, k, nbytes, up, out, f):
    """With the scale-up link at least as fast as the fabric, the two-level all-to-all never
    costs more than sending everything over the fabric (the one-link bound), and a faster link
    of either kind never makes it slower."""
    fast, slow = max(up, out), min(up, out)
    t = float(comm.hierarchical_all_to_all_s(nbytes, n, k, fast, 1e-6, slow, 2e-6))
    assert t <= float(comm.all_to_all_s(nbytes, n, slow, 2e-6)) * (1 + 1e-12)
    for faster in (comm.hierarchical_all_to_all_s(nbytes, n, k, fast * f, 1e-6, slow, 2e-6),
                   comm.hierarchical_all_to_all_s(nbytes, n, k, fast, 1e-6, slow * f, 2e-6)):
        assert float(faster) <= t * (1 + 1e-12)


# --- issue #12 terms, each against its formula written out ------------------------------------


def test_tree_allreduce_latency_by_hand():
    """2 log2(n) alpha: 1,024 ranks at 4 us = 2 x 10 x 4 us = 80 us; one rank costs nothing."""
    assert float(comm.tree_allreduce_latency_s(1024, 4e-6)) == pytest.approx(80e-6, rel=1e-12)
    assert float(comm.tree_allreduce_latency_s(1, 4e-6)) == 0.0


def test_dp_buckets_by_hand():
    """Megatron Core: bucket = max(40M, 1M x dp) parameters; ceil; at least one."""
    assert float(comm.dp_buckets(1e9, 8)) == 25.0  # 1e9 / 40e6
    assert float(comm.dp_buckets(1e9, 100)) == 10.0  # bucket 100M
    assert float(comm.dp_buckets(41e6, 8)) == 2.0
    assert float(comm.dp_buckets(1e3, 8)) == 1.0


def test_buckets_repeat_only_the_latency_terms():
    """b buckets of a ZeRO-0 all-reduce over a flat ring of n (no hierarchy: n_inner 1):
    2(n-1)/n x bytes / bw + b x 2(n-1) alpha."""
    params, n, bw, a, b = 1e9, 16, 50e9, 5e-6, 25.0
    reduce, gather = comm.dp_sync_parts_s(params, n, 0, 1, 450e9, 2e-6, bw, a, b)
    by_hand = 2 * (n - 1) / n * params * 2.0 / bw + b * 2 * (n - 1) * a
    assert float(reduce) == pytest.approx(by_hand, rel=1e-12)
    assert float(gather) == 0.0
    # ZeRO-1: reduce-scatter of the gradients + all-gather of the 16-bit weights, each half
    rs, ag = comm.dp_sync_parts_s(params, n, 1, 1, 450e9, 2e-6, bw, a, b)
    half = (n - 1) / n * params * 2.0 / bw + b * (n - 1) * a
    assert float(rs) == pytest.approx(half, rel=1e-12)
    assert float(ag) == pytest.approx(half, rel=1e-12)
    assert float(comm.dp_grad_sync_s(params, n, 1, 1, 450e9, 2e-6, bw, a, b)) == \
        pytest.approx(2 * half, rel=1e-12)
    # ZeRO-3 gathers every micro-batch instead (zero3_gather_s), not once per step
    assert float(comm.dp_sync_parts_s(params, n, 3, 1, 450e9, 2e-6, bw, a, b)[1]) == 0.0


def test_deduplicated_dispatch_never_sends_more_than_one_copy_per_expert():
    """comm.a2a_token_copies (DeepEP / HybridEP dispatch): over every EP size, domain size and
    top-k, the fabric copies are at most the k (n - n_inner)/n of a per-expert all-to-all and
    at most one per remote domain, the scale-up copies at most k; with one domain nothing
    crosses the fabric and the scale-up copies are the other ranks hit,
    (n-1)(1 - C(E - E/n, k)/C(E, k)); dense models send none."""
    from math import comb
    for n, n_in, e, k in [(8, 8, 128, 8), (16, 8, 128, 8), (32, 8, 256, 8), (64, 4, 256, 8),
                          (64, 64, 256, 8), (4, 1, 16, 2), (256, 8, 256, 8)]:
        inner, outer = (float(x) for x in comm.a2a_token_copies(n, n_in, e, k))
        assert 0.0 <= outer <= k * (n - n_in) / n + 1e-12
        assert outer <= n / n_in - 1.0 + 1e-12
        assert 0.0 <= inner <= k  # each expert copy takes at most one scale-up hop
        if n == n_in:
            assert outer == 0.0
            assert inner == pytest.approx((n - 1) * (1 - comb(e - e // n, k) / comb(e, k)))
    assert [float(x) for x in comm.a2a_token_copies(16, 8, 0, 0)] == [0.0, 0.0]


def test_alltoall_dispatch_sends_one_copy_per_routed_expert():
    """Megatron-Core's alltoall dispatcher (`dedup` False) permutes one row per (token, routed
    expert) pair: k (n - n_inner)/n copies cross the fabric and k (n_inner - 1)/n the scale-up
    link, by hand for EP 16 over two 8-GPU domains with top-8 (4 and 3.5). Never fewer fabric
    copies than the deduplicated dispatch's (which forwards inside the remote domain, so only
    inside one domain are its scale-up copies also fewer); the same fabric copies when k = 1."""
    inner, outer = (float(x) for x in comm.a2a_token_copies(16, 8, 128, 8, dedup=False))
    assert (inner, outer) == pytest.approx((3.5, 4.0), rel=1e-12)
    for n, n_in, e, k in [(8, 8, 128, 8), (16, 8, 128, 8), (64, 4, 256, 8), (4, 1, 16, 2),
                          (16, 8, 64, 1)]:
        flat = [float(x) for x in comm.a2a_token_copies(n, n_in, e, k, dedup=False)]
        flex = [float(x) for x in comm.a2a_token_copies(n, n_in, e, k)]
        assert flex[1] <= flat[1] + 1e-12
        if n == n_in:
            assert flex[0] <= flat[0] + 1e-12
        if k == 1:
            assert flex[1] == pytest.approx(flat[1], rel=1e-12)
    bw = dict(bw_inner=450e9, alpha_inner=2e-6, bw_outer=50e9, alpha_outer=5e-6)
    per_expert = comm.moe_all_to_all_s(1e7, 16, 8, 128, 8, 4, 2, **bw, dedup=False)
    assert float(per_expert) > float(comm.moe_all_to_all_s(1e7, 16, 8, 128, 8, 4, 2, **bw))
    # arrays: one entry per dispatcher
    both = comm.a2a_token_copies(16, 8, 128, 8, dedup=np.array([True, False]))[1]
    assert float(both[1]) == pytest.approx(4.0) and float(both[0]) < 4.0
