"""Communication: alpha-beta collective costs and per-step traffic of each parallelism (L3).

Every bandwidth here is *per GPU, per direction* (a ring uses one direction of each link).
The alpha-beta ring costs are from Thakur, Rabenseifner & Gropp 2005, "Optimization of
Collective Communication Operations in MPICH" (IJHPCA 19(1)), and Patarasuk & Yuan 2009,
"Bandwidth optimal all-reduce algorithms for clusters of workstations" (JPDC 69(2)):

    all-reduce (ring)         2 (n-1)/n * bytes / bw + 2 (n-1) * alpha
    reduce-scatter/all-gather   (n-1)/n * bytes / bw +   (n-1) * alpha
    all-to-all (pairwise)       (n-1)/n * bytes / bw +   (n-1) * alpha
    point-to-point                        bytes / bw +           alpha
    small all-reduce (tree)       2 log2(n) * alpha  (NCCL's tree for latency-bound messages)

Bus bandwidth (NCCL tests, doc/PERFORMANCE.md): nccl-tests report algbw = bytes / time and
busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for reduce-scatter / all-gather, so that
busbw is comparable to the link's bandwidth whatever n. The ring costs above are exactly
bytes / time at busbw = bw; NET_EFFICIENCY is the busbw a large collective reaches on the
scale-out network, as a share of the NIC's line rate.

`bytes` is the full buffer one rank holds before an all-reduce / after an all-gather.
Placement follows Megatron-LM's rank order (tp fastest, then cp, then dp, pp slowest;
Narayanan et al. 2021, arXiv 2104.04473, section 3.3): a group stays on the scale-up link
while its span fits in the scale-up domain, otherwise it crosses the scale-out fabric.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# --- overlap of communication with compute (fraction hidden) ----------------------------------
# Tensor-parallel collectives: the share hidden is a calibrated catalog value
# (efficiency.toml `tp_overlap`, read through `Efficiency.tp_overlap`).
# DP gradient reduction is bucketed and overlapped with the backward pass (Li et al. 2020,
# PyTorch DDP, arXiv 2006.15704, section 3.2.3); the share of the last micro-batch's compute
# that can hide it is an assumed constant (0.8 and 1.0 change the fit by < 0.3 points).
DP_OVERLAP = 0.8
# ZeRO-3/FSDP parameter all-gathers are prefetched during the previous layer's compute
# (Zhao et al. 2023, PyTorch FSDP, arXiv 2304.11277, section 3.3): assumed constant.
ZERO3_OVERLAP = 0.8
# Context-parallel KV ring exchange overlaps with blockwise attention (Liu et al. 2023,
# Ring Attention, arXiv 2310.01889): assumed constant, most hidden.
CP_OVERLAP = 0.7
# MoE all-to-all is on the critical path without special scheduling (DeepSeek-V3's DualPipe
# hides it, arXiv 2412.19437 section 3.2.1; Megatron's default does not): none hidden.
EP_OVERLAP = 0.0
# Pipeline p2p sends: Megatron-LM overlaps them with compute in the interleaved schedule
# (--no-overlap-p2p-communication turns it off, so it is on by default; Megatron-LM
# arguments.py); with plain 1F1B (vpp = 1) they are exposed.
PP_OVERLAP_INTERLEAVED = 1.0
PP_OVERLAP_1F1B = 0.0


# Scale-out network efficiency at scale: the bus bandwidth (NCCL convention above) a large
# multi-node collective reaches, as a share of the per-GPU NIC line rate. nccl-tests over
# 400 Gb/s NDR InfiniBand (50 GB/s per GPU) reach about 40-45 GB/s busbw for >= 1 GB messages
# (NVIDIA's cluster-validation guides); 0.85 is our stated judgement, not fitted. The MoE
# all-to-all gets the same share, as measured (#12): nccl-tests all-to-all over two DGX H100
# nodes with NVLink disabled, 46 GB/s busbw on 400 Gb/s NICs (0.92; github.com/deepseek-ai/
# DeepEP issue #3, 2025-02-25); DeepEP's internode dispatch on H800 + CX7 400 Gb/s (V1 table,
# docs/legacy.md) 58 and 51 GB/s at EP 32 and 64, "logical" figures that count the tokens for
# the sender's own node too (its tests/test_internode.py), i.e. 43.5-44.6 GB/s on the wire
# (0.87-0.89; tests/test_moe_network.py reproduces EP 32 within 4%).
NET_EFFICIENCY = 0.85
# Gradient buckets: Megatron Core's DistributedDataParallel reduces gradients in buckets of
# max(40M, 1M x dp) parameters (megatron/core/distributed/distributed_data_parallel.py,
# bucket_size); PyTorch DDP's bucket_cap_mb is 25. Each bucket is its own collective (one
# latency term each), and the last bucket's reduction cannot start before the backward ends,
# so at least one bucket's time is exposed.
DP_BUCKET_PARAMS = 40e6
DP_BUCKET_PARAMS_PER_RANK = 1e6
# Collectives of one scalar per step over every rank: the gradient-norm all-reduce for
# clipping and the loss / found-inf reduction (Megatron-LM's optimizer step), latency-bound.
STEP_SYNC_COLLECTIVES = 2.0
# Megatron's TP communication overlap (Transformer Engine userbuffers, --tp-comm-overlap) runs
# only inside one NVLink domain; TP groups that cross the network are not overlapped.
TP_CROSS_NODE_OVERLAP = 0.0
# DualPipe (DeepSeek-V3, arXiv 2412.19437 section 3.2.1) overlaps each micro-batch's
# all-to-all and PP communication with the computation of the other direction: "both
# all-to-all and PP communication can be fully hidden during execution".
EP_OVERLAP_DUALPIPE = 1.0
# Megatron-Core's MoE all-to-all overlap (--overlap-moe-expert-parallel-comm with
# --delay-wgrad-compute; Megatron-Core MoE README, "EP A2A overlap"; set by the Megatron-Bridge
# DeepSeek-V3 and Qwen3 MXFP8 recipes from 26.06, and the B200 EP 32 DeepSeek-V3 one from
# 26.04.01): in the 1F1B steady state one micro-batch's forward runs merged with another's
# backward, so each one's dispatch and combine run under the other's compute, as in DualPipe
# but without its two-directional pipeline. The first forward and the last backward of a step
# have no partner: the compute that can hide it is (1 - 1/m) of the step's (m micro-batches).
EP_OVERLAP_A2A = 1.0


# --- collective primitives -------------------------------------------------------------------


def _steps(n: Any) -> Any:
    return np.maximum(np.asarray(n, dtype=float) - 1.0, 0.0)


def _transfer_s(share: Any, nbytes: Any, bw: Any) -> Any:
    """share x bytes / bw, exactly 0 when nothing moves (share 0), even on a link of bandwidth
    0 (a single node with no network); infinite when bytes must cross a missing link."""
    share = np.asarray(share, dtype=float)
    bw = np.asarray(bw, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = share * np.asarray(nbytes) / bw
    return np.where(share > 0, t, 0.0)


def ring_allreduce_s(nbytes: Any, n: Any, bw: Any, alpha: Any) -> Any:
    """Ring all-reduce: 2(n-1)/n * bytes / bw + 2(n-1) alpha (0 for n = 1)."""
    n = np.asarray(n, dtype=float)
    return _transfer_s(2.0 * _steps(n) / n, nbytes, bw) + 2.0 * _steps(n) * alpha


def reduce_scatter_s(nbytes: Any, n: Any, bw: Any, alpha: Any) -> Any:
    """Ring reduce-scatter (or all-gather): (n-1)/n * bytes / bw + (n-1) alpha."""
    n = np.asarray(n, dtype=float)
    return _transfer_s(_steps(n) / n, nbytes, bw) + _steps(n) * alpha


all_gather_s = reduce_scatter_s


def all_to_all_s(nbytes: Any, n: Any, bw: Any, alpha: Any) -> Any:
    """Pairwise all-to-all: each rank keeps 1/n of its buffer and sends the rest."""
    n = np.asarray(n, dtype=float)
    return _transfer_s(_steps(n) / n, nbytes, bw) + _steps(n) * alpha


def hierarchical_all_to_all_s(nbytes: Any, n: Any, n_inner: Any, bw_inner: Any,
                              alpha_inner: Any, bw_outer: Any, alpha_outer: Any) -> Any:
    """Pairwise all-to-all over n ranks of which n_inner share one scale-up domain: each rank
    sends bytes/n to each peer, (n_inner - 1) of them over the scale-up link and n - n_inner
    over the scale-out fabric, both at once (NCCL issues the sends of an all-to-all as one
    group of concurrent point-to-point transfers), so the slower of the two sets the time.
    Reduces to `all_to_all_s` on one link when n_inner = n or n_inner = 1."""
    n = np.asarray(n, dtype=float)
    k = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    inner = _transfer_s((k - 1.0) / n, nbytes, bw_inner)
    outer = _transfer_s((n - k) / n, nbytes, bw_outer)
    return np.maximum(inner, outer) + (k - 1.0) * alpha_inner + (n - k) * alpha_outer


def tree_allreduce_latency_s(n: Any, alpha: Any) -> Any:
    """Latency of an all-reduce of a few bytes over n ranks on NCCL's tree (up the tree and
    down again): 2 log2(n) alpha (0 for n = 1). The gradient-norm and loss reductions."""
    return 2.0 * np.log2(np.maximum(np.asarray(n, dtype=float), 1.0)) * np.asarray(alpha)


def dp_buckets(params: Any, dp: Any) -> Any:
    """Gradient buckets per step: ceil(params / bucket), bucket = max(40M, 1M x dp) parameters
    (Megatron Core DDP); at least 1."""
    bucket = np.maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * np.asarray(dp, dtype=float))
    return np.maximum(np.ceil(np.asarray(params, dtype=float) / bucket), 1.0)


def p2p_s(nbytes: Any, bw: Any, alpha: Any) -> Any:
    """One point-to-point send."""
    return np.asarray(nbytes) / np.asarray(bw) + alpha


def hierarchical_allreduce_s(nbytes: Any, n: Any, n_inner: Any, bw_inner: Any, alpha_inner: Any,
                             bw_outer: Any, alpha_outer: Any) -> Any:
    """Two-level all-reduce: reduce-scatter inside the scale-up domain, all-reduce of the
    1/n_inner shard across domains on the scale-out fabric, all-gather inside again
    (the NCCL/Horovod hierarchical scheme; Sergeev & Del Balso 2018, arXiv 1802.05799)."""
    n = np.asarray(n, dtype=float)
    k = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    inner = 2.0 * reduce_scatter_s(nbytes, k, bw_inner, alpha_inner)
    outer = ring_allreduce_s(np.asarray(nbytes) / k, n / k, bw_outer, alpha_outer)
    return inner + outer


def hierarchical_rs_s(nbytes: Any, n: Any, n_inner: Any, bw_inner: Any, alpha_inner: Any,
                      bw_outer: Any, alpha_outer: Any) -> Any:
    """Two-level reduce-scatter (or all-gather): half of the hierarchical all-reduce."""
    n = np.asarray(n, dtype=float)
    k = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    inner = reduce_scatter_s(nbytes, k, bw_inner, alpha_inner)
    outer = reduce_scatter_s(np.asarray(nbytes) / k, n / k, bw_outer, alpha_outer)
    return inner + outer


# --- link selection ----------------------------------------------------------------------------


def group_link(span: Any, domain: Any, bw_up: Any, a_up: Any, bw_out: Any, a_out: Any
               ) -> tuple[Any, Any]:
    """(bandwidth, latency) of a group whose ranks span `span` consecutive GPUs: the scale-up
    link when the span fits in one scale-up domain, else the scale-out fabric."""
    inside = np.asarray(span) <= np.asarray(domain)
    return np.where(inside, bw_up, bw_out), np.where(inside, a_up, a_out)


def ranks_inside(stride: Any, n: Any, domain: Any) -> Any:
    """How many ranks of a group with stride `stride` share one scale-up domain (>= 1, <= n)."""
    return np.clip(np.floor(np.asarray(domain) / np.asarray(stride)), 1.0, np.asarray(n))


# --- per-step traffic of each parallelism ------------------------------------------------------


def tp_layer_collectives(recompute_full: Any, regathers: Any = 0.0) -> Any:
    """All-reduce-equivalents per layer per micro-batch for Megatron tensor parallelism:
    2 forward + 2 backward (f and g operators, Shoeybi et al. 2019, arXiv 1909.08053, fig. 4);
    with sequence parallelism each becomes a reduce-scatter + all-gather of the same volume
    (Korthikanti et al. 2022, section 4.2.2). Full recompute repeats the 2 forward ones;
    `regathers` adds the all-gathers a backward repeats (`recompute.tp_gathers_repeated`)."""
    return 4.0 + 2.0 * np.asarray(recompute_full, dtype=float) + np.asarray(regathers, float)


# Bytes of one float8 element (E4M3 / E5M2): what a float8 TP all-gather moves per element.
FP8_ELEMENT_BYTES = 1.0


def tp_gather_share(fp8: Any, fp8_tp_gather: Any, act_bytes: Any) -> Any:
    """Bytes of a TP all-gather over those of its reduce-scatter: FP8_ELEMENT_BYTES /
    act_bytes where the stack gathers in float8 under FP8 (`fp8_tp_gather` > 0), else 1."""
    on = np.asarray(fp8) & (np.asarray(fp8_tp_gather) > 0)
    return np.where(on, FP8_ELEMENT_BYTES / np.asarray(act_bytes, dtype=float), 1.0)


def tp_comm_s(act_bytes_per_layer: Any, tp: Any, n_collectives: Any, layers: Any,
              microbatches: Any, bw: Any, alpha: Any, gather_share: Any = 1.0,
              regathers: Any = 0.0) -> Any:
    """Tensor-parallel time per step per GPU: n all-reduces of the (mb x s x h) activation per
    layer, for every layer of the stage and every micro-batch. Each is a reduce-scatter plus
    an all-gather (the ring all-reduce, exactly); the all-gather moves `gather_share` of the
    bytes (1/2 where it runs in float8 and the reduce-scatter in 16 bits: torchao's
    Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput). `regathers`
    all-reduce equivalents are all-gathers only (2 per equivalent, at `gather_share`): those a
    backward repeats (`recompute.tp_gathers_repeated`)."""
    gather = all_gather_s(np.asarray(act_bytes_per_layer) * gather_share, tp, bw, alpha)
    one = reduce_scatter_s(act_bytes_per_layer, tp, bw, alpha) + gather
    return (one * n_collectives + 2.0 * gather * regathers) * layers * microbatches


def pp_comm_s(boundary_bytes: Any, pp: Any, vpp: Any, microbatches: Any, bw: Any,
              alpha: Any) -> Any:
    """Pipeline p2p per step: each micro-batch crosses a stage boundary forward and backward,
    vpp times with interleaving (Narayanan et al. 2021, section 2.2.2)."""
    hops = np.where(np.asarray(pp) > 1, 2.0 * np.asarray(vpp) * microbatches, 0.0)
    return hops * p2p_s(boundary_bytes, bw, alpha)


def cp_comm_s(kv_bytes_per_layer: Any, cp: Any, layers: Any, microbatches: Any, bw: Any,
              alpha: Any) -> Any:
    """Context-parallel ring exchange of K and V: (cp-1) sends of the local K,V chunk forward
    and twice that backward (K,V and their gradients), per layer and micro-batch."""
    steps = _steps(cp)
    return 3.0 * steps * p2p_s(kv_bytes_per_layer, bw, alpha) * layers * microbatches


def ep_comm_s(dispatch_bytes: Any, ep: Any, moe_layers: Any, microbatches: Any, bw: Any,
              alpha: Any, n_inner: Any = None, bw_outer: Any = None,
              alpha_outer: Any = None) -> Any:
    """MoE all-to-all: dispatch and combine, forward and backward (4 per MoE layer per
    micro-batch; Lepikhin et al. 2020, GShard, arXiv 2006.16668). With `n_inner` (EP ranks per
    scale-up domain) the traffic to peers in the same domain takes the scale-up link (bw,
    alpha) and the rest the scale-out fabric (`hierarchical_all_to_all_s`)."""
    if n_inner is None:
        one = all_to_all_s(dispatch_bytes, ep, bw, alpha)
    else:
        one = hierarchical_all_to_all_s(dispatch_bytes, ep, n_inner, bw, alpha, bw_outer,
                                        alpha_outer)
    return 4.0 * one * moe_layers * microbatches


# --- MoE token dispatch: deduplicated (DeepEP / HybridEP) or per expert (alltoall) ---------
#
# The dispatcher of tuned MoE training (DeepEP, github.com/deepseek-ai/DeepEP; Megatron-Core's
# flex dispatcher with its DeepEP and HybridEP backends, which the Megatron-Bridge MoE recipes
# use) sends a token to each destination GPU ONCE, however many of its k experts live there
# (DeepEP's dispatch layout: is_token_in_rank; the per-expert copies are made after receipt),
# and across scale-up domains sends it ONCE per destination domain, to the GPU of the same local
# index, which forwards it over the scale-up link to the GPUs holding its experts (DeepSeek-V3,
# arXiv 2412.19437, section 3.2.2: "transmit the tokens via IB to the GPUs with the same
# in-node index on their target nodes ... forwarded via NVLink"). Combine is the mirror image.
# Under uniform routing (what force-balanced benchmarks measure) the chance that a set of x of
# the E experts receives none of a token's k distinct experts is C(E-x, k) / C(E, k).


def _none_chosen(experts: int, k: int, x: Any) -> Any:
    """C(E - x, k) / C(E, k) = prod_{i<k} (E - x - i) / (E - i): probability that none of a
    token's k distinct experts (uniform over E) falls in a given set of x experts."""
    x = np.asarray(x, dtype=float)
    p = np.ones_like(x)
    for i in range(int(k)):
        p = p * np.clip((experts - x - i) / (experts - i), 0.0, 1.0)
    return p


