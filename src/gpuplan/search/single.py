"""One configuration through the same physics, pricing and feasibility rules as the search
(`gpuplan estimate`)."""

from __future__ import annotations

import math
from dataclasses import replace
from operator import attrgetter
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimators import buffers as bufm
from ..estimators import cost as costm
from ..estimators.compute import Efficiency
from ..estimators.memory import MemoryBreakdown
from ..estimators.memory_one import summary as mem_summary
from ..estimators.timing import TIMING_PARTS
from ..spec import (
    FP8,
    OPTIMIZERS,
    PRECISIONS,
    R_MODULES,
    RECOMPUTE,
    SCHEDULES,
    STACKS,
    Accelerator,
    Layout,
    ModelSpec,
    module_names,
    moe_dedup,
    offload_names,
)
from ..units import GiB
from . import feasibility as fz
from .evaluate import Site, SiteOverrides, outcome, own_cost, physics, site_from_catalog
from .fit import fit_options
from .hardware import (
    check_precision,
    default_system,
    efficiency_for,
    hardware_table,
    with_tp_collectives,
)
from .intervals import Interval, interval
from .memo import one_row, per_catalog
from .platforms import (
    Platform,
    PriceRow,
    default_platform,
    offer_platform,
    system_platform,
)
from .power import PowerScaling, drawn_watts, power_limited, power_scaling
from .results import Estimate, EstimateWarning, LayoutInfo, MemoryGiB

# MemoryBreakdown fields that only fine-tuning fills (shown in memory_gib, #15)
TUNED_FIELDS = ("base_weights", "adapter_weights", "adapter_optimizer", "tuned")


def first(x: Any) -> float:
    """The single value of a grid of one, as a Python float."""
    if type(x) is float:  # the scalar fast paths' values: no numpy round trip
        return x
    if type(x) is int:  # the breakdown's stage index
        return float(x)
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


_PLAIN = (int, float, bool)
_INTS = (int, bool)
_INT_SET = frozenset(_INTS)


def one(x: Any) -> Any:
    """The single value of a grid of one, as a Python number (bool, int or float)."""
    return x if type(x) in _PLAIN else np.asarray(x).reshape(-1)[0].item()


def host_watts_per_gpu(cat: Catalog, p: Platform) -> float:
    """Host (CPU, NIC, fans) power per GPU: system max power minus the GPUs' TDP, per GPU; from
    the catalog system of the same accelerator when the platform is a cloud offer; 0 if none."""
    assert p.accelerator is not None
    system = p.system or default_system(cat, p.accelerator)
    if system is None:
        return 0.0
    return float(costm.host_watts_per_gpu(system.max_power_watts, system.gpus_per_node,
                                          p.accelerator.tdp_watts))


def own_usd_per_gpu_hour(p: Platform, site: Site, gpus: Any,
                         power_limit_watts: float | None = None) -> tuple[Any, Any]:
    """Owned cost per used GPU-hour of `gpus` GPUs of system p over the site's years (their
    electricity at the power limit when one is given)."""
    assert p.system is not None and p.system.price_usd and p.accelerator is not None
    tco = own_cost(p.system, p.accelerator, site, np.ceil(np.asarray(gpus, dtype=float)
                                                           / p.system.gpus_per_node),
                   gpu_watts=power_limit_watts)
    return tco.usd_per_gpu_hour, tco.capex_total_usd


