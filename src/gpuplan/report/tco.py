"""Text and JSON of `gpuplan tco` results (search.ownership.TcoResult) (L5).

JSON: the keys of the 0.1 contract (the owned record at the top level, `cloud`,
`break_even_utilization`, `break_even_months`, `scenario`); "never breaks even" is the string
"never", never null.
"""

from __future__ import annotations

from typing import Any

from ..search.ownership import OwnRecord, ScenarioAnswer, TcoResult
from ..search.rent import CloudRow
from ..search.scenario import Pick
from .fmt import duration, jsonable, num, pct, table, usd
from .reasons import reason

NEVER = "never"


# --- JSON ----------------------------------------------------------------------------------
def _never(x: float | None) -> float | str:
    return NEVER if x is None else x


def _own_json(o: OwnRecord) -> dict[str, Any]:
    return {
        "gpus": o.gpus, "capex_usd": o.capex_usd, "capex_usd_lines": dict(o.capex_usd_lines),
        "cash_up_front_usd": o.capex_usd,
        "opex_usd_per_year": dict(o.opex_usd_per_year_lines),
        "opex_usd_per_year_total": o.opex_usd_per_year, "residual_usd": o.residual_usd,
        "usd_per_year": dict(o.usd_per_year_lines), "usd_per_year_total": o.usd_per_year,
        "total_usd": o.total_usd, "used_gpu_hours": o.used_gpu_hours,
        "usd_per_gpu_hour": o.usd_per_gpu_hour,
        "usd_per_gpu_hour_lines": dict(o.usd_per_gpu_hour_lines),
        "usd_per_gpu_hour_at_full_use": o.usd_per_gpu_hour_at_full_use,
        "it_kw": o.it_watts / 1000, "energy_kwh_per_year": o.energy_kwh_per_year,
        "co2e_kg_per_year": o.co2e_kg_per_year,
    }


def _row_json(r: CloudRow) -> dict[str, Any]:
    d = jsonable(r)
    d["break_even_utilization"] = _never(r.break_even_utilization)
    d["break_even_months"] = _never(r.break_even_months)
    d["usd_per_gpu_hour"] = _never(r.usd_per_gpu_hour)
    return d


