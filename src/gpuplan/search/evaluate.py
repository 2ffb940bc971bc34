"""One code path for one configuration and for millions: physics, then price (L4).

`physics` composes the memory and time models (siblings that never import each other);
`outcome` turns a step time into days, GPU-hours, goodput, energy and money for a pricing mode.
`gpuplan estimate` and `gpuplan plan` both call these, so a plan and its estimate agree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimators import buffers, memory, memory_one, timing, timing_one
from ..estimators import cost as costm
from ..estimators.compute import Efficiency
from ..spec import Accelerator, Hardware, Layout, ModelSpec, System
from ..units import DAY, HOUR, GiB
from .platforms import single_box


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
    host_load_factor: float | None = None  # None: the GPU load factor
    allocator: str = "caching"  # ALLOCATORS: whose margin `fragmentation` is
    stack_buffers: Any = None  # estimators.buffers.StackBuffers of [memory.STACK]; None: LEGACY
    given: frozenset[str] = frozenset()  # fields the user set (a flag or a scenario)

    @property
    def host_load(self) -> float:
        """Host (CPU, NIC, fans) power as a fraction of its maximum."""
        return self.gpu_load_factor if self.host_load_factor is None else self.host_load_factor


# The PyTorch CUDA caching allocator's settings, each with its margin (reserved - allocated, as
# a fraction of allocated) in data/site.toml `allocator_fragmentation_<name>` (docs/calibration.md
# 'Allocator margin per allocator setting'): 'caching' is PyTorch's default, 'expandable' is
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (pytorch/pytorch PR #96995).
ALLOCATORS = ("caching", "expandable")
DEFAULT_ALLOCATOR = "caching"


def allocator_fraction(cat: Catalog, allocator: str | None) -> float:
    """The catalog's allocator margin of `allocator` (None: DEFAULT_ALLOCATOR)."""
    name = DEFAULT_ALLOCATOR if allocator is None else allocator
    if name not in ALLOCATORS:
        raise ConfigError(f"unknown allocator {name!r}: give caching (PyTorch's default) or "
                          "expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")
    return cat.site_value(f"allocator_fragmentation_{name}")


def with_allocator(cat: Catalog, site: Site, allocator: str | None) -> Site:
    """The site with the allocator setting `allocator` and its catalog margin (None: unchanged)."""
    if allocator is None or allocator == site.allocator:
        return site
    return replace(site, allocator=allocator, fragmentation=allocator_fraction(cat, allocator))


# site overrides as the flags give them: Site fields by name (numbers; None = the catalog's) and
# "allocator" (a name in ALLOCATORS)
SiteOverrides = dict[str, float | str | None]


