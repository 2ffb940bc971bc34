"""One self-contained HTML file for a plan, estimate or TCO result (L5): tables, the SVG charts
of `svg.py`, the assumptions and the source of every catalog entry used; nothing fetched.

`render_html(kind, data)` takes the `--json` dict; the web view's extra keys (`estimates`,
`tco`, `commands`, `command`, `charts`) add the memory chart per plan, buy against rent and
the command lines when present.
"""

from __future__ import annotations

from html import escape
from typing import Any

from . import svg
from .estimate import memory_rows
from .fmt import duration_range, num, usd, usd_range

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1f2933;margin:2rem auto;
max-width:1100px;padding:0 1rem}h1{font-size:1.5rem;margin:0 0 .3rem}h2{font-size:1.1rem;
margin:1.8rem 0 .5rem;border-bottom:1px solid #e4e7eb;padding-bottom:.3rem}
table{border-collapse:collapse;font-size:13px}th,td{padding:.3rem .6rem;border-bottom:1px solid
#e4e7eb;text-align:left}td.r,th.r{text-align:right}.muted{color:#616e7c}code{background:#f5f7fa;
padding:.1rem .3rem;border-radius:3px;font-size:12px}.charts{display:grid;
grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1rem}.charts svg{max-width:100%;
height:auto;border:1px solid #e4e7eb;border-radius:6px;background:#fff}
"""

PLAN_COLUMNS = (("#", "r"), ("GPU", ""), ("n", "r"), ("layout", ""), ("precision", ""),
                ("recompute", ""), ("where", ""), ("pricing", ""), ("time", "r"), ("cost", "r"),
                ("MFU", "r"), ("GiB/GPU", "r"), ("bottleneck", ""))


def table(headers: tuple[tuple[str, str], ...], rows: list[list[Any]]) -> str:
    head = "".join(f'<th class="{a}">{escape(h)}</th>' for h, a in headers)
    body = "".join("<tr>" + "".join(f'<td class="{a}">{escape(str(c))}</td>'
                                    for c, (_, a) in zip(r, headers, strict=False)) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def plan_rows(plans: list[dict[str, Any]]) -> list[list[Any]]:
    return [[i, p["gpu"], p["gpus"], svg.layout_text(p), p["precision"], p["recompute"],
             p["platform"], p["pricing"],
             duration_range(p["time_to_train_days"], p.get("time_to_train_days_p10"),
                            p.get("time_to_train_days_p90")),
             usd_range(p["cost_usd"], p.get("cost_usd_p10"), p.get("cost_usd_p90")),
             f"{p['mfu'] * 100:.0f}%", f"{p['memory_gib_per_gpu']:.0f}/{p['gpu_memory_gib']:.0f}",
             p["bottleneck"]] for i, p in enumerate(plans, 1)]


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in items) + "</ul>"


def _charts(kind: str, data: dict[str, Any]) -> str:
    charts = data.get("charts") or _default_charts(kind, data)
    return '<div class="charts">' + "".join(charts.values()) + "</div>" if charts else ""


def _default_charts(kind: str, data: dict[str, Any]) -> dict[str, str]:
    if kind == "plan":
        out = {"pareto": svg.pareto_svg(data), "outlook": svg.outlook_svg(data)}
        if data.get("estimates"):
            out["memory"] = svg.memory_svg(data["estimates"])
        if data.get("tco"):
            out["buy_rent"] = svg.buy_rent_svg(data["tco"])
        return out
    if kind == "estimate":
        return {"memory": svg.memory_svg([data])}
    return {"buy_rent": svg.buy_rent_svg(data)} if data.get("cloud") else {}


def _plan(r: dict[str, Any]) -> list[str]:
    cons = [f"deadline {r['deadline_days']:g} days"] if r.get("deadline_days") else []
    cons += [f"budget {usd(r['budget_usd'])}"] if r.get("budget_usd") else []
    out = [f"<h1>Plan for {escape(str(r['model']))} on {num(r['tokens'])} tokens</h1>",
           f'<p class="muted">objective {escape(r["objective"])}'
           + (f"; {escape(', '.join(cons))}" if cons else "")
           + f"; {r['evaluated']:,} candidates evaluated, {r['feasible']:,} feasible</p>"]
    if r["plans"]:
        out += ["<h2>Ranked plans</h2>", table(PLAN_COLUMNS, plan_rows(r["plans"])),
                _list(r.get("why") or [])]
    else:
        out += ["<h2>No feasible plan</h2>", _list(r.get("relax") or [])]
    out += ["<h2>Charts</h2>", _charts("plan", r)]
    if r.get("excluded"):
        rows = [[k, f"{v:,}"] for k, v in sorted(r["excluded"].items(), key=lambda kv: -kv[1])]
        out += ["<h2>Excluded candidates</h2>", table((("reason", ""), ("count", "r")), rows)]
    commands = r.get("commands") or [p["reproduce"] for p in r["plans"] if p.get("reproduce")]
    if commands:
        out += ["<h2>Reproduce</h2>", "<ol>" + "".join(
            f"<li><code>{escape(c)}</code></li>" for c in commands) + "</ol>"]
    a = r.get("assumptions") or {}
    if a:
        out += ["<h2>Assumptions</h2>",
                table((("assumption", ""), ("value", "r")), [[k, f"{v:g}" if isinstance(
                    v, int | float) else v] for k, v in a.items()])]
    out += _sources(r)
    return out


def _sources(r: dict[str, Any]) -> list[str]:
    """Where each catalog entry the plans rest on comes from (built-in catalog)."""
    from ..catalog import load_catalog

    cat = load_catalog([])
    rows: list[list[str]] = []
    for p in (r.get("plans") or []):
        for kind, key, table_ in (("GPU", "gpu", cat.accelerators), ("offer", "offer", cat.offers),
                                  ("system", "system", cat.systems)):
            entry = table_.get(p.get(key) or "")
            if entry is not None and [kind, entry.id] not in [x[:2] for x in rows]:
                rows.append([kind, entry.id, getattr(entry, "source", ""),
                             getattr(entry, "as_of", "")])
    if not rows:
        return []
    return ["<h2>Sources</h2>", table((("kind", ""), ("id", ""), ("source", ""), ("as of", "")),
                                      rows)]


def _estimate(r: dict[str, Any]) -> list[str]:
    rows = memory_rows(r["memory_gib"], r["gpu_memory_gib"])
    out = [f"<h1>{escape(r['model'])} on {r['gpus']} x {escape(r['gpu'])}</h1>",
           f'<p class="muted">{escape(r["platform"])}; '
           + ("fits" if r["fits"] else "does not fit")
           + f"; MFU {r['mfu'] * 100:.1f}%, bottleneck {escape(r['bottleneck'])}</p>",
           "<h2>Memory per GPU (GiB)</h2>", table((("part", ""), ("GiB", "r")), rows),
           _list(r.get("suggestions") or [])]
    if r.get("time_to_train_days"):
        days = duration_range(r["time_to_train_days"], r.get("time_to_train_days_p10"),
                              r.get("time_to_train_days_p90"))
        cost = usd_range(r.get("cost_usd"), r.get("cost_usd_p10"), r.get("cost_usd_p90"))
        out.append(f"<p>{escape(days)} to train (P10-P90 in brackets); cost {escape(cost)}</p>")
    out += ["<h2>Charts</h2>", _charts("estimate", r)]
    return out


def _tco(r: dict[str, Any]) -> list[str]:
    rows = [[k, usd(v)] for k, v in (r.get("usd_per_year") or {}).items()]
    rows.append(["total per year", usd(r["usd_per_year_total"])])
    out = [f"<h1>Owning {r['nodes']} x {escape(r['system'])} ({r['gpus']} x "
           f"{escape(r['accelerator'])})</h1>",
           f'<p class="muted">{usd(r["cash_up_front_usd"])} up front; '
           f"{usd(r['usd_per_gpu_hour'])} per used GPU-hour at "
           f"{r['utilization'] * 100:.0f}% utilization over {r['years']:g} years</p>",
           "<h2>Cost per year</h2>", table((("line", ""), ("USD", "r")), rows)]
    cloud = r.get("cloud") or []
    if cloud:
        out += ["<h2>Renting the same GPUs</h2>", table(
            (("offer", ""), ("pricing", ""), ("$/used GPU-hour", "r"), ("break-even months", "r"),
             ("source", "")),
            [[c["offer"], c["pricing"], usd(c["usd_per_gpu_hour"]), num(c["break_even_months"]),
              c["source"]] for c in cloud])]
    out += ["<h2>Charts</h2>", _charts("tco", r)]
    a = r.get("assumptions") or {}
    if a:
        out += ["<h2>Assumptions and sources</h2>", table(
            (("input", ""), ("value", "r"), ("from", "")),
            [[k, f"{v['value']:g}", v["from"]] for k, v in a.items()])]
    return out


def render_html(kind: str, data: dict[str, Any]) -> str:
    """A whole HTML document for `kind` (plan, estimate or tco) from its JSON dict."""
    body = {"plan": _plan, "estimate": _estimate, "tco": _tco}[kind](data)
    if data.get("command"):
        body.append(f'<p class="muted">command: <code>{escape(data["command"])}</code></p>')
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>gpuplan {kind}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body)
            + "\n<footer class=\"muted\">made by gpuplan</footer></body></html>\n")
