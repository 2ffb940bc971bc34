"""`gpuplan tco`: what owning servers costs per year and per GPU-hour, against renting them."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from . import common_options

EXAMPLES = """examples:
  gpuplan tco --system dgx-h100 --nodes 4 --years 4 --utilization 0.7 --electricity 0.12 --pue 1.3
  gpuplan tco --system dgx-h100 --nodes 4 --utilization 0.7 --compare-cloud
  gpuplan tco --system dgx-h100 --nodes 64 --utilization 0.9 --compare-cloud --pricing on-demand
  gpuplan tco --scenario startup
  gpuplan tco --scenario hyperscale --json

Every default comes from the catalog's site values (`gpuplan catalog site`, with sources);
a flag overrides it. Owned costs are all fixed per calendar hour, so the cost per *used*
GPU-hour is the yearly cost divided by the GPU-hours actually used (--utilization).
"""

# flag dest -> (site value name, what it is, how to print it)
SITE_FLAGS: dict[str, tuple[str, str, str]] = {
    "years": ("depreciation_years", "depreciation period", "{:g} years"),
    "electricity": ("electricity_usd_per_kwh", "electricity", "${:.3f}/kWh"),
    "pue": ("pue", "PUE", "{:.2f}"),
    "colocation": ("colocation_usd_per_kw_month", "colocation", "${:,.0f}/kW-month"),
    "maintenance": ("maintenance_fraction_per_year", "maintenance", "{:.1%} of capex/yr"),
    "network": ("network_usd_per_gpu", "scale-out network", "${:,.0f}/GPU"),
    "storage": ("storage_usd_per_gpu", "storage", "${:,.0f}/GPU"),
    "install": ("install_fraction", "installation", "{:.1%} of hardware"),
    "staff": ("staff_usd_per_gpu_year", "operations staff", "${:,.0f}/GPU-year"),
    "residual": ("residual_value_fraction", "residual value", "{:.0%} of server price"),
    "load_factor": ("gpu_load_factor", "GPU load factor", "{:.0%} of TDP"),
    "reuse": ("reserved_reuse_utilization", "reuse of idle committed hours", "{:.0%}"),
    "grid": ("grid_kg_co2e_per_kwh", "grid intensity", "{:.3f} kg CO2e/kWh"),
    "spot_rate": ("spot_interruptions_per_hour", "spot interruptions", "{:.2e}/instance-hour"),
}
FRACTIONS = {"utilization", "maintenance", "install", "residual", "load_factor",
             "host_load_factor", "reuse"}
# Reliability values used to price spot when a model sizes the checkpoint.
RELIABILITY_SITE = ("gpu_mtbf_hours", "checkpoint_bytes_per_s_per_node", "restart_s")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tco",
        help="total cost of owning servers, per year and per GPU-hour; buy vs rent",
        description="Total cost of ownership of N servers over a depreciation period (servers, "
        "network, storage, installation, power x PUE, colocation, maintenance, staff, residual "
        "value), per year and per used GPU-hour; with --compare-cloud the same GPUs rented in "
        "every pricing mode the catalog has, and the utilization above which owning wins.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--system", help="system id or alias, e.g. dgx-h100 (`gpuplan catalog systems`)")
    p.add_argument("--nodes", type=int, metavar="N", help="number of servers (default 1)")
    p.add_argument("--utilization", type=float, metavar="U",
                   help="fraction of the hours the GPUs do useful work, e.g. 0.7")
    p.add_argument("--price", type=float, metavar="USD", help="price of one server (default: "
                   "the catalog's list price)")
    p.add_argument("--host-load-factor", type=float, metavar="F",
                   help="host (CPU, NIC, fans) power as a fraction of its maximum "
                   "(default: the GPU load factor)")
    flag_help = {
        "years": "depreciation period in years", "electricity": "USD per kWh",
        "pue": "power usage effectiveness (facility / IT power, >= 1)",
        "colocation": "USD per kW-month of IT load (0 for an own facility)",
        "maintenance": "support and spares, fraction of capex per year",
        "network": "scale-out network (NICs, switches, optics) USD per GPU",
        "storage": "shared storage USD per GPU", "install": "installation, fraction of hardware",
        "staff": "operations staff USD per GPU-year",
        "residual": "resale value at the end, fraction of the server price",
        "load_factor": "average GPU power as a fraction of TDP",
        "reuse": "fraction of idle committed (reserved / savings-plan) hours other work reuses",
        "grid": "grid carbon intensity, kg CO2e per kWh",
        "spot_rate": "spot interruptions per instance-hour",
    }
    for dest, (_, _, _) in SITE_FLAGS.items():
        flag = "--" + {"spot_rate": "spot-interruptions"}.get(dest, dest.replace("_", "-"))
        p.add_argument(flag, dest=dest, type=float, metavar="X",
                       help=flag_help[dest] + " (default: site)")
    p.add_argument("--compare-cloud", action="store_true",
                   help="rent the same GPUs in every pricing mode of the catalog's offers")
    p.add_argument("--pricing", action="append", metavar="MODE",
                   help="only these pricing modes (repeatable): on-demand, spot, reserved-1y, "
                   "reserved-3y, savings-plan-1y, savings-plan-3y, capacity-block")
    p.add_argument("--cloud", help="only offers of this cloud (aws, gcp, azure, ...)")
    p.add_argument("--model", help="model id: sizes the checkpoint that prices spot interruptions")
    p.add_argument("--scenario", help="a preset from the article (startup, research, hyperscale, "
                   "...): prints its assumptions and the honest answer")
    common_options(p)
    p.set_defaults(func=run)


# --- inputs ---------------------------------------------------------------------------------
@dataclass
class Inputs:
    values: dict[str, float]  # dest -> value
    origins: dict[str, str]  # dest -> where it came from


def _check(dest: str, value: Any) -> float:
    from ..errors import ConfigError

    flag = "--" + {"spot_rate": "spot-interruptions"}.get(dest, dest.replace("_", "-"))
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"{flag} must be a number >= 0, got {value}; fix the value")
    if dest in FRACTIONS and v > 1:
        raise ConfigError(f"{flag} must be a fraction between 0 and 1, got {value}; "
                          f"write 0.7 for 70%")
    if dest == "pue" and v < 1:
        raise ConfigError(f"--pue must be at least 1 (facility power / IT power), got {value}")
    if dest in ("years", "nodes", "utilization") and v <= 0:
        raise ConfigError(f"{flag} must be more than 0, got {value}")
    if dest == "nodes" and v != int(v):
        raise ConfigError(f"--nodes must be a whole number, got {value}")
    return v


def _inputs(args: argparse.Namespace, cat: Any, scenario: dict[str, Any]) -> Inputs:
    """Each value from its flag, else the scenario, else the site default; origin recorded."""
    from ..errors import ConfigError

    values: dict[str, float] = {}
    origins: dict[str, str] = {}
    sname = f"scenario {args.scenario}" if args.scenario else ""
    for dest in ("nodes", "utilization", "price", "host_load_factor", *SITE_FLAGS):
        flag_value = getattr(args, dest)
        if flag_value is not None:
            values[dest], origins[dest] = _check(dest, flag_value), "flag"
        elif dest in scenario:
            values[dest], origins[dest] = _check(dest, scenario[dest]), sname
        elif dest in SITE_FLAGS:
            site_name = SITE_FLAGS[dest][0]
            values[dest] = _check(dest, cat.site_value(site_name))
            origins[dest] = f"site {site_name}: {cat.site[site_name].source}"
    if "nodes" not in values:
        values["nodes"], origins["nodes"] = 1.0, "default"
    if "utilization" not in values:
        raise ConfigError("give --utilization, the fraction of hours the GPUs do useful work "
                          "(e.g. 0.7); it decides the cost per used GPU-hour")
    return Inputs(values, origins)


def _pricing_filter(args: argparse.Namespace) -> set[str] | None:
    from ..estimate import cost

    if not args.pricing:
        return None
    names = [n for item in args.pricing for n in item.split(",") if n.strip()]
    return {cost.MODES[cost.mode_code(n)] for n in names}


def _scenario(cat: Any, name: str | None) -> dict[str, Any]:
    from ..errors import CatalogError, UnknownIdError

    if not name:
        return {}
    try:
        table = cat.table("scenarios")
    except CatalogError:
        table = {}
    key = name.strip().lower()
    if key not in table:
        raise UnknownIdError("scenario", name, table, "gpuplan tco --help")
    sc = dict(table[key])
    sc["id"] = key
    return sc


# --- the owned cluster ----------------------------------------------------------------------
def own_cost(cat: Any, system: Any, acc: Any, inp: Inputs) -> Any:
    from ..errors import ConfigError
    from ..estimate import cost

    v = inp.values
    price = v.get("price", system.price_usd)
    if price is None:
        raise ConfigError(f"system '{system.id}' has no price in the catalog; give --price USD "
                          f"(one server)" + _price_hint(cat, system.id))
    return cost.own_tco(
        nodes=v["nodes"], gpus_per_node=system.gpus_per_node, system_price_usd=price,
        system_max_power_watts=system.max_power_watts, gpu_tdp_watts=acc.tdp_watts,
        years=v["years"], utilization=v["utilization"], usd_per_kwh=v["electricity"],
        pue=v["pue"], colocation_usd_per_kw_month=v["colocation"],
        maintenance_fraction_per_year=v["maintenance"], network_usd_per_gpu=v["network"],
        storage_usd_per_gpu=v["storage"], install_fraction=v["install"],
        staff_usd_per_gpu_year=v["staff"], residual_value_fraction=v["residual"],
        gpu_load_factor=v["load_factor"], host_load_factor=v.get("host_load_factor"),
    )


def _price_hint(cat: Any, system_id: str) -> str:
    """A scenario preset that prices this system, offered as an example (not applied)."""
    from ..errors import CatalogError

    try:
        table = cat.table("scenarios")
    except CatalogError:
        return ""
    for name, sc in table.items():
        if sc.get("system") == system_id and "price" in sc:
            return (f", e.g. --price {sc['price']:g} as the '{name}' scenario assumes "
                    f"(`gpuplan tco --scenario {name}`)")
    return ""


def _f(x: Any) -> float:
    return float(x)


def own_record(o: Any, inp: Inputs) -> dict[str, Any]:
    from ..estimate import cost

    v = inp.values
    gpus = _f(o.gpus)
    used_per_year = gpus * cost.HOURS_PER_YEAR * v["utilization"]
    per_year = {"depreciation": _f(o.depreciation_usd_per_year),
                **{k: _f(x) for k, x in o.opex_usd_per_year.items()}}
    with_zero = used_per_year if used_per_year > 0 else math.nan
    return {
        "gpus": int(gpus),
        "capex_usd": _f(o.capex_total_usd),
        "capex_usd_lines": {k: _f(x) for k, x in o.capex_usd.items()},
        "cash_up_front_usd": _f(o.capex_total_usd),
        "opex_usd_per_year": {k: _f(x) for k, x in o.opex_usd_per_year.items()},
        "opex_usd_per_year_total": _f(o.opex_total_usd_per_year),
        "residual_usd": _f(o.residual_usd),
        "usd_per_year": per_year,
        "usd_per_year_total": sum(per_year.values()),
        "total_usd": _f(o.total_usd),
        "used_gpu_hours": _f(o.used_gpu_hours),
        "usd_per_gpu_hour": _f(o.usd_per_gpu_hour),
        "usd_per_gpu_hour_lines": {k: x / with_zero for k, x in per_year.items()},
        "usd_per_gpu_hour_at_full_use": _f(o.usd_per_gpu_hour_at_full_use),
        "it_kw": _f(o.it_watts) / 1000,
        "energy_kwh_per_year": _f(o.energy_kwh_per_year),
        "co2e_kg_per_year": _f(cost.co2e_kg(o.energy_kwh_per_year, v["grid"])),
    }


# --- renting the same GPUs ------------------------------------------------------------------
def _spot_goodput(cat: Any, inp: Inputs, model: Any, gpus: float, offer: Any) -> float | None:
    """Goodput of the spot run: interruptions x instances, checkpoint sized by the model."""
    from ..estimate import cost

    if model is None:
        return None
    instances = math.ceil(gpus / offer.count)
    nbytes = cost.checkpoint_bytes(model.total_params())
    nodes = max(1, instances)
    ckpt_s = cost.checkpoint_write_s(nbytes, cat.site_value("checkpoint_bytes_per_s_per_node"),
                                     nodes)
    rate = cost.spot_interruptions_per_hour(inp.values["spot_rate"], instances)
    return _f(cost.goodput(ckpt_s, cat.site_value("restart_s"), rate).goodput)


def cloud_rows(cat: Any, acc: Any, o: Any, inp: Inputs, modes: set[str] | None,
               cloud: str | None, model: Any) -> list[dict[str, Any]]:
    """Every offer x pricing mode with this accelerator: list and effective $/used GPU-hour."""
    from ..estimate import cost

    v = inp.values
    u = v["utilization"]
    gpus = _f(o.gpus)
    capex, opex_m = _f(o.capex_total_usd), _f(o.opex_total_usd_per_year) / 12
    full = _f(o.usd_per_gpu_hour_at_full_use)
    rows = []
    for offer in cat.offers_for(acc.id):
        if cloud and offer.cloud.lower() != cloud.lower():
            continue
        prices = dict(offer.usd_per_hour)
        if offer.capacity_block_usd_per_hour is not None:
            prices["capacity-block"] = offer.capacity_block_usd_per_hour
        for mode, per_instance in prices.items():
            if modes is not None and mode not in modes:
                continue
            code = cost.mode_code(mode)
            listed = _f(cost.per_gpu_hour(per_instance, offer.count))
            reuse = v["reuse"] if code in cost.TERM_YEARS else 1.0
            g = _spot_goodput(cat, inp, model, gpus, offer) if code == cost.SPOT else None
            rate = listed / g if g else (math.inf if g == 0 else listed)
            effective = _f(cost.committed_usd_per_used_hour(rate, u, reuse)) if rate < math.inf \
                else math.inf
            instances = math.ceil(gpus / offer.count)
            rows.append({
                "offer": offer.id, "cloud": offer.cloud, "instance_type": offer.instance_type,
                "region": offer.region, "pricing": mode, "instances": instances,
                "exceeds_max_instances": bool(offer.max_instances
                                              and instances > offer.max_instances),
                "list_usd_per_gpu_hour": listed,
                "usd_per_gpu_hour": effective,
                "goodput": g,
                "reuse_utilization": reuse if code in cost.TERM_YEARS else None,
                "break_even_utilization": _f(cost.break_even_utilization(full, rate, reuse)),
                "break_even_months": _f(cost.break_even_months(capex, opex_m, gpus, u, rate,
                                                               reuse)),
                "source": offer.source, "as_of": offer.as_of,
            })
    rows.sort(key=lambda r: (cost.mode_code(r["pricing"]), r["usd_per_gpu_hour"]))
    return rows


def cheapest_by_mode(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The cheapest offer of each pricing mode (owning must beat the best deal to win)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        b = best.get(r["pricing"])
        if b is None or r["usd_per_gpu_hour"] < b["usd_per_gpu_hour"]:
            best[r["pricing"]] = r
    return best


# --- scenario answer ------------------------------------------------------------------------
def scenario_answer(cat: Any, sc: dict[str, Any], system: Any, acc: Any, own: dict[str, Any],
                    inp: Inputs, best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """First-order facts for a scenario: compute, time on the system, money against budget."""
    from ..errors import ConfigError
    from ..estimate import cost
    from ..units import DAY, HOUR, parse_count

    out: dict[str, Any] = {}
    gpus = own["gpus"]
    budget = sc.get("budget_usd")
    if budget is not None:
        out["budget_usd"] = float(budget)
        out["cash_up_front_over_budget_usd"] = own["cash_up_front_usd"] - float(budget)
    if "model" not in sc or "tokens" not in sc:
        return out
    model = cat.model(sc["model"])
    tokens = parse_count(sc["tokens"], "scenario tokens")
    precision = sc.get("precision", "bf16")
    if precision not in acc.peak_flops:
        raise ConfigError(f"scenario {sc['id']}: {acc.id} has no dense {precision} rate; set "
                          f"precision to one of {', '.join(acc.peak_flops)}")
    mfu = _check("utilization", sc.get("mfu", 0.4))
    params = model.active_params()
    flops = cost.training_flops_6nd(params, tokens)
    useful_s = cost.first_order_train_s(flops, gpus, acc.peak_flops[precision], mfu)
    fail_rate = cost.cluster_failures_per_hour(gpus, cat.site_value("gpu_mtbf_hours"))
    ckpt_s = cost.checkpoint_write_s(cost.checkpoint_bytes(model.total_params()),
                                     cat.site_value("checkpoint_bytes_per_s_per_node"),
                                     own["gpus"] / system.gpus_per_node)
    g = cost.goodput(ckpt_s, cat.site_value("restart_s"), fail_rate)
    wall_s = _f(cost.wall_hours(useful_s / HOUR, g.goodput)) * HOUR
    gpu_hours = gpus * wall_s / HOUR
    state = cost.min_model_state_bytes(model.total_params())
    hbm = gpus * acc.memory_bytes
    out.update({
        "model": model.id, "params": params, "tokens": tokens, "precision": precision,
        "mfu": mfu, "training_flops": _f(flops),
        "peak_flops_total": gpus * acc.peak_flops[precision],
        "peak_flops_total_by_precision": {k: gpus * x for k, x in acc.peak_flops.items()},
        "goodput": _f(g.goodput), "wall_days": wall_s / DAY, "gpu_hours": gpu_hours,
        "model_state_bytes": _f(state), "cluster_memory_bytes": hbm,
        "model_state_fits": bool(state <= hbm),
        "own_job_cost_usd": _f(cost.own_job_cost_usd(gpu_hours, own["usd_per_gpu_hour"])),
        "energy_kwh": _f(cost.energy_kwh(own["it_kw"] * 1000, wall_s / HOUR,
                                         inp.values["pue"])),
    })
    out["co2e_kg"] = _f(cost.co2e_kg(out["energy_kwh"], inp.values["grid"]))
    out["run_longer_than_life"] = out["wall_days"] > inp.values["years"] * 365.25
    if "deadline_days" in sc:
        out["deadline_days"] = float(sc["deadline_days"])
        out["meets_deadline"] = out["wall_days"] <= float(sc["deadline_days"])
    out["cloud_job_cost_usd"] = {m: r["usd_per_gpu_hour"] * gpu_hours for m, r in best.items()
                                 if m in ("on-demand", "spot")}
    return out


# --- run ------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    from ..catalog import load_catalog
    from ..errors import ConfigError
    from ..report.fmt import dumps

    cat = load_catalog(args.catalog)
    sc = _scenario(cat, args.scenario)
    system_name = args.system or sc.get("system")
    if not system_name:
        raise ConfigError("give --system (e.g. dgx-h100; `gpuplan catalog systems` lists them) "
                          "or --scenario NAME")
    system = cat.system(system_name)
    acc = cat.accelerator(system.accelerator)
    modes = _pricing_filter(args)
    inp = _inputs(args, cat, sc)
    model = cat.model(args.model or sc["model"]) if (args.model or sc.get("model")) else None
    o = own_cost(cat, system, acc, inp)
    rec: dict[str, Any] = {"system": system.id, "accelerator": acc.id,
                           "nodes": int(inp.values["nodes"]), "years": inp.values["years"],
                           "utilization": inp.values["utilization"]}
    rec.update(own_record(o, inp))
    rec["assumptions"] = {k: {"value": inp.values[k], "from": inp.origins[k]} for k in inp.values}
    rows: list[dict[str, Any]] = []
    best: dict[str, dict[str, Any]] = {}
    if args.compare_cloud or sc:
        rows = cloud_rows(cat, acc, o, inp, modes, args.cloud, model)
        best = cheapest_by_mode(rows)
    if args.compare_cloud:
        rec["cloud"] = rows
        rec["break_even_utilization"] = {m: r["break_even_utilization"] for m, r in best.items()}
        rec["break_even_months"] = {m: r["break_even_months"] for m, r in best.items()}
    if sc:
        rec["scenario"] = {"id": sc["id"], "inputs": sc,
                           "answer": scenario_answer(cat, sc, system, acc, rec, inp, best)}
    if args.json:
        print(dumps(rec))
    else:
        print(render(rec, system, acc, best))
    return 0


# --- text -----------------------------------------------------------------------------------
def dollars(x: float) -> str:
    """Whole dollars with thousands separators, so a column of them lines up."""
    return f"${x:,.0f}" if math.isfinite(x) else "-"


def render(rec: dict[str, Any], system: Any, acc: Any, best: dict[str, dict[str, Any]]) -> str:
    from ..report.fmt import table, usd

    out = []
    if "scenario" in rec:
        out.append(render_scenario(rec["scenario"]))
    out.append(f"Owning {rec['nodes']} x {system.name} ({rec['gpus']} x {acc.name}) for "
               f"{rec['years']:g} years at {rec['utilization']:.0%} utilization")
    out.append("")
    capex = [(k, dollars(v)) for k, v in rec["capex_usd_lines"].items()]
    capex.append(("total (cash up front)", dollars(rec["capex_usd"])))
    out.append(table(capex, ["capex", "USD"], "lr"))
    out.append("")
    yearly = [(k, dollars(v), f"${rec['usd_per_gpu_hour_lines'][k]:.3f}")
              for k, v in rec["usd_per_year"].items()]
    yearly.append(("total", dollars(rec["usd_per_year_total"]),
                   f"${rec['usd_per_gpu_hour']:.3f}"))
    out.append(table(yearly, ["cost", "per year", "per used GPU-hour"], "lrr"))
    out.append(f"depreciation = (capex - residual {usd(rec['residual_usd'])}) / "
               f"{rec['years']:g} years; {rec['years']:g}-year total {usd(rec['total_usd'])}")
    out.append(f"energy {rec['energy_kwh_per_year'] / 1000:,.0f} MWh/yr (IT {rec['it_kw']:.1f} "
               f"kW x PUE), {rec['co2e_kg_per_year'] / 1000:,.0f} t CO2e/yr")
    if "cloud" in rec:
        out.append("")
        out.append(render_cloud(rec, best))
    out.append("")
    assumed = [(k, f"{v['value']:g}", v["from"][:90]) for k, v in rec["assumptions"].items()]
    out.append(table(assumed, ["assumption", "value", "from"]))
    return "\n".join(out)


def render_cloud(rec: dict[str, Any], best: dict[str, dict[str, Any]]) -> str:
    from ..report.fmt import table

    own = rec["usd_per_gpu_hour"]
    if not rec["cloud"]:
        return f"no cloud offer in the catalog has {rec['accelerator']} in these pricing modes"

    def pct(x: float | None) -> str:
        if x is None or not math.isfinite(x):
            return "never"
        return "always" if x == 0 else f"{x:.0%}"

    life = rec["years"] * 12

    def months(x: float | None) -> str:
        if x is None or not math.isfinite(x):
            return "never"
        return f"{x:.1f}" + (" (> life)" if x > life else "")

    rows = []
    for r in rec["cloud"]:
        eff = r["usd_per_gpu_hour"]
        rows.append((r["offer"], r["pricing"], f"${r['list_usd_per_gpu_hour']:.2f}",
                     f"${eff:.2f}" if math.isfinite(eff) else "-",
                     f"{eff / own:.2f}x" if math.isfinite(eff) and own > 0 else "-",
                     pct(r["break_even_utilization"]), months(r["break_even_months"])))
    lines = [f"Renting {rec['gpus']} x {rec['accelerator']} instead (own: "
             f"${own:.2f} per used GPU-hour)",
             table(rows, ["offer", "pricing", "list $/GPU-h", "$/used GPU-h", "vs own",
                          "own wins above", "months to pay back"], "llrrrrr"),
             "commitments: every hour of the term is paid; idle hours reused at "
             f"{rec['assumptions']['reuse']['value']:.0%}. spot: list price"
             + (" / goodput" if any(r["goodput"] for r in rec["cloud"]) else
                " (no interruption overhead: give --model to size checkpoints)"),
             "break-even against the cheapest offer of each mode: "
             + ", ".join(f"{m} {pct(r['break_even_utilization'])}" for m, r in best.items())]
    return "\n".join(lines)


def render_scenario(s: dict[str, Any]) -> str:
    from ..report.fmt import num, usd
    from ..units import gib

    inp, ans = s["inputs"], s["answer"]
    lines = [f"Scenario '{s['id']}': {inp.get('title', '')}"]
    if inp.get("article_claim"):
        lines.append(f"  the article ({inp.get('article_where', '')}): {inp['article_claim']}")
    keys = ("model", "tokens", "budget_usd", "deadline_days", "system", "nodes", "years",
            "utilization", "precision", "mfu", "acquisition", "vendor")
    lines.append("  assumptions: " + ", ".join(f"{k}={inp[k]}" for k in keys if k in inp))
    if "budget_usd" in ans:
        over = ans["cash_up_front_over_budget_usd"]
        lines.append(f"  budget {usd(ans['budget_usd'])}: buying needs "
                     f"{usd(ans['budget_usd'] + over)} up front, "
                     + (f"{usd(over)} over budget" if over > 0 else f"{usd(-over)} to spare"))
    if "training_flops" in ans:
        lines.append(
            f"  training {ans['model']} on {num(ans['tokens'])} tokens = 6 x "
            f"{num(ans['params'])} params x tokens = {num(ans['training_flops'])} FLOP; at "
            f"{ans['mfu']:.0%} MFU of {num(ans['peak_flops_total'])} FLOP/s "
            f"({ans['precision']} dense) and goodput {ans['goodput']:.1%}: "
            f"{ans['wall_days']:,.0f} days ({ans['wall_days'] / 365.25:.1f} years), "
            f"{num(ans['gpu_hours'])} GPU-hours")
        peaks = ans["peak_flops_total_by_precision"]
        lines.append("  dense peak of the cluster: "
                     + ", ".join(f"{k} {num(v)} FLOP/s" for k, v in peaks.items()))
        if ans["run_longer_than_life"]:
            lines.append(f"  the run outlasts the {inp.get('years', '')}-year life of the servers")
        fits = "fits in" if ans["model_state_fits"] else "does NOT fit in"
        lines.append(f"  model state (weights, grads, AdamW: 16 B/param) "
                     f"{gib(ans['model_state_bytes']):,.0f} GiB {fits} the cluster's "
                     f"{gib(ans['cluster_memory_bytes']):,.0f} GiB of GPU memory")
        if "deadline_days" in ans:
            lines.append(f"  deadline {ans['deadline_days']:g} days: "
                         + ("met" if ans["meets_deadline"] else "missed"))
        cloud = ", ".join(f"{m} {usd(v)}" for m, v in ans["cloud_job_cost_usd"].items())
        lines.append(f"  the run's cost: owned {usd(ans['own_job_cost_usd'])}"
                     + (f"; rented {cloud}" if cloud else "")
                     + f"; {ans['energy_kwh'] / 1000:,.0f} MWh, "
                     f"{ans['co2e_kg'] / 1000:,.1f} t CO2e")
    lines.append("")
    return "\n".join(lines)