def price_rows(plats: list[Platform], site: Site, pricing_filter: tuple[str, ...] = (),
               power_limit_watts: float | None = None) -> list[PriceRow]:
    """Every way to pay for each platform: its listed modes and capacity blocks, or owning
    at the site's TCO."""
    rows = []
    for p in plats:
        if p.acquisition == "own":
            if p.system is None or not p.system.price_usd:
                continue
            # one node, and two: own_tco is linear in the node count beyond the scale-out
            # network bought from two nodes on, so two nodes price any larger count
            gpus = np.array([1.0, 2.0]) * p.gpus_per_node
            rate, capex = own_usd_per_gpu_hour(p, site, gpus, power_limit_watts)
            per_gpu = np.asarray(capex, dtype=float) / gpus
            rows.append(PriceRow(platform=p, mode="own", usd_per_gpu_hour=float(rate[0]),
                                 capex_per_gpu=float(per_gpu[0]),
                                 scale_out_usd_per_gpu_hour=float(rate[1]),
                                 scale_out_capex_per_gpu=float(per_gpu[1])))
            continue
        for mode, rate in sorted(p.prices.items()):
            if pricing_filter and mode not in pricing_filter:
                continue
            rows.append(PriceRow(platform=p, mode=mode, usd_per_gpu_hour=rate, capex_per_gpu=0.0))
        cb = p.offer.capacity_block_usd_per_hour if p.offer else None
        if cb and (not pricing_filter or "capacity-block" in pricing_filter):
            rows.append(PriceRow(platform=p, mode="capacity-block",
                                 usd_per_gpu_hour=cb / p.gpus_per_node, capex_per_gpu=0.0))
    return rows


def resolve_platform(cat: Catalog, gpu: Accelerator, offer: str | None,
                     system: str | None) -> Platform:
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


_INFO_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch", "global_batch",
                "seq_len", "precision", "recompute", "optimizer", "sp", "flash", "offload",
                "stack", "first_stage_layers", "last_stage_layers", "shard_group",
                "recompute_modules", "recompute_every", "schedule", "offload_layers",
                "moe_dispatcher")
_info_values = attrgetter(*_INFO_FIELDS)


def _layout_info(layout: Layout, **memory_options: Any) -> LayoutInfo:
    values = _info_values(layout)
    if not _INT_SET.issuperset(map(type, values)):  # numpy values, grids of one: Python ints
        values = tuple(int(x if type(x) in _PLAIN else one(x)) for x in values)
    (tp, pp, dp, cp, ep, vpp, zero, mb, gb, seq, prec, rc, opt, sp, flash, off, stack, first_l,
     last_l, sg, mods, every, sched, off_layers, dispatcher) = values
    return LayoutInfo(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, zero=zero, micro_batch=mb, global_batch=gb,
        seq_len=seq, microbatches=int(gb / (dp * mb)), precision=PRECISIONS[prec],
        recompute=RECOMPUTE[rc], optimizer=OPTIMIZERS[opt], sp=bool(sp) and tp > 1,
        flash=bool(flash), offload=bool(off), stack=STACKS[stack], first_stage_layers=first_l,
        last_stage_layers=last_l, shard_group=sg,
        offload_parts=offload_names(off) if off else (), offload_layers=off_layers,
        recompute_modules=module_names(mods) if rc == R_MODULES else (),
        recompute_every=every, schedule=SCHEDULES[sched],
        moe_dispatcher="flex" if moe_dedup(dispatcher, stack) else "alltoall", **memory_options)


# the MemoryBreakdown fields `memory_detail_gib` lists, in their order
DETAIL_FIELDS = tuple(k for k in MemoryBreakdown.__dataclass_fields__
                      if k not in TUNED_FIELDS and k != "host_traffic")
_detail_values = attrgetter(*DETAIL_FIELDS)
_timing_values = attrgetter(*TIMING_PARTS)


_NUMBERS = frozenset((float, int))
_FLOATS = frozenset((float,))


def _gib(values: tuple[Any, ...]) -> list[float]:
    """Bytes (Python floats, or grids of one) -> GiB as Python floats."""
    if _NUMBERS.issuperset(map(type, values)):  # the scalar fast path's floats (and `stage`)
        return [x / GiB for x in values]  # an int divides as float(x) / GiB
    return [(x if type(x) is float else first(x)) / GiB for x in values]


def _memory_fields(mem: Any, layout: Layout, site: Site) -> dict[str, Any]:
    """The estimate's memory figures (GiB) from the breakdown of the most loaded GPU."""
    lines = mem.buffer_lines()
    summary = mem_summary(mem, GiB, lines)  # x / GiB: the same floats as (x / 1.0) / GiB
    return dict(
        memory_gib=MemoryGiB(**(summary if _FLOATS.issuperset(map(type, summary.values()))
                                else {k: first(v) for k, v in summary.items()})),
        memory_detail_gib=tuple(zip(DETAIL_FIELDS, _gib(_detail_values(mem)), strict=True)),
        allocated_gib=first(mem.allocated) / GiB, reserved_gib=first(mem.reserved) / GiB,
        memory_buffers=memory_buffers(mem, layout, site, lines))