def a2a_token_copies(n: Any, n_inner: Any, experts: int, k: int, dedup: Any = True
                     ) -> tuple[Any, Any]:
    """(copies over the scale-up link, copies over the scale-out fabric) that one token of one
    rank makes in a dispatch over an EP group of n ranks, n_inner per scale-up domain
    (G = n / n_inner domains; E/n experts per rank, E n_inner / n per domain). Deduplicated
    (`dedup`, the flex dispatcher):

        fabric   = (G - 1) (1 - C(E - E n_inner/n, k) / C(E, k))   (one per remote domain hit)
        scale-up = G (n_inner - 1) (1 - C(E - E/n, k) / C(E, k))   (to the other GPUs of each
                                                                    domain hit, incl. forwarding)

    For G = 1 the fabric term is 0 and the scale-up term is the ranks hit. Not deduplicated
    (Megatron-Core's MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/
    token_dispatcher.py: `permute` makes one row per (token, routed expert) pair and the
    all-to-all's input_splits count the rows per EP rank, so a token whose k experts sit on
    one remote rank crosses the link k times; the rows of local experts stay):

        fabric   = k (n - n_inner) / n        scale-up = k (n_inner - 1) / n

    0 copies for dense models (k = 0)."""
    n = np.asarray(n, dtype=float)
    n_in = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    if not k or experts <= 0:
        return np.zeros_like(n), np.zeros_like(n)
    domains = n / n_in
    outer = (domains - 1.0) * (1.0 - _none_chosen(experts, k, experts * n_in / n))
    inner = domains * (n_in - 1.0) * (1.0 - _none_chosen(experts, k, experts / n))
    return (np.where(dedup, inner, k * (n_in - 1.0) / n),
            np.where(dedup, outer, k * (n - n_in) / n))


