"""Text and JSON of `gpuplan plan` results (L5): every sentence of a plan is written here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..search.results import Comparison, Favourite, Note, PlanResult, PlanRow, Relax, SizeResult
from . import finetune as ftr
from .command import estimate_command, number, site_args
from .estimate import POWER_BASIS
from .fmt import duration, duration_range, jsonable, num, pct, table, usd
from .reasons import (
    MICRO_BATCH_TOO_SMALL,
    PLATFORM_REASONS,
    export_status,
    platform_entry,
    reason,
)
from .svg import layout_text

# the PlanRow fields `svg.layout_text` reads
LAYOUT_KEYS = ("tp", "pp", "vpp", "dp", "cp", "ep", "zero", "micro_batch", "shard_group",
               "offload_parts")


def _layout(p: PlanRow) -> str:
    return layout_text({k: getattr(p, k) for k in LAYOUT_KEYS})


def plans_table(plans: tuple[PlanRow, ...]) -> str:
    rows = [(i, p.gpu, p.gpus, _layout(p), p.precision, p.recompute, p.platform, p.pricing,
             duration_range(p.time_to_train_days, p.time_to_train_days_p10,
                            p.time_to_train_days_p90), usd(p.cost_usd), pct(p.mfu * 100, 0),
             f"{p.memory_gib_per_gpu:.0f}/{p.gpu_memory_gib:.0f}", p.bottleneck)
            for i, p in enumerate(plans, 1)]
    return table(rows, ["#", "gpu", "n", "layout", "prec", "recompute", "where", "pricing",
                        "time", "cost", "MFU", "GiB/GPU", "bottleneck"],
                 "rlrlllllrrrrl")


def spot_spread_lines(plans: tuple[PlanRow, ...]) -> list[str]:
    """The spread of the spot prices the table ranked on (rows whose offer records one): the
    median it ranked on, and the min and max over the observations (`prices import`)."""
    parts = []
    for i, p in enumerate(plans, 1):
        if p.spot_spread_usd_per_gpu_hour is None:
            continue
        lo, hi = p.spot_spread_usd_per_gpu_hour
        parts.append(f"#{i} {usd(p.usd_per_gpu_hour)} (range {usd(lo)}-{usd(hi)} over "
                     f"{p.spot_observations} observation{'s' if p.spot_observations != 1 else ''}"
                     ")")
    if not parts:
        return []
    return ["spot prices ranked on, per GPU-hour, the median over zones and dates: "
            + "; ".join(parts)]


def _option(p: PlanRow) -> str:
    """'1024 x b300 (aws ..., spot) in 46.8 days for $2.30M'."""
    return (f"{p.gpus} x {p.gpu} ({p.platform}, {p.pricing}) in {duration(p.time_to_train_days)}"
            f" for {usd(p.cost_usd)}")


def _up_front(p: PlanRow) -> str:
    """An owned option's cash up front, said beside its cost (issue #10 item 6)."""
    return f"; {usd(p.cash_up_front_usd)} up front" if p.acquisition == "own" else ""


def _constraints(r: PlanResult) -> str:
    cons = []
    if r.deadline_days is not None:
        cons.append(f"finishing within {duration(r.deadline_days)}"
                    + (" (the default deadline; --deadline-days sets it)"
                       if r.deadline_is_default else ""))
    if r.budget_usd is not None:
        cons.append(f"costing at most {usd(r.budget_usd)}")
    return " and ".join(cons)


def winner_line(r: PlanResult) -> str:
    w = r.plans[0]
    obj = {"cost": "cheapest", "time": "fastest", "energy": "least energy"}[r.objective]
    cons = _constraints(r)
    return (f"winner: {obj} of {r.options:,} distinct option{'s' if r.options != 1 else ''}"
            + (f" {cons}" if cons else "") + f": {_option(w)}{_up_front(w)}; MFU "
            f"{pct(w.mfu * 100, 0)}, limited by {w.bottleneck}, {w.headroom_gib:.0f} GiB memory "
            "headroom per GPU.")


LABELS = {"runner_up": "runner-up", "best_without_spot": "best option without spot",
          "best_own": "best owned option", "best_cloud": "best cloud option"}


def comparison(c: Comparison) -> str:
    ratio = f"{c.cost_ratio:.2f}x" if c.cost_ratio is not None else "-"
    return (f"{LABELS.get(c.label, c.label)}: {_option(c.row)} "
            f"({ratio} the cost, {c.time_ratio:.2f}x the time of the winner){_up_front(c.row)}")


