"""Merged rows -> validated, typed catalog entries (and the cross-references between tables)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import spec
from ..errors import CatalogError, GpuplanError, UnknownIdError
from .check import check_keys, check_value, convert, did_you_mean, where
from .merge import PACKAGE_PREFIX, Doc, Row, merge_docs
from .model import Catalog
from .schema import (
    EFFICIENCY,
    RESIDUALS,
    ROW_TABLES,
    RULES,
    SCENARIO,
    SITE_FIELDS,
    SITE_VALUES,
    STACK,
    STACK_MEMORY,
    normalize,
)

BUILD: dict[str, type[Any]] = {
    "accelerator": spec.Accelerator,
    "fabric": spec.Fabric,
    "system": spec.System,
    "pod": spec.Pod,
    "offer": spec.Offer,
    "model": spec.ModelSpec,
}


def _at(kind: str, ident: str, row: Row, key: str = "") -> str:
    """The message prefix: the file that set `key` (else the last file that wrote the row)."""
    return where(row.origins.get(key, row.origin), kind, ident)


def _check(schema: dict[str, Any], kind: str, ident: str, row: Row, complete: bool) -> None:
    """Every field known and valid (each message names the file that set the field); when
    `complete`, every required field present."""
    for key, value in row.values.items():
        at = _at(kind, ident, row, key)
        check_keys(schema, {key: value}, at)
        check_value(schema[key], key, value, at)
        if key == "source" and not value.strip():
            raise CatalogError(f"{at}: source must not be empty")
    if complete:
        _need(schema, kind, ident, row)


def _need(schema: dict[str, Any], kind: str, ident: str, row: Row) -> None:
    for key, f in schema.items():
        if f.required and key not in row.values:
            raise CatalogError(f"{_at(kind, ident, row)}: missing field '{key}'")


def build_entity(kind: str, ident: str, row: Row) -> Any:
    _check(ROW_TABLES[kind], kind, ident, row, complete=True)
    for table, test, fix in RULES:
        if table == kind and not test(row.values):
            raise CatalogError(f"{_at(kind, ident, row)}: {fix}")
    cls = BUILD[kind]
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in convert(ROW_TABLES[kind], row.values).items() if k in names}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, GpuplanError) as err:
        raise CatalogError(f"{_at(kind, ident, row)}: {err}") from None


def _build_table(cat: Catalog, kind: str, rows: dict[str, Row]) -> None:
    table = cat.tables()[kind]
    amap: dict[str, str] = {}
    for ident, row in rows.items():
        obj = build_entity(kind, ident, row)
        table[ident] = obj
        for a in obj.aliases:
            na = normalize(a)
            if na in amap and amap[na] != ident:
                raise CatalogError(f"{row.origins.get('aliases', row.origin)}: alias '{a}' names "
                                   f"both {kind} '{amap[na]}' and '{ident}'")
            amap[na] = ident
    cat.aliases[kind] = {a: i for a, i in amap.items() if a not in table}


def build_site(rows: dict[str, Row]) -> dict[str, spec.SiteValue]:
    out = {}
    for name, row in rows.items():
        if name not in SITE_VALUES:
            raise CatalogError(f"{row.origin}: unknown site value '{name}'"
                               f"{did_you_mean(name, SITE_VALUES)} (`gpuplan catalog site` "
                               f"lists them)")
        _check({**SITE_FIELDS, "value": SITE_VALUES[name]}, "site", name, row, complete=True)
        v = row.values
        out[name] = spec.SiteValue(name=name, value=float(v["value"]), unit=v["unit"],
                                   source=v["source"], as_of=v["as_of"], notes=v.get("notes", ""))
    return out


def resolve_efficiency(rows: dict[str, Row]) -> dict[str, dict[str, Any]]:
    """[efficiency.FAMILY] rows with `inherits` resolved: each row complete, in file units."""
    if "default" not in rows:
        raise CatalogError("the catalog lacks [efficiency.default] (data/efficiency.toml); "
                           "add it in an overlay or reinstall gpuplan")
    return resolve_inherits("efficiency", EFFICIENCY, rows)


def resolve_inherits(kind: str, schema: dict[str, Any], rows: dict[str, Row]
                     ) -> dict[str, dict[str, Any]]:
    """[KIND.NAME] rows with `inherits` resolved (efficiency families, software stacks)."""
    own = {k: f for k, f in schema.items() if not f.inherited}
    for ident, row in rows.items():
        _check(schema, kind, ident, row, complete=False)
        _need(own, kind, ident, row)
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(ident: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if ident in resolved:
            return resolved[ident]
        row = rows[ident]
        base: dict[str, Any] = {}
        if "inherits" in row.values:
            at = _at(kind, ident, row, "inherits")
            parent = normalize(row.values["inherits"])
            if parent not in rows:
                raise CatalogError(f"{at}: inherits unknown family '{parent}'"
                                   f"{did_you_mean(parent, rows)}")
            if parent in chain:
                origins = [rows[f].origins["inherits"] for f in chain]
                by = next((o for o in reversed(origins) if not o.startswith(PACKAGE_PREFIX)),
                          origins[-1])
                raise CatalogError(f"{by}: {kind} inherits forms a loop "
                                   f"({' -> '.join((*chain, parent))}); remove one inherits")
            base = {k: v for k, v in resolve(parent, (*chain, parent)).items()
                    if schema[k].inherited}
        out = {**base, **row.values}
        missing = [k for k, f in schema.items() if f.required and k not in out]
        if missing:
            raise CatalogError(f"{_at(kind, ident, row)}: missing field '{missing[0]}'; "
                               f"give it or take it from another family with inherits = \"ID\"")
        resolved[ident] = out
        return out

    for ident in rows:
        resolve(ident, (ident,))
    return resolved


def _reference(cat: Catalog, kind: str, name: Any, at: str) -> None:
    try:
        cat.resolve(kind, str(name))
    except UnknownIdError as err:
        raise CatalogError(f"{at}: {err}") from None


def build_scenarios(cat: Catalog, rows: dict[str, Row]) -> dict[str, dict[str, Any]]:
    out = {}
    for ident, row in rows.items():
        _check(SCENARIO, "scenarios", ident, row, complete=True)
        v = row.values
        for key, kind in (("model", "model"), ("system", "system")):
            if v.get(key):
                _reference(cat, kind, v[key], _at("scenarios", ident, row, key))
        gpus = v.get("gpu", [])
        for g in [gpus] if isinstance(gpus, str) else gpus:
            _reference(cat, "accelerator", g, _at("scenarios", ident, row, "gpu"))
        out[ident] = dict(v)
    return out


def build_stack_memory(rows: dict[str, Row]) -> dict[str, dict[str, Any]]:
    """[memory.STACK] rows (data/memory.toml): one per name of spec.STACKS, each complete."""
    out = {}
    for ident, row in rows.items():
        if ident not in spec.STACKS:
            raise CatalogError(f"{_at('memory', ident, row)}: unknown software stack; "
                               f"stacks: {', '.join(spec.STACKS)}")
        _check(STACK_MEMORY, "memory", ident, row, complete=True)
        out[ident] = dict(row.values)
    return out


def cross_check(cat: Catalog) -> None:
    """References between tables must resolve."""
    def need(kind: str, ident: str, ref_kind: str, ref: str, table: dict[str, Any]) -> None:
        if ref and normalize(ref) not in table:
            raise CatalogError(f"{kind} '{ident}' refers to unknown {ref_kind} '{ref}'"
                               f"{did_you_mean(normalize(ref), table)}")

    for a in cat.accelerators.values():
        need("accelerator", a.id, "fabric", a.scale_up_fabric, cat.fabrics)
        need("accelerator", a.id, "fabric", a.host_interface, cat.fabrics)
    for s in cat.systems.values():
        need("system", s.id, "accelerator", s.accelerator, cat.accelerators)
        need("system", s.id, "fabric", s.scale_out_fabric, cat.fabrics)
    for p in cat.pods.values():
        need("pod", p.id, "system", p.system, cat.systems)
    for o in cat.offers.values():
        need("offer", o.id, "accelerator", o.accelerator, cat.accelerators)
        if not o.usd_per_hour:
            raise CatalogError(f"offer '{o.id}': usd_per_hour needs at least one pricing mode")


def build_catalog(docs: list[Doc]) -> Catalog:
    """Merge package data and overlays (in order), then validate and build every table."""
    rows = merge_docs(docs)
    cat = Catalog(origins=tuple(d.origin for d in docs))
    for kind in ROW_TABLES:
        _build_table(cat, kind, rows[kind])
    cat.site.update(build_site(rows["site"]))
    cross_check(cat)
    cat.extra["efficiency"] = resolve_efficiency(rows["efficiency"])
    cat.extra["scenarios"] = build_scenarios(cat, rows["scenarios"])
    cat.extra["stack"] = resolve_inherits("stack", STACK, rows["stack"])
    for ident, row in rows["residuals"].items():
        _check(RESIDUALS, "residuals", ident, row, complete=True)
    cat.extra["residuals"] = {k: dict(r.values) for k, r in rows["residuals"].items()}
    cat.extra["memory"] = build_stack_memory(rows["memory"])
    for kind, table in rows.items():
        for ident, row in table.items():
            cat.provenance[(kind, ident)] = dict(row.origins)
    return cat