def dispatch_logical_bw(line_bytes_per_s: Any, share: Any) -> Any:
    """The deduplicated dispatch's internode pipeline rate per GPU: the fabric's
    `moe_dispatch_logical_share` x its line rate; inf (no bound) where none is measured (nan)."""
    share = np.asarray(share, dtype=float)
    with np.errstate(invalid="ignore"):
        bw = share * np.asarray(line_bytes_per_s, dtype=float)
    return np.where(np.isnan(share), np.inf, bw)


def a2a_logical_copies(n: Any, n_inner: Any, experts: int, k: int) -> Any:
    """Expected (token, scale-up domain hit) pairs of one token, the sender's own domain
    included: G (1 - C(E - E n_inner/n, k) / C(E, k)) for G = n / n_inner > 1 domains, else 0.
    What the deduplicated dispatch's internode pipeline moves (DeepEP and HybridEP route the
    own node's tokens through it too; their benchmarks count these bytes as "RDMA"/"IB"
    bandwidth: DeepEP tests/test_internode.py `num_rdma_token_sent`, HybridEP tests/utils.py
    `count_rdma_send_from_routing_map`, "we do not set the local node map to zeros")."""
    n = np.asarray(n, dtype=float)
    n_in = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    if not k or experts <= 0:
        return np.zeros_like(n)
    domains = n / n_in
    hit = 1.0 - _none_chosen(experts, k, experts * n_in / n)
    return np.where(domains > 1.0, domains * hit, 0.0)


