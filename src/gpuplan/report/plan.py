"""Text rendering of `gpuplan plan` results (L5)."""

from __future__ import annotations

from typing import Any

from .fmt import duration, num, table, usd


def _layout(p: dict[str, Any]) -> str:
    parts = [f"tp{p['tp']}", f"pp{p['pp']}", f"dp{p['dp']}"]
    if p.get("cp", 1) > 1:
        parts.append(f"cp{p['cp']}")
    if p.get("ep", 1) > 1:
        parts.append(f"ep{p['ep']}")
    parts.append(f"z{p['zero']}")
    parts.append(f"mb{p['micro_batch']}")
    return " ".join(parts)


def plans_table(plans: list[dict[str, Any]]) -> str:
    rows = []
    for i, p in enumerate(plans, 1):
        rows.append((i, p["gpu"], p["gpus"], _layout(p), p["precision"], p["recompute"],
                     p["platform"], p["pricing"], duration(p["time_to_train_days"]),
                     usd(p["cost_usd"]), f"{p['mfu'] * 100:.0f}%",
                     f"{p['memory_gib_per_gpu']:.0f}/{p['gpu_memory_gib']:.0f}",
                     p["bottleneck"]))
    return table(rows, ["#", "gpu", "n", "layout", "prec", "recompute", "where", "pricing",
                        "time", "cost", "MFU", "GiB/GPU", "bottleneck"],
                 "rlrlllllrrrrl")


def render(r: dict[str, Any]) -> str:
    lines = []
    if r.get("scenario"):
        s = r["scenario"]
        lines.append(f"scenario {s['name']}: " + str(s.get("title") or s.get("description") or ""))
        for key in ("article_claim", "claim"):
            if s.get(key):
                lines.append(f"  the article says: {s[key]}")
        lines.append("")
    cons = []
    if r["deadline_days"] is not None:
        cons.append(f"deadline {r['deadline_days']:g} days")
    if r["budget_usd"] is not None:
        cons.append(f"budget {usd(r['budget_usd'])}")
    lines.append(
        f"plan for {r['model']} on {num(r['tokens'])} tokens (sequence {r['seq_len']}, "
        f"global batch {r['global_batch']}), objective: {r['objective']}"
        + (f"; {', '.join(cons)}" if cons else ""))
    lines.append(f"evaluated {r['evaluated']:,} candidates ({r['physics_evaluated']:,} "
                 f"hardware x layout points) in {r.get('elapsed_s', 0):.2f} s; "
                 f"{r['feasible']:,} feasible")
    lines.append("")
    if r["plans"]:
        lines.append(plans_table(r["plans"]))
        lines.append("")
        lines += [f"- {w}" for w in r["why"]]
    else:
        lines.append("NO FEASIBLE PLAN.")
        lines += [f"- {x}" for x in r["relax"]]
    pick = r.get("scenario_pick")
    if pick:
        lines.append("")
        if pick["feasible"]:
            verdict = []
            if r["deadline_days"] is not None:
                verdict.append("meets the deadline" if pick["meets_deadline"]
                               else "MISSES the deadline")
            if r["budget_usd"] is not None:
                verdict.append("within budget" if pick["meets_budget"] else "OVER budget")
            lines.append(
                f"the article's pick, {pick['gpus']} x {pick['gpu']} ({pick['platform']}, owned): "
                f"{pick['time_to_train_days']:,.1f} days, {usd(pick['cost_usd'])} of the "
                f"cluster's cost over the run, {usd(pick['cash_up_front_usd'])} up front"
                + (f"; {', '.join(verdict)}" if verdict else ""))
        else:
            lines.append(f"the article's pick ({pick['system']}): infeasible, {pick['reason']}")
    if r["favourite"]:
        lines.append("")
        lines.append("the GPUs you asked for:")
        lines += [f"- {x}" for x in r["favourite"]]
    if r["outlook"]:
        lines.append("")
        lines.append("scaling outlook for the winner (best layout at each size, same pricing):")
        rows = []
        for o in r["outlook"]:
            if not o.get("feasible"):
                rows.append((o["gpus"], "-", "-", "-", o.get("reason", "infeasible")))
                continue
            rows.append((o["gpus"], duration(o["time_to_train_days"]), usd(o["cost_usd"]),
                         f"{o['mfu'] * 100:.0f}%",
                         f"{o.get('scaling_efficiency', float('nan')) * 100:.0f}%"))
        lines.append(table(rows, ["GPUs", "time", "cost", "MFU", "scaling efficiency"],
                           "rrrrr"))
    if len(r["pareto"]) > 1:
        lines.append("")
        lines.append(f"cost/time Pareto front ({len(r['pareto'])} plans; --json lists them):")
        front = r["pareto"]
        pick = front if len(front) <= 6 else [front[i * (len(front) - 1) // 5] for i in range(6)]
        lines.append(table([(p["gpus"], p["gpu"], p["pricing"], duration(p["time_to_train_days"]),
                             usd(p["cost_usd"])) for p in pick],
                           ["n", "gpu", "pricing", "time", "cost"], "rllrr"))
    a = r.get("assumptions")
    if a:
        lines.append("")
        lines.append(
            f"assumptions: owned hardware over {a['own_years']:g} years at "
            f"{a['own_utilization'] * 100:.0f}% utilization; unused committed hours reused at "
            f"{a['commitment_reuse_utilization'] * 100:.0f}%; spot reclaimed "
            f"{a['spot_interruptions_per_instance_hour']:g} times per instance-hour; one GPU "
            f"failure per {a['gpu_mtbf_hours']:,.0f} GPU-hours; ${a['electricity_usd_per_kwh']:g}"
            f"/kWh at PUE {a['pue']:g} (flags --years, --utilization, --reuse, --interruptions, "
            f"--electricity, --pue; `gpuplan catalog site` gives the sources)")
    if r["excluded"]:
        lines.append("")
        lines.append("excluded candidates: " + "; ".join(
            f"{k} {v:,}" for k, v in sorted(r["excluded"].items(), key=lambda kv: -kv[1])))
    for reason, ids in r.get("excluded_platforms", {}).items():
        # the text keeps each entry's head; --json and `gpuplan catalog show ID` give the rule
        short = sorted({i.split(" (")[0] for i in ids})
        lines.append(f"excluded platforms, {reason}: " + "; ".join(short))
    return "\n".join(lines)
