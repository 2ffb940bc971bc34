"""One configuration through the same physics and pricing as the search (`gpuplan estimate`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimate import cost as costm
from ..estimate.timing import BOTTLENECKS, TIMING_PARTS
from ..spec import PRECISIONS, Accelerator, Layout, ModelSpec
from ..units import GiB
from .evaluate import Site, outcome, own_cost, physics, site_from_catalog
from .fit import fit_suggestions
from .hardware import check_precision, default_system, efficiency_for, hardware_table
from .platforms import (
    Platform,
    as_hardware_platform,
    default_platform,
    offer_platform,
    system_platform,
)


def host_watts_per_gpu(cat: Catalog, p: Platform) -> float:
    """Host (CPU, NIC, fans) power per GPU: system max power minus the GPUs' TDP, per GPU; from
    the catalog system of the same accelerator when the platform is a cloud offer; 0 if none."""
    system = p.system or default_system(cat, p.accelerator)
    if system is None:
        return 0.0
    host = costm.host_watts_per_node(system.max_power_watts, system.gpus_per_node,
                                     p.accelerator.tdp_watts)
    return float(host) / system.gpus_per_node


def own_usd_per_gpu_hour(p: Platform, site: Site, gpus: Any) -> tuple[Any, Any]:
    """Owned cost per used GPU-hour of `gpus` GPUs of system p over the site's years."""
    assert p.system is not None and p.system.price_usd
    tco = own_cost(p.system, p.accelerator, site, np.ceil(np.asarray(gpus, dtype=float)
                                                           / p.system.gpus_per_node))
    return tco.usd_per_gpu_hour, tco.capex_total_usd


def _platform(cat: Catalog, gpu: Accelerator, offer: str | None, system: str | None) -> Platform:
    if offer and system:
        raise ConfigError("give either --offer or --system, not both")
    if offer:
        o = cat.offer(offer)
        if o.accelerator != gpu.id:
            raise ConfigError(f"offer {o.id} has {o.accelerator} GPUs, not {gpu.id}; pick an "
                              f"offer from `gpuplan catalog offers --gpu {gpu.id}`")
        return offer_platform(cat, o)
    s = cat.system(system) if system else default_system(cat, gpu)
    if s is not None:
        if s.accelerator != gpu.id:
            raise ConfigError(f"system {s.id} has {s.accelerator} GPUs, not {gpu.id}")
        return system_platform(cat, s)
    return default_platform(cat, gpu)


def estimate(cat: Catalog, model: ModelSpec, gpu: Accelerator, layout: Layout, *, gpus: int,
             tokens: float | None, offer: str | None, system: str | None,
             usd_per_gpu_hour: float | None, pricing: str | None,
             overrides: dict[str, float | None]) -> dict[str, Any]:
    check_precision(gpu, PRECISIONS[int(layout.precision)])
    site = site_from_catalog(cat, **overrides)
    plat = _platform(cat, gpu, offer, system)
    hw = hardware_table(cat, [(gpu, as_hardware_platform(plat))])
    eff = efficiency_for(cat, hw.family)
    ph = physics(model, layout, hw, eff, site)
    mem, t = ph.memory, ph.timing
    cap = float(hw.memory_bytes[0])
    summary = {k: float(np.asarray(v).reshape(-1)[0]) / GiB for k, v in mem.summary().items()}
    fits = bool(np.asarray(ph.fits).reshape(-1)[0])
    out: dict[str, Any] = {
        "model": model.id, "params": model.total_params(), "active_params": model.active_params(),
        "gpu": gpu.id, "gpus": gpus, "platform": plat.id, "gpus_per_node": plat.gpus_per_node,
        "layout": {"tp": int(layout.tp), "pp": int(layout.pp), "dp": int(layout.dp),
                   "cp": int(layout.cp), "ep": int(layout.ep), "vpp": int(layout.vpp),
                   "zero": int(layout.zero), "micro_batch": int(layout.micro_batch),
                   "global_batch": int(layout.global_batch), "seq_len": int(layout.seq_len),
                   "microbatches": int(layout.microbatches),
                   "precision": PRECISIONS[int(layout.precision)],
                   "recompute": ("none", "selective", "full")[int(layout.recompute)],
                   "optimizer": ("adamw", "sgd", "adafactor")[int(layout.optimizer)],
                   "sp": bool(layout.sp) and int(layout.tp) > 1, "flash": bool(layout.flash),
                   "offload": bool(layout.offload)},
        "memory_gib": summary,
        "memory_detail_gib": {k: float(np.asarray(getattr(mem, k)).reshape(-1)[0]) / GiB
                              for k in mem.__dataclass_fields__},
        "gpu_memory_gib": cap / GiB,
        "headroom_gib": float(np.asarray(ph.headroom_bytes).reshape(-1)[0]) / GiB,
        "fits": fits,
        "suggestions": [] if fits else fit_suggestions(
            model, layout, cap, gpus, runtime_overhead_bytes=site.runtime_overhead_bytes,
            fragmentation=site.fragmentation),
    }
    first = lambda x: float(np.asarray(x).reshape(-1)[0])  # noqa: E731
    tps = first(t.tokens_per_s)
    out.update({
        "step_time_s": first(t.step_s), "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / gpus, "mfu": first(t.mfu), "hfu": first(t.hfu),
        "bottleneck": BOTTLENECKS[int(np.asarray(t.bottleneck).reshape(-1)[0])],
        "efficiency_is_guess": bool(np.asarray(t.efficiency_guess).reshape(-1)[0]),
        "time_breakdown_s": {k: first(getattr(t, k)) for k in TIMING_PARTS},
        "tokens": tokens, "time_to_train_days": None, "gpu_hours": None, "cost_usd": None,
        "pricing": None, "usd_per_gpu_hour": None, "goodput": None, "energy_kwh": None,
        "co2e_kg": None,
    })
    if tokens is None:
        return out
    mode_name, rate = _price(cat, plat, pricing, usd_per_gpu_hour, site)
    host_w = host_watts_per_gpu(cat, plat)
    o = outcome(tokens=tokens, tokens_per_s=tps, gpus=gpus, gpus_per_node=plat.gpus_per_node,
                params=model.total_params(), mode=costm.mode_code(mode_name or "on-demand"),
                usd_per_gpu_hour=rate if rate is not None else 0.0, tdp_watts=gpu.tdp_watts,
                host_watts_per_gpu=host_w, site=site)
    out.update({
        "time_to_train_days": first(o.days), "useful_days": first(o.useful_days),
        "gpu_hours": first(o.gpu_hours), "goodput": first(o.goodput),
        "energy_kwh": first(o.energy_kwh), "co2e_kg": first(o.co2e_kg),
        "checkpoint_write_s": first(o.checkpoint_s),
        "interruptions_per_hour": first(o.interruptions_per_hour),
        "pricing": mode_name, "usd_per_gpu_hour": rate,
        "cost_usd": first(o.cost_usd) if rate is not None else None,
    })
    return out