def note(n: Note) -> str:
    if n.code == "spot_assumption":
        return (f"spot assumes the capacity exists for the whole run and is reclaimed "
                f"{n.value:g} times per instance-hour (catalog default, a lower bound for GPU "
                f"instances; --interruptions changes it)")
    if n.code == "efficiency_guess":
        return (f"caution: no published run calibrates {n.gpu} under the stack shown; its speed "
                f"rests on a stated guess with a wider range (docs/calibration.md)")
    if n.code == "export_licence":
        return (f"{n.gpu} needs a US export licence for China; licences have been granted "
                f"(see `gpuplan catalog show {n.gpu}`)")
    if n.code == "no_option":
        return f"no {'owned' if n.acquisition == 'own' else 'cloud'} option meets the constraints"
    if n.code == "long_run":
        return (f"caution: the winner runs for {duration(n.value)}; hardware and prices move in "
                "that time: a tighter --deadline-days trades money for time")
    if n.code == "micro_batch_too_small":
        return MICRO_BATCH_TOO_SMALL
    return n.code


def relax(x: Relax) -> str:
    if x.kind == "budget":
        return (f"feasible from a budget of {usd(x.budget_usd)}"
                + (f" (keeping the {x.keep_deadline_days:g}-day deadline)"
                   if x.keep_deadline_days is not None else ""))
    if x.kind == "deadline":
        return (f"feasible from a deadline of {x.deadline_days:,.0f} days"
                + (f" (keeping the {usd(x.keep_budget_usd)} budget)"
                   if x.keep_budget_usd is not None else ""))
    if x.kind == "both":
        return (f"relax both: the fastest option takes {duration(x.deadline_days)} and the "
                f"cheapest costs {usd(x.budget_usd)}")
    if x.kind == "filters":
        return ("no platform passes the filters; widen --gpu, --vendor, --cloud, --region, "
                "--acquisition or --export-region")
    if x.kind == "memory":
        return (f"nothing that is otherwise valid fits in memory on the platforms left (up to "
                f"{x.max_gpus} GPUs, single-instance offers capped at one node): allow more "
                f"GPUs (--max-gpus), other GPUs or a shorter --seq-len")
    if x.kind == "allow_consumer":
        return "consumer cards were limited to one node; --allow-consumer lifts that"
    return "no candidate is valid: " + _counts(x.excluded)


def _counts(excluded: Any) -> str:
    return ", ".join(f"{reason(e.reason)} ({e.count:,})" for e in excluded)


def favourite(f: Favourite) -> str:
    if f.platforms:
        parts = [PLATFORM_REASONS.get(p.reason, p.reason)
                 + (f" ({export_status(p)})"
                    if p.reason == "export_controlled" else f" ({p.id})" if p.id != f.gpu else "")
                 for p in f.platforms]
        return f"{f.gpu}: " + "; ".join(parts)
    if f.excluded:
        return f"{f.gpu}: no feasible candidate: " + _counts(f.excluded)
    return f"{f.gpu}: no offer or system in the catalog matches the filters"


def why(r: PlanResult) -> list[str]:
    if not r.plans:
        return []
    return [winner_line(r)] + [comparison(x) if isinstance(x, Comparison) else note(x)
                               for x in r.why]


def _scenario_lines(r: PlanResult) -> list[str]:
    if not r.scenario:
        return []
    s = dict(r.scenario)
    lines = [f"scenario {s['name']}: " + str(s.get("title") or s.get("description") or "")]
    for key in ("article_claim", "claim"):
        if s.get(key):
            lines.append(f"  the article says: {s[key]}")
    return lines + [""]


def _pick_lines(r: PlanResult) -> list[str]:
    p = r.scenario_pick  # search.scenario.Pick
    if p is None:
        return []
    if not p.feasible:
        return ["", f"the article's pick ({p.system}): infeasible, {reason(p.reason)}"]
    verdict = []
    if p.meets_deadline is not None:
        verdict.append("meets the deadline" if p.meets_deadline else "MISSES the deadline")
    if r.budget_usd is not None and p.meets_budget is not None:
        verdict.append("within budget" if p.meets_budget else "OVER budget")
    return ["", f"the article's pick, {p.gpus} x {p.gpu} ({p.platform}, owned): "
            f"{duration(p.time_to_train_days)}, {usd(p.cost_usd)} of the cluster's cost over "
            f"the run, {usd(p.cash_up_front_usd)} up front"
            + (f"; {', '.join(verdict)}" if verdict else "")]


