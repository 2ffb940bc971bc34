"""Prediction intervals: how far a real run may fall from the predicted time (L4).

`validate --calibrate --residuals` writes `data/residuals.toml`: for each (family, stack
calibration group) with enough runs, the 10th, 50th and 90th percentiles of actual /
predicted time over its published runs (at rank p(n+1), the prediction-interval rank:
`calibrate.groups.quantiles`), each run predicted by constants fitted without its
source (leave-one-source-out), and a 'pooled' row over every run. Runs with a written,
source-based `anomaly` reason (a release's stated regression) are left out: the range states
how far current, well-tuned software may fall from the prediction. A figure's P10-P90 range is
its predicted value times (p10, p90) of its group; a pair without a group row takes the pooled
row, and a guess (no calibration run for the pair) takes the pooled row widened by
GUESS_WIDEN in log space. GPU-hours and cost are taken to scale with time (goodput and
commitments make them slightly non-linear; the error is small against the range itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from ..catalog import Catalog
from .hardware import stack_group

# A guess's range: the pooled residuals' log-quantiles times this (50% wider).
GUESS_WIDEN = 1.5
Z90 = NormalDist().inv_cdf(0.9)


@dataclass(frozen=True, kw_only=True)
class Interval:
    """Actual / predicted time at P10 and P90, and which residual group gave them."""

    p10: float
    p90: float
    group: str  # 'FAMILY/STACK', 'pooled' or 'pooled, widened (guess)'


def interval(cat: Catalog, family: str, stack: str | None, guess: bool) -> Interval:
    """The time ratios of one (family, stack) pair; (1, 1) if the catalog has no residuals."""
    group = stack_group(cat, stack)
    rows = cat.tables()["residuals"]
    own = next((r for r in rows.values()
                if r["family"] == family and r["stack"] == group), None)
    if own is not None and not guess:
        return Interval(p10=float(own["p10"]), p90=float(own["p90"]),
                        group=f"{family}/{group}")
    pooled = rows.get("pooled")
    if pooled is None:
        return Interval(p10=1.0, p90=1.0, group="none")
    widen = GUESS_WIDEN if guess else 1.0
    return Interval(p10=math.exp(math.log(float(pooled["p10"])) * widen),
                    p90=math.exp(math.log(float(pooled["p90"])) * widen),
                    group="pooled, widened (guess)" if guess else "pooled")


def at_confidence(iv: Interval, confidence: float | None) -> float:
    """Actual / predicted time at quantile `confidence` (None or 0.5: the prediction itself),
    log-normal between the prediction and P90."""
    if confidence is None or confidence <= 0.5:
        return 1.0
    z = NormalDist().inv_cdf(confidence)
    return math.exp(math.log(max(iv.p90, 1e-9)) * z / Z90)
