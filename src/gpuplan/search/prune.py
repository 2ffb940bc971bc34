"""Exact pruning of `plan`'s rows before the full time model (#11) (L4).

Per physics group and GPU count the search keeps one row, the fastest (`fastest_per_count`);
the other rows matter only through the tally (physically feasible or not, NO_LINK) and, for
ZeRO-3 rows, through the HSDP rule (`variants.hsdp_twins`: a row whose compute floor is
within FLOOR_MARGIN of its count's fastest step gets its HSDP copy timed). So a row whose
step time is provably longer than the step of a row already timed at its count can be
skipped, if it provably runs (a finite step); for a ZeRO-3 row whose HSDP copy the rule
reads, `twins.settle` then decides the rule's verdict (from the floor bound and a ceiling,
timing only the few rows between). The proof is a lower bound of the step (`floors`):

    step_s >= (1 + bubble fraction) x (compute_s + memory_s + layer overhead + a2a)

since step_s = busy + sync + optimizer + exposed PP/DP/offload + bubble, bubble = fraction x
busy and busy = compute + memory + overhead + exposed TP/CP/EP, every part >= 0
(`timing.step_time`; `comm.shared_overlap` never exposes less than nothing). compute_s,
memory_s and the layer overhead are evaluated as `timing._compute_parts` does, from the same
helpers (FLOPs, slowest stage, efficiencies, peaks), at a few operations per row: the layout
alone decides most factors, the group's hardware and efficiency scale them. a2a is the MoE
all-to-all where it is all exposed (1F1B, comm.EP_OVERLAP = 0: `shared_overlap` hides
min(t, 0) of it), else 0 (search/a2a.py); on an MoE model whose dispatch crosses
nodes it is most of the gap between the bound and the step.

Steps (`timed_rows`): the bound of every row (its layout terms, and a group's bounds, once per
number of rows equal but for what the terms do not read: search/termrows.py); per group and
count, a few rows of small bound and a sample of the others are timed first (`_probed`, all
groups' probes in a few calls); rows whose bound is above the best probe's step by MARGIN are
skipped, the rest timed as before. A group's rows arrive with a few fields (`groups.LEAN`, the
table row, memory and host traffic): the probes and the rows kept get the others from the table
(`timed.filled`), the skipped rows never do. The HSDP copies (`groups.evaluate_groups`) are
skipped likewise, against their count's fastest grid row too. Groups timed together
(`timed.time_many`, equal rows) skip a row only where all of them may. Skipped rows are counted
physically feasible, as timing them would have (`_sound` hardware, no offload traffic, a
supported precision: the bound is finite). A guard (`_holds`) checks both bounds on every probe
and every row timed; if one fails (a physics change the bound does not mirror), the search
times every row, as without pruning. `tests/test_search_cache.py` checks that plans are equal
with and without pruning, and the bound against every row of several searches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..estimators import timing
from ..estimators.compute import (
    MOE_LOAD_IMBALANCE,
    elementwise_bytes_per_token_layer,
    expert_gemm_dim,
    flops_per_token,
    logits_bytes_per_token,
)
from ..estimators.recompute import full_share
from ..estimators.shapes import act_element_bytes, tokens_per_rank
from ..rules import LayoutArrays
from ..spec import FP8, PRECISIONS
from ..workload import finetune_of
from . import a2a, termrows
from . import twins as tw
from .timed import _TIMED_KEYS as _TIMED
from .timed import filled, layout_of, time_many
from .timed import scalar as _scalar
from .variants import FLOOR_MARGIN

ENABLED = True  # False: every row through the time model (tests compare both)
# relative margin between a bound and a step: the bound sums the same parts in another order
# (float64 round-off ~1e-16); a row is skipped only when surely slower, and its tokens/s then
# differ from the fastest's by far more than round-off (no tie can be skipped)
MARGIN = 1e-6


@dataclass
class Stats:
    """Rows of one search: bounded (every row the bound saw), probed (timed first), skipped
    (never timed), timed (after the probes) and whether the guard fell back."""

    bounded: int = 0
    probed: int = 0
    skipped: int = 0
    timed: int = 0
    settled: int = 0  # skipped rows whose HSDP verdict `twins.settle` decided
    unsure: int = 0  # of them, those it timed to decide
    fell_back: bool = False


stats = Stats()  # figures added up over the process's searches (benchmarks read them)


def _layout_terms(req: Any, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layout-only factors of the bound for rows g, from `timing._compute_parts`'s
    quantities: with d = hidden / tp, e_mm = matmul_max x d / (d + half_dim) (x fp8_ratio at
    FP8) and so on, compute_s = sum of FLOPs / (peak x efficiency) regroups as
    C x (a_mm + half_dim x b_mm) + C16 x (a_16 + a_at / attention_ratio) x (1 + half_dim / d),
    C = 1 / (matmul_max x peak x fp8 factor), C16 = 1 / (matmul_max x 16-bit peak)."""
    model, layout = req.model, layout_of(g, req)
    c: Any = SimpleNamespace(**LayoutArrays.read(layout, float), rc=np.asarray(layout.recompute),
                        prec=np.asarray(layout.precision),
                        m=np.asarray(layout.microbatches, dtype=float),
                        schedule=np.asarray(layout.schedule))
    c.full = full_share(c.rc, c.rk)
    fl = flops_per_token(model, c.seq)
    L = model.layers
    tokens_gpu = c.gb * c.seq / (c.dp * c.cp)
    layer_hw = (fl.hardware(c.rc, c.rmods, c.rk) - fl.lm_head) / L
    lps, head = timing.slowest_stage(model, c, layer_hw, fl.lm_head)
    stage = tokens_gpu / c.tp * (layer_hw * lps + fl.lm_head * head)
    per_layer_tokens = tokens_gpu / c.tp * lps / L
    expert = per_layer_tokens * timing._expert_flops(model, c) / stage
    attn = per_layer_tokens * fl.attention_executed(c.rc, c.rmods, c.rk) / stage
    head16 = tokens_gpu / c.tp * fl.lm_head * head / stage
    repeat = 1.0 + c.full / 3.0
    per_token = (elementwise_bytes_per_token_layer(model, act_element_bytes(c.prec), c.ep) * lps
                 + logits_bytes_per_token(model) * head)
    d = model.hidden / c.tp
    d_ex = expert_gemm_dim(model, tokens_per_rank(c.seq, c.mb, c.cp) / c.tp, c.ep)
    main, ex = stage * (1 - expert - attn - head16), stage * expert * MOE_LOAD_IMBALANCE
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = dict(a_mm=main + ex, b_mm=main / d + ex / d_ex, a_16=stage * head16,
                     a_at=stage * attn, inv_d=1.0 / d,
                     mem_bytes=tokens_gpu / c.tp * per_token * repeat,
                     overhead=lps * c.m * repeat, bubble=1.0 + timing._bubble_fraction(c),
                     **a2a.layout_terms(model, c, lps))
    n = g["gpus"].shape
    out = {k: np.broadcast_to(np.asarray(v, dtype=float), n) for k, v in terms.items()}
    out["prec"] = np.broadcast_to(c.prec.astype(np.intp), n)
    if "ep" in out:
        out["a2a_at"], out["a2a_pairs"] = a2a.pairs(out.pop("ep"), out.pop("stride"))
    return out


