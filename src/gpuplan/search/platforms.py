"""Ways to get GPUs: every cloud offer and every system one can buy, after the user's filters (L4).

A `Platform` is where the accelerators sit: a catalog `System` (a server and its NICs), a cloud
`Offer` (an instance and its network bandwidth), the stated default node, or one given by hand
(e.g. a published run's cluster). It fixes the node shape (GPUs per node, scale-up domain,
scale-out bandwidth per GPU and direction) and the prices; platforms with the same physics share
one evaluation in the search.

Default platform (no system and no offer): the catalog system for that accelerator if one
exists (the first server, by id); otherwise `DEFAULT_GPUS_PER_NODE` GPUs per node sharing the
accelerator's own scale-up fabric (PCIe for cards without NVLink), and one
`DEFAULT_NIC_FABRIC` NIC per GPU -- a stated assumption, shown by `gpuplan estimate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..spec import PRICING, Accelerator, Fabric, Offer, System

DEFAULT_GPUS_PER_NODE = 8
DEFAULT_NIC_FABRIC = "roce-100g"
# Used only when the catalog lacks the fabric above: 100 Gbit/s = 12.5e9 B/s, 5 us (a guess).
DEFAULT_NIC_BYTES_PER_S = 12.5e9
DEFAULT_LATENCY_S = 5e-6


@dataclass(frozen=True, kw_only=True)
class Platform:
    """A node shape and, for catalog platforms, where it comes from and what it costs."""

    gpus_per_node: int
    scale_up_domain: int
    scale_out_bytes_per_s: float  # per GPU, per direction
    scale_out_latency_s: float = DEFAULT_LATENCY_S
    # the scale-out fabric's moe_dispatch_logical_share (nan = not measured), #12
    scale_out_dispatch_share: float = float("nan")
    id: str = "custom"  # offer id, system id, '<gpu>-default-node' or 'custom' (by hand)
    acquisition: str = "own"  # 'cloud' or 'own'
    accelerator: Accelerator | None = None  # None only for a platform given by hand
    max_gpus: int = 0  # 0 = no stated cap
    offer: Offer | None = None
    system: System | None = None
    # pricing name -> USD per GPU-hour (cloud list prices; owning is priced by the search)
    prices: dict[str, float] = field(default_factory=dict)

    @property
    def physics_key(self) -> tuple[str, int, int, float, float, str]:
        return (self.accelerator.id if self.accelerator else "", self.gpus_per_node,
                self.scale_up_domain, round(self.scale_out_bytes_per_s, 3),
                round(self.scale_out_latency_s, 9), repr(self.scale_out_dispatch_share))

    @property
    def label(self) -> str:
        if self.offer is not None:
            return f"{self.offer.cloud} {self.offer.instance_type} ({self.offer.region})"
        if self.system is not None:
            return f"own {self.system.name}"
        return self.id


@dataclass(frozen=True, kw_only=True)
class PriceRow:
    """One way to pay for one platform."""

    platform: Platform
    mode: str  # a pricing mode of cost.MODES, or 'capacity-block'
    usd_per_gpu_hour: float  # owning: the owned cost per used GPU-hour of one node
    capex_per_gpu: float  # cash up front per GPU (owning only; 0 for cloud)
    # Owning more than one node buys the scale-out network (evaluate.own_cost); None: as above
    scale_out_usd_per_gpu_hour: float | None = None
    scale_out_capex_per_gpu: float | None = None

    def figures(self) -> tuple[float, float, float, float]:
        """(USD per GPU-hour, capex per GPU) on one node, then on more than one node."""
        usd, capex = self.usd_per_gpu_hour, self.capex_per_gpu
        usd_n = usd if self.scale_out_usd_per_gpu_hour is None else self.scale_out_usd_per_gpu_hour
        capex_n = capex if self.scale_out_capex_per_gpu is None else self.scale_out_capex_per_gpu
        return usd, capex, usd_n, capex_n

    def at(self, gpus: Any) -> tuple[Any, Any]:
        """(USD per GPU-hour, capex per GPU) of a run on `gpus` GPUs (scalars or an array)."""
        usd, capex, usd_n, capex_n = self.figures()
        if usd_n == usd and capex_n == capex:
            return usd, capex
        multi = np.asarray(gpus) > self.platform.gpus_per_node
        return np.where(multi, usd_n, usd), np.where(multi, capex_n, capex)


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


@dataclass(frozen=True, kw_only=True)
class PlatformExclusion:
    """A platform left out before the search: `reason` is a code, `id` the platform or GPU."""

    reason: str  # 'export_controlled' | 'no_public_price' | 'no_pricing_mode'
    id: str
    status: str = ""  # export: 'prohibited' or 'license-required'
    since: str = ""
    rule: str = ""
    gpu: str = ""


def default_system(cat: Catalog, acc: Accelerator) -> System | None:
    """The first catalog server (by id) built around this accelerator, if any."""
    found = sorted((s for s in cat.systems.values() if s.accelerator == acc.id),
                   key=lambda s: (s.kind != "server", s.id))
    return found[0] if found else None


def single_box(system: System) -> bool:
    """A system with no scale-out NIC and no scale-out fabric (a DGX Station): it is not cabled
    to other nodes, so it is planned as one box and owning it buys no scale-out network. Both
    are checked because a row that names a fabric but omits nics_per_node means one NIC per
    GPU (system_platform)."""
    return system.nics_per_node == 0 and not system.scale_out_fabric


def dispatch_share(fab: Fabric | None) -> float:
    """A scale-out fabric's moe_dispatch_logical_share; nan when it has none (no bound)."""
    share = fab.moe_dispatch_logical_share if fab is not None else None
    return float("nan") if share is None else float(share)