def site_from_catalog(cat: Catalog, **overrides: Any) -> Site:
    """Catalog site defaults with the non-None overrides (numbers, by Site field) applied; the
    allocator margin is the catalog's for the `allocator` override (a name in ALLOCATORS; None
    or absent: DEFAULT_ALLOCATOR). One mapping carries both, as the flags give them."""
    allocator: str | None = overrides.pop("allocator", None)
    v = cat.site_value
    values: dict[str, float] = {
        "runtime_overhead_bytes": v("runtime_overhead_gib") * GiB,
        "fragmentation": allocator_fraction(cat, allocator),
        "gpu_mtbf_hours": v("gpu_mtbf_hours"),
        "checkpoint_bytes_per_s_per_node": v("checkpoint_bytes_per_s_per_node"),
        "restart_s": v("restart_s"),
        "spot_interruptions_per_hour": v("spot_interruptions_per_hour"),
        "reuse_utilization": v("reserved_reuse_utilization"),
        "utilization": v("utilization"),
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
    given = {k: float(x) + 0.0 for k, x in overrides.items() if x is not None}
    values.update(given)
    if not values["utilization"] > 0:
        raise ConfigError(f"--utilization must be more than 0, got {values['utilization']:g}: "
                          "an owned cluster that does no useful work has no cost per GPU-hour; "
                          "give the share of hours it trains, e.g. 0.7")
    rows = cat.extra.get("memory")
    stacks = buffers.from_table(rows) if rows else None
    return Site(**values, given=frozenset(given), stack_buffers=stacks,
                allocator=DEFAULT_ALLOCATOR if allocator is None else allocator)


def owned_site(system: System, site: Site) -> Site:
    """The site as it applies to owning `system`: a workstation (it sits in an office) pays no
    colocation unless the user gave it. The scale-out network depends on the node count too:
    see scale_out_network_usd_per_gpu."""
    if system.kind == "workstation" and "colocation_usd_per_kw_month" not in site.given:
        return replace(site, colocation_usd_per_kw_month=0.0)
    return site


def scale_out_network_usd_per_gpu(system: System, site: Site, nodes: Any) -> Any:
    """Scale-out network bought per GPU when owning `nodes` of `system`: none for a single box
    (no scale-out NIC or fabric) and none for one node of any server (nothing to cable it to),
    the site's figure from two nodes on; the user's figure (a flag or a scenario) always.
    The one rule for `plan`'s owned rate, `estimate --pricing own` and `gpuplan tco`."""
    if "network_usd_per_gpu" in site.given:
        return site.network_usd_per_gpu
    if single_box(system):
        return 0.0
    return np.where(np.asarray(nodes, dtype=float) > 1, site.network_usd_per_gpu, 0.0)


def own_cost(system: System, accelerator: Accelerator, site: Site, nodes: Any,
             gpu_watts: float | None = None) -> Any:
    """cost.OwnCost of `nodes` priced systems over the site's years (the one owned-cost path:
    the plan's owned rate, `estimate --pricing own` and `gpuplan tco` all come here), on the
    site as it applies to the system (owned_site) and its scale-out network at that node count
    (scale_out_network_usd_per_gpu). `gpu_watts`: a power limit the GPUs are held to (their
    electricity at that draw)."""
    if not system.price_usd:
        raise ConfigError(f"system '{system.id}' has no price in the catalog; give its price "
                          "(tco --price USD, or price_usd in a --catalog overlay)")
    network = scale_out_network_usd_per_gpu(system, site, nodes)
    site = owned_site(system, site)
    return costm.own_tco(
        nodes=nodes, gpus_per_node=system.gpus_per_node, system_price_usd=system.price_usd,
        system_max_power_watts=system.max_power_watts, gpu_tdp_watts=accelerator.tdp_watts,
        years=site.years, utilization=site.utilization,
        usd_per_kwh=site.electricity_usd_per_kwh, pue=site.pue,
        colocation_usd_per_kw_month=site.colocation_usd_per_kw_month,
        maintenance_fraction_per_year=site.maintenance_fraction_per_year,
        network_usd_per_gpu=network, storage_usd_per_gpu=site.storage_usd_per_gpu,
        install_fraction=site.install_fraction, staff_usd_per_gpu_year=site.staff_usd_per_gpu_year,
        residual_value_fraction=site.residual_value_fraction,
        gpu_load_factor=site.gpu_load_factor, host_load_factor=site.host_load,
        gpu_draw_watts=gpu_watts)


def run_goodput(*, gpus: Any, gpus_per_node: Any, params: float, spot: Any, site: Site,
                failures: bool = True) -> tuple[Any, Any]:
    """(cost.Goodput, checkpoint seconds) of a run on `gpus` GPUs: hardware failures grow with
    the GPU count (unless `failures` is False), spot adds its interruptions per instance-hour
    where `spot`; every node writes its share of the checkpoint in parallel."""
    gpus = np.asarray(gpus, dtype=float)
    nodes = np.ceil(gpus / np.asarray(gpus_per_node, dtype=float))
    rate = costm.cluster_failures_per_hour(gpus, site.gpu_mtbf_hours) * float(failures)
    rate = rate + np.where(spot, costm.spot_interruptions_per_hour(
        site.spot_interruptions_per_hour, nodes), 0.0)
    ckpt_s = costm.checkpoint_write_s(costm.checkpoint_bytes(params),
                                      site.checkpoint_bytes_per_s_per_node, nodes)
    return costm.goodput(ckpt_s, site.restart_s, rate), ckpt_s


@dataclass(frozen=True)
class Physics:
    memory: Any  # memory.MemoryBreakdown (bytes, arrays)
    timing: Any  # timing.TimingBreakdown (arrays)
    fits: Any  # reserved <= usable (GPU memory - runtime context), i.e. total <= GPU
    headroom_bytes: Any  # arrays; Python numbers for one configuration on one-row hardware


def memory_per_gpu(model: ModelSpec, layout: Layout, site: Site) -> Any:
    """The memory breakdown of the most loaded GPU; it depends on the layout, not the GPU."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return memory.memory_breakdown(model, layout,
                                       runtime_overhead_bytes=site.runtime_overhead_bytes,
                                       fragmentation=site.fragmentation,
                                       stacks=site.stack_buffers)


def time_per_step(model: ModelSpec, layout: Layout, hw: Hardware, eff: Efficiency,
                  host_traffic: Any = 0.0, stacks: Any = None) -> Any:
    """The step-time breakdown. Infeasible corners (a zero-bandwidth network, an unsupported
    precision) come out as inf or nan and are masked by the caller; they are not errors.
    `host_traffic`: the memory breakdown's offload bytes per step (0 without offload);
    `stacks`: the site's stack buffers (Site.stack_buffers), as the memory model's."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return timing.step_time(model, layout, hw, eff, host_traffic, stacks)


def physics(model: ModelSpec, layout: Layout, hw: Hardware, eff: Efficiency,
            site: Site) -> Physics:
    """Memory and step time of the layout; one configuration takes the scalar fast paths
    (`memory_one.memory_breakdown_one` and `timing_one.step_time_one`, equal to
    `memory.memory_breakdown` and `timing.step_time` to 1e-9), which hand anything outside
    their `mirrors` (a grid) to the vectorized models."""
    mem = memory_one.memory_breakdown_one(model, layout,
                                          runtime_overhead_bytes=site.runtime_overhead_bytes,
                                          fragmentation=site.fragmentation,
                                          stacks=site.stack_buffers)
    cap, total = hw.memory_bytes, mem.total
    # one configuration in Python floats (the fast paths, a one-row hardware): no numpy
    headroom = cap - total if type(cap) is float and type(total) is float \
        else np.asarray(cap) - total
    return Physics(memory=mem, timing=timing_one.step_time_one(model, layout, hw, eff,
                                                               mem.host_traffic,
                                                               site.stack_buffers),
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
    g, ckpt_s = run_goodput(gpus=gpus, gpus_per_node=gpus_per_node, params=params,
                            spot=mode == costm.SPOT, site=site)
    it_w = costm.it_power_watts(gpus, tdp_watts, host_watts_per_gpu, site.gpu_load_factor,
                                site.host_load)
    run = costm.run_cost(
        mode=mode, useful_hours=useful_h, instances=nodes,
        usd_per_instance_hour=np.asarray(usd_per_gpu_hour, dtype=float)
        * np.asarray(gpus_per_node), goodput_fraction=g.goodput,
        reuse_utilization=site.reuse_utilization, it_watts=it_w, pue=site.pue,
        grid_kg_co2e_per_kwh=site.grid_kg_co2e_per_kwh)
    return Outcome(useful_days=useful_h * HOUR / DAY, goodput=g.goodput,
                   days=run.wall_hours * HOUR / DAY, gpu_hours=run.wall_hours * gpus,
                   cost_usd=run.cost_usd, energy_kwh=run.energy_kwh, co2e_kg=run.co2e_kg,
                   checkpoint_s=ckpt_s, interruptions_per_hour=g.interruptions_per_hour)
