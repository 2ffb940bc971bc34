"""One code path for one configuration and for millions: physics, then price (L4).

`physics` composes the memory and time models (siblings that never import each other);
`outcome` turns a step time into days, GPU-hours, goodput, energy and money for a pricing mode.
`gpuplan estimate` and `gpuplan plan` both call these, so a plan and its estimate agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..estimate import cost as costm
from ..estimate import memory, timing
from ..estimate.compute import Efficiency
from ..spec import Hardware, Layout, ModelSpec
from ..units import DAY, HOUR, GiB


@dataclass(frozen=True, kw_only=True)
class Site:
    """Site, reliability and pricing assumptions: catalog defaults, overridable from the CLI."""

    runtime_overhead_bytes: float
    fragmentation: float
    gpu_mtbf_hours: float
    checkpoint_bytes_per_s_per_node: float
    restart_s: float
    spot_interruptions_per_hour: float
    reuse_utilization: float
    utilization: float
    years: float
    electricity_usd_per_kwh: float
    pue: float
    grid_kg_co2e_per_kwh: float
    gpu_load_factor: float
    colocation_usd_per_kw_month: float
    maintenance_fraction_per_year: float
    network_usd_per_gpu: float
    storage_usd_per_gpu: float
    install_fraction: float
    staff_usd_per_gpu_year: float
    residual_value_fraction: float


def site_from_catalog(cat: Catalog, **overrides: float | None) -> Site:
    """Catalog site defaults with the non-None overrides applied."""
    v = cat.site_value
    values: dict[str, float] = {
        "runtime_overhead_bytes": v("runtime_overhead_gib") * GiB,
        "fragmentation": v("allocator_fragmentation_fraction"),
        "gpu_mtbf_hours": v("gpu_mtbf_hours"),
        "checkpoint_bytes_per_s_per_node": v("checkpoint_bytes_per_s_per_node"),
        "restart_s": v("restart_s"),
        "spot_interruptions_per_hour": v("spot_interruptions_per_hour"),
        "reuse_utilization": v("reserved_reuse_utilization"),
        "utilization": 0.7,
        "years": v("depreciation_years"),
        "electricity_usd_per_kwh": v("electricity_usd_per_kwh"),
        "pue": v("pue"),
        "grid_kg_co2e_per_kwh": v("grid_kg_co2e_per_kwh"),
        "gpu_load_factor": v("gpu_load_factor"),
        "colocation_usd_per_kw_month": v("colocation_usd_per_kw_month"),
        "maintenance_fraction_per_year": v("maintenance_fraction_per_year"),
        "network_usd_per_gpu": v("network_usd_per_gpu"),
        "storage_usd_per_gpu": v("storage_usd_per_gpu"),
        "install_fraction": v("install_fraction"),
        "staff_usd_per_gpu_year": v("staff_usd_per_gpu_year"),
        "residual_value_fraction": v("residual_value_fraction"),
    }
    values.update({k: float(x) for k, x in overrides.items() if x is not None})
    return Site(**values)


@dataclass(frozen=True)
class Physics:
    memory: Any  # memory.MemoryBreakdown (bytes, arrays)
    timing: Any  # timing.TimingBreakdown (arrays)
    fits: np.ndarray  # total <= GPU memory
    headroom_bytes: np.ndarray


def memory_per_gpu(model: ModelSpec, layout: Layout, site: Site) -> Any:
    """The memory breakdown of the most loaded GPU; it depends on the layout, not the GPU."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return memory.memory_breakdown(model, layout,
                                       runtime_overhead_bytes=site.runtime_overhead_bytes,
                                       fragmentation=site.fragmentation)


def time_per_step(model: ModelSpec, layout: Layout, hw: Hardware, eff: Efficiency) -> Any:
    """The step-time breakdown. Infeasible corners (a zero-bandwidth network, an unsupported
    precision) come out as inf or nan and are masked by the caller; they are not errors."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return timing.step_time(model, layout, hw, eff)


def physics(model: ModelSpec, layout: Layout, hw: Hardware, eff: Efficiency,
            site: Site) -> Physics:
    mem = memory_per_gpu(model, layout, site)
    headroom = np.asarray(hw.memory_bytes) - mem.total
    return Physics(memory=mem, timing=time_per_step(model, layout, hw, eff),
                   fits=headroom >= 0, headroom_bytes=headroom)


@dataclass(frozen=True)
class Outcome:
    """Time and money of a whole run, arrays over candidates."""

    useful_days: Any  # training time if nothing failed
    goodput: Any  # useful / wall time (failures, checkpoints, restarts, spot interruptions)
    days: Any  # wall-clock days
    gpu_hours: Any  # GPU-hours paid for (wall time x GPUs)
    cost_usd: Any
    energy_kwh: Any
    co2e_kg: Any
    checkpoint_s: Any
    interruptions_per_hour: Any


def outcome(*, tokens: Any, tokens_per_s: Any, gpus: Any, gpus_per_node: Any, params: float,
            mode: Any, usd_per_gpu_hour: Any, tdp_watts: Any, host_watts_per_gpu: Any,
            site: Site) -> Outcome:
    """Days, goodput, cost, energy for `tokens` at `tokens_per_s`, in pricing `mode` (codes
    into cost.MODES; for 'own', `usd_per_gpu_hour` is the owned cost per used GPU-hour)."""
    gpus = np.asarray(gpus, dtype=float)
    nodes = np.ceil(gpus / np.asarray(gpus_per_node, dtype=float))
    mode = np.asarray(mode)
    with np.errstate(divide="ignore", invalid="ignore"):
        useful_h = np.where(tokens_per_s > 0, tokens / np.asarray(tokens_per_s) / HOUR, np.inf)
    # Failures grow with GPU count; spot adds its own interruptions per instance-hour.
    rate = costm.cluster_failures_per_hour(gpus, site.gpu_mtbf_hours)
    rate = rate + np.where(mode == costm.SPOT,
                           costm.spot_interruptions_per_hour(site.spot_interruptions_per_hour,
                                                             nodes), 0.0)
    ckpt_s = costm.checkpoint_write_s(costm.checkpoint_bytes(params),
                                      site.checkpoint_bytes_per_s_per_node, nodes)
    g = costm.goodput(ckpt_s, site.restart_s, rate)
    wall_h = costm.wall_hours(np.where(np.isfinite(useful_h), useful_h, 0.0), g.goodput)
    wall_h = np.where(np.isfinite(useful_h), wall_h, np.inf)
    finite = np.isfinite(wall_h)
    wh = np.where(finite, wall_h, 0.0)
    rate_instance = np.asarray(usd_per_gpu_hour, dtype=float) * np.asarray(gpus_per_node)
    cost = costm.job_cost_usd(mode, wh, nodes, rate_instance, site.reuse_utilization)
    cost = np.where(finite, cost, np.inf)
    it_w = gpus * (np.asarray(tdp_watts) * site.gpu_load_factor
                   + np.asarray(host_watts_per_gpu) * site.gpu_load_factor)
    kwh = costm.energy_kwh(it_w, wh, site.pue)
    return Outcome(useful_days=useful_h * HOUR / DAY, goodput=g.goodput,
                   days=wall_h * HOUR / DAY, gpu_hours=wall_h * gpus, cost_usd=cost,
                   energy_kwh=np.where(finite, kwh, np.inf),
                   co2e_kg=np.where(finite, costm.co2e_kg(kwh, site.grid_kg_co2e_per_kwh), np.inf),
                   checkpoint_s=ckpt_s, interruptions_per_hour=rate)