def _timing_fields(t: Any, eff: Efficiency, runs: bool, gpus: int) -> dict[str, Any]:
    """The estimate's rates, bottleneck and time breakdown from the step-time breakdown."""
    tps = first(t.tokens_per_s)
    small = runs and bool(one(fz.small_micro_batch(
        overhead_s=t.overhead_s, compute_s=t.compute_s, matmul_efficiency=t.matmul_efficiency,
        matmul_max=first(eff.matmul_max))))
    parts = [x if type(x) is float else first(x) for x in _timing_values(t)] if runs \
        else [0.0] * len(TIMING_PARTS)
    return dict(
        tokens_per_s=tps, tokens_per_s_per_gpu=tps / gpus, mfu=first(t.mfu), hfu=first(t.hfu),
        bottleneck=fz.BOTTLENECKS[int(one(fz.bottleneck(t)))], micro_batch_too_small=small,
        efficiency_is_guess=bool(one(t.efficiency_guess)),
        time_breakdown_s=tuple(zip(TIMING_PARTS, parts, strict=True)))


def _warnings(plat: Platform, layout: Layout, gpus: int, memory_bytes: Any, capacity_bytes: float,
              t: Any) -> tuple[EstimateWarning, ...]:
    """The plan's rules this configuration breaks (the plan would exclude it), in fz.ORDER."""
    checks = [*fz.hardware_checks(tp=layout.tp, precision=layout.precision, gpus=gpus,
                                  platform=plat, allow_consumer=False),
              fz.memory_check(memory_bytes, capacity_bytes),
              fz.runs_check(t.step_s, t.tokens_per_s), fz.offer_check(gpus, plat)]
    return tuple(EstimateWarning(code=c, gpus=gpus, gpus_per_node=plat.gpus_per_node,
                                 scale_up_domain=plat.scale_up_domain, max_gpus=plat.max_gpus,
                                 tp=int(one(layout.tp)))
                 for c in fz.broken(checks))


def check_host_memory(offloaded_bytes: float, host_bytes: float, plat: Platform) -> None:
    """Offload needs the node's host memory: one clear line when the catalog has none for the
    platform, or when the offloaded state needs more than its RAM per GPU."""
    if offloaded_bytes <= 0:
        return
    if not host_bytes > 0:
        raise ConfigError(f"--offload and --ema host need host memory, and the catalog has no "
                          f"ram_gib for {plat.id}; give --system with one (see `gpuplan "
                          f"catalog systems`) or add ram_gib in a --catalog overlay")
    if offloaded_bytes > host_bytes:
        raise ConfigError(f"--offload / --ema host need {offloaded_bytes / GiB:,.0f} GiB of host "
                          f"memory per GPU, but {plat.id} has {host_bytes / GiB:,.0f} GiB per "
                          f"GPU; offload less, shard more (--zero, --shard-group) or use more "
                          f"GPUs")