def terms_of(req: Any, g: dict[str, np.ndarray], table: Any = None) -> dict[str, np.ndarray]:
    """`_layout_terms` of rows g, from those of the layout table's rows (`_table_terms`): a
    row's `row` is its grid row, or -2 - its variant row (`variants.candidates`)."""
    if table is None or "row" not in g:
        return _layout_terms(req, g)
    return _gathered(_table_terms(req, table), _term_ids(table, g))


def _term_ids(table: Any, g: dict[str, np.ndarray]) -> np.ndarray:
    """The `termrows.term_ids` number of each of rows g (`row`: the table row)."""
    row = g["row"]
    return table.bounds["ids"][np.where(row >= 0, row, table.g["gpus"].size - 2 - row)]


def _table_terms(req: Any, table: Any) -> dict[str, np.ndarray]:
    """The bound terms of the layout table's rows, once per `termrows.term_ids` number (rows
    equal but for what no term reads), kept in it (`LayoutTable.bounds`): each row's number
    (`ids`; grid rows, then variant rows), the float terms as one (term, number) matrix (one
    gather), `prec`, and for an MoE model the all-to-all's (EP degree, stride) pairs."""
    b = table.bounds
    if "floats" not in b:
        ids, rows = termrows.term_ids(table)
        x = _layout_terms(req, termrows.representatives(table, rows, _LAYOUT_KEYS))
        names = [k for k in _FLOATS if k in x]  # the all-to-all's (last): MoE alone
        floats = np.empty((len(names), rows.size))
        for j, k in enumerate(names):
            floats[j] = x[k]
        b.update(ids=ids, floats=floats, prec=np.ascontiguousarray(x["prec"]))
        if "a2a_pairs" in x:
            b["a2a_at"], b["a2a_pairs"] = x["a2a_at"], x["a2a_pairs"]
    return b


