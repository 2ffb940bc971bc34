"""Owning servers against renting them: `tco(...)` returns a typed TcoResult (L4).

Owning: `evaluate.own_cost` (cost.own_tco: capex, opex, residual, per used GPU-hour). Renting:
every catalog offer of the same accelerator in every pricing mode, its effective price per used
GPU-hour (commitments carry their idle hours, spot its interruptions) and the break-even
utilization and months against owning (cost.break_even_*). A scenario adds its training job,
run on the same hardware through the same estimate path as `gpuplan plan` (search/scenario.py).
Every value records where it came from: a flag, the scenario, or the catalog's site table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog, load_catalog
from ..errors import ConfigError, UnknownIdError
from ..estimators import cost
from ..spec import Accelerator, Pod, System
from . import scenario as scn
from .evaluate import Site, own_cost, owned_site, scale_out_network_usd_per_gpu, site_from_catalog
from .inputs import check_input
from .plan import MAX_GPUS_CAP
from .platforms import single_box
from .rent import BreakEven, CloudRow, break_even_by_mode, cloud_rows
from .scenario import Pick

# input name (the CLI flag's dest) -> (catalog site value, evaluate.Site field)
SITE_INPUTS: dict[str, tuple[str, str]] = {
    "years": ("depreciation_years", "years"),
    "electricity": ("electricity_usd_per_kwh", "electricity_usd_per_kwh"),
    "pue": ("pue", "pue"),
    "colocation": ("colocation_usd_per_kw_month", "colocation_usd_per_kw_month"),
    "maintenance": ("maintenance_fraction_per_year", "maintenance_fraction_per_year"),
    "network": ("network_usd_per_gpu", "network_usd_per_gpu"),
    "storage": ("storage_usd_per_gpu", "storage_usd_per_gpu"),
    "install": ("install_fraction", "install_fraction"),
    "staff": ("staff_usd_per_gpu_year", "staff_usd_per_gpu_year"),
    "residual": ("residual_value_fraction", "residual_value_fraction"),
    "load_factor": ("gpu_load_factor", "gpu_load_factor"),
    "reuse": ("reserved_reuse_utilization", "reuse_utilization"),
    "grid": ("grid_kg_co2e_per_kwh", "grid_kg_co2e_per_kwh"),
    "spot_rate": ("spot_interruptions_per_hour", "spot_interruptions_per_hour"),
}
# why an owned system is not charged a site value (evaluate.owned_site and
# evaluate.scale_out_network_usd_per_gpu): input -> origin
NOT_CHARGED = {
    "single_box": "single box: no scale-out NIC; --network adds one",
    "one_node": "one node: nothing to cable it to, no scale-out network; --network adds one",
    "workstation": "workstation: sits in an office, no colocation; --colocation adds it",
}


@dataclass(frozen=True, kw_only=True)
class Assumption:
    name: str  # the input (CLI flag dest)
    value: float
    origin: str  # 'flag', 'default', 'scenario NAME' or 'site NAME: source'


@dataclass(frozen=True, kw_only=True)
class OwnRecord:
    """The owned cluster over its life; every tuple is (line, USD) and sums to its total."""

    gpus: int
    capex_usd_lines: tuple[tuple[str, float], ...]  # servers, network, storage, install
    capex_usd: float  # = cash up front
    opex_usd_per_year_lines: tuple[tuple[str, float], ...]  # power, colocation, ...
    opex_usd_per_year: float
    residual_usd: float
    usd_per_year_lines: tuple[tuple[str, float], ...]  # depreciation + opex lines
    usd_per_year: float
    usd_per_gpu_hour_lines: tuple[tuple[str, float], ...]  # the same per used GPU-hour
    total_usd: float
    used_gpu_hours: float
    usd_per_gpu_hour: float
    usd_per_gpu_hour_at_full_use: float
    it_watts: float
    energy_kwh_per_year: float
    co2e_kg_per_year: float


@dataclass(frozen=True, kw_only=True)
class ScenarioAnswer:
    id: str
    inputs: tuple[tuple[str, Any], ...]  # the preset as written (title, claim, assumptions)
    budget_usd: float | None
    cash_up_front_over_budget_usd: float | None  # negative: money to spare
    own: Pick | None  # the job on the owned cluster (None: the preset names no model/tokens)
    cloud: tuple[Pick, ...]  # the job on the cheapest on-demand and spot offers
    model: str | None
    params: float | None
    tokens: float | None
    training_flops: float | None  # model FLOPs (6N + attention per token) x tokens, from MFU
    peak_flops_total: float | None  # at the precision of the run
    peak_flops_total_by_precision: tuple[tuple[str, float], ...]
    cluster_memory_bytes: float
    deadline_days: float | None
    run_longer_than_life: bool | None


@dataclass(frozen=True, kw_only=True)
class TcoResult:
    system: str
    system_name: str
    pod: str | None  # the pod id when --system named a pod
    accelerator: str
    accelerator_name: str
    nodes: int
    years: float
    utilization: float
    own: OwnRecord
    assumptions: tuple[Assumption, ...]
    compare_cloud: bool
    cloud: tuple[CloudRow, ...]
    break_even: tuple[BreakEven, ...]  # against the cheapest offer of each mode
    scenario: ScenarioAnswer | None


# --- inputs ------------------------------------------------------------------------------------
def _resolve_system(cat: Catalog, name: str) -> tuple[System, Pod | None]:
    """A system id, or a pod id (its system, and its node count)."""
    try:
        return cat.system(name), None
    except UnknownIdError as err:
        try:
            pod = cat.pod(name)
        except UnknownIdError:
            raise err from None
        return cat.system(pod.system), pod


def _inputs(cat: Catalog, given: dict[str, Any], sc: dict[str, Any], pod: Pod | None
            ) -> tuple[dict[str, float], dict[str, str]]:
    """Each value from its flag, else the scenario, else the site default; origin recorded."""
    values: dict[str, float] = {}
    origins: dict[str, str] = {}
    defaults = site_from_catalog(cat)
    for name in ("nodes", "utilization", "price", "host_load_factor", *SITE_INPUTS):
        if given.get(name) is not None:
            values[name], origins[name] = check_input(name, given[name]), "flag"
        elif name in sc and name != "price":
            values[name], origins[name] = check_input(name, sc[name]), f"scenario {sc['id']}"
        elif name in SITE_INPUTS:
            site_name = SITE_INPUTS[name][0]
            values[name] = check_input(name, cat.site_value(site_name))
            origins[name] = f"site {site_name}: {cat.site[site_name].source}"
        elif name == "utilization":
            values[name] = check_input(name, defaults.utilization)
            origins[name] = ("site utilization: " + cat.site["utilization"].source
                             if "utilization" in cat.site else "default")
    per_pod = pod.nodes if pod else 1
    values["nodes"] = values.get("nodes", 1.0) * per_pod
    origins.setdefault("nodes", "default")
    if pod:
        origins["nodes"] += f" x pod {pod.id} ({pod.nodes} nodes)"
    return values, origins


def _priced(cat: Catalog, system: System, values: dict[str, float], sc: dict[str, Any]
            ) -> tuple[Catalog, System]:
    """The catalog with the system at the price used: the flag's, the catalog's, else the
    scenario's (then recorded in `values`); a one-line error with an example when none."""
    if "price" in values:
        cat = scn.with_system_price(cat, system, values["price"], "--price")
    elif not system.price_usd and sc.get("price") and sc.get("system") == system.id:
        values["price"] = check_input("price", sc["price"])
        cat = scn.with_system_price(cat, system, values["price"],
                                    str(sc.get("price_source", f"scenario {sc['id']}")))
    system = cat.system(system.id)
    if not system.price_usd:
        raise ConfigError(f"system '{system.id}' has no price in the catalog; give --price USD "
                          f"(one server)" + _price_hint(cat, system.id))
    return cat, system