def _outlook_lines(r: PlanResult) -> list[str]:
    if not r.outlook:
        return []
    rows, notes = [], []
    for o in r.outlook:
        if not o.feasible:
            rows.append((o.gpus, "-", "-", "-", reason(o.reason) or "infeasible"))
            continue
        mark = " *" if o.scaling_note else ""
        scaling = o.scaling_efficiency * 100 if o.scaling_efficiency is not None else None
        rows.append((o.gpus, duration(o.time_to_train_days), usd(o.cost_usd),
                     pct((o.mfu or 0) * 100, 0), pct(scaling, 0) + mark))
        if o.scaling_note == "faster_layout":
            notes.append(f"* above 100%: at {o.gpus} GPUs the memory freed allows a faster "
                         f"layout (tp{o.tp} pp{o.pp} z{o.zero} mb{o.micro_batch}, recompute "
                         f"{o.recompute}) than at the reference size")
    return ["", "scaling outlook for the winner (best layout at each size, same pricing):",
            table(rows, ["GPUs", "time", "cost", "MFU", "scaling efficiency"], "rrrrr"),
            *notes]


def _front_lines(r: PlanResult) -> list[str]:
    front = r.pareto
    if len(front) <= 1:
        return []
    pick = front if len(front) <= 6 else tuple(front[i * (len(front) - 1) // 5] for i in range(6))
    return ["", f"cost/time Pareto front ({len(front)} plans; --json lists them):",
            table([(p.gpus, p.gpu, p.pricing, duration(p.time_to_train_days), usd(p.cost_usd))
                   for p in pick], ["n", "gpu", "pricing", "time", "cost"], "rllrr")]


def _tail_lines(r: PlanResult) -> list[str]:
    a = r.assumptions
    lines = ["", f"assumptions: owned hardware over {a.own_years:g} years at "
             f"{pct(a.own_utilization * 100, 0)} utilization; unused committed hours reused at "
             f"{pct(a.commitment_reuse_utilization * 100, 0)}; spot reclaimed "
             f"{a.spot_interruptions_per_instance_hour:g} times per instance-hour; one GPU "
             f"failure per {a.gpu_mtbf_hours:,.0f} GPU-hours; "
             f"{usd(a.electricity_usd_per_kwh)}/kWh at PUE {a.pue:g} (flags --years, "
             f"--utilization, --reuse, --interruptions, --electricity, --pue; `gpuplan catalog "
             f"site` gives the sources)", *_power_lines(r)]
    if r.excluded:
        lines += ["", "excluded candidates: " + "; ".join(
            f"{reason(e.reason)} {e.count:,}" for e in sorted(r.excluded, key=lambda e: -e.count))]
    for code, ids in _platforms_by_reason(r, rule=False).items():
        # the text keeps each entry's head; --json and `gpuplan catalog show ID` give the rule
        lines.append(f"excluded platforms, {PLATFORM_REASONS.get(code, code)}: "
                     + "; ".join(sorted(set(ids))))
    return lines


def _power_lines(r: PlanResult) -> list[str]:
    """The power limit and, for each GPU of the table, its factor and the law it came from
    (`search.power`; a GPU whose TDP is within the limit runs unchanged)."""
    watts = r.assumptions.power_limit_watts
    if watts is None:
        return []
    shown = {p.gpu for p in r.plans}
    parts = [f"{gpu} unchanged ({p.tdp_watts:,.0f} W TDP)" if p.factor >= 1 else
             f"{gpu} peak FLOP/s x {p.factor:.3f} = ({number(watts)} / {p.tdp_watts:,.0f} "
             f"W)^{p.exponent:.3f}, {POWER_BASIS[p.basis]}"
             for gpu, p in r.power if gpu in shown]
    return [f"power limit {number(watts)} W per GPU (--power-limit-watts; energy at the limit; "
            f"docs/calibration.md): " + ("; ".join(parts) if parts else
                                         "--json gives each GPU's factor")]


def _platforms_by_reason(r: PlanResult, *, rule: bool = True) -> dict[str, list[str]]:
    """The excluded platforms by reason code, each as `reasons.platform_entry`."""
    out: dict[str, list[str]] = {}
    for p in r.excluded_platforms:
        out.setdefault(p.reason, []).append(platform_entry(p, rule=rule))
    return out


def reproduce(r: PlanResult, row: PlanRow, request: Mapping[str, Any] | None = None) -> str:
    """The `gpuplan estimate` line that computes `row` again, stating the site assumptions its
    cost rests on. `request`: the plan's model flags (a config.json path or an explicit shape
    is repeated as given) and `catalog` overlays."""
    req = request or {}
    return estimate_command({**jsonable(row), "model": r.model, "tokens": r.tokens}, model=req,
                            site=site_args(jsonable(r.assumptions), row.pricing),
                            catalog=req.get("catalog") or ()) + ftr.flags(r.finetune)


def _stack_line(r: PlanResult) -> str:
    """Which software stack the times assume (`--stack` constrains it)."""
    stacks = ", ".join(dict.fromkeys(p.stack for p in r.plans))
    how = "as asked" if r.stack else "the best-supported per GPU family; --stack sets it"
    rank = (f"ranked on the P{r.confidence * 100:.0f} time and cost (--confidence)"
            if r.confidence else "ranked on the median; time in brackets is the P10-P90 range")
    return f"software stack: {stacks} ({how}); {rank}"


def render_text(r: PlanResult, *, timing: bool = True,
                request: Mapping[str, Any] | None = None) -> str:
    """The plan as text; `timing=False` leaves out the search time (golden files); `request`
    as for `reproduce`."""
    lines = _scenario_lines(r)
    cons = []
    if r.deadline_days is not None:
        cons.append(f"deadline {duration(r.deadline_days)}"
                    + (" (default)" if r.deadline_is_default else ""))
    if r.budget_usd is not None:
        cons.append(f"budget {usd(r.budget_usd)}")
    if r.assumptions.power_limit_watts is not None:
        cons.append(f"power limit {number(r.assumptions.power_limit_watts)} W per GPU")
    lines.append(f"plan for {r.model} on {num(r.tokens)} tokens (sequence {r.seq_len}, global "
                 f"batch {r.global_batch}), objective: {r.objective}"
                 + (f"; {', '.join(cons)}" if cons else ""))
    took = f" in {r.elapsed_s or 0:.2f} s" if timing else ""
    lines += [f"evaluated {r.evaluated:,} candidates ({r.physics_evaluated:,} hardware x "
              f"layout points){took}; {r.feasible:,} feasible", *ftr.lines(r.finetune), ""]
    if r.plans:
        lines += [_stack_line(r), plans_table(r.plans), *spot_spread_lines(r.plans), ""]
        lines += [f"- {w}" for w in why(r)]
        lines += ["", "reproduce the winner: " + reproduce(r, r.plans[0], request)]
    else:
        lines += ["NO FEASIBLE PLAN."] + [f"- {relax(x)}" for x in r.relax]
    lines += _pick_lines(r) + ftr.single_gpu_lines(r.finetune)
    if r.favourite:
        lines += ["", "the GPUs you asked for:"] + [f"- {favourite(f)}" for f in r.favourite]
    lines += _outlook_lines(r) + _front_lines(r) + _tail_lines(r)
    return "\n".join(lines)


def _size_json(o: SizeResult) -> dict[str, Any]:
    if not o.feasible:
        return {"gpus": o.gpus, "feasible": False, "reason": reason(o.reason),
                "reason_code": o.reason}
    return {k: v for k, v in jsonable(o).items() if v is not None or k == "scaling_efficiency"}


def to_json(r: PlanResult, *, request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `--json` contract: the keys of gpuplan 0.1 (sentences where it had sentences) and,
    beside each list of sentences, its structured form (`*_detail`, reason codes); each plan
    row's `reproduce` line and the winner's as `reproduce` (`request` as for `reproduce`)."""
    out = jsonable(r)
    lines = [reproduce(r, row, request) for row in r.plans]
    factor = {gpu: p.factor for gpu, p in r.power}  # with --power-limit-watts only
    out.update(
        plans=[{**row, "reproduce": line, **({"power_factor": factor[row["gpu"]]}
                                             if row["gpu"] in factor else {})}
               for row, line in zip(out["plans"], lines, strict=True)],
        reproduce=lines[0] if lines else None,
        best={obj: jsonable(row) for obj, row in r.best},
        excluded={reason(e.reason): e.count for e in r.excluded},
        excluded_codes={e.reason: e.count for e in r.excluded},
        excluded_platforms={PLATFORM_REASONS.get(k, k): v
                            for k, v in _platforms_by_reason(r).items()},
        excluded_platforms_detail=jsonable(r.excluded_platforms),
        why=why(r), why_detail=[{"kind": type(x).__name__.lower(), **jsonable(x)}
                                for x in r.why],
        relax=[relax(x) for x in r.relax], relax_detail=jsonable(r.relax),
        favourite=[favourite(f) for f in r.favourite], favourite_detail=jsonable(r.favourite),
        outlook=[_size_json(o) for o in r.outlook],
        scenario=dict(r.scenario) if r.scenario else None,
        scenario_pick=_pick_json(r))
    if r.scenario is None:
        del out["scenario"], out["scenario_pick"]
    if r.assumptions.power_limit_watts is None:  # only with --power-limit-watts
        del out["assumptions"]["power_limit_watts"], out["power"]
    else:
        out["power"] = {gpu: jsonable(p) for gpu, p in r.power}
    out.pop("finetune", None)
    out.update(ftr.to_json(r.finetune))
    if r.finetune is not None and r.finetune.memory_gib is not None:
        out["memory_gib"] = jsonable(r.finetune.memory_gib)
    return out


def _pick_json(r: PlanResult) -> dict[str, Any] | None:
    p = r.scenario_pick
    if p is None:
        return None
    return {**jsonable(p), "reason": reason(p.reason), "reason_code": p.reason}