def _gathered(b: dict[str, np.ndarray], at: np.ndarray) -> dict[str, np.ndarray]:
    """The terms of `_table_terms` numbers `at`."""
    out = dict(zip(_FLOATS[:len(b["floats"])], np.take(b["floats"], at, axis=1), strict=True))
    out["prec"] = b["prec"][at]
    if "a2a_pairs" in b:
        out["a2a_at"], out["a2a_pairs"] = b["a2a_at"][at], b["a2a_pairs"]
    return out


# the fields `_layout_terms` reads (`timed.layout_of`)
_LAYOUT_KEYS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch", "recompute",
                "precision", "shard_group", "offload")


# the float terms of `_layout_terms` (beside `prec`, and for an MoE model `a2a_at` and
# `a2a_pairs`; the last two floats are an MoE model's alone)
_FLOATS = ("a_mm", "b_mm", "a_16", "a_at", "inv_d", "mem_bytes", "overhead", "bubble",
           "a2a_bytes", "a2a_scale")


def floors(x: dict[str, np.ndarray], hw: Any, eff: Any, model: Any = None,
           stack: int = 0, memo: dict[tuple, Any] | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """(lower bound of step_s, lower bound of compute + memory + overhead + optimizer) of
    rows with layout terms x (`terms_of`) on one group's hardware and efficiency; with the
    `model` (and the group's `stack`), the step's bound counts the MoE all-to-all where it is
    surely exposed (`a2a.floor`: a part of the busy time, as compute is)."""
    codes = np.arange(len(PRECISIONS))
    mmax, half = (float(np.asarray(v).reshape(-1)[0]) for v in (eff.matmul_max, eff.half_dim))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        factor = np.where(codes == FP8, np.asarray(eff.fp8_ratio).reshape(-1)[0], 1.0)
        c = (1.0 / (mmax * timing.peak_at(hw, codes) * factor)).reshape(-1)[x["prec"]]
        c16 = (1.0 / (mmax * timing._peak16(hw, codes))).reshape(-1)[x["prec"]]
        ratio = float(np.asarray(eff.attention_ratio).reshape(-1)[0])
        compute = (c * (x["a_mm"] + half * x["b_mm"])
                   + c16 * (x["a_16"] + x["a_at"] / ratio) * (1.0 + half * x["inv_d"]))
        memory = x["mem_bytes"] * _scalar(1.0 / (np.asarray(hw.memory_bandwidth_bytes_per_s)
                                                 * np.asarray(eff.memory_fraction)))
        floor = compute + memory + _scalar(eff.layer_overhead_s) * x["overhead"]
        lag = 0.0 if model is None else a2a.floor(model, x, hw, stack, memo)
        return (floor + lag) * x["bubble"], floor


def _sound(clock: Any) -> bool:
    """One hardware and efficiency row (the bound reads them as scalars), every link and
    bandwidth finite and positive: then only the precision and offload traffic can make a
    step infinite, and the bound is infinite or the row not eligible there."""
    hw, eff = clock.hw, clock.eff
    one = all(np.size(getattr(x, f.name)) <= 1 for x in (hw, eff) for f in fields(x)
              if f.name != "peak_flops_by_precision")
    vals = [np.asarray(getattr(hw, k), dtype=float) for k in (
        "memory_bandwidth_bytes_per_s", "scale_up_bytes_per_s", "scale_out_bytes_per_s",
        "scale_up_domain")]
    lat = [np.asarray(getattr(hw, k), dtype=float) for k in ("scale_up_latency_s",
                                                               "scale_out_latency_s")]
    return (one and all(bool(np.all(np.isfinite(v) & (v > 0))) for v in vals)
            and all(bool(np.all(np.isfinite(v) & (v >= 0))) for v in lat))


def _segments(gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each GPU count, each row's count number) of count-sorted rows."""
    n = gpus.size
    starts = np.flatnonzero(np.concatenate(([True], gpus[1:] != gpus[:-1])))
    return starts, np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))


