"""Ways to get GPUs: every cloud offer and every system one can buy, after the user's filters (L4).

A Platform fixes the node shape (GPUs per node, scale-up domain, scale-out bandwidth) and the
prices; platforms with the same physics share one evaluation in the search.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..catalog import Catalog
from ..errors import ConfigError
from ..spec import PRICING, Accelerator, Offer, System
from .hardware import Platform as HwPlatform
from .hardware import platform_of


@dataclass(frozen=True, kw_only=True)
class Platform:
    id: str  # offer id or system id
    acquisition: str  # 'cloud' or 'own'
    accelerator: Accelerator
    gpus_per_node: int
    scale_up_domain: int
    scale_out_bytes_per_s: float  # per GPU, per direction
    scale_out_latency_s: float
    max_gpus: int  # 0 = no stated cap
    offer: Offer | None = None
    system: System | None = None
    # pricing name -> USD per GPU-hour (cloud: list prices; own: filled in by the search)
    prices: dict[str, float] = field(default_factory=dict)

    @property
    def physics_key(self) -> tuple[str, int, int, float, float]:
        return (self.accelerator.id, self.gpus_per_node, self.scale_up_domain,
                round(self.scale_out_bytes_per_s, 3), round(self.scale_out_latency_s, 9))

    @property
    def label(self) -> str:
        if self.offer is not None:
            return f"{self.offer.cloud} {self.offer.instance_type} ({self.offer.region})"
        assert self.system is not None
        return f"own {self.system.name}"


@dataclass(frozen=True, kw_only=True)
class Filters:
    gpus: tuple[str, ...] = ()  # accelerator ids (resolved)
    vendor: str = ""
    acquisition: str = "any"  # cloud | own | any
    pricing: tuple[str, ...] = ()  # subset of PRICING + ('own',)
    clouds: tuple[str, ...] = ()
    region: str = ""
    export_region: str = ""  # '' or 'cn'
    allow_consumer: bool = False


def _physical(cat: Catalog, acc: Accelerator, where: Offer | System | None) -> dict[str, Any]:
    """Node shape and per-GPU scale-out figures, as the time model's hardware builder sees them."""
    plat = platform_of(cat, acc, where)
    return {"gpus_per_node": plat.gpus_per_node, "scale_up_domain": plat.scale_up_domain,
            "scale_out_bytes_per_s": plat.scale_out_bytes_per_s,
            "scale_out_latency_s": plat.scale_out_latency_s}


def offer_platform(cat: Catalog, o: Offer) -> Platform:
    acc = cat.accelerators[o.accelerator]
    return Platform(id=o.id, acquisition="cloud", accelerator=acc, **_physical(cat, acc, o),
                    max_gpus=o.max_instances * o.count if o.max_instances else 0, offer=o,
                    prices={k: v / o.count for k, v in o.usd_per_hour.items()})


def system_platform(cat: Catalog, s: System) -> Platform:
    acc = cat.accelerators[s.accelerator]
    return Platform(id=s.id, acquisition="own", accelerator=acc, **_physical(cat, acc, s),
                    max_gpus=0, system=s)


def default_platform(cat: Catalog, acc: Accelerator) -> Platform:
    """The stated default node for an accelerator with no catalog system (owned, unpriced)."""
    return Platform(id=f"{acc.id}-default-node", acquisition="own", accelerator=acc,
                    **_physical(cat, acc, None), max_gpus=0)


def as_hardware_platform(p: Platform) -> HwPlatform:
    return HwPlatform(gpus_per_node=p.gpus_per_node, scale_up_domain=p.scale_up_domain,
                      scale_out_bytes_per_s=p.scale_out_bytes_per_s,
                      scale_out_latency_s=p.scale_out_latency_s)


def _system_for(cat: Catalog, accelerator_id: str) -> System | None:
    for s in cat.systems.values():
        if s.accelerator == accelerator_id:
            return s
    return None


def export_reason(acc: Accelerator, region: str) -> str:
    """Why an accelerator is excluded for an export region ('' when it is allowed)."""
    if region != "cn":
        return ""
    if acc.export_cn in ("prohibited", "license-required"):
        return (f"{acc.id}: {acc.export_cn} since {acc.export_cn_date} "
                f"({acc.export_cn_rule})")
    return ""


def select_platforms(cat: Catalog, f: Filters) -> tuple[list[Platform], dict[str, list[str]]]:
    """All platforms passing the filters, and the excluded ones grouped by reason."""
    if f.acquisition not in ("cloud", "own", "any"):
        raise ConfigError(f"--acquisition must be cloud, own or any, got '{f.acquisition}'")
    for mode in f.pricing:
        if mode not in PRICING + ("own", "capacity-block"):
            raise ConfigError(f"unknown pricing mode '{mode}'; choose from "
                              f"{', '.join(PRICING + ('capacity-block', 'own'))}")
    if f.export_region not in ("", "cn"):
        raise ConfigError(f"--export-region supports 'cn' only, got '{f.export_region}'")
    known_clouds = {o.cloud for o in cat.offers.values()}
    for c in f.clouds:
        if c not in known_clouds:
            raise ConfigError(f"unknown cloud '{c}'; the catalog has "
                              f"{', '.join(sorted(known_clouds))}")
    excluded: dict[str, list[str]] = {}

    def skip(reason: str, ident: str) -> None:
        excluded.setdefault(reason, []).append(ident)

    candidates: list[Platform] = []
    if f.acquisition in ("cloud", "any") and (not f.pricing or set(f.pricing) - {"own"}):
        candidates += [offer_platform(cat, o) for o in cat.offers.values()]
    if f.acquisition in ("own", "any") and (not f.pricing or "own" in f.pricing):
        for s in cat.systems.values():
            if s.price_usd:
                candidates.append(system_platform(cat, s))
            else:
                skip("own: system has no public price", s.id)
    kept: list[Platform] = []
    for p in candidates:
        acc = p.accelerator
        if f.gpus and acc.id not in f.gpus:
            continue  # not asked for: not an exclusion
        if f.vendor and acc.vendor != f.vendor:
            continue
        if p.offer is not None:
            if f.clouds and p.offer.cloud not in f.clouds:
                continue
            if f.region and not p.offer.region.startswith(f.region):
                continue
            prices = {k: v for k, v in p.prices.items() if not f.pricing or k in f.pricing}
            if not prices:
                skip("offer lacks the requested pricing mode", p.id)
                continue
            p = replace(p, prices=prices)
        reason = export_reason(acc, f.export_region)
        if reason:
            skip("export-controlled for China", reason)
            continue
        kept.append(p)
    return kept, excluded


def group_by_physics(platforms: Iterable[Platform]) -> dict[tuple, list[Platform]]:
    groups: dict[tuple, list[Platform]] = {}
    for p in platforms:
        groups.setdefault(p.physics_key, []).append(p)
    return groups