def moe_dispatch_s(token_bytes: Any, n: Any, n_inner: Any, experts: int, k: int,
                   bw_inner: Any, alpha_inner: Any, bw_outer: Any, alpha_outer: Any,
                   dedup: Any = True, bw_logical: Any = np.inf) -> Any:
    """One dispatch (or combine): `token_bytes` = the rank's tokens x hidden x element bytes;
    the scale-up and scale-out sends run at once (`hierarchical_all_to_all_s`), with one
    latency per scale-up peer and per remote domain. A deduplicated dispatch over more than
    one domain is also bounded by its internode pipeline: `a2a_logical_copies` x bytes at
    `bw_logical` (per GPU; inf = no bound, the default)."""
    return sum(moe_dispatch_parts(token_bytes, n, n_inner, experts, k, bw_inner, alpha_inner,
                                  bw_outer, alpha_outer, dedup, bw_logical))


def moe_dispatch_parts(token_bytes: Any, n: Any, n_inner: Any, experts: int, k: int,
                       bw_inner: Any, alpha_inner: Any, bw_outer: Any, alpha_outer: Any,
                       dedup: Any = True, bw_logical: Any = np.inf) -> tuple[Any, Any]:
    """`moe_dispatch_s` as (transfer seconds, latency seconds); with token_bytes 1 the first
    is the seconds per byte of the rank's tokens (the pruning bound's factor, search/a2a.py)."""
    inner, outer = a2a_token_copies(n, n_inner, experts, k, dedup)
    logical = np.where(dedup, a2a_logical_copies(n, n_inner, experts, k), 0.0)
    n = np.asarray(n, dtype=float)
    n_in = np.clip(np.asarray(n_inner, dtype=float), 1.0, n)
    t = np.maximum(np.maximum(_transfer_s(inner, token_bytes, bw_inner),
                              _transfer_s(outer, token_bytes, bw_outer)),
                   _transfer_s(logical, token_bytes, bw_logical))
    lat = np.where(n > 1, (n_in - 1.0) * alpha_inner + (n / n_in - 1.0) * alpha_outer, 0.0)
    return t, lat


