"""Renting the GPUs one would own: every offer x pricing mode, and when owning wins (L4).

Per used GPU-hour: pay-per-use modes cost their list price (spot divided by its goodput when a
model sizes the checkpoint); commitments carry the idle hours of their term that other work does
not reuse (cost.committed_usd_per_used_hour). Break-even against owning: the utilization above
which owning costs less per used GPU-hour, and the months after which it has paid for itself
(cost.break_even_utilization, cost.break_even_months). "Never" is None in these records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog
from ..estimators import cost
from ..spec import Accelerator, ModelSpec, Offer
from .evaluate import Site, run_goodput


@dataclass(frozen=True, kw_only=True)
class CloudRow:
    offer: str
    cloud: str
    instance_type: str
    region: str
    pricing: str
    instances: int
    exceeds_max_instances: bool
    list_usd_per_gpu_hour: float
    usd_per_gpu_hour: float | None  # per used GPU-hour; None: spot never finishes (goodput 0)
    goodput: float | None  # spot with a model only; None: no interruption overhead applied
    reuse_utilization: float | None  # commitments only
    break_even_utilization: float | None  # None: owning never wins at any utilization
    break_even_months: float | None  # None: owning never pays back
    source: str
    as_of: str


@dataclass(frozen=True, kw_only=True)
class BreakEven:
    """Owning against the cheapest offer of one pricing mode."""

    pricing: str
    offer: str
    usd_per_gpu_hour: float | None
    utilization: float | None  # None: never
    months: float | None  # None: never


def _num(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def spot_goodput(site: Site, model: ModelSpec | None, gpus: int, offer: Offer) -> float | None:
    """Goodput of a spot run on `offer` instances: its interruptions alone (hardware failures
    hit owning too), the checkpoint sized by the model; None without a model."""
    if model is None:
        return None
    g, _ = run_goodput(gpus=gpus, gpus_per_node=offer.count, params=model.total_params(),
                       spot=True, site=site, failures=False)
    return float(g.goodput)


def _prices(offer: Offer) -> dict[str, float]:
    prices = dict(offer.usd_per_hour)
    if offer.capacity_block_usd_per_hour is not None:
        prices["capacity-block"] = offer.capacity_block_usd_per_hour
    return prices


def _row(offer: Offer, mode: str, per_instance: float, own: Any, site: Site,
         model: ModelSpec | None) -> CloudRow:
    code = cost.mode_code(mode)
    u = site.utilization
    listed = float(cost.per_gpu_hour(per_instance, offer.count))
    committed = code in cost.TERM_YEARS
    reuse = site.reuse_utilization if committed else 1.0
    g = spot_goodput(site, model, own.gpus, offer) if code == cost.SPOT else None
    finishes = g is None or g > 0
    rate = listed / g if g else listed
    instances = math.ceil(own.gpus / offer.count)
    return CloudRow(
        offer=offer.id, cloud=offer.cloud, instance_type=offer.instance_type,
        region=offer.region, pricing=mode, instances=instances,
        exceeds_max_instances=bool(offer.max_instances and instances > offer.max_instances),
        list_usd_per_gpu_hour=listed,
        usd_per_gpu_hour=_num(cost.committed_usd_per_used_hour(rate, u, reuse)) if finishes
        else None,
        goodput=g, reuse_utilization=reuse if committed else None,
        break_even_utilization=_num(cost.break_even_utilization(
            own.usd_per_gpu_hour_at_full_use, rate, reuse)) if finishes else 0.0,
        break_even_months=_num(cost.break_even_months(
            own.capex_usd, own.opex_usd_per_year / 12, own.gpus, u, rate, reuse))
        if finishes else None,
        source=offer.source, as_of=offer.as_of)


def cloud_rows(cat: Catalog, acc: Accelerator, own: Any, site: Site,
               modes: Iterable[str] = (), cloud: str | None = None,
               model: ModelSpec | None = None) -> tuple[CloudRow, ...]:
    """Every offer x pricing mode with this accelerator (`own` is the ownership.OwnRecord),
    cheapest first within each mode."""
    wanted = {cost.MODES[cost.mode_code(n)] for item in modes for n in item.split(",")
              if n.strip()}
    rows = [_row(offer, mode, per_instance, own, site, model)
            for offer in cat.offers_for(acc.id)
            if not cloud or offer.cloud.lower() == cloud.lower()
            for mode, per_instance in _prices(offer).items()
            if not wanted or mode in wanted]
    inf = math.inf
    rows.sort(key=lambda r: (cost.mode_code(r.pricing),
                             inf if r.usd_per_gpu_hour is None else r.usd_per_gpu_hour))
    return tuple(rows)


def break_even_by_mode(rows: Iterable[CloudRow]) -> tuple[BreakEven, ...]:
    """Owning against the cheapest offer of each mode (owning must beat the best deal to win);
    rows arrive sorted cheapest first within each mode."""
    best: dict[str, CloudRow] = {}
    for r in rows:
        best.setdefault(r.pricing, r)
    return tuple(BreakEven(pricing=m, offer=r.offer, usd_per_gpu_hour=r.usd_per_gpu_hour,
                           utilization=r.break_even_utilization, months=r.break_even_months)
                 for m, r in best.items())
