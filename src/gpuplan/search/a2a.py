"""The MoE all-to-all term of the pruning's step bound (search/prune.py, #12) (L4).

Under 1F1B with comm.EP_OVERLAP = 0 the time model hides none of the MoE all-to-all
(`comm.shared_overlap` hides min(t, 0) of it), so all of it is part of the busy time the
bound counts: `timing._model_parallel_comm`'s `comm.moe_all_to_all_s`, its layout factors per
row (`layout_terms`) and its hardware factors per (EP degree, stride) pair (`floor`). On an
MoE model whose dispatch crosses nodes it is most of the gap between the bound and the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..estimators import comm
from ..estimators.compute import MOE_LOAD_IMBALANCE
from ..estimators.shapes import hidden_activation_bytes
from ..spec import D_AUTO, S_1F1B, moe_dedup
from .timed import scalar as _scalar


def counted(model: Any) -> bool:
    """Whether the bound counts an all-to-all (`layout_terms`): an MoE model, none hidden."""
    return bool(model.is_moe) and comm.EP_OVERLAP == 0.0


def layout_terms(model: Any, c: Any, lps: Any) -> dict[str, Any]:
    """The layout's factors of the MoE all-to-all's seconds per step (`comm.moe_all_to_all_s`
    as `timing._model_parallel_comm` calls it): a2a_scale (4 x MoE layers of the slowest
    stage x micro-batches: the dispatches per step) and a2a_bytes (a2a_scale x one dispatch's
    bytes), 0 where none of it is surely exposed (a dense model, or a schedule or overlap
    that may hide it: only 1F1B with comm.EP_OVERLAP = 0 exposes it all, `comm.shared_overlap`
    hiding min(t, 0) of it); beside the EP degree and tp x cp (the EP ranks' stride), which
    place its ranks. The search's layouts keep the default dispatcher (`floor`)."""
    if not counted(model):
        return {}
    act = hidden_activation_bytes(model, seq_len=c.seq, micro_batch=c.mb, cp=c.cp,
                                  precision=c.prec)
    scale = np.where(c.schedule == S_1F1B, 4.0 * (model.moe_layers * lps / model.layers) * c.m,
                     0.0)
    return dict(a2a_bytes=scale * (act / c.tp * MOE_LOAD_IMBALANCE), a2a_scale=scale, ep=c.ep,
                stride=c.tp * c.cp)


def pairs(ep: np.ndarray, stride: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each row's number among the distinct (EP degree, stride) pairs, those pairs as a
    (k, 2) float array): the all-to-all's per-pair factors are computed once per pair."""
    e, s = ep.astype(np.int64), stride.astype(np.int64)
    if e.size == 0:
        return np.zeros(0, dtype=np.intp), np.zeros((0, 2))
    width = int(s.max()) + 1
    key = e * width + s
    present = np.zeros(int(key.max()) + 1, dtype=bool)
    present[key] = True
    codes = np.flatnonzero(present)
    number = np.cumsum(present, dtype=np.intp) - 1
    return number[key], np.stack([codes // width, codes % width], axis=1).astype(float)


def floor(model: Any, x: dict[str, np.ndarray], hw: Any, stack: int,
          memo: dict[tuple, Any] | None = None) -> Any:
    """The MoE all-to-all's seconds per step of rows with layout terms x on one group's
    hardware (0 where `layout_terms` found none surely exposed): one dispatch's seconds per
    byte and latency (`comm.moe_dispatch_parts`) per (EP degree, stride) pair (`pairs`), then
    per row its bytes x that rate + latency (copies x bytes / bandwidth regrouped: equal to
    round-off). The dispatch is deduplicated as the default dispatcher (spec.D_AUTO) is under
    `stack`. `memo`: the per-pair figures of x's pairs by the hardware figures they read (the
    layout table's pairs are the same for every group: computed once per distinct links)."""
    pairs = x.get("a2a_pairs")
    if not model.is_moe or pairs is None or pairs.size == 0:
        return 0.0
    out = _scalar(hw.scale_out_bytes_per_s)
    logical = comm.dispatch_logical_bw(out, getattr(hw, "scale_out_dispatch_share", np.nan))
    reads = (_scalar(hw.scale_up_domain), out, _scalar(logical),
             _scalar(hw.scale_up_bytes_per_s), _scalar(hw.scale_up_latency_s),
             _scalar(hw.scale_out_latency_s), bool(moe_dedup(D_AUTO, stack)))
    found = None if memo is None else memo.get(reads)
    if found is None:
        domain, out, logical, up, up_lat, out_lat, dedup = reads
        with np.errstate(divide="ignore", invalid="ignore"):
            ep, n_in = pairs[:, 0], comm.ranks_inside(pairs[:, 1], pairs[:, 0], domain)
            found = comm.moe_dispatch_parts(1.0, ep, n_in, model.experts,
                                            model.experts_per_token, up, up_lat,
                                            out * comm.NET_EFFICIENCY, out_lat, dedup, logical)
        if memo is not None:
            memo[reads] = found
    rate, lat = found
    at = x["a2a_at"]
    return x["a2a_bytes"] * rate[at] + x["a2a_scale"] * lat[at]