def _scenario_json(a: ScenarioAnswer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.budget_usd is not None:
        out["budget_usd"] = a.budget_usd
        gap = a.cash_up_front_over_budget_usd
        # two non-negative amounts (a signed one would read as a negative price)
        out["cash_up_front_over_budget_usd"] = None if gap is None else max(0.0, gap)
        out["cash_up_front_to_spare_usd"] = None if gap is None else max(0.0, -gap)
    if a.own is None:
        return out
    p = a.own
    out.update({
        "model": a.model, "params": a.params, "tokens": a.tokens, "feasible": p.feasible,
        "reason": reason(p.reason), "run": {**jsonable(p), "reason": reason(p.reason)},
        "model_state_fits": p.reason not in ("out_of_memory", "host_memory_exceeded"),
        "cluster_memory_bytes": a.cluster_memory_bytes,
        "peak_flops_total_by_precision": dict(a.peak_flops_total_by_precision),
        "cloud_runs": [{**jsonable(c), "reason": reason(c.reason)} for c in a.cloud],
    })
    if a.deadline_days is not None:
        out["deadline_days"] = a.deadline_days
    if not p.feasible:
        return out
    out.update({
        "precision": p.precision, "mfu": p.mfu, "training_flops": a.training_flops,
        "peak_flops_total": a.peak_flops_total, "goodput": p.goodput,
        "wall_days": p.time_to_train_days, "useful_days": p.useful_days,
        "gpu_hours": p.gpu_hours, "own_job_cost_usd": p.cost_usd,
        "cash_up_front_usd": p.cash_up_front_usd, "energy_kwh": p.energy_kwh,
        "co2e_kg": p.co2e_kg, "run_longer_than_life": a.run_longer_than_life,
        "cloud_job_cost_usd": {c.pricing: c.cost_usd for c in a.cloud if c.feasible},
    })
    if a.deadline_days is not None:
        out["meets_deadline"] = p.meets_deadline
    return out


def to_json(r: TcoResult) -> dict[str, Any]:
    rec: dict[str, Any] = {"system": r.system, "accelerator": r.accelerator, "nodes": r.nodes,
                           "years": r.years, "utilization": r.utilization}
    if r.pod:
        rec["pod"] = r.pod
    rec.update(_own_json(r.own))
    rec["assumptions"] = {a.name: {"value": a.value, "from": a.origin} for a in r.assumptions}
    if r.compare_cloud:
        rec["cloud"] = [_row_json(x) for x in r.cloud]
        rec["break_even_utilization"] = {b.pricing: _never(b.utilization) for b in r.break_even}
        rec["break_even_months"] = {b.pricing: _never(b.months) for b in r.break_even}
    if r.scenario is not None:
        rec["scenario"] = {"id": r.scenario.id, "inputs": dict(r.scenario.inputs),
                           "answer": _scenario_json(r.scenario)}
    return jsonable(rec)


# --- text ----------------------------------------------------------------------------------
def render_text(r: TcoResult) -> str:
    o = r.own
    out = [] if r.scenario is None else [_scenario_text(r.scenario, r), ""]
    pod = f", pod {r.pod}" if r.pod else ""
    out.append(f"Owning {r.nodes} x {r.system_name} ({o.gpus} x {r.accelerator_name}{pod}) for "
               f"{r.years:g} years at {pct(r.utilization * 100, 0)} utilization")
    out.append("")
    capex = [(k, usd(v)) for k, v in o.capex_usd_lines]
    capex.append(("total (cash up front)", usd(o.capex_usd)))
    out.append(table(capex, ["capex", "USD"], "lr"))
    out.append("")
    per_hour = dict(o.usd_per_gpu_hour_lines)
    yearly = [(k, usd(v), usd(per_hour[k])) for k, v in o.usd_per_year_lines]
    yearly.append(("total", usd(o.usd_per_year), usd(o.usd_per_gpu_hour)))
    out.append(table(yearly, ["cost", "per year", "per used GPU-hour"], "lrr"))
    out.append(f"depreciation = (capex - residual {usd(o.residual_usd)}) / {r.years:g} years; "
               f"{r.years:g}-year total {usd(o.total_usd)}, {usd(o.capex_usd)} of it up front")
    out.append(f"energy {num(o.energy_kwh_per_year / 1000)} MWh/yr (IT {num(o.it_watts / 1000)} "
               f"kW x PUE), {num(o.co2e_kg_per_year / 1000)} t CO2e/yr")
    if r.compare_cloud:
        out += ["", _cloud_text(r)]
    out.append("")
    assumed = [(a.name, f"{a.value:g}", a.origin[:90]) for a in r.assumptions]
    out.append(table(assumed, ["assumption", "value", "from"]))
    return "\n".join(out)


def _when(u: float | None) -> str:
    if u is None:
        return NEVER
    return "always" if u == 0 else pct(u * 100, 0)


def _cloud_text(r: TcoResult) -> str:
    own = r.own.usd_per_gpu_hour
    if not r.cloud:
        return f"no cloud offer in the catalog has {r.accelerator} in these pricing modes"
    life = r.years * 12

    def months(m: float | None) -> str:
        if m is None:
            return NEVER
        return num(m) + (" (> life)" if m > life else "")

    rows = []
    for c in r.cloud:
        eff = c.usd_per_gpu_hour
        rows.append((c.offer, c.pricing, usd(c.list_usd_per_gpu_hour),
                     usd(eff) if eff is not None else "never finishes",
                     f"{num(eff / own)}x" if eff is not None else "-",
                     _when(c.break_even_utilization), months(c.break_even_months)))
    reuse = next((a.value for a in r.assumptions if a.name == "reuse"), None)
    spot = (" / goodput" if any(c.goodput is not None for c in r.cloud)
            else " (no interruption overhead: give --model to size checkpoints)")
    return "\n".join([
        f"Renting {r.own.gpus} x {r.accelerator} instead (own: {usd(own)} per used GPU-hour, "
        f"{usd(r.own.capex_usd)} up front)",
        table(rows, ["offer", "pricing", "list $/GPU-h", "$/used GPU-h", "vs own",
                     "own wins above", "months to pay back"], "llrrrrr"),
        f"commitments: every hour of the term is paid; idle hours reused at "
        f"{pct(reuse * 100 if reuse is not None else None, 0)}. "
        f"spot: list price{spot}",
        "break-even against the cheapest offer of each mode: "
        + ", ".join(f"{b.pricing} {_when(b.utilization)}" for b in r.break_even)])


def _scenario_text(a: ScenarioAnswer, r: TcoResult) -> str:
    inp = dict(a.inputs)
    lines = [f"Scenario '{a.id}': {inp.get('title', '')}"]
    if inp.get("article_claim"):
        lines.append(f"  the article ({inp.get('article_where', '')}): {inp['article_claim']}")
    keys = ("model", "tokens", "budget_usd", "deadline_days", "system", "nodes", "years",
            "utilization", "precision", "acquisition", "vendor")
    lines.append("  assumptions: " + ", ".join(f"{k}={inp[k]}" for k in keys if k in inp))
    if a.budget_usd is not None and a.cash_up_front_over_budget_usd is not None:
        over = a.cash_up_front_over_budget_usd
        lines.append(f"  budget {usd(a.budget_usd)}: buying needs {usd(a.budget_usd + over)} up "
                     "front, " + (f"{usd(over)} over budget" if over > 0
                                  else f"{usd(-over)} to spare"))
    if a.own is not None:
        lines += _job_text(a, r)
    return "\n".join(lines)


def _layout(p: Pick) -> str:
    return (f"tp{p.tp} pp{p.pp} dp{p.dp} zero{p.zero} micro-batch {p.micro_batch} "
            f"{p.precision} recompute {p.recompute}")


def _job_text(a: ScenarioAnswer, r: TcoResult) -> list[str]:
    p = a.own
    assert p is not None
    where = f"{p.gpus} x {r.accelerator} ({r.system_name}, owned)"
    head = f"  training {a.model} on {num(a.tokens)} tokens on {where}"
    peaks = "  dense peak of the cluster: " + ", ".join(
        f"{k} {num(v)} FLOP/s" for k, v in a.peak_flops_total_by_precision)
    if not p.feasible:
        return [f"{head}: does NOT run, {reason(p.reason)} (every layout `gpuplan plan` considers)",
                peaks]
    lines = [f"{head}: best layout {_layout(p)}, {num(p.tokens_per_s)} tokens/s, MFU "
             f"{pct((p.mfu or 0) * 100, 0)}, goodput {pct((p.goodput or 0) * 100)}: "
             f"{duration(p.time_to_train_days)}, "
             f"{num(p.gpu_hours)} GPU-hours; {num(a.training_flops)} model FLOP", peaks]
    if a.run_longer_than_life:
        lines.append(f"  the run outlasts the {r.years:g}-year life of the servers")
    if a.deadline_days is not None:
        lines.append(f"  deadline {a.deadline_days:g} days: "
                     + ("met" if p.meets_deadline else "missed"))
    cloud = ", ".join(f"{c.pricing} {usd(c.cost_usd)} ({c.offer}, {duration(c.time_to_train_days)})"
                      if c.feasible else f"{c.pricing} on {c.offer}: {reason(c.reason)}"
                      for c in a.cloud)
    energy = f"{num((p.energy_kwh or 0) / 1000)} MWh, {num((p.co2e_kg or 0) / 1000)} t CO2e"
    lines.append(f"  the run's cost: owned {usd(p.cost_usd)} of the cluster's cost "
                 f"({usd(p.cash_up_front_usd)} up front)" + (f"; rented {cloud}" if cloud else "")
                 + f"; {energy}")
    return lines