def system_platform(cat: Catalog, s: System) -> Platform:
    fab = cat.fabrics.get(s.scale_out_fabric)
    nics = s.nics_per_node or s.gpus_per_node
    per_gpu = (fab.bytes_per_s_per_direction * nics / s.gpus_per_node if fab
               else DEFAULT_NIC_BYTES_PER_S)
    return Platform(id=s.id, acquisition="own", accelerator=cat.accelerators[s.accelerator],
                    gpus_per_node=s.gpus_per_node, scale_up_domain=s.scale_up_domain,
                    scale_out_bytes_per_s=per_gpu,
                    scale_out_latency_s=fab.latency_s if fab else DEFAULT_LATENCY_S, system=s,
                    scale_out_dispatch_share=dispatch_share(fab),
                    max_gpus=s.gpus_per_node if single_box(s) else 0)


def offer_platform(cat: Catalog, o: Offer) -> Platform:
    return Platform(id=o.id, acquisition="cloud", accelerator=cat.accelerators[o.accelerator],
                    gpus_per_node=o.count, scale_up_domain=o.count,
                    scale_out_bytes_per_s=o.network_bytes_per_s / o.count,
                    max_gpus=o.max_instances * o.count if o.max_instances else 0, offer=o,
                    prices={k: v / o.count for k, v in o.usd_per_hour.items()})


def default_platform(cat: Catalog, acc: Accelerator) -> Platform:
    """The stated default node for an accelerator with no catalog system (owned, unpriced)."""
    nic = cat.fabrics.get(DEFAULT_NIC_FABRIC)
    return Platform(id=f"{acc.id}-default-node", acquisition="own", accelerator=acc,
                    gpus_per_node=DEFAULT_GPUS_PER_NODE, scale_up_domain=DEFAULT_GPUS_PER_NODE,
                    scale_out_bytes_per_s=nic.bytes_per_s_per_direction if nic
                    else DEFAULT_NIC_BYTES_PER_S,
                    scale_out_latency_s=nic.latency_s if nic else DEFAULT_LATENCY_S,
                    scale_out_dispatch_share=dispatch_share(nic))


def platform_of(cat: Catalog, acc: Accelerator, where: System | Offer | Platform | None
                ) -> Platform:
    """Resolve any platform (None = the default: the first catalog server, else the default
    node) to a `Platform`."""
    if isinstance(where, Platform):
        return where
    if where is None:
        where = default_system(cat, acc)
    if isinstance(where, System):
        return system_platform(cat, where)
    if isinstance(where, Offer):
        return offer_platform(cat, where)
    return default_platform(cat, acc)


def export_exclusion(acc: Accelerator, region: str) -> PlatformExclusion | None:
    """Why an accelerator is excluded for an export region (None when it is allowed)."""
    if region != "cn" or acc.export_cn not in ("prohibited", "license-required"):
        return None
    return PlatformExclusion(reason="export_controlled", id=acc.id, gpu=acc.id,
                             status=acc.export_cn, since=str(acc.export_cn_date),
                             rule=str(acc.export_cn_rule))


def _check_filters(cat: Catalog, f: Filters) -> None:
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


def _candidates(cat: Catalog, f: Filters, skipped: list[PlatformExclusion]) -> list[Platform]:
    out: list[Platform] = []
    if f.acquisition in ("cloud", "any") and (not f.pricing or set(f.pricing) - {"own"}):
        out += [offer_platform(cat, o) for o in cat.offers.values()]
    if f.acquisition in ("own", "any") and (not f.pricing or "own" in f.pricing):
        for s in cat.systems.values():
            if s.price_usd:
                out.append(system_platform(cat, s))
            else:
                skipped.append(PlatformExclusion(reason="no_public_price", id=s.id,
                                                 gpu=s.accelerator))
    return out


def select_platforms(cat: Catalog, f: Filters) -> tuple[list[Platform],
                                                        tuple[PlatformExclusion, ...]]:
    """All platforms passing the filters, and the excluded ones with their reasons."""
    _check_filters(cat, f)
    skipped: list[PlatformExclusion] = []
    kept: list[Platform] = []
    for p in _candidates(cat, f, skipped):
        acc = p.accelerator
        assert acc is not None
        if (f.gpus and acc.id not in f.gpus) or (f.vendor and acc.vendor != f.vendor):
            continue  # not asked for: not an exclusion
        if p.offer is not None:
            if f.clouds and p.offer.cloud not in f.clouds:
                continue
            if f.region and not p.offer.region.startswith(f.region):
                continue
            prices = {k: v for k, v in p.prices.items() if not f.pricing or k in f.pricing}
            if not prices:
                skipped.append(PlatformExclusion(reason="no_pricing_mode", id=p.id, gpu=acc.id))
                continue
            p = replace(p, prices=prices)
        export = export_exclusion(acc, f.export_region)
        if export is not None:
            skipped.append(export)
            continue
        kept.append(p)
    return kept, tuple(skipped)


def group_by_physics(platforms: Iterable[Platform]) -> dict[tuple, list[Platform]]:
    groups: dict[tuple, list[Platform]] = {}
    for p in platforms:
        groups.setdefault(p.physics_key, []).append(p)
    return groups