def estimate(cat: Catalog, model: ModelSpec, gpu: Accelerator, layout: Layout, *, gpus: int,
             tokens: float | None, offer: str | None, system: str | None,
             usd_per_gpu_hour: float | None, pricing: str | None,
             overrides: SiteOverrides,
             power_limit_watts: float | None = None, grad_reduce_dtype: str | None = None,
             memory_options: tuple[str | None, ...] = (),
             tp_collectives: str | None = None) -> Estimate:
    """`memory_options`: (moments dtype, activation cache, EMA place, FP8 recipe),
    `with_memory_options` (the FP8 recipe with this GPU); `tp_collectives`: 'overlapped' or
    'blocking' (None: the stack's, `with_tp_collectives`)."""
    _check_precision(cat, gpu, PRECISIONS[int(layout.precision)])
    site = with_memory_options(with_grad_reduce(_site(cat, overrides), grad_reduce_dtype),
                               layout, *memory_options, gpu=gpu)
    plat, hw = _hardware(cat, gpu, offer, system)
    stack = STACKS[int(one(layout.stack))]
    eff, iv = _efficiency(cat, gpu.family, stack)
    eff, tp_collectives = with_tp_collectives(cat, eff, gpu.family, stack, tp_collectives)
    power: PowerScaling | None = None
    if power_limit_watts is not None:
        power = power_scaling(gpu, power_limit_watts)
        hw = power_limited(hw, gpu, power_limit_watts)
    ph = physics(model, layout, hw, eff, site)
    mem, t = ph.memory, ph.timing
    check_host_memory(first(mem.offloaded), first(hw.host_memory_bytes), plat)
    cap = first(hw.memory_bytes)
    fits = bool(one(ph.fits))
    step = first(t.step_s)
    runs = math.isfinite(step)
    params, active = _params(cat, model)
    base: dict[str, Any] = dict(
        model=model.id, params=params, active_params=active,
        gpu=gpu.id, gpus=gpus, platform=plat.id, gpus_per_node=plat.gpus_per_node,
        layout=_layout_info(layout, **_memory_echo(layout, site), tp_collectives=tp_collectives),
        **_memory_fields(mem, layout, site),
        gpu_memory_gib=cap / GiB, headroom_gib=first(ph.headroom_bytes) / GiB, fits=fits,
        suggestions=() if fits else fit_options(
            model, layout, cap, gpus, runtime_overhead_bytes=site.runtime_overhead_bytes,
            fragmentation=site.fragmentation, stacks=site.stack_buffers,
            total_bytes=first(mem.total)),
        warnings=_warnings(plat, layout, gpus, mem.total, cap, t),
        **_timing_fields(t, eff, runs, gpus),
        tokens=tokens, interval_group=iv.group, power_limit_watts=power_limit_watts, power=power,
        step_time_s=step if runs else None,
        step_time_s_p10=step * iv.p10 if runs else None,
        step_time_s_p90=step * iv.p90 if runs else None)
    if not runs:
        return Estimate(**base, feasible=False, infeasible_reason=fz.NO_LINK)
    if tokens is None:
        return Estimate(**base, feasible=True, infeasible_reason=None)
    return _with_run(cat, base, plat, gpu, model, site, pricing, usd_per_gpu_hour, iv)


def _params(cat: Catalog, model: ModelSpec) -> tuple[int, int]:
    """(total, active) parameters of the model, once per catalog for a catalog's own model
    (a model from flags or a config.json, or a fine-tuned copy, is counted every call)."""
    if cat.models.get(model.id) is not model:
        return model.total_params(), model.active_params()
    return per_catalog(cat, ("params", model.id),
                       lambda: (model.total_params(), model.active_params()))


def _check_precision(cat: Catalog, gpu: Accelerator, precision: str) -> None:
    """`hardware.check_precision`, once per catalog for a catalog's own accelerator."""
    if cat.accelerators.get(gpu.id) is not gpu:
        check_precision(gpu, precision)
    else:
        per_catalog(cat, ("precision", gpu.id, precision), lambda: check_precision(gpu, precision))


def _site(cat: Catalog, overrides: SiteOverrides) -> Site:
    """The site: the catalog's defaults (once per catalog) or, with an override, built anew."""
    if any(v is not None for v in overrides.values()):
        return site_from_catalog(cat, **overrides)
    return per_catalog(cat, "site", lambda: site_from_catalog(cat))


def _hardware(cat: Catalog, gpu: Accelerator, offer: str | None, system: str | None
              ) -> tuple[Platform, Any]:
    """The platform of `gpu` (`resolve_platform`) and its hardware row (`hardware_table`, as
    Python numbers: `one_row`), once per catalog for a catalog's own accelerator."""
    def build() -> tuple[Platform, Any]:
        plat = resolve_platform(cat, gpu, offer, system)
        return plat, one_row(hardware_table(cat, [(gpu, plat)]))

    if cat.accelerators.get(gpu.id) is not gpu:  # a changed copy: its own figures
        return build()
    return per_catalog(cat, ("hardware", gpu.id, offer, system), build)