def _price_hint(cat: Catalog, system_id: str) -> str:
    """A scenario preset that prices this system, offered as an example (not applied)."""
    try:
        table = cat.table("scenarios")
    except Exception:  # noqa: BLE001 -- no scenarios table: no hint
        return ""
    for name, sc in table.items():
        if sc.get("system") == system_id and "price" in sc:
            return (f", e.g. --price {sc['price']:g} as the '{name}' scenario assumes "
                    f"(`gpuplan tco --scenario {name}`)")
    return ""


def _site(cat: Catalog, values: dict[str, float], origins: dict[str, str]) -> Site:
    """The site with what the user gave (a flag or the scenario) recorded as given; the
    catalog's defaults come from site_from_catalog itself."""
    over: dict[str, float | None] = {
        field: None if origins[name].startswith("site ") else values[name]
        for name, (_, field) in SITE_INPUTS.items()}
    over["utilization"] = values["utilization"]
    over["host_load_factor"] = values.get("host_load_factor")
    return site_from_catalog(cat, **over)


def _not_charged(system: System, site: Site, nodes: int, values: dict[str, float],
                 origins: dict[str, str]) -> None:
    """Record the site values owning `nodes` of this system does not charge
    (evaluate.owned_site, evaluate.scale_out_network_usd_per_gpu)."""
    network = float(scale_out_network_usd_per_gpu(system, site, nodes))
    if network != site.network_usd_per_gpu:
        values["network"] = network
        origins["network"] = NOT_CHARGED["single_box" if single_box(system) else "one_node"]
    owned = owned_site(system, site)
    if owned.colocation_usd_per_kw_month != site.colocation_usd_per_kw_month:
        values["colocation"] = owned.colocation_usd_per_kw_month
        origins["colocation"] = NOT_CHARGED["workstation"]


