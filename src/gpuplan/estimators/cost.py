"""What training costs: cloud pricing modes, on-premises TCO, buy vs rent, failures, energy (L3).

Pure numpy: every function takes scalars or arrays (broadcast together) and returns arrays, or
frozen dataclasses of arrays whose parts sum to their total. No I/O, no printing: catalog and
site values arrive as arguments. Units are in the names: USD, watts, kWh, kg CO2e, bytes;
billing time in hours (prices are quoted per hour), checkpoint and restart times in seconds.

Conventions (stated once, used everywhere):
- A year is 365.25 days (8,766 hours); a month is a twelfth of it.
- A commitment (reserved instance, savings plan) is paid for its whole term whether used or not.
- An owned cluster's costs are all fixed per calendar hour (power is drawn at the load factor
  around the clock), so its cost per *used* GPU-hour is that fixed cost divided by utilization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, quote, suggest
from ..spec import PRICING
from ..units import HOUR, YEAR

HOURS_PER_YEAR = YEAR / HOUR  # 8,766 h (365.25 days)
HOURS_PER_MONTH = HOURS_PER_YEAR / 12
# Every way of getting GPUs, in the order of their integer codes in vectorized inputs.
MODES = (*PRICING, "capacity-block", "own")
ON_DEMAND, SPOT, RESERVED_1Y, RESERVED_3Y, SAVINGS_1Y, SAVINGS_3Y, CAPACITY_BLOCK, OWN = range(8)
MODE_ALIASES = {"savings-plan": "savings-plan-1y", "reserved": "reserved-1y",
                "ondemand": "on-demand", "buy": "own", "on-prem": "own"}
# Commitment term of each committed mode, in years (AWS reserved instances and savings plans are
# sold for 1 or 3 years: https://aws.amazon.com/savingsplans/faq/).
TERM_YEARS = {RESERVED_1Y: 1.0, RESERVED_3Y: 3.0, SAVINGS_1Y: 1.0, SAVINGS_3Y: 3.0}
# AWS EC2 Capacity Blocks for ML are sold in whole days (1-14 days in 1-day increments, longer
# ones in 7-day increments): https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html
CAPACITY_BLOCK_HOURS = 24.0
# Mixed-precision AdamW checkpoint: fp32 master weights + two fp32 moments (12 B/param, "K = 12"
# in Rajbhandari et al. 2020, ZeRO, sec. 3.1, https://arxiv.org/abs/1910.02054) + 16-bit
# weights (2 B/param). Gradients are not saved.
ADAMW_CHECKPOINT_BYTES_PER_PARAM = 14.0


# --- input checks (bad input is a ConfigError with one line, never a traceback) -------------
def _nonneg(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if (a >= 0).all():  # the common case, checked without building the mask twice
        return a
    bad = ~(a >= 0)  # negative or nan
    if bad.any():
        raise ConfigError(
            f"{name} must be a number >= 0, got {np.ravel(a[bad] if a.ndim else a)[0]:g}; "
            "fix the value"
        )
    return a


def _fraction(name: str, x: Any) -> np.ndarray:
    a = _nonneg(name, x)
    if np.any(a > 1):
        raise ConfigError(
            f"{name} must be a fraction between 0 and 1, got {np.max(a):g}; write 0.7 for 70%"
        )
    return a


def mode_code(name: str) -> int:
    """'reserved-3y' -> its integer code in MODES; a clear error listing the modes otherwise."""
    key = name.strip().lower()
    key = MODE_ALIASES.get(key, key)
    if key not in MODES:
        hint = suggest(key, MODES, n=1)
        raise ConfigError(f"unknown pricing mode {quote(name)}; "
                          + (f"did you mean '{hint[0]}'? " if hint else "")
                          + f"choose one of: {', '.join(MODES)}")
    return MODES.index(key)


def term_hours(mode: int) -> float:
    """Commitment term of a committed mode, in hours."""
    return TERM_YEARS[mode] * HOURS_PER_YEAR


# --- cloud: pay per use ---------------------------------------------------------------------
def per_gpu_hour(usd_per_instance_hour: Any, gpus_per_instance: Any) -> np.ndarray:
    # usd per GPU-hour = instance rate / GPUs in the instance
    return _nonneg("price", usd_per_instance_hour) / np.asarray(gpus_per_instance, dtype=float)


def on_demand_cost_usd(hours: Any, instances: Any, usd_per_instance_hour: Any) -> np.ndarray:
    # cost = wall hours x instances x hourly rate (billed per use)
    return (_nonneg("hours", hours) * _nonneg("instances", instances)
            * _nonneg("price", usd_per_instance_hour))


def capacity_block_cost_usd(hours: Any, instances: Any, usd_per_instance_hour: Any,
                            block_hours: float = CAPACITY_BLOCK_HOURS) -> np.ndarray:
    # cost = ceil(hours / block) x block x instances x rate (blocks are bought whole; see
    # CAPACITY_BLOCK_HOURS for the AWS source)
    blocks = np.ceil(_nonneg("hours", hours) / block_hours)
    return blocks * block_hours * _nonneg("instances", instances) * _nonneg(
        "price", usd_per_instance_hour)


# --- cloud: commitments (reserved 1y/3y, savings plans) --------------------------------------
@dataclass(frozen=True)
class Commitment:
    """A job run on committed capacity. committed = job_share + stranded;
    job_cost = job_share + (1 - reuse) x stranded (the part nobody else uses)."""

    terms: Any  # whole terms bought per instance
    committed_usd: Any  # paid for the whole terms
    job_share_usd: Any  # the job's own instance-hours at the committed rate
    stranded_usd: Any  # paid for but not used by the job
    reused_usd: Any  # stranded capacity other work uses (at the reuse utilization)
    job_cost_usd: Any  # what the job must carry: job share + stranded not reused
    effective_usd_per_hour: Any  # job_cost / the job's instance-hours (>= the committed rate)


def commitment_cost(hours: Any, instances: Any, usd_per_instance_hour: Any, term_h: Any,
                    reuse_utilization: Any) -> Commitment:
    """A job of `hours` wall time on `instances` committed instances.

    A commitment is paid for its whole term: AWS bills a reserved instance for every hour of
    its term, used or not, and a savings plan for its hourly commitment throughout
    (https://aws.amazon.com/ec2/pricing/reserved-instances/, https://aws.amazon.com/savingsplans/faq/).
    The hours the job does not use are reused by other work at `reuse_utilization`.
    """
    h = _nonneg("hours", hours)
    n = _nonneg("instances", instances)
    rate = _nonneg("price", usd_per_instance_hour)
    reuse = _fraction("reuse utilization", reuse_utilization)
    terms = np.maximum(1.0, np.ceil(h / term_h))  # a term is bought whole
    committed = terms * term_h * n * rate
    share = h * n * rate
    stranded = committed - share
    reused = reuse * stranded
    job_cost = share + (1 - reuse) * stranded
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        effective = np.where(h * n > 0, job_cost / (h * n), np.inf)
    return Commitment(terms, committed, share, stranded, reused, job_cost, effective)


def committed_usd_per_used_hour(usd_per_hour: Any, utilization: Any,
                                reuse_utilization: Any = 0.0) -> np.ndarray:
    # Steady state over a term: the holder uses u of the committed hours; of the idle (1 - u),
    # other work reuses a fraction r. Cost per used hour = rate (u + (1 - u)(1 - r)) / u
    #   = rate (r + (1 - r)/u): rate / u with no reuse, the rate itself with full reuse.
    u = _fraction("utilization", utilization)
    r = _fraction("reuse utilization", reuse_utilization)
    rate = _nonneg("price", usd_per_hour)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_used = rate * (r + (1 - r) / np.where(u > 0, u, 1.0))
    return np.where((u > 0) | (r >= 1), per_used, np.inf)


# --- reliability: failures, spot interruptions, checkpoints (Young 1974; Daly 2006) -----------
def cluster_failures_per_hour(gpus: Any, gpu_mtbf_hours: Any) -> np.ndarray:
    # Independent failures add: cluster rate = gpus / per-GPU MTBF. Llama 3 (Dubey et al. 2024,
    # sec. 3.3.4, https://arxiv.org/abs/2407.21783): 419 unexpected interruptions in 54 days on
    # 16,384 H100s, i.e. a per-GPU MTBF of about 16,384 x 54 x 24 / 419 = 50,700 h.
    return _nonneg("gpus", gpus) / _nonneg("GPU MTBF hours", gpu_mtbf_hours)


def spot_interruptions_per_hour(per_instance_per_hour: Any, instances: Any) -> np.ndarray:
    # Each instance may be reclaimed independently: cluster rate = per-instance rate x instances
    # (a synchronous job stops when any one is reclaimed).
    return _nonneg("spot interruption rate", per_instance_per_hour) * _nonneg("instances",
                                                                              instances)


def checkpoint_bytes(params: Any,
                     bytes_per_param: Any = ADAMW_CHECKPOINT_BYTES_PER_PARAM) -> np.ndarray:
    # model + optimizer state = params x bytes per param (14 for mixed-precision AdamW)
    return _nonneg("parameters", params) * _nonneg("bytes per parameter", bytes_per_param)


def checkpoint_write_s(nbytes: Any, bytes_per_s_per_node: Any, nodes: Any) -> np.ndarray:
    # Sharded checkpoint, every node writes its part in parallel:
    # time = bytes / (per-node storage bandwidth x nodes)
    bw = _nonneg("storage bandwidth", bytes_per_s_per_node) * _nonneg("nodes", nodes)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _nonneg("checkpoint bytes", nbytes) / np.where(bw > 0, bw, 1)
    return np.where(bw > 0, t, np.inf)


def young_daly_interval_s(checkpoint_s: Any, interruptions_per_hour: Any) -> np.ndarray:
    # Optimal compute time between checkpoints, tau = sqrt(2 x delta x MTBI) (Young 1974,
    # "A first order approximation to the optimum checkpoint interval", CACM 17(9);
    # Daly 2006, FGCS 22(3)). Infinite (never checkpoint) when nothing interrupts.
    lam_s = _nonneg("interruption rate", interruptions_per_hour) / HOUR
    d = _nonneg("checkpoint time", checkpoint_s)
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(lam_s > 0, np.sqrt(2 * d / np.where(lam_s > 0, lam_s, 1.0)), np.inf)


@dataclass(frozen=True)
class Goodput:
    """Fractions of wall time; goodput + checkpoint + restart + lost_work = 1."""

    goodput: Any  # useful training time / wall time
    checkpoint: Any  # writing checkpoints
    restart: Any  # restarting after an interruption (scheduling, loading the checkpoint)
    lost_work: Any  # work since the last checkpoint, redone
    interval_s: Any  # compute time between checkpoints
    interruptions_per_hour: Any


def goodput(checkpoint_s: Any, restart_s: Any, interruptions_per_hour: Any,
            interval_s: Any = None) -> Goodput:
    """Useful fraction of wall time under interruptions, first-order model (Daly 2006).

    With rate lambda, checkpoint time delta every tau of work, restart R, and on average tau/2
    of work lost per interruption, a wall time T holds W of work where
        T = W (1 + delta/tau) + lambda T (R + tau/2)
        =>  W/T = (1 - lambda (R + tau/2)) / (1 + delta/tau).
    tau defaults to the Young-Daly optimum, where delta/tau = lambda tau/2 = sqrt(delta lambda/2).
    Goodput is 0 when interruptions come faster than a restart plus half an interval.
    """
    lam = _nonneg("interruption rate", interruptions_per_hour) / HOUR
    d = _nonneg("checkpoint time", checkpoint_s)
    r = _nonneg("restart time", restart_s)
    if interval_s is None:
        tau = young_daly_interval_s(d, lam * HOUR)
        ckpt_per_work = lost = np.sqrt(d * lam / 2)  # delta/tau and lambda tau/2 at the optimum
    else:
        tau = _nonneg("checkpoint interval", interval_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            ckpt_per_work = np.where(d > 0, d / tau, 0.0)
        lost = lam * tau / 2
    restart = lam * r
    g = (1 - restart - lost) / (1 + ckpt_per_work)
    ok = g > 0
    g = np.where(ok, g, 0.0)
    waste = restart + lost
    with np.errstate(divide="ignore", invalid="ignore"):
        restart_f = np.where(ok, restart, restart / waste)
        lost_f = np.where(ok, lost, lost / waste)
    return Goodput(g, g * ckpt_per_work, restart_f, lost_f, tau, lam * HOUR)


def wall_hours(useful_hours: Any, goodput_fraction: Any) -> np.ndarray:
    # wall time = useful time / goodput (infinite when goodput is 0: the job never finishes)
    g = _fraction("goodput", goodput_fraction)
    with np.errstate(divide="ignore"):
        return np.where(g > 0, _nonneg("hours", useful_hours) / np.where(g > 0, g, 1.0), np.inf)


def spot_cost_usd(useful_hours: Any, instances: Any, usd_per_instance_hour: Any,
                  goodput_fraction: Any) -> np.ndarray:
    # Spot bills wall time: cost = useful hours / goodput x instances x spot rate
    return on_demand_cost_usd(wall_hours(useful_hours, goodput_fraction), instances,
                              usd_per_instance_hour)


# --- on-premises TCO ----------------------------------------------------------------------
def host_watts_per_node(system_max_power_watts: Any, gpus_per_node: Any,
                        gpu_tdp_watts: Any) -> np.ndarray:
    # host (CPUs, memory, NICs, fans, storage) = system max power - GPUs x TDP, never negative
    return np.maximum(_nonneg("system power", system_max_power_watts)
                      - np.asarray(gpus_per_node) * _nonneg("GPU TDP", gpu_tdp_watts), 0.0)


def host_watts_per_gpu(system_max_power_watts: Any, gpus_per_node: Any,
                       gpu_tdp_watts: Any) -> np.ndarray:
    # host power per GPU = host power per node / GPUs per node
    return host_watts_per_node(system_max_power_watts, gpus_per_node,
                               gpu_tdp_watts) / np.asarray(gpus_per_node, dtype=float)


def it_power_watts(gpus: Any, gpu_tdp_watts: Any, host_watts_per_gpu: Any,
                   gpu_load_factor: Any, host_load_factor: Any) -> np.ndarray:
    # IT power = GPUs x (TDP x GPU load + host power per GPU x host load); the one definition
    # the owned TCO, the run's energy and the plan share
    return _nonneg("gpus", gpus) * (
        _nonneg("GPU TDP", gpu_tdp_watts) * _fraction("GPU load factor", gpu_load_factor)
        + _nonneg("host power", host_watts_per_gpu)
        * _fraction("host load factor", host_load_factor))


def energy_kwh(it_watts: Any, hours: Any, pue: Any) -> np.ndarray:
    # facility energy = IT power x hours x PUE (PUE = facility power / IT power, The Green Grid)
    p = _nonneg("PUE", pue)
    if np.any(p < 1):
        raise ConfigError(f"PUE must be at least 1 (facility / IT power), got {np.min(p):g}")
    return _nonneg("power", it_watts) / 1000 * _nonneg("hours", hours) * p


def co2e_kg(kwh: Any, grid_kg_co2e_per_kwh: Any) -> np.ndarray:
    # emissions = energy x grid carbon intensity (location-based, GHG Protocol Scope 2 guidance)
    return _nonneg("energy", kwh) * _nonneg("grid intensity", grid_kg_co2e_per_kwh)


def power_usd_per_year(it_watts: Any, pue: Any, usd_per_kwh: Any) -> np.ndarray:
    # power = IT kW x 8,766 h x PUE x $/kWh
    return energy_kwh(it_watts, HOURS_PER_YEAR, pue) * _nonneg("electricity price", usd_per_kwh)


def colocation_usd_per_year(it_kw: Any, usd_per_kw_month: Any) -> np.ndarray:
    # colocation = provisioned IT kW x $/kW-month x 12 (0 $/kW-month for an own facility)
    return _nonneg("IT kW", it_kw) * _nonneg("colocation price", usd_per_kw_month) * 12


def maintenance_usd_per_year(capex_usd: Any, fraction_per_year: Any) -> np.ndarray:
    # support and spares = capex x fraction per year
    return _nonneg("capex", capex_usd) * _fraction("maintenance fraction", fraction_per_year)


def staff_usd_per_year(gpus: Any, usd_per_gpu_year: Any) -> np.ndarray:
    # operations staff = GPUs x $/GPU-year
    return _nonneg("gpus", gpus) * _nonneg("staff cost", usd_per_gpu_year)


def used_gpu_hours(gpus: Any, years: Any, utilization: Any) -> np.ndarray:
    # GPU-hours doing work = GPUs x years x 8,766 h x utilization
    return _nonneg("gpus", gpus) * _nonneg("years", years) * HOURS_PER_YEAR * _fraction(
        "utilization", utilization)


@dataclass(frozen=True)
class OwnCost:
    """On-premises TCO over `years`. total = capex + opex/yr x years - residual."""

    capex_usd: dict[str, Any]  # servers, network, storage, install
    opex_usd_per_year: dict[str, Any]  # power, colocation, maintenance, staff
    residual_usd: Any  # resale value at the end of the period
    years: Any
    gpus: Any
    it_watts: Any  # average IT power at the load factors
    energy_kwh_per_year: Any  # facility energy, PUE included
    used_gpu_hours: Any
    capex_total_usd: Any  # cash up front
    opex_total_usd_per_year: Any
    depreciation_usd_per_year: Any  # (capex - residual) / years, straight line
    total_usd: Any
    usd_per_gpu_hour: Any  # total / used GPU-hours
    usd_per_gpu_hour_at_full_use: Any  # total / all GPU-hours of the period (utilization 1)


def own_tco(*, nodes: Any, gpus_per_node: Any, system_price_usd: Any,
            system_max_power_watts: Any, gpu_tdp_watts: Any, years: Any, utilization: Any,
            usd_per_kwh: Any, pue: Any, colocation_usd_per_kw_month: Any,
            maintenance_fraction_per_year: Any, network_usd_per_gpu: Any,
            storage_usd_per_gpu: Any, install_fraction: Any, staff_usd_per_gpu_year: Any,
            residual_value_fraction: Any, gpu_load_factor: Any,
            host_load_factor: Any = None, gpu_draw_watts: Any = None) -> OwnCost:
    """Total cost of owning `nodes` servers for `years` (straight-line depreciation).

    Capex: servers + network + storage, plus installation as a fraction of them. Opex per year:
    power at the load factors around the clock x PUE, colocation on the provisioned IT load
    (system max power, as colocation contracts bill committed kW), maintenance as a fraction of
    capex, staff. Residual value: a fraction of the server price recovered at the end.
    The host load factor defaults to the GPU load factor. `gpu_draw_watts`: what a GPU draws
    at full load when held below its TDP (a power limit); the host's share of the system power
    is still derived from the TDP, and colocation still bills the system's provisioned power.
    """
    gpus = _nonneg("nodes", nodes) * np.asarray(gpus_per_node, dtype=float)
    yrs = _nonneg("years", years)
    if np.any(yrs <= 0):
        raise ConfigError("years must be more than 0; give the depreciation period, e.g. 4")
    servers = np.asarray(nodes) * _nonneg("system price", system_price_usd)
    network = gpus * _nonneg("network cost per GPU", network_usd_per_gpu)
    storage = gpus * _nonneg("storage cost per GPU", storage_usd_per_gpu)
    install = (servers + network + storage) * _fraction("install fraction", install_fraction)
    capex = {"servers": servers, "network": network, "storage": storage, "install": install}
    capex_total = servers + network + storage + install
    hlf = gpu_load_factor if host_load_factor is None else host_load_factor
    host_per_gpu = host_watts_per_gpu(system_max_power_watts, gpus_per_node, gpu_tdp_watts)
    draw = gpu_tdp_watts if gpu_draw_watts is None else np.minimum(gpu_tdp_watts, gpu_draw_watts)
    it_w = it_power_watts(gpus, draw, host_per_gpu, gpu_load_factor, hlf)
    provisioned_kw = np.asarray(nodes) * _nonneg("system power", system_max_power_watts) / 1000
    opex = {
        "power": power_usd_per_year(it_w, pue, usd_per_kwh),
        "colocation": colocation_usd_per_year(provisioned_kw, colocation_usd_per_kw_month),
        "maintenance": maintenance_usd_per_year(capex_total, maintenance_fraction_per_year),
        "staff": staff_usd_per_year(gpus, staff_usd_per_gpu_year),
    }
    opex_total = sum(opex.values())
    residual = servers * _fraction("residual value fraction", residual_value_fraction)
    total = capex_total + opex_total * yrs - residual
    used = used_gpu_hours(gpus, yrs, utilization)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_used = np.where(used > 0, total / np.where(used > 0, used, 1), np.inf)
    return OwnCost(
        capex_usd=capex, opex_usd_per_year=opex, residual_usd=residual, years=yrs, gpus=gpus,
        it_watts=it_w, energy_kwh_per_year=energy_kwh(it_w, HOURS_PER_YEAR, pue),
        used_gpu_hours=used, capex_total_usd=capex_total, opex_total_usd_per_year=opex_total,
        depreciation_usd_per_year=(capex_total - residual) / yrs, total_usd=total,
        usd_per_gpu_hour=per_used,
        usd_per_gpu_hour_at_full_use=total / (gpus * yrs * HOURS_PER_YEAR),
    )


# --- buy vs rent ----------------------------------------------------------------------------
def break_even_utilization(own_usd_per_gpu_hour_at_full_use: Any, cloud_usd_per_gpu_hour: Any,
                           reuse_utilization: Any = 1.0) -> np.ndarray:
    """Owner utilization u* above which owning costs less per used GPU-hour than renting.

    Owning costs F / u per used GPU-hour (F = all-in cost per calendar GPU-hour). Renting at
    rate c costs c (r + (1 - r)/u) per used hour (see committed_usd_per_used_hour): r = 1 for
    pay-per-use modes (on-demand, spot), r = the reuse of idle committed hours for commitments.
    F/u = c r + c (1 - r)/u  =>  u* = (F - c (1 - r)) / (c r).
    0 where owning wins at any utilization; nan where u* > 1 (owning never wins).
    """
    f = _nonneg("own cost", own_usd_per_gpu_hour_at_full_use)
    c = _nonneg("cloud price", cloud_usd_per_gpu_hour)
    r = _fraction("reuse utilization", reuse_utilization)
    fixed, per_use = c * (1 - r), c * r
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u = np.where(per_use > 0, (f - fixed) / np.where(per_use > 0, per_use, 1),
                     np.where(f < fixed, 0.0, np.inf))
    u = np.maximum(u, 0.0)
    return np.where(u <= 1, u, np.nan)


def break_even_months(capex_usd: Any, opex_usd_per_month: Any, gpus: Any, utilization: Any,
                      cloud_usd_per_gpu_hour: Any, reuse_utilization: Any = 1.0) -> np.ndarray:
    # Months m after which owning has cost less than renting the same used GPU-hours. Renting
    # costs c gpus (r u + 1 - r) 730.5 h per month (r = 1 for pay-per-use; see above), so
    # capex + opex_m m = rent_m m  =>  m = capex / (rent_m - opex_m).
    # Residual value ignored (conservative for owning); nan where renting always costs less.
    u = _fraction("utilization", utilization)
    r = _fraction("reuse utilization", reuse_utilization)
    rent_m = (_nonneg("cloud price", cloud_usd_per_gpu_hour) * _nonneg("gpus", gpus)
              * (r * u + 1 - r) * HOURS_PER_MONTH)
    saving = rent_m - _nonneg("opex", opex_usd_per_month)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = _nonneg("capex", capex_usd) / np.where(saving > 0, saving, 1)
    return np.where(saving > 0, m, np.nan)


# --- first-order size of a job: an independent cross-check for tests, never an answer ------
# (every answer goes through estimators/timing.py via search/evaluate.py)
def training_flops_6nd(params: Any, tokens: Any) -> np.ndarray:
    # C = 6 N D: forward 2 N D + backward 4 N D FLOP (Kaplan et al. 2020, sec. 2.1,
    # https://arxiv.org/abs/2001.08361); attention FLOPs neglected
    return 6.0 * _nonneg("parameters", params) * _nonneg("tokens", tokens)


def first_order_train_s(flops: Any, gpus: Any, peak_flops: Any, mfu: Any) -> np.ndarray:
    # time = FLOPs / (GPUs x dense peak x MFU), MFU as defined in PaLM (Chowdhery et al. 2022,
    # appendix B, https://arxiv.org/abs/2204.02311)
    rate = _nonneg("gpus", gpus) * _nonneg("peak FLOP/s", peak_flops) * _fraction("MFU", mfu)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rate > 0, _nonneg("FLOPs", flops) / np.where(rate > 0, rate, 1), np.inf)


# --- one job in any mode (vectorized over the mode code) ------------------------------------
def job_cost_usd(mode: Any, hours: Any, instances: Any, usd_per_instance_hour: Any,
                 reuse_utilization: Any) -> np.ndarray:
    """The job's cost in each mode (codes into MODES), for `hours` of wall time (goodput already
    applied) on `instances` instances at that mode's rate (for 'own', the owned cost per used
    GPU-hour x GPUs per instance). Commitments carry their stranded part not reused."""
    m = np.asarray(mode)
    pay = on_demand_cost_usd(hours, instances, usd_per_instance_hour)
    block = capacity_block_cost_usd(hours, instances, usd_per_instance_hour)
    out = np.where(m == CAPACITY_BLOCK, block, pay)
    for code, years in TERM_YEARS.items():
        c = commitment_cost(hours, instances, usd_per_instance_hour, years * HOURS_PER_YEAR,
                            reuse_utilization)
        out = np.where(m == code, c.job_cost_usd, out)
    return out


@dataclass(frozen=True)
class RunCost:
    """One training run in one pricing mode: money, wall time, energy, emissions."""

    cost_usd: Any
    wall_hours: Any  # useful hours / goodput
    goodput: Any
    energy_kwh: Any  # facility energy over the wall time (PUE included)
    co2e_kg: Any


def run_cost(*, mode: Any, useful_hours: Any, instances: Any, usd_per_instance_hour: Any,
             goodput_fraction: Any, reuse_utilization: Any, it_watts: Any, pue: Any,
             grid_kg_co2e_per_kwh: Any) -> RunCost:
    """A run of `useful_hours` of training: wall time after goodput, its cost in `mode` (see
    job_cost_usd), and the energy the hardware draws meanwhile (`it_watts` for the whole job,
    at the site PUE; a cloud's own PUE is not published per instance). A run that never ends
    (no progress, or goodput 0) costs inf: the caller masks it, it is not an error."""
    wall = wall_hours(useful_hours, goodput_fraction)
    finite = np.isfinite(wall)
    hours = np.where(finite, wall, 0.0)
    kwh = energy_kwh(it_watts, hours, pue)
    usd = job_cost_usd(mode, hours, instances, usd_per_instance_hour, reuse_utilization)
    return RunCost(
        cost_usd=np.where(finite, usd, np.inf), wall_hours=wall,
        goodput=np.asarray(goodput_fraction, dtype=float),
        energy_kwh=np.where(finite, kwh, np.inf),
        co2e_kg=np.where(finite, co2e_kg(kwh, grid_kg_co2e_per_kwh), np.inf),
    )
