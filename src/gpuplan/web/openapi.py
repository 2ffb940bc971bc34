"""The OpenAPI 3.1 schema of the API, written from the CLI's own parsers (`adapter.fields`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from .. import __version__
from .adapter import Field, fields

ERROR = {"$ref": "#/components/schemas/Error"}
RESULT = {"type": "object", "description": "exactly what `gpuplan COMMAND --json` prints; with "
          "?charts=1 also `charts` (SVG text), `command` and, for plan, `estimates`, "
          "`commands` and `tco`"}


def field_schema(f: Field) -> dict[str, Any]:
    s: dict[str, Any] = {"description": f"{f.flag}: {f.help}".rstrip(": ")}
    if f.kind == "array":
        s.update(type="array", items={"type": "string"})
    elif f.kind == "object":
        s.update(type="object")
    elif f.kind in ("integer", "number") and not f.choices:
        s["type"] = f.kind
        if f.minimum is not None:
            s["exclusiveMinimum" if f.exclusive_minimum else "minimum"] = f.minimum
        if f.maximum is not None:
            s["maximum"] = f.maximum
    elif f.kind == "boolean":
        s["type"] = "boolean"
    elif f.choices:
        s["enum"] = [int(c) if c.isdigit() else c for c in f.choices]
    else:
        s["type"] = ["string", "number"] if f.name in ("tokens", "budget_usd") else "string"
    return s


def _body(command: str) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False,
            "properties": {f.name: field_schema(f) for f in fields(command).values()}}


def _responses(ok: dict[str, Any]) -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": ERROR}}}
    return {"200": {"description": "the CLI's --json output",
                    "content": {"application/json": {"schema": ok}}},
            "400": {"description": "not JSON", **err},
            "404": {"description": "unknown path", **err},
            "413": {"description": "body over 1 MiB", **err},
            "422": {"description": "bad input: the CLI's one-line message", **err},
            "429": {"description": "server busy", **err}}


def _get(command: str, summary: str) -> dict[str, Any]:
    params = []
    for f in fields(command).values():
        s = field_schema(f)
        params.append({"name": f.name, "in": "query", "required": False,
                       "description": s.pop("description"),
                       "schema": s if f.kind != "array" else {"type": "array",
                                                               "items": {"type": "string"}}})
    return {"get": {"summary": summary, "parameters": params,
                    "responses": _responses({"type": ["array", "object"]})}}


@cache
def schema() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for command, summary in (("plan", "search every GPU x count x layout x pricing option"),
                             ("estimate", "memory, time and cost of one configuration"),
                             ("tco", "total cost of owning servers, against renting")):
        paths[f"/api/{command}"] = {"post": {
            "summary": summary,
            "parameters": [{"name": "charts", "in": "query", "required": False,
                            "schema": {"type": "string", "enum": ["0", "1"]}}],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _body(command)}}},
            "responses": _responses(RESULT)}}
    for what in ("gpus", "systems", "offers", "models"):
        paths[f"/api/catalog/{what}"] = _get(f"catalog/{what}", f"the catalog's {what}")
    paths["/api/validate"] = _get("validate", "the model against published training runs")
    return {"openapi": "3.1.0",
            "info": {"title": "gpuplan", "version": __version__,
                     "description": "Request fields are the CLI's flag names with underscores; "
                     "responses are the CLI's --json output."},
            "paths": paths,
            "components": {"schemas": {"Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "string"}}}}}}