# --- the owned cluster -------------------------------------------------------------------------
def own_record(system: System, acc: Accelerator, site: Site, nodes: int) -> OwnRecord:
    o = own_cost(system, acc, site, nodes)
    f = lambda x: float(x)  # noqa: E731 -- numpy scalar -> float
    gpus = f(o.gpus)
    capex = tuple((k, f(x)) for k, x in o.capex_usd.items())
    opex = tuple((k, f(x)) for k, x in o.opex_usd_per_year.items())
    per_year = (("depreciation", f(o.depreciation_usd_per_year)), *opex)
    used_per_year = gpus * cost.HOURS_PER_YEAR * site.utilization  # > 0: utilization > 0
    return OwnRecord(
        gpus=int(gpus), capex_usd_lines=capex, capex_usd=f(o.capex_total_usd),
        opex_usd_per_year_lines=opex, opex_usd_per_year=f(o.opex_total_usd_per_year),
        residual_usd=f(o.residual_usd), usd_per_year_lines=per_year,
        usd_per_year=sum(x for _, x in per_year),
        usd_per_gpu_hour_lines=tuple((k, x / used_per_year) for k, x in per_year),
        total_usd=f(o.total_usd), used_gpu_hours=f(o.used_gpu_hours),
        usd_per_gpu_hour=f(o.usd_per_gpu_hour),
        usd_per_gpu_hour_at_full_use=f(o.usd_per_gpu_hour_at_full_use),
        it_watts=f(o.it_watts), energy_kwh_per_year=f(o.energy_kwh_per_year),
        co2e_kg_per_year=f(cost.co2e_kg(o.energy_kwh_per_year, site.grid_kg_co2e_per_kwh)))


# --- the scenario's training job on this hardware ------------------------------------------
def scenario_answer(cat: Catalog, sc: dict[str, Any], system: System, nodes: int,
                    site: Site, own: OwnRecord, best: tuple[BreakEven, ...]) -> ScenarioAnswer:
    """The preset's job on these nodes, through the plan's estimate path (scenario.pick), and on
    the cheapest on-demand and spot offers of the same accelerator at the same GPU count."""
    from .platforms import offer_platform

    acc = cat.accelerator(system.accelerator)
    budget = float(sc["budget_usd"]) if sc.get("budget_usd") is not None else None
    pick: Pick | None = None
    cloud: list[Pick] = []
    model = None
    req = None
    if sc.get("model") and sc.get("tokens"):
        model = cat.model(sc["model"])
        req = scn.request(model, sc, site)
        pick = scn.pick(cat, req, {**sc, "system": system.id}, nodes)
        for b in best:
            if b.pricing in ("on-demand", "spot"):
                cloud.append(scn.run_on(cat, req, offer_platform(cat, cat.offer(b.offer)),
                                        own.gpus, b.pricing, scn.precisions(sc, req)))
    prec = pick.precision if pick and pick.feasible else None
    peak = acc.peak_flops.get(prec) if prec else None
    flops = None
    if pick and pick.feasible and peak and req and pick.tokens_per_s:
        # MFU = model FLOP/s / (GPUs x peak), so model FLOPs = MFU x GPUs x peak x seconds
        assert pick.mfu is not None  # plan.at_size sets it on every feasible result
        flops = pick.mfu * own.gpus * peak * req.tokens / pick.tokens_per_s
    days = pick.time_to_train_days if pick and pick.feasible else None
    return ScenarioAnswer(
        id=sc["id"], inputs=tuple(sc.items()), budget_usd=budget,
        cash_up_front_over_budget_usd=own.capex_usd - budget if budget is not None else None,
        own=pick, cloud=tuple(cloud), model=model.id if model else None,
        params=model.active_params() if model else None,
        tokens=req.tokens if req else None, training_flops=flops,
        peak_flops_total=own.gpus * peak if peak else None,
        peak_flops_total_by_precision=tuple((k, own.gpus * x) for k, x in acc.peak_flops.items()),
        cluster_memory_bytes=own.gpus * acc.memory_bytes,
        deadline_days=float(sc["deadline_days"]) if sc.get("deadline_days") is not None
        else None,
        run_longer_than_life=days > site.years * 365.25 if days is not None else None)