def _efficiency(cat: Catalog, family: str, stack: str) -> tuple[Efficiency, Interval]:
    """The efficiency constants (`efficiency_for`, as Python numbers: `one_row`) and the
    prediction interval (`interval`) of a (family, stack) pair, once per catalog."""
    def build() -> tuple[Efficiency, Interval]:
        eff = one_row(efficiency_for(cat, np.array([family], dtype=object), stack))
        return eff, interval(cat, family, stack, bool(one(eff.guess)))

    return per_catalog(cat, ("efficiency", family, stack), build)


def with_grad_reduce(site: Site, dtype: str | None) -> Site:
    """The site with every stack reducing gradients in `dtype` ('fp32' | 'bf16'; None: as the
    catalog's [memory.STACK] says)."""
    if dtype is None:
        return site
    if dtype not in bufm.REDUCE_DTYPES:
        raise ConfigError(f"--grad-reduce-dtype must be one of {', '.join(bufm.REDUCE_DTYPES)}, "
                          f"got {dtype!r}")
    return replace(site, stack_buffers=(site.stack_buffers or bufm.LEGACY)
                   .with_grad_reduce(dtype))


def with_memory_options(site: Site, layout: Layout, moments_dtype: str | None = None,
                        activation_cache: str | None = None, ema: str | None = None,
                        fp8_recipe: str | None = None, *, gpu: Accelerator | None = None
                        ) -> Site:
    """The site with every stack keeping the run's memory options (estimators/buffers.py:
    `--moments-dtype`, `--activation-cache`, `--ema`, `--fp8-recipe` on `gpu`; None: the
    stack's own)."""
    if moments_dtype is None and activation_cache is None and ema is None and (
            fp8_recipe is None or fp8_recipe == "auto"):
        return site  # the stacks' own options
    sb = site.stack_buffers or bufm.LEGACY
    for value, names, what in ((moments_dtype, tuple(bufm.MOMENT_DTYPES), "--moments-dtype"),
                               (activation_cache, bufm.ACTIVATION_CACHES, "--activation-cache"),
                               (ema, bufm.EMA_PLACES, "--ema"),
                               (fp8_recipe, bufm.FP8_RECIPES, "--fp8-recipe")):
        if value is not None and value not in names:
            raise ConfigError(f"{what} must be one of {', '.join(names)}, got {value!r}")
    if activation_cache == "fp8" and int(one(layout.precision)) != FP8:
        raise ConfigError("--activation-cache fp8 caches FP8 activations and needs "
                          "--precision fp8; drop it or add --precision fp8")
    if fp8_recipe in ("tensor", "mxfp8") and int(one(layout.precision)) != FP8:
        raise ConfigError(f"--fp8-recipe {fp8_recipe} sets how FP8 GEMMs are scaled and needs "
                          "--precision fp8; drop it or add --precision fp8")
    if moments_dtype is not None:
        sb = sb.with_moments(moments_dtype)
    if activation_cache is not None:
        sb = sb.with_activation_cache(activation_cache)
    if ema is not None:
        sb = sb.with_ema(ema)
    if fp8_recipe is not None:  # the transpose kept unless per-tensor on a non-TN-only GPU
        sb = sb.with_fp8_transpose(bufm.fp8_transpose_kept(
            fp8_recipe, bool(gpu is not None and gpu.fp8_gemm_any_layout)))
    return site if sb is (site.stack_buffers or bufm.LEGACY) else replace(site, stack_buffers=sb)


_MOMENT_NAMES = {v: k for k, v in bufm.MOMENT_DTYPES.items()}  # bytes -> --moments-dtype


def _memory_echo(layout: Layout, site: Site) -> dict[str, Any]:
    """The memory options the layout's stack runs with (`with_memory_options`), for the
    layout echo."""
    sb = site.stack_buffers or bufm.LEGACY
    s = int(one(layout.stack))
    moments = _MOMENT_NAMES[float(sb.moment_bytes[s])]
    return dict(moments_dtype=moments, activation_cache="fp8" if sb.fp8_act_cache[s] else "stack",
                ema=sb.ema[s], fp8_transpose=bool(sb.fp8_transpose[s]),
                allocator=site.allocator, allocator_fraction=float(site.fragmentation))


