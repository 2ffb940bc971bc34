"""What the page shows beside a result: the charts, the memory of each ranked plan and the
exact command that reproduces each one. Everything goes through `adapter.run`.

`plan_view(body)` = the plan JSON + `estimates` (one `estimate` per ranked plan, for its memory
breakdown), `commands` (the `gpuplan estimate ...` line of each), `command` (the `gpuplan plan`
line), `tco` (buy against rent for the best plan that can be owned) and `charts` (four SVGs).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from ..report import svg
from ..report.html import plan_rows
from .adapter import RequestError, fields, run

MODEL_FIELDS = ("model", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp",
                "tied_embeddings", "config")
SITE_FIELDS = ("utilization", "years", "electricity", "pue", "grid_intensity", "interruptions",
               "reuse")
MAX_ROW_ESTIMATES = 10
MEMORY_BARS = 6  # ranked plans drawn in the memory chart


def command_line(command: str, body: dict[str, Any]) -> str:
    """The shell command that sends `body` to `command` (an uploaded config as config.json)."""
    known = fields(command)
    words = ["gpuplan", *command.split("/")]
    for name, value in body.items():
        f = known.get(name)
        if f is None or value is None or value is False or value == []:
            continue
        if name == "config":
            words += ["--model", "config.json"]
        elif value is True:
            words.append(f.flag)
        else:
            for v in value if isinstance(value, list) else [value]:
                words += [f.flag, str(v)]
    return " ".join(shlex.quote(w) for w in words)


def estimate_body(row: dict[str, Any], plan: dict[str, Any],
                  request: dict[str, Any]) -> dict[str, Any]:
    """The `estimate` request that reproduces one ranked plan (as tests/test_plan.py checks)."""
    body: dict[str, Any] = {k: request[k] for k in MODEL_FIELDS if request.get(k) is not None}
    if not any(k in body for k in ("config", "layers")):
        body = {"model": plan["model"]}
    body.update(gpu=row["gpu"], gpus=row["gpus"], tp=row["tp"], pp=row["pp"], cp=row["cp"],
                ep=row["ep"], zero=row["zero"], micro_batch=row["micro_batch"],
                global_batch=row["global_batch"], seq_len=row["seq_len"],
                recompute=row["recompute"], precision=row["precision"],
                tokens=request.get("tokens") or f"{plan['tokens']:.6g}", pricing=row["pricing"])
    if row.get("offer"):
        body["offer"] = row["offer"]
    else:
        body["system"] = row["system"]
    body.update({k: request[k] for k in SITE_FIELDS if request.get(k) is not None})
    return body


def _tco_body(plan: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
    """Buy against rent for the first ranked plan whose GPU the catalog prices as a server."""
    systems = {s["id"]: s for s in run("catalog/systems", {}) if s.get("price_usd")}  # type: ignore[union-attr]
    for row in plan.get("plans") or []:
        sid = row.get("system") if row.get("system") in systems else next(
            (s["id"] for s in systems.values() if s["accelerator"] == row["gpu"]), None)
        if sid:
            util = (plan.get("assumptions") or {}).get("own_utilization") or 0.7
            body: dict[str, Any] = {
                "system": sid, "compare_cloud": True, "utilization": util,
                "nodes": math.ceil(row["gpus"] / systems[sid]["gpus_per_node"])}
            for k in ("years", "electricity", "pue", "reuse"):
                if request.get(k) is not None:
                    body[k] = request[k]
            return body
    return None


def plan_view(request: dict[str, Any]) -> dict[str, Any]:
    result = dict(run("plan", request))  # type: ignore[arg-type]
    rows = (result.get("plans") or [])[:MAX_ROW_ESTIMATES]
    bodies = [estimate_body(r, result, request) for r in rows]
    estimates = [run("estimate", b) for b in bodies]
    tco_body = _tco_body(result, request)
    tco = run("tco", tco_body) if tco_body else None
    result["command"] = command_line("plan", request)
    result["commands"] = [command_line("estimate", b) for b in bodies]
    result["estimates"] = estimates
    result["tco"] = tco
    result["tco_command"] = command_line("tco", tco_body) if tco_body else None
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