def moe_all_to_all_s(token_bytes: Any, n: Any, n_inner: Any, experts: int, k: int,
                     moe_layers: Any, microbatches: Any, bw_inner: Any, alpha_inner: Any,
                     bw_outer: Any, alpha_outer: Any, dedup: Any = True,
                     bw_logical: Any = np.inf) -> Any:
    """MoE token traffic per step: dispatch and combine, forward and backward (4 per MoE layer
    per micro-batch; GShard, arXiv 2006.16668), each `moe_dispatch_s`."""
    one = moe_dispatch_s(token_bytes, n, n_inner, experts, k, bw_inner, alpha_inner, bw_outer,
                         alpha_outer, dedup, bw_logical)
    return 4.0 * one * moe_layers * microbatches


def shared_overlap(totals: list[Any], caps: list[Any], budget_s: Any) -> list[Any]:
    """Exposed part of each communication when all of them hide behind the same compute.

    Each can hide up to its cap (overlap fraction x the compute it may run under); together
    they cannot hide more than `budget_s` of compute, so over budget every hidden share is
    scaled down alike. Then sum(exposed) = sum(totals) - min(sum(hidden), budget): a faster
    link or a faster chip never makes the step longer.
    """
    hidden = [np.minimum(np.asarray(t, dtype=float), np.asarray(c, dtype=float))
              for t, c in zip(totals, caps, strict=True)]
    total_hidden = sum(hidden)
    budget = np.asarray(budget_s, dtype=float)
    scale = np.where(total_hidden > budget, budget / np.maximum(total_hidden, 1e-300), 1.0)
    return [np.asarray(t, dtype=float) - h * scale for t, h in zip(totals, hidden, strict=True)]