def _classes(jobs: list[tuple[dict[str, np.ndarray], Any, Any]]) -> list[list[int]]:
    """Jobs `timed.time_many` times together (the same key and stack: the same rows); a job
    without a key alone."""
    out: dict[Any, list[int]] = {}
    for i, (_, c, key) in enumerate(jobs):
        out.setdefault((key, c.stack) if key is not None else (None, i), []).append(i)
    return list(out.values())


# rows timed first, per GPU count: the smallest bound of each (tp, ep, pp) (its communication
# differs most between them); about 2% of the rows, a probe within a few percent of the best
PROBE_FIELDS = ("tp", "ep", "pp")
DENSE = 1 << 22  # the largest dense key array of `_probes` (else np.unique's sort)
SAMPLE = 97  # every SAMPLE-th eligible row is timed with the probes (the guard's sample)


def _probe_keys(g: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(`_segments` of rows g, each row's number among the (GPU count, PROBE_FIELDS values)
    combinations, their range): what `_probes` and `_probed` read of a class's rows."""
    starts, seg = _segments(g["gpus"])
    key = seg.astype(np.int64)
    for f in PROBE_FIELDS:
        v = g[f].astype(np.int64)
        key = key * (int(v.max()) + 1) + v
    size = int(key.max()) + 1 if key.size else 0
    if size > DENSE:
        _, key = np.unique(key, return_inverse=True)
        size = int(key.max()) + 1
    return starts, seg, key, size


def _same(g: dict[str, np.ndarray]) -> tuple[int, ...]:
    """What `_probe_keys` reads of rows g, by identity: the jobs of a class share the arrays."""
    return tuple(id(g[f]) for f in ("gpus", *PROBE_FIELDS))


def _probes(g: dict[str, np.ndarray], step_lb: np.ndarray, ok: np.ndarray,
            keys: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None) -> np.ndarray:
    """Per GPU count and PROBE_FIELDS values, the first row of the smallest bound among rows
    `ok` (none where no row is ok); `keys`: `_probe_keys(g)`, when known."""
    _, _, key, size = keys or _probe_keys(g)
    b = np.where(ok, step_lb, np.inf)
    low = np.full(size, np.inf)
    np.minimum.at(low, key, b)
    first = np.flatnonzero(ok & (b == low[key]))
    _, pick = np.unique(key[first], return_index=True)
    return first[pick]


def _skips(g: dict[str, np.ndarray], bound: tuple[np.ndarray, np.ndarray, np.ndarray],
           best: np.ndarray, twins: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """(rows provably slower than `best` (a step already timed at each row's count, inf when
    none), and of them those whose HSDP verdict `twins.settle` decides): the rows whose HSDP
    copy `variants.hsdp_twins` may time (`twins`: from `twins.relevant`; None: every ZeRO-3
    grid row, each then skipped only with a floor provably above `best` too, no verdict)."""
    step_lb, floor_lb, ok = bound
    skip = ok & (step_lb > best * (1.0 + MARGIN))
    near = ((g["row"] >= 0) & (g["zero"] == 3) if twins is None else twins) & ~(
        floor_lb > best * (1.0 + FLOOR_MARGIN) * (1.0 + MARGIN))
    if twins is None:
        return skip & ~near, None
    return skip, skip & near


def _holds(g: Any, t: Any, bound: tuple[np.ndarray, np.ndarray, np.ndarray]) -> bool:
    """The guard: every timed row the bound calls ok has a finite step and both bounds hold."""
    step_lb, floor_lb, ok = bound
    step = t.full("step_s")
    floor = t.floor()
    return bool(np.all(~ok | (np.isfinite(step) & (step >= step_lb * (1.0 - MARGIN))
                              & (floor >= floor_lb * (1.0 - MARGIN)))))


Jobs = list[tuple[dict[str, np.ndarray], Any, Any]]


def _bounds(req: Any, jobs: Jobs, table: Any) -> list[Any]:
    """Per job, (step bound, floor bound, eligible) of its rows, or None (not prunable)."""
    out: list[Any] = [None] * len(jobs)
    for members in _classes(jobs):
        g = jobs[members[0]][0]
        if g["gpus"].size == 0 or not all(_sound(jobs[i][1]) for i in members):
            continue
        memo = None
        if table is None or "row" not in g:
            x, place = terms_of(req, g, table), None
        else:  # once per number of `termrows.term_ids` among the rows, then gathered
            b = _table_terms(req, table)
            ids = _term_ids(table, g)
            distinct, place = termrows.among(ids, b["prec"].size)
            if distinct.size * 4 > ids.size * 3:  # few rows share: each its own (the same)
                x, place = _gathered(b, ids), None
            else:
                x = _gathered(b, distinct)
            memo = table.bounds.setdefault("a2a_memo", {})  # for the table's pairs alone
        for i in members:
            step_lb, floor_lb = floors(x, jobs[i][1].hw, jobs[i][1].eff, req.model,
                                       jobs[i][1].stack, memo)
            if place is not None:
                step_lb, floor_lb = step_lb[place], floor_lb[place]
            ok = np.isfinite(step_lb) & (step_lb > 0) & (g["host_traffic"] == 0)
            out[i] = (step_lb, floor_lb, ok)
            stats.bounded += g["gpus"].size
    return out


def _probed(req: Any, jobs: Jobs, bounds: list[Any], table: Any = None,
            known: list[Any] | None = None) -> list[Any] | None:
    """Per prunable job, the fastest step of its probes (`_probes`, and every SAMPLE-th
    eligible row; all timed in a few calls) at each row's GPU count (inf where none ran);
    None when the bound fails on a probe (`_holds`: the probes are the rows where it is
    tightest, the sample the others). `known`: per job, a step already timed at each row's
    count (`_known`): rows whose bound is above it are skipped whatever the probes find, so
    none of them is chosen as a probe (the sample still takes them)."""
    probes = []
    keys: dict[tuple[int, ...], Any] = {}  # `_probe_keys` of each class's rows, once
    for i, b in enumerate(bounds):
        if b is not None:
            ok = b[2]
            sample = np.flatnonzero(ok)[::SAMPLE]
            lead = ok if known is None or known[i] is None else (
                ok & ~(b[0] > known[i] * (1.0 + MARGIN)))
            same = _same(jobs[i][0])
            if same not in keys:
                keys[same] = _probe_keys(jobs[i][0])
            probes.append((i, np.union1d(_probes(jobs[i][0], b[0], lead, keys[same]), sample)))
    steps = time_many(req, [({k: v for k, v in filled(table, {k: v[rows] for k, v in
                                                             jobs[i][0].items()}).items()
                              if k in _TIMED}, jobs[i][1], None) for i, rows in probes])
    stats.probed += sum(rows.size for _, rows in probes)
    out: list[Any] = [None] * len(jobs)
    for (i, rows), t in zip(probes, steps, strict=True):
        if not _holds(None, t, tuple(x[rows] for x in bounds[i])):
            return None
        starts, seg, _, _ = keys[_same(jobs[i][0])]
        best = np.full(starts.size, np.inf)
        step = t.full("step_s")
        np.minimum.at(best, seg[rows], np.where(np.isfinite(step), step, np.inf))
        out[i] = best[seg]
    return out


def _known(jobs: Jobs, bounds: list[Any], known: list[Any]) -> list[Any]:
    """Per prunable job, its `known` (GPU counts, fastest step at each) at each row's count."""
    out: list[Any] = [None] * len(jobs)
    for i, b in enumerate(bounds):
        counts, steps = known[i]
        if b is None or counts.size == 0:
            continue
        gpus = jobs[i][0]["gpus"]
        at = np.minimum(np.searchsorted(counts, gpus), counts.size - 1)
        out[i] = np.where((counts[at] == gpus) & np.isfinite(steps[at]), steps[at], np.inf)
    return out


Timed = tuple[list[dict[str, np.ndarray]], list[Any], list[int], list[np.ndarray]]


def _every(req: Any, jobs: Jobs, table: Any) -> Timed:
    """Every row of the jobs timed (every field gathered once per class of jobs alike)."""
    plain: list[Any] = [None] * len(jobs)
    for members in _classes(jobs):
        full = filled(table, jobs[members[0]][0])
        for i in members:
            plain[i] = dict(full)
    return plain, time_many(req, [(g, c, key) for g, (_, c, key) in zip(plain, jobs,
                                                                       strict=True)]), \
        [0] * len(jobs), [np.zeros(0, dtype=np.int64) for _ in jobs]


def _kept(req: Any, jobs: Jobs, table: Any, bounds: list[Any], best: list[Any]
          ) -> tuple[list[dict[str, np.ndarray]], list[int], list[Any]]:
    """Per job, (the rows to time (every field), the count skipped, the skipped rows whose
    HSDP verdict `twins.settle` decides (row, gpus, zero, host traffic, floor bound; None:
    none)); the
    bounds of the rows kept replace `bounds`."""
    kept, skipped = [g for g, _, _ in jobs], [0] * len(jobs)
    deferred: list[Any] = [None] * len(jobs)
    for members in _classes(jobs):
        g = jobs[members[0]][0]
        rel = tw.relevant(g, jobs[members[0]][1], table)  # one GPU memory per class
        parts = (None if any(best[i] is None for i in members) else
                 [_skips(g, bounds[i], best[i], rel) for i in members])
        if parts is not None:  # a few rows to settle: timed instead (settling has a cost per job)
            parts = [(s, d) if d is None or np.count_nonzero(d) >= tw.MIN_ROWS else (s & ~d, None)
                     for s, d in parts]
        skip = None if parts is None else np.logical_and.reduce([s for s, _ in parts])
        part, n = g, 0
        if skip is not None and skip.any():
            for i, (_, near) in zip(members, parts or [], strict=True):
                if near is not None and (near & skip).any():
                    at = np.flatnonzero(near & skip)
                    deferred[i] = {"row": g["row"][at], "gpus": g["gpus"][at],
                                   "zero": g["zero"][at], "floor_lb": bounds[i][1][at],
                                   "host_traffic": g["host_traffic"][at]}
            at = np.flatnonzero(~skip)  # indices once, not a mask scan per field
            part, n = {k: v[at] for k, v in g.items()}, int(skip.sum())
            for i in members:
                bounds[i] = tuple(b[at] for b in bounds[i])
        part = filled(table, part)  # every field, for the rows kept alone
        for i in members:
            kept[i], skipped[i] = dict(part), n
    return kept, skipped, deferred


def timed_rows(req: Any, jobs: Jobs, table: Any = None, known: list[Any] | None = None
               ) -> Timed:
    """`timed.time_many(req, jobs)` with the provably slower rows skipped: (each job's rows
    that were timed, their timing, the rows skipped, all physically feasible, and the table
    rows among those skipped that `variants.hsdp_twins` would return, `twins.settle`).
    `table`: the layout table the rows come from (its bound terms are kept there); `known`:
    per job, the (sorted GPU counts, fastest step at each) found already (a bound beside the
    probes')."""
    if not ENABLED or finetune_of(req.model) is not None:
        return _every(req, jobs, table)
    bounds = _bounds(req, jobs, table)
    near = None if known is None else _known(jobs, bounds, known)
    best = _probed(req, jobs, bounds, table, near)
    if best is None:  # the bound failed on a probe: time every row
        stats.fell_back = True
        return _every(req, jobs, table)
    if near is not None:
        best = [b if k is None else np.minimum(b, k) for b, k in zip(best, near, strict=True)]
    kept, skipped, deferred = _kept(req, jobs, table, bounds, best)
    timings = time_many(req, [(g, c, key) for g, (_, c, key) in zip(kept, jobs, strict=True)])
    busy = None
    if all(b is None or _holds(g, t, b) for g, t, b in zip(kept, timings, bounds, strict=True)):
        busy, unsure = tw.settle(req, table, jobs, kept, timings, deferred)
        stats.settled += sum(d["row"].size for d in deferred if d is not None)
        stats.unsure += unsure
    if busy is None or not all(d is None or tw.holds(req, table, g, t, c, b[1])
                               for g, t, d, (_, c, _), b
                               in zip(kept, timings, deferred, jobs, bounds, strict=True)):
        stats.fell_back = True
        return _every(req, jobs, table)
    stats.skipped += sum(skipped)
    stats.timed += sum(g["gpus"].size for g in kept)
    return kept, timings, skipped, busy