def price_rows(plats: list[Platform], site: Site, pricing_filter: tuple[str, ...] = ()
               ) -> list[tuple[Platform, str, float, float]]:
    """(platform, mode, USD per GPU-hour, cash up front per GPU) for every way to pay for
    each platform: its listed modes and capacity blocks, or owning at the site's TCO."""
    rows = []
    for p in plats:
        if p.acquisition == "own":
            if p.system is None or not p.system.price_usd:
                continue
            rate, capex = own_usd_per_gpu_hour(p, site, p.gpus_per_node)
            rows.append((p, "own", float(np.asarray(rate).reshape(-1)[0]),
                         float(np.asarray(capex).reshape(-1)[0]) / p.gpus_per_node))
            continue
        for mode, rate in sorted(p.prices.items()):
            if pricing_filter and mode not in pricing_filter:
                continue
            rows.append((p, mode, rate, 0.0))
        cb = p.offer.capacity_block_usd_per_hour if p.offer else None
        if cb and (not pricing_filter or "capacity-block" in pricing_filter):
            rows.append((p, "capacity-block", cb / p.gpus_per_node, 0.0))
    return rows


def _price(cat: Catalog, plat: Platform, pricing: str | None, usd_per_gpu_hour: float | None,
           site: Site) -> tuple[str | None, float | None]:
    """(pricing mode, USD per GPU-hour) for the run; (None, None) when nothing gives a price."""
    if usd_per_gpu_hour is not None:
        mode = costm.MODES[costm.mode_code(pricing)] if pricing else "on-demand"
        return mode, usd_per_gpu_hour
    if pricing is None:
        if plat.offer is not None:
            return "on-demand", plat.prices.get("on-demand")
        return None, None
    mode = costm.MODES[costm.mode_code(pricing)]
    if mode == "own" and plat.system is not None and not plat.system.price_usd:
        raise ConfigError(f"system {plat.system.id} has no price in the catalog, so --pricing own "
                          f"cannot be costed; give --usd-per-gpu-hour X (e.g. from `gpuplan tco "
                          f"--system {plat.system.id} --price USD`) or price it in a --catalog "
                          f"overlay")
    if mode == "own" and (plat.system is None or not plat.system.price_usd):
        raise ConfigError(f"--pricing own needs a system with a price; give --system (see "
                          f"`gpuplan catalog systems`), none is known for "
                          f"{plat.accelerator.id}")
    if mode != "own" and plat.offer is None:
        offers = [o.id for o in cat.offers_for(plat.accelerator.id)]
        hint = f"e.g. --offer {offers[0]}" if offers else "or --usd-per-gpu-hour X"
        raise ConfigError(f"--pricing {mode} needs a cloud offer: give --offer ID ({hint})")
    rates = {m: rate for _, m, rate, _ in price_rows([plat], site)}
    if mode not in rates:
        have = ", ".join(sorted(rates)) or "none"
        raise ConfigError(f"offer {plat.id} has no {mode} price; it has: {have}")
    return mode, rates[mode]