def exposed(total_s: Any, hideable_s: Any, overlap: Any) -> Any:
    """Communication left on the critical path when `overlap` of `hideable_s` compute hides it."""
    return np.maximum(np.asarray(total_s) - overlap * np.asarray(hideable_s), 0.0)


# --- data-parallel gradient synchronization ----------------------------------------------------

# Gradients are reduced in 16 bits: Megatron Core's DistributedDataParallelConfig defaults to
# grad_reduce_in_fp32 = False, and PyTorch FSDP MixedPrecision(reduce_dtype=bf16) is the usual
# recipe (Llama 3 reduces in FP32 instead, arXiv 2407.21783 section 3.3.4: 2x the DP bytes).
# Parameters are all-gathered in 16 bits, or in FP8 where the stack keeps FP8 primary weights
# (estimators/dp_comm.py `param_gather_bytes`: FP8_ELEMENT_BYTES).
GRAD_REDUCE_BYTES = 2.0
PARAM_GATHER_BYTES = 2.0


# The data-parallel group of gradient reduction and ZeRO/FSDP sharding spans dp x cp ranks:
# the cp ranks hold the same weights and see different tokens, so they reduce their gradients
# together. Megatron-Core (NVIDIA/Megatron-LM @ d98e8a6, 2026-08-22) builds DDP's gradient
# buffers and the distributed optimizer over `intra_dp_cp_group`, i.e.
# parallel_state.get_data_parallel_group(with_context_parallel=True) (distributed/
# distributed_data_parallel.py, process_groups_config.py setup_process_groups_for_ddp,
# optimizer/__init__.py), whose ranks are RankGenerator.get_ranks('dp-cp') under the order
# "tp-cp-ep-dp-pp" (parallel_state.py): cp inside dp, stride tp. Its bucket size stays
# max(40M, 1M x dp) from the dp group WITHOUT cp (`dp_buckets`). torchtitan (pytorch/torchtitan
# @ b5bcd76, 2026-08-21; distributed/parallel_dims.py, models/llama3/parallelize.py) shards FSDP
# over its `fsdp` mesh dimension, dp_shard x cp flattened ("pp", "dp_replicate", "fsdp", "tp"),
# HSDP replicas outside it: the same ranks.


