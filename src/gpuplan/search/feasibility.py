"""Which candidates can run, and why not: one set of rules for `plan` and `estimate` (L4).

`plan` drops a candidate at the first rule it breaks (and counts it under that rule's code);
`estimate` runs the one configuration it is given and reports every rule it breaks as a
warning. Rules are vectorized masks (True = breaks the rule); codes are stable identifiers,
`report/reasons.py` turns them into sentences.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from ..spec import FP8
from .platforms import Platform

# Codes, in the order `plan` applies them.
DIVIDE = "degrees_do_not_divide"
TP_DOMAIN = "tp_beyond_scale_up"
LAYOUT = "layout_does_not_suit_model"
INTERLEAVE = "interleave_microbatches"  # vpp > 1: micro-batches per step not a multiple of pp
FP8_MISSING = "fp8_unsupported"
CONSUMER = "consumer_beyond_one_node"
OOM = "out_of_memory"
HOST_MEMORY = "host_memory_exceeded"  # offloaded state above the node's RAM per GPU (#11)
NO_LINK = "no_link"
OFFER_CAP = "offer_cap"
NO_GOODPUT = "no_goodput"
DEADLINE = "misses_deadline"
BUDGET = "over_budget"
# plan's layout variants (search/variants.py): a copy whose twin fits on the GPU
OP_UNNEEDED = "op_recompute_unneeded"
OFFLOAD_UNNEEDED = "offload_unneeded"
HSDP_UNNEEDED = "hsdp_unneeded"  # cannot beat the fastest layout of its count (variants.py)
ORDER = (DIVIDE, TP_DOMAIN, LAYOUT, INTERLEAVE, FP8_MISSING, CONSUMER, OP_UNNEEDED,
         OFFLOAD_UNNEEDED, OOM, HOST_MEMORY, HSDP_UNNEEDED, NO_LINK, OFFER_CAP, NO_GOODPUT,
         DEADLINE, BUDGET)

# Advisory (estimate text and plan notes; never an exclusion).
SMALL_MICRO_BATCH = "micro_batch_too_small"
SMALL_GEMM_FRACTION = 0.5  # achieved matmul efficiency below half its ceiling: GEMMs too small


_PLAIN = frozenset((int, float, bool))


def _plain(*values: Any) -> bool:
    """One configuration given as Python numbers: the rules below answer with Python bools
    (the same comparisons, without numpy's per-operation cost); a grid takes numpy."""
    return _PLAIN.issuperset(map(type, values))


@dataclass(frozen=True, kw_only=True)
class Check:
    code: str
    bad: Any  # bool array: True where the candidate breaks the rule


def hardware_checks(*, tp: Any, precision: Any, gpus: Any, platform: Platform,
                    allow_consumer: bool) -> list[Check]:
    """Rules of the hardware a layout runs on: TP inside the scale-up domain, FP8 where the
    GPU has it, consumer cards on one node unless allowed."""
    acc = platform.accelerator
    assert acc is not None
    if not _plain(tp, precision, gpus):  # a grid (one configuration: Python bools below)
        tp, gpus, precision = np.asarray(tp), np.asarray(gpus), np.asarray(precision)
    out = [Check(code=TP_DOMAIN, bad=tp > platform.scale_up_domain),
           Check(code=FP8_MISSING, bad=(precision == FP8) & ("fp8" not in acc.peak_flops))]
    if acc.consumer and not allow_consumer:
        out.append(Check(code=CONSUMER, bad=gpus > platform.gpus_per_node))
    return out


def memory_check(memory_bytes: Any, capacity_bytes: float) -> Check:
    if _plain(memory_bytes):
        return Check(code=OOM, bad=not memory_bytes <= capacity_bytes)
    return Check(code=OOM, bad=~(np.asarray(memory_bytes) <= capacity_bytes))


def host_memory_check(offloaded_bytes: Any, host_bytes: float) -> Check:
    """Offloaded state fits in the node's host memory per GPU (unknown RAM: nothing may be
    offloaded)."""
    off = np.asarray(offloaded_bytes, dtype=float)
    return Check(code=HOST_MEMORY, bad=(off > 0) & ~(off <= host_bytes))


def runs_check(step_s: Any, tokens_per_s: Any) -> Check:
    """A finite step: no traffic over a link the platform lacks (e.g. two instances that have
    no network between them)."""
    if _plain(step_s, tokens_per_s):
        return Check(code=NO_LINK, bad=not (math.isfinite(step_s) and tokens_per_s > 0))
    return Check(code=NO_LINK, bad=~(np.isfinite(step_s) & (np.asarray(tokens_per_s) > 0)))


def offer_check(gpus: Any, platform: Platform) -> Check:
    if _plain(gpus):
        return Check(code=OFFER_CAP, bad=bool(platform.max_gpus) and gpus > platform.max_gpus)
    return Check(code=OFFER_CAP,
                 bad=(np.asarray(gpus) > platform.max_gpus) if platform.max_gpus
                 else np.zeros(np.shape(gpus), dtype=bool))


def goodput_check(days: Any) -> Check:
    """A run that ends: failures (and spot interruptions) rarer than a checkpoint-and-restart
    cycle. With too many GPUs the cluster fails faster than it can recover (goodput 0)."""
    return Check(code=NO_GOODPUT, bad=~np.isfinite(np.asarray(days, dtype=float)))


def small_micro_batch(*, overhead_s: Any, compute_s: Any, matmul_efficiency: Any,
                      matmul_max: Any) -> Any:
    """True where the micro-batch is too small to keep the GPU busy: the fixed per-layer
    overhead outweighs the GEMMs, or the GEMMs reach under half their efficiency ceiling."""
    if _plain(overhead_s, compute_s, matmul_efficiency, matmul_max):
        return (overhead_s > compute_s
                or matmul_efficiency < SMALL_GEMM_FRACTION * matmul_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((np.asarray(overhead_s) > np.asarray(compute_s))
                | (np.asarray(matmul_efficiency)
                   < SMALL_GEMM_FRACTION * np.asarray(matmul_max)))


def broken(checks: list[Check]) -> tuple[str, ...]:
    """Codes of the rules a single configuration breaks (for `estimate`)."""
    return tuple(c.code for c in checks
                 if (c.bad if type(c.bad) is bool else bool(np.asarray(c.bad).reshape(-1)[0])))


# The bottleneck is the largest part of the step (memory-bound kernels and the optimizer step
# together are "memory bandwidth"); its name, by index.
BOTTLENECK_PARTS = (("compute", ("compute_s",)), ("fixed overhead", ("overhead_s",)),
                    ("memory bandwidth", ("memory_s", "optimizer_s")),
                    ("TP comm", ("tp_comm_s",)), ("DP comm", ("dp_comm_s",)),
                    ("PP bubble", ("bubble_s",)), ("PP comm", ("pp_comm_s",)),
                    ("CP comm", ("cp_comm_s",)), ("EP comm", ("ep_comm_s",)),
                    ("host offload", ("offload_s",)))
BOTTLENECKS = tuple(name for name, _ in BOTTLENECK_PARTS)
_part_values = attrgetter(*(k for _, keys in BOTTLENECK_PARTS for k in keys))
_PART_SIZES = tuple(len(keys) for _, keys in BOTTLENECK_PARTS)
_PART_SLICES = tuple(slice(sum(_PART_SIZES[:i]), sum(_PART_SIZES[:i + 1]))
                     for i in range(len(_PART_SIZES)))
_FLOATS = frozenset((float,))


def bottleneck(t: Any) -> Any:
    """Index into BOTTLENECKS of the largest part of each step (a TimingBreakdown); nan and
    +inf parts count 0 (np.nan_to_num)."""
    flat = _part_values(t)
    if _FLOATS.issuperset(map(type, flat)):  # one configuration (timing_one)
        low = -sys.float_info.max
        sums = [sum(flat[s]) for s in _PART_SLICES]  # each part's sum, from 0
        one = [0.0 if x != x or x == math.inf else (x if x >= low else low) for x in sums]
        return one.index(max(one))
    values = [[getattr(t, k) for k in keys] for _, keys in BOTTLENECK_PARTS]
    parts = [sum(np.asarray(x, dtype=float) for x in v) for v in values]
    stacked = np.stack(np.broadcast_arrays(*parts))
    return np.argmax(np.nan_to_num(stacked, nan=0.0, posinf=0.0), axis=0)
