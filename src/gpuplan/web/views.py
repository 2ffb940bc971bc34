"""What the page shows beside a result: the charts, the memory of each ranked plan and the
exact command that reproduces each one. Every result comes from `adapter.run`; the servers the
TCO can price are read from the (cached) catalog.

`plan_view(body)` = the plan JSON + `estimates` (one `estimate` per ranked plan, for its memory
breakdown), `commands` (the `gpuplan estimate ...` line of each), `command` (the `gpuplan plan`
line), `tco` (buy against rent for the best plan that can be owned) and `charts` (four SVGs).
"""

from __future__ import annotations

import math
from typing import Any, cast

from ..api import MODEL_FLAGS
from ..catalog import load_catalog
from ..report import svg
from ..report.command import estimate_args, shell_line, site_args
from ..report.html import plan_rows
from .adapter import RequestError, fields, run

MODEL_FIELDS = ("model", *MODEL_FLAGS, "config")
MAX_ROW_ESTIMATES = 10
MEMORY_BARS = 6  # ranked plans drawn in the memory chart


def command_line(command: str, body: dict[str, Any]) -> str:
    """The shell command that sends `body` to `command` (an uploaded config as config.json)."""
    known = fields(command)
    args = {k: ("config.json" if k == "config" else v) for k, v in body.items() if k in known}
    return shell_line(command, args, {**{k: f.flag for k, f in known.items()},
                                      "config": "--model"})


def estimate_body(row: dict[str, Any], plan: dict[str, Any],
                  request: dict[str, Any]) -> dict[str, Any]:
    """The `estimate` request that reproduces one ranked plan: the fields of its `reproduce`
    line (`report.command.estimate_args`), an uploaded config sent again as `config`."""
    given = {k: request[k] for k in MODEL_FIELDS if request.get(k) is not None}
    body = estimate_args({**row, "model": plan["model"], "tokens": plan["tokens"]}, model=given,
                         site=site_args(plan.get("assumptions") or {}, row["pricing"]))
    if request.get("config") is not None:
        body.pop("model", None)
        body["config"] = request["config"]
    return body


def _tco_body(plan: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
    """Buy against rent for the first ranked plan whose GPU the catalog prices as a server."""
    systems = {s.id: s for s in load_catalog().systems.values() if s.price_usd}
    for row in plan.get("plans") or []:
        sid = row.get("system") if row.get("system") in systems else next(
            (s.id for s in systems.values() if s.accelerator == row["gpu"]), None)
        if sid:
            util = (plan.get("assumptions") or {}).get("own_utilization") or 0.7
            body: dict[str, Any] = {
                "system": sid, "compare_cloud": True, "utilization": util,
                "nodes": math.ceil(row["gpus"] / systems[sid].gpus_per_node)}
            for k in ("years", "electricity", "pue", "reuse"):
                if request.get(k) is not None:
                    body[k] = request[k]
            return body
    return None


def plan_view(request: dict[str, Any]) -> dict[str, Any]:
    result = dict(run("plan", request))  # type: ignore[arg-type]
    rows = (result.get("plans") or [])[:MAX_ROW_ESTIMATES]
    bodies = [estimate_body(r, result, request) for r in rows]
    estimates = [cast(dict[str, Any], run("estimate", b)) for b in bodies]  # a JSON object
    tco_body = _tco_body(result, request)
    tco = run("tco", tco_body) if tco_body else None
    result["command"] = command_line("plan", request)
    result["commands"] = [r["reproduce"] for r in rows]
    result["estimates"] = estimates
    result["tco"] = tco
    result["charts"] = charts("plan", result)
    result["table"] = plan_rows(result.get("plans") or [])
    result["memory_tables"] = [memory_rows(e) for e in estimates]
    return result


def memory_rows(e: dict[str, Any]) -> list[list[str]]:
    """The memory breakdown of one estimate as display rows (GiB)."""
    m = e["memory_gib"]
    rows = [[name, f"{m.get(key, 0.0):.1f}"] for key, name, _ in svg.PARTS]
    return rows + [["total", f"{m['total']:.1f}"], ["capacity", f"{e['gpu_memory_gib']:.1f}"]]


def estimate_view(request: dict[str, Any]) -> dict[str, Any]:
    result = dict(run("estimate", request))  # type: ignore[arg-type]
    result["command"] = command_line("estimate", request)
    result["charts"] = charts("estimate", result)
    return result


def tco_view(request: dict[str, Any]) -> dict[str, Any]:
    result = dict(run("tco", request))  # type: ignore[arg-type]
    result["command"] = command_line("tco", request)
    result["charts"] = charts("tco", result)
    return result


def charts(kind: str, data: dict[str, Any]) -> dict[str, str]:
    """The SVG charts of a result (a view's extra keys, when present, add the memory and TCO)."""
    if kind == "plan":
        ests = data.get("estimates") or []
        ests = ests[:MEMORY_BARS]
        labels = [f"#{i} {e['gpu']}" for i, e in enumerate(ests, 1)]
        out = {"pareto": svg.pareto_svg(data), "memory": svg.memory_svg(ests, labels),
               "outlook": svg.outlook_svg(data)}
        if data.get("tco"):
            out["buy_rent"] = svg.buy_rent_svg(data["tco"])
        return out
    if kind == "estimate":
        return {"memory": svg.memory_svg([data])}
    if kind == "tco":
        return {"buy_rent": svg.buy_rent_svg(data)} if data.get("cloud") else {}
    raise RequestError(404, f"no charts for '{kind}'")


VIEWS = {"plan": plan_view, "estimate": estimate_view, "tco": tco_view}


def report_html(command: str, body: dict[str, Any]) -> str:
    """The self-contained HTML report of a request (`POST /api/report/COMMAND`)."""
    from ..report.html import render_html

    return render_html(command, VIEWS[command](body))