def memory_buffers(mem: Any, layout: Layout, site: Site, lines: dict[str, Any] | None = None
                   ) -> tuple[tuple[str, float, str], ...]:
    """(name, GiB, dtype) of each line of `other` for one configuration (`lines`:
    `mem.buffer_lines()` when the caller has them already)."""
    sb, s = site.stack_buffers or bufm.LEGACY, int(one(layout.stack))
    dtypes = bufm.buffer_dtypes(PRECISIONS[int(layout.precision)], float(sb.grad_reduce_bytes[s]),
                                bool(sb.fp8_primary_weights[s]))
    lines = mem.buffer_lines() if lines is None else lines
    return tuple(zip(lines, _gib(tuple(lines.values())), [dtypes[k] for k in lines],
                     strict=True))


def _with_run(cat: Catalog, base: dict[str, Any], plat: Platform, gpu: Accelerator,
              model: ModelSpec, site: Site, pricing: str | None,
              usd_per_gpu_hour: float | None, iv: Interval) -> Estimate:
    """Days, money and energy of training on `tokens` (a run that never ends is infeasible)."""
    mode_name, rate = _price(cat, plat, pricing, usd_per_gpu_hour, site, int(base["gpus"]),
                             base["power_limit_watts"])
    o = outcome(tokens=base["tokens"], tokens_per_s=base["tokens_per_s"], gpus=base["gpus"],
                gpus_per_node=plat.gpus_per_node, params=base["params"],
                mode=costm.mode_code(mode_name or "on-demand"),
                usd_per_gpu_hour=rate if rate is not None else 0.0,
                tdp_watts=drawn_watts(gpu.tdp_watts, base["power_limit_watts"]),
                host_watts_per_gpu=host_watts_per_gpu(cat, plat), site=site)
    days, hours = first(o.days), first(o.gpu_hours)
    cost = first(o.cost_usd) if rate is not None else None
    ranges: dict[str, Any] = dict(  # splatted into Estimate beside `base`
        time_to_train_days_p10=days * iv.p10, time_to_train_days_p90=days * iv.p90,
        gpu_hours_p10=hours * iv.p10, gpu_hours_p90=hours * iv.p90,
        cost_usd_p10=None if cost is None else cost * iv.p10,
        cost_usd_p90=None if cost is None else cost * iv.p90)
    if fz.broken([fz.goodput_check(days)]):
        return Estimate(**base, feasible=False, infeasible_reason=fz.NO_GOODPUT,
                        goodput=first(o.goodput), useful_days=first(o.useful_days),
                        checkpoint_write_s=first(o.checkpoint_s),
                        interruptions_per_hour=first(o.interruptions_per_hour),
                        pricing=mode_name, usd_per_gpu_hour=rate)
    return Estimate(
        **base, **ranges, feasible=True, infeasible_reason=None, time_to_train_days=days,
        useful_days=first(o.useful_days), gpu_hours=hours, goodput=first(o.goodput),
        energy_kwh=first(o.energy_kwh), co2e_kg=first(o.co2e_kg),
        checkpoint_write_s=first(o.checkpoint_s),
        interruptions_per_hour=first(o.interruptions_per_hour), pricing=mode_name,
        usd_per_gpu_hour=rate, cost_usd=cost)


def _price(cat: Catalog, plat: Platform, pricing: str | None, usd_per_gpu_hour: float | None,
           site: Site, gpus: int, power_limit_watts: float | None = None
           ) -> tuple[str | None, float | None]:
    """(pricing mode, USD per GPU-hour) of a run on `gpus` GPUs; (None, None) when nothing gives
    a price."""
    assert plat.accelerator is not None
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
    rates = {r.mode: float(r.at(gpus)[0])
             for r in price_rows([plat], site, power_limit_watts=power_limit_watts)}
    if mode not in rates:
        have = ", ".join(sorted(rates)) or "none"
        raise ConfigError(f"offer {plat.id} has no {mode} price; it has: {have}")
    return mode, rates[mode]