def dp_cp_group(tp: Any, dp: Any, cp: Any, domain: Any) -> tuple[Any, Any]:
    """(ranks, ranks per scale-up domain) of the data-parallel group the gradient reduction,
    the ZeRO parameter all-gathers and the FSDP gathers run over: dp x cp ranks at stride tp
    (comment above), of which floor(domain / tp) share one scale-up domain (`ranks_inside`)."""
    ranks = np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float)
    return ranks, ranks_inside(tp, ranks, domain)


def dp_sync_parts_s(params: Any, dp: Any, zero: Any, n_inner: Any, bw_inner: Any,
                    a_inner: Any, bw_outer: Any, a_outer: Any, buckets: Any = 1.0,
                    gather_bytes: Any = PARAM_GATHER_BYTES) -> tuple[Any, Any]:
    """Once per step, (gradient reduction, parameter all-gather) seconds: ZeRO-0 all-reduces
    the gradients; ZeRO-1/2/3 reduce-scatter them and (1/2) all-gather the updated parameters,
    `gather_bytes` each (Rajbhandari et al. 2020, arXiv 1910.02054, section 7: in 16 bits,
    the same volume as one all-reduce). In `buckets` buckets, each its own collective: the
    bandwidth term is the same, the latency terms count once per bucket (b x f(bytes / b))."""
    z = np.asarray(zero)
    b = np.asarray(buckets, dtype=float)
    grads = np.asarray(params) * GRAD_REDUCE_BYTES / b
    weights = np.asarray(params) * gather_bytes / b
    ar = b * hierarchical_allreduce_s(grads, dp, n_inner, bw_inner, a_inner, bw_outer, a_outer)
    rs = b * hierarchical_rs_s(grads, dp, n_inner, bw_inner, a_inner, bw_outer, a_outer)
    ag = b * hierarchical_rs_s(weights, dp, n_inner, bw_inner, a_inner, bw_outer, a_outer)
    return np.where(z == 0, ar, rs), np.where((z == 1) | (z == 2), ag, 0.0)


