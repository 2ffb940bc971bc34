"""MoE token dispatch over the scale-out network (issue #12).

The dispatch terms (`comm.a2a_token_copies`, `comm.moe_dispatch_s`) against an exhaustive
enumeration of the routing and against DeepEP's published internode kernel figure, and the
network scaling facts: spreading one EP group over more nodes never speeds up its dispatch or
the step; an EP group inside one node does not depend on the NIC; a thinner NIC slows an EP
group that crosses nodes."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest

from gpuplan import validation
from gpuplan.catalog import load_catalog
from gpuplan.estimators import comm
from gpuplan.estimators.timing import step_time
from gpuplan.estimators.timing_one import step_time_one
from gpuplan.search.hardware import efficiency_for, hardware_for
from gpuplan.spec import D_ALLTOALL, D_FLEX, FP8, Layout

QWEN3_30B_ROW = "mbridge2606-h100-qwen3-30b-a3b-16-fp8"  # model dimensions only


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.fixture(scope="module")
def qwen3_30b(cat):
    rows = {r["id"]: r for r in validation.load_runs()}
    return validation.run_model(cat, rows[QWEN3_30B_ROW])


# --- the copy counts, against every routing of a small case -------------------------------------


def _enumerated_copies(experts: int, k: int, n: int, n_in: int, dedup: bool
                       ) -> tuple[float, float]:
    """Mean (scale-up, scale-out) copies of one token sent by rank 0 over every one of the
    C(E, k) equally likely expert sets: experts E/n per rank and ranks n_in per domain, both in
    order. Deduplicated: one fabric copy per remote domain hit, landing on the rank with the
    sender's local index there, and one scale-up copy to every other rank hit in each domain
    (from the sender at home, forwarded by the landing rank elsewhere). Per expert: one copy
    per routed expert, over the fabric when its rank is in another domain, over the scale-up
    link when it is another rank of the sender's domain."""
    per_rank, inner, outer = experts // n, 0.0, 0.0
    sets = list(itertools.combinations(range(experts), k))
    for chosen in sets:
        ranks = [e // per_rank for e in chosen]
        if dedup:
            hit = set(ranks)
            outer += len({r // n_in for r in hit} - {0})
            inner += sum(1 for r in hit if r % n_in != 0)
        else:
            outer += sum(1 for r in ranks if r // n_in != 0)
            inner += sum(1 for r in ranks if r // n_in == 0 and r != 0)
    return inner / len(sets), outer / len(sets)


@pytest.mark.parametrize("experts,k,n,n_in", [(8, 3, 4, 2), (12, 4, 6, 3), (16, 2, 8, 2),
                                              (16, 5, 4, 4), (8, 2, 8, 1)])
@pytest.mark.parametrize("dedup", [True, False])
def test_copies_equal_an_enumeration_of_every_routing(experts, k, n, n_in, dedup):
    """`a2a_token_copies` is the expectation over uniform routing; enumerating all expert sets
    of a small case gives it exactly (1e-12: float rounding only)."""
    got = [float(x) for x in comm.a2a_token_copies(n, n_in, experts, k, dedup)]
    assert got == pytest.approx(_enumerated_copies(experts, k, n, n_in, dedup), rel=1e-12,
                                abs=1e-12)


def _enumerated_domains_hit(experts: int, k: int, n: int, n_in: int) -> float:
    """Mean number of scale-up domains (the sender's included) holding at least one of a
    token's k experts, over every expert set."""
    per_domain = experts // (n // n_in)
    sets = list(itertools.combinations(range(experts), k))
    return sum(len({e // per_domain for e in chosen}) for chosen in sets) / len(sets)


@pytest.mark.parametrize("experts,k,n,n_in", [(8, 3, 4, 2), (12, 4, 6, 3), (16, 2, 8, 2),
                                              (8, 2, 8, 1), (16, 1, 4, 2)])
def test_logical_copies_equal_an_enumeration_of_every_routing(experts, k, n, n_in):
    """`a2a_logical_copies`: the (token, domain hit) pairs, own domain included, that the
    deduplicated dispatch's internode pipeline moves: exactly the enumerated mean (1e-12);
    none inside one domain, where that pipeline is not used."""
    got = float(comm.a2a_logical_copies(n, n_in, experts, k))
    assert got == pytest.approx(_enumerated_domains_hit(experts, k, n, n_in), rel=1e-12)
    assert float(comm.a2a_logical_copies(n, n, experts, k)) == 0.0
    assert float(comm.a2a_logical_copies(n, n_in, 0, 0)) == 0.0


def test_dispatch_time_is_the_slower_link_plus_one_latency_per_peer():
    """moe_dispatch_s = max(scale-up copies x bytes / bw_up, fabric copies x bytes / bw_out)
    + (n_inner - 1) alpha_up + (domains - 1) alpha_out, written out for EP 32 over 4 domains."""
    tb, up, out, a_up, a_out = 30e6, 450e9, 42.5e9, 1.9e-6, 4e-6
    inner, outer = (float(x) for x in comm.a2a_token_copies(32, 8, 256, 8))
    expected = max(inner * tb / up, outer * tb / out) + 7 * a_up + 3 * a_out
    got = float(comm.moe_dispatch_s(tb, 32, 8, 256, 8, up, a_up, out, a_out))
    assert got == pytest.approx(expected, rel=1e-12)
    # with the internode pipeline bound (flex only): a third leg, the logical pairs at its rate
    logical, rate = float(comm.a2a_logical_copies(32, 8, 256, 8)), 30e9
    bound = max(inner * tb / up, outer * tb / out, logical * tb / rate) + 7 * a_up + 3 * a_out
    got = float(comm.moe_dispatch_s(tb, 32, 8, 256, 8, up, a_up, out, a_out, True, rate))
    assert got == pytest.approx(bound, rel=1e-12) and bound > expected
    # Megatron's alltoall dispatcher and a dispatch inside one domain never meet it
    for args in ((32, 8, False), (8, 8, True)):
        n, n_in, dedup = args
        free = comm.moe_dispatch_s(tb, n, n_in, 256, 8, up, a_up, out, a_out, dedup)
        assert float(comm.moe_dispatch_s(tb, n, n_in, 256, 8, up, a_up, out, a_out, dedup,
                                         rate)) == float(free)


def test_deepep_internode_figure_at_ep32():
    """DeepEP's normal (training) kernels, H800 with one ConnectX-7 400 Gb/s per GPU (~50 GB/s),
    4,096 tokens x 7,168 hidden, top-8 of 256 experts, FP8 dispatch: 58 GB/s dispatch and
    57 GB/s combine "bottleneck bandwidth (RDMA)" at EP 32 (docs/legacy.md of
    github.com/deepseek-ai/DeepEP, the V1 table). tests/test_internode.py there divides the
    bytes of every (token, node hit) pair -- the sender's own node included, which never
    crosses the NIC -- by the kernel time; at EP 32 its top-4 node groups of 4 nodes restrict
    nothing, so the routing is the uniform one `a2a_token_copies` takes. The model's dispatch
    over 4 domains of 8 (NIC at comm.NET_EFFICIENCY of 50 GB/s, NVLink at DeepEP's ~160 GB/s,
    NCCL's latencies), turned into the same logical figure, lands within 10% of both: DeepEP's
    EP 32 and EP 64 figures imply 43.5-44.6 GB/s on the wire, 0.87-0.89 of the line rate,
    against 0.85 here, plus the latency terms."""
    fp8_bytes = 7168 * (1 + 4 / 128)  # e4m3 + one fp32 scale per 128 (DeepEP's fp8_factor)
    tb = 4096 * fp8_bytes
    t = float(comm.moe_dispatch_s(tb, 32, 8, 256, 8, 160e9, 1.9e-6,
                                  50e9 * comm.NET_EFFICIENCY, 4e-6))
    nodes_hit = 4 * (1 - comb(256 - 64, 8) / comb(256, 8))  # own node included
    logical = nodes_hit * tb / t
    for published in (58e9, 57e9):
        assert logical == pytest.approx(published, rel=0.10)


def test_hybridep_h100_internode_figures(cat):
    """HybridEP on H100 with one ConnectX-7 400 Gb/s per GPU (github.com/deepseek-ai/DeepEP,
    branch hybrid-ep, docs/README_Hybrid-EP.md, "H100 Platform": 4,096 tokens x 7,168 BF16,
    top-8 of 8 experts per rank, 8 ranks per node, 16 SMs, torch API), "IB bandwidth" =
    (token, node hit) pairs, own node included, x bytes / time; harmonic mean of dispatch and
    combine: 53.9, 49.8 and 43.7 GB/s at 16, 32 and 64 ranks. The model with the catalog's
    ib-ndr fabric: at 2 nodes, where the pipeline bound is the source's own figure, within 2%
    (latencies only); at 4 and 8 nodes, independent of it, within 12% (the wire at
    NET_EFFICIENCY: HybridEP reaches 0.75-0.77 of the line rate there, DeepEP V1 0.87-0.89)."""
    fab = cat.fabrics["ib-ndr"]
    line = fab.bytes_per_s_per_direction
    rate = float(comm.dispatch_logical_bw(line, fab.moe_dispatch_logical_share))
    tb = 4096 * 7168 * 2
    for ranks, published, tol in ((16, (54.47, 53.35), 0.02), (32, (47.36, 52.53), 0.12),
                                  (64, (41.24, 46.57), 0.12)):
        experts = 8 * ranks
        t = float(comm.moe_dispatch_s(tb, ranks, 8, experts, 8, 450e9, 1.9e-6,
                                      line * comm.NET_EFFICIENCY, fab.latency_s, True, rate))
        model = float(comm.a2a_logical_copies(ranks, 8, experts, 8)) * tb / t
        measured = 2e9 / (1 / published[0] + 1 / published[1])
        assert model == pytest.approx(measured, rel=tol)


def test_a_fabric_without_a_dispatch_figure_has_no_pipeline_bound(cat):
    """The share is nan where nothing was measured: no bound (inf), the wire alone."""
    assert cat.fabrics["ib-xdr"].moe_dispatch_logical_share is None
    assert float(comm.dispatch_logical_bw(100e9, float("nan"))) == np.inf
    assert float(comm.dispatch_logical_bw(50e9, 1.08)) == pytest.approx(54e9, rel=1e-12)
    # the catalog carries it to the hardware of a system on that fabric, and not elsewhere
    share = cat.fabrics["ib-ndr"].moe_dispatch_logical_share
    assert float(hardware_for(cat, "h100-sxm", precision="bf16",
                              system="dgx-h100").scale_out_dispatch_share[0]) == share
    assert share == pytest.approx(2 / (1 / 54.47 + 1 / 53.35) / 50, abs=0.005)
    offer = next(o.id for o in cat.offers.values() if o.accelerator == "h100-sxm")
    assert np.isnan(hardware_for(cat, "h100-sxm", precision="bf16",
                                 offer=offer).scale_out_dispatch_share[0])


# --- scaling facts ----------------------------------------------------------------------------


def _links(cat, acc: str) -> tuple[float, ...]:
    hw = hardware_for(cat, acc, precision="bf16", scale_out_bytes_per_s=50e9)
    line = float(hw.scale_out_bytes_per_s[0])
    return (float(hw.scale_up_bytes_per_s[0]), float(hw.scale_up_latency_s[0]),
            line * comm.NET_EFFICIENCY, float(hw.scale_out_latency_s[0]),
            float(comm.dispatch_logical_bw(line, hw.scale_out_dispatch_share[0])))


@pytest.mark.parametrize("acc", ["h100-sxm", "b200"])
def test_spreading_an_ep_group_over_more_nodes_never_speeds_up_its_dispatch(cat, acc):
    """For the catalog's 8-GPU HGX platforms on 400 Gb/s InfiniBand (with the internode
    pipeline bound of the deduplicated dispatch), every EP size, expert count and top-k, both
    dispatchers: fewer EP ranks per node (the same group on more nodes) never gives a faster
    dispatch. This needs a scale-up link well ahead of the NIC (here 10-21x): the
    deduplicated dispatch uses both links at once, and with NVLink only ~4.7x the NIC (H800:
    200 against 42.5 GB/s) two nodes of 4 can beat one of 8 for a small group -- the NIC then
    adds a path."""
    up, a_up, out, a_out, logical = _links(cat, acc)
    assert up >= 8 * out and np.isfinite(logical)
    for experts, k, n, dedup in itertools.product((16, 64, 128, 256), (1, 2, 4, 8),
                                                  (2, 4, 8, 16, 64, 256), (True, False)):
        if experts % n:
            continue
        times = [float(comm.moe_dispatch_s(1e7, n, n_in, experts, k, up, a_up, out, a_out,
                                           dedup, logical))
                 for n_in in (8, 4, 2, 1) if n_in <= n]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:], strict=False))


def _moe_step(cat, model, lay: Layout, acc: str, **platform):
    hw = hardware_for(cat, acc, precision="fp8", **platform)
    eff = efficiency_for(cat, hw.family)
    return step_time(model, lay, hw, eff), step_time_one(model, lay, hw, eff)


def _ep_layout(ep: int, dispatcher: int) -> Layout:
    return Layout(dp=ep, ep=ep, global_batch=16 * ep, micro_batch=1, seq_len=4096, zero=1,
                  precision=FP8, moe_dispatcher=dispatcher)


@pytest.mark.parametrize("dispatcher", [D_FLEX, D_ALLTOALL])
def test_one_node_moe_layout_is_unaffected_by_the_nic(cat, qwen3_30b, dispatcher):
    """Qwen3-30B-A3B with EP 8 on one 8-GPU B200 node: its dispatch, DP and syncs never leave
    NVLink, so 400, 200 or 40 Gb/s per GPU give the same step (1e-12), in the array model and
    in the scalar fast path."""
    lay = _ep_layout(8, dispatcher)
    steps = []
    for nic in (50e9, 25e9, 5e9):
        t, one = _moe_step(cat, qwen3_30b, lay, "b200", scale_out_bytes_per_s=nic)
        steps += [float(t.step_s[0]), float(one.step_s)]
        assert float(t.ep_comm_s[0]) > 0.0  # the dispatch is there, on NVLink
    assert steps == pytest.approx([steps[0]] * len(steps), rel=1e-12)


@pytest.mark.parametrize("dispatcher", [D_FLEX, D_ALLTOALL])
def test_halving_the_nic_slows_an_ep_group_that_crosses_nodes(cat, qwen3_30b, dispatcher):
    """Qwen3-30B-A3B with EP 16 over two 8-GPU H100 nodes (no all-to-all overlap): the fabric
    leg sets the dispatch time, so 400 -> 200 Gb/s per GPU makes the exposed EP time grow by
    more than 1.8x (2x minus the NVLink-bound and latency parts) and the step > 5% slower."""
    lay = _ep_layout(16, dispatcher)
    full, _ = _moe_step(cat, qwen3_30b, lay, "h100-sxm", scale_out_bytes_per_s=50e9)
    half, _ = _moe_step(cat, qwen3_30b, lay, "h100-sxm", scale_out_bytes_per_s=25e9)
    assert float(half.ep_comm_s[0]) > 1.8 * float(full.ep_comm_s[0])
    assert float(half.step_s[0]) > 1.05 * float(full.step_s[0])


@pytest.mark.parametrize("dispatcher", [D_FLEX, D_ALLTOALL])
def test_more_nodes_for_the_same_ep_group_never_speed_up_the_step(cat, qwen3_30b, dispatcher):
    """The same EP 16 layout on H100 nodes of 8, 4, 2 and 1 GPUs (scale-up domain = node):
    every group crosses the fabric sooner, so the step time never falls (1e-12), and the
    exposed EP time of one 16-GPU domain (NVLink only) is below that of 16 single-GPU nodes
    (fabric only). The scalar fast path agrees (1e-9)."""
    lay = _ep_layout(16, dispatcher)
    steps, ep = [], []
    for node in (16, 8, 4, 2, 1):
        t, one = _moe_step(cat, qwen3_30b, lay, "h100-sxm", gpus_per_node=node,
                           scale_up_domain=node)
        assert float(one.step_s) == pytest.approx(float(t.step_s[0]), rel=1e-9)
        steps.append(float(t.step_s[0]))
        ep.append(float(t.ep_comm_s[0]))
    assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:], strict=False))
    assert ep[-1] > ep[0]
    assert np.all(np.isfinite(steps))
