"""Scenario presets (data/scenarios.toml), resolved once for `plan` and `tco` (L4).

A scenario fills what the user leaves unset: a model and tokens, a deadline and a budget, a
system x nodes the article picked (with the article's price where the catalog has none), the
years and utilization of owning it. `pick` answers "what would the article's own pick do"
through the same estimate path as the plan search (`plan.at_size`: the fastest layout of those
GPUs, physics and outcome of search/evaluate.py), so `plan --scenario X` and `tco --scenario X`
give the same days and dollars for the same hardware.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog
from ..errors import CatalogError, UnknownIdError
from ..spec import ModelSpec, System
from ..units import parse_count
from ..workload import default_global_batch, default_seq_len
from .evaluate import Site, SiteOverrides
from .plan import Request, at_size
from .platforms import Platform, system_platform
from .results import SizeResult

R_NO_PRICE = "no_price_system"  # a reason code (report/reasons.py)
# Scenario keys that are site values (owning): they apply unless a flag overrides them.
SITE_KEYS = ("years", "utilization")


@dataclass(frozen=True, kw_only=True)
class Pick(SizeResult):
    """A fixed piece of hardware (a system x nodes owned, or a cloud offer) running the
    scenario's training job: the fastest layout, its days and cost (the fields of
    `SizeResult`); or why it cannot (`reason`, a code of search.feasibility)."""

    system: str | None  # the system id (owned) or None (a cloud offer)
    offer: str | None = None
    meets_deadline: bool | None = None
    meets_budget: bool | None = None


def load(cat: Catalog, name: str | None, list_cmd: str) -> dict[str, Any]:
    """The preset NAME as a plain dict with its 'id' added; {} when no name is given."""
    if not name:
        return {}
    try:
        table = cat.table("scenarios")
    except CatalogError:
        table = {}
    key = name.strip().lower()
    if key not in table:
        raise UnknownIdError("scenario", name, table, list_cmd)
    sc = dict(table[key])
    sc["id"] = key
    if sc.get("acquisition") == "either":
        sc["acquisition"] = "any"
    return sc


def with_system_price(cat: Catalog, system: System, price: float, source: str) -> Catalog:
    """A copy of the catalog where `system` costs `price` (never the cached catalog)."""
    priced = dataclasses.replace(system, price_usd=float(price), price_source=source)
    return dataclasses.replace(cat, systems={**cat.systems, system.id: priced})


def with_scenario_price(cat: Catalog, scen: dict[str, Any]) -> Catalog:
    """A scenario may price its system where the catalog has no price (stated in the
    scenario); the catalog's own price wins where it has one."""
    sid, price = scen.get("system"), scen.get("price")
    if not sid or not price:
        return cat
    s = cat.system(sid)
    if s.price_usd:
        return cat
    return with_system_price(cat, s, float(price), str(scen.get("price_source", "scenario")))


def site_overrides(scen: dict[str, Any], overrides: SiteOverrides) -> SiteOverrides:
    """Site overrides: the flags' (not None) first, then the scenario's years and utilization."""
    out = dict(overrides)
    for key in SITE_KEYS:
        if out.get(key) is None and scen.get(key) is not None:
            out[key] = float(scen[key])
    return out


def request(model: ModelSpec, scen: dict[str, Any], site: Site) -> Request:
    """The plan request a scenario implies when no flag changes it (the batch defaults of
    `gpuplan plan`): what `tco --scenario` evaluates."""
    seq = default_seq_len(model)
    budget = scen.get("budget_usd")
    deadline = scen.get("deadline_days")
    return Request(model=model, tokens=parse_count(scen["tokens"], "scenario tokens"),
                   seq_len=seq, global_batch=default_global_batch(seq, 1),
                   deadline_days=float(deadline) if deadline is not None else None,
                   budget_usd=float(budget) if budget is not None else None, site=site)


def precisions(scen: dict[str, Any], req: Request) -> tuple[str, ...]:
    """The scenario's stated training precision, else the request's."""
    p = str(scen.get("precision") or "").lower()
    return (p,) if p else req.precisions


def run_on(cat: Catalog, req: Request, plat: Platform, gpus: int, mode: str,
           precs: tuple[str, ...]) -> Pick:
    """The fastest layout of `gpus` GPUs of platform `plat`, priced in `mode`, judged against
    the request's deadline and budget (the budget counts owned cash up front, as the search)."""
    r = at_size(cat, req, plat, gpus, mode, precs)
    fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}  # Pick extends it
    fields.update(system=plat.system.id if plat.system else None,
                  offer=plat.offer.id if plat.offer else None)
    if r.feasible:
        fields["meets_deadline"] = (r.time_to_train_days or 0.0) <= req.deadline
        spend = max(r.cost_usd or 0.0, r.cash_up_front_usd or 0.0)
        fields["meets_budget"] = req.budget_usd is None or spend <= req.budget_usd
    return Pick(**fields)


def pick(cat: Catalog, req: Request, scen: dict[str, Any], nodes: int | None = None) -> Pick | None:
    """What the scenario's own hardware (its system x nodes, owned) would do; None when the
    scenario names no system or no node count. `nodes` overrides the scenario's."""
    nodes = nodes or scen.get("nodes")
    if not scen.get("system") or not nodes:
        return None
    system = cat.system(scen["system"])
    gpus = int(nodes) * system.gpus_per_node
    if not system.price_usd:
        return Pick(system=system.id, gpus=gpus, feasible=False, reason=R_NO_PRICE)
    return run_on(cat, req, system_platform(cat, system), gpus, "own", precisions(scen, req))