# --- the public entry point ------------------------------------------------------------------
def tco(*, system: str | None = None, nodes: float | None = None,
        utilization: float | None = None, price: float | None = None,
        host_load_factor: float | None = None, compare_cloud: bool = False,
        pricing: tuple[str, ...] | list[str] = (), cloud: str | None = None,
        model: str | None = None, scenario: str | None = None,
        catalog: tuple[str, ...] | list[str] = (), cat: Catalog | None = None,
        **site: float | None) -> TcoResult:
    """Total cost of owning `nodes` x `system` (or a pod) over `years`, per year and per used
    GPU-hour; with `compare_cloud` the same GPUs rented in every pricing mode of the catalog.
    Site values (years, electricity, pue, colocation, maintenance, network, storage, install,
    staff, residual, load_factor, reuse, grid, spot_rate) default to the catalog's site table;
    `scenario` fills what is not given and adds its training job on this hardware."""
    unknown = set(site) - set(SITE_INPUTS)
    if unknown:
        raise ConfigError(f"unknown tco input '{sorted(unknown)[0]}'; the site inputs are "
                          + ", ".join(SITE_INPUTS))
    cat = cat if cat is not None else load_catalog(catalog)
    sc = scn.load(cat, scenario, "gpuplan tco --help")
    name = system or sc.get("system")
    if not name:
        raise ConfigError("give --system (e.g. dgx-h100; `gpuplan catalog systems` lists them) "
                          "or --scenario NAME")
    sys_, pod = _resolve_system(cat, name)
    if model:  # an unknown id is an error even when nothing below reads the model
        cat.model(model)
    for mode in pricing or ():  # likewise an unknown pricing mode
        cost.mode_code(mode)
    given = {"nodes": nodes, "utilization": utilization, "price": price,
             "host_load_factor": host_load_factor, **site}
    values, origins = _inputs(cat, given, sc, pod)
    n = int(values["nodes"])
    if n * sys_.gpus_per_node > MAX_GPUS_CAP:
        raise ConfigError(f"--nodes {n:,} gives {n * sys_.gpus_per_node:,} GPUs, above the "
                          f"{MAX_GPUS_CAP:,} GPUs gpuplan models; lower --nodes")
    cat, sys_ = _priced(cat, sys_, values, sc)
    if "price" in values:
        origins.setdefault("price", f"scenario {sc.get('id')}")
    acc = cat.accelerator(sys_.accelerator)
    st = _site(cat, values, origins)
    _not_charged(sys_, st, n, values, origins)
    own = own_record(sys_, acc, st, n)
    rows: tuple[CloudRow, ...] = ()
    best: tuple[BreakEven, ...] = ()
    if compare_cloud or sc:
        model_id = model or sc.get("model")
        rows = cloud_rows(cat, acc, own, st, pricing, cloud,
                          cat.model(model_id) if model_id else None)
        best = break_even_by_mode(rows)
    return TcoResult(
        system=sys_.id, system_name=sys_.name, pod=pod.id if pod else None, accelerator=acc.id,
        accelerator_name=acc.name, nodes=n, years=st.years, utilization=st.utilization,
        own=own, compare_cloud=compare_cloud,
        assumptions=tuple(Assumption(name=k, value=values[k], origin=origins[k])
                          for k in values),
        cloud=rows if compare_cloud else (), break_even=best if compare_cloud else (),
        scenario=scenario_answer(cat, sc, sys_, n, st, own, best) if sc else None)