def dp_grad_sync_s(params: Any, dp: Any, zero: Any, n_inner: Any, bw_inner: Any, a_inner: Any,
                   bw_outer: Any, a_outer: Any, buckets: Any = 1.0) -> Any:
    """The whole per-step DP synchronization: both parts of `dp_sync_parts_s`."""
    reduce, gather = dp_sync_parts_s(params, dp, zero, n_inner, bw_inner, a_inner, bw_outer,
                                     a_outer, buckets)
    return reduce + gather


def zero3_gather_s(params: Any, dp: Any, zero: Any, microbatches: Any, n_inner: Any,
                   bw_inner: Any, a_inner: Any, bw_outer: Any, a_outer: Any,
                   gather_bytes: Any = PARAM_GATHER_BYTES) -> Any:
    """ZeRO-3/FSDP: the parameters (`gather_bytes` each) are all-gathered before each forward
    and again before each backward, for every micro-batch (Zhao et al. 2023, arXiv 2304.11277,
    section 3.2)."""
    weights = np.asarray(params) * gather_bytes
    ag = hierarchical_rs_s(weights, dp, n_inner, bw_inner, a_inner, bw_outer, a_outer)
    return np.where(np.asarray(zero) >= 3, 2.0 * np.asarray(microbatches) * ag, 0.0)


# --- HSDP / hybrid sharding (#11) ---------------------------------------------------------------


def hsdp_grad_sync_s(params: Any, group: Any, replicas: Any, zero: Any, n_inner: Any,
                     r_inner: Any, bw_inner: Any, a_inner: Any, bw_outer: Any,
                     a_outer: Any, gather_bytes: Any = PARAM_GATHER_BYTES) -> Any:
    """Once per step with ZeRO sharded inside groups of `group` ranks and replicated across
    `replicas` groups (PyTorch FSDP HYBRID_SHARD, Zhao et al. 2023, arXiv 2304.11277, section
    3.2.2; torchtitan dp_shard x dp_replicate): reduce-scatter the gradients inside the group,
    all-reduce each 1/group shard across the replicas, and (ZeRO-1/2) all-gather the updated
    parameters (`gather_bytes` each) inside the group. `n_inner` / `r_inner`: ranks of the
    group / of the replica set that share one scale-up domain. group = all ranks gives
    `dp_grad_sync_s`."""
    z = np.asarray(zero)
    grads = np.asarray(params) * GRAD_REDUCE_BYTES
    rs = hierarchical_rs_s(grads, group, n_inner, bw_inner, a_inner, bw_outer, a_outer)
    ar = hierarchical_allreduce_s(grads / np.asarray(group), replicas, r_inner, bw_inner,
                                  a_inner, bw_outer, a_outer)
    ag = hierarchical_rs_s(np.asarray(params) * gather_bytes, group, n_inner, bw_inner,
                           a_inner, bw_outer, a_outer)
    return rs + ar + np.where(z >= 3, 0.0, ag)
