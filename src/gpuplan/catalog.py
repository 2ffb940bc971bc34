"""The catalog: sourced hardware, fabrics, cloud offers, site defaults and model presets (L2).

Data lives in TOML files in ``gpuplan/data`` (TOML because every row carries prose -- a source,
a caveat -- beside its numbers, comments can explain a disputed figure next to it, and Python
reads it with the standard library). Files are read on first use, never at import. Users overlay
their own TOML (``--catalog FILE`` or ``GPUPLAN_CATALOG=FILE[:FILE...]``) with the same tables; an
entry whose id exists is merged field by field, a new id must be complete, and the result is
validated exactly like the package data.

Units in the files are the ones datasheets use and are named in each field (``memory_gib``,
``peak_tflops``, ``scale_up_gb_per_s``); they are converted to bytes, FLOP/s and seconds here.
"""

from __future__ import annotations

import csv
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import spec
from .errors import CatalogError, GpuplanError, UnknownIdError, suggest
from .units import GB, TB, TERA, GiB

ENV_VAR = "GPUPLAN_CATALOG"
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")

# --- field schemas -------------------------------------------------------------------------
# name in file -> (kind, required, conversion factor to the code's unit or None)
# kinds: str, int, num (finite >= 0), bool, date, peak (precision -> num), price (pricing -> num),
#        list (list of str), optnum (num or absent)
Field = tuple[str, bool, float | None]

_COMMON: dict[str, Field] = {
    "id": ("str", True, None),
    "name": ("str", True, None),
    "source": ("str", True, None),
    "as_of": ("date", True, None),
    "aliases": ("list", False, None),
    "notes": ("str", False, None),
}

SCHEMAS: dict[str, dict[str, Field]] = {
    "accelerator": {
        **_COMMON,
        "vendor": ("str", True, None),
        "architecture": ("str", True, None),
        "family": ("str", True, None),
        "form_factor": ("str", True, None),
        "memory_gib": ("num", True, GiB),
        "memory_bandwidth_gb_per_s": ("num", True, GB),
        "peak_tflops": ("peak", True, TERA),
        "fp16_accumulate_tflops": ("optnum", False, TERA),
        "scale_up_kind": ("str", True, None),
        "scale_up_fabric": ("str", True, None),
        "scale_up_gb_per_s": ("num", True, GB),
        "host_interface": ("str", True, None),
        "tdp_watts": ("num", True, 1.0),
        "launch_date": ("date", True, None),
        "launch_price_usd": ("optnum", False, 1.0),
        "price_source": ("str", False, None),
        "price_date": ("str", False, None),
        "software": ("str", True, None),
        "consumer": ("bool", False, None),
        "export_cn": ("str", True, None),
        "export_cn_rule": ("str", True, None),
        "export_cn_date": ("date", True, None),
    },
    "fabric": {
        **_COMMON,
        "kind": ("str", True, None),
        "gb_per_s_per_direction": ("num", True, GB),
        "latency_us": ("num", True, 1e-6),
    },
    "system": {
        **_COMMON,
        "kind": ("str", True, None),
        "accelerator": ("str", True, None),
        "gpus_per_node": ("int", True, None),
        "scale_up_domain": ("int", True, None),
        "scale_out_fabric": ("str", False, None),
        "nics_per_node": ("int", False, None),
        "cpu": ("str", False, None),
        "ram_gib": ("num", False, GiB),
        "storage_tb": ("num", False, TB),
        "max_power_watts": ("num", True, 1.0),
        "price_usd": ("optnum", False, 1.0),
        "price_source": ("str", False, None),
        "price_date": ("str", False, None),
    },
    "pod": {
        **_COMMON,
        "system": ("str", True, None),
        "nodes": ("int", True, None),
    },
    "offer": {
        **_COMMON,
        "name": ("str", False, None),
        "cloud": ("str", True, None),
        "instance_type": ("str", True, None),
        "accelerator": ("str", True, None),
        "count": ("int", True, None),
        "region": ("str", True, None),
        "usd_per_hour": ("price", True, 1.0),
        "capacity_block_usd_per_hour": ("optnum", False, 1.0),
        "network_gbit_per_s": ("num", True, GB / 8),
        "max_instances": ("int", False, None),
    },
    "model": {
        **_COMMON,
        "layers": ("int", True, None),
        "hidden": ("int", True, None),
        "heads": ("int", True, None),
        "kv_heads": ("int", True, None),
        "ffn": ("int", True, None),
        "vocab": ("int", True, None),
        "mlp": ("str", True, None),
        "tied_embeddings": ("bool", False, None),
        "head_dim": ("int", False, None),
        "experts": ("int", False, None),
        "experts_per_token": ("int", False, None),
        "moe_ffn": ("int", False, None),
        "shared_experts": ("int", False, None),
        "dense_layers": ("int", False, None),
        "max_seq_len": ("int", False, None),
        "q_lora_rank": ("int", False, None),
        "kv_lora_rank": ("int", False, None),
        "rope_head_dim": ("int", False, None),
        "v_head_dim": ("int", False, None),
        "params_published_b": ("optnum", False, 1e9),
    },
    "site": {
        "value": ("num", True, None),
        "unit": ("str", True, None),
        "source": ("str", True, None),
        "as_of": ("date", True, None),
        "notes": ("str", False, None),
    },
}

# which file holds which table (array-of-tables name -> file)
FILES = {
    "accelerator": "accelerators.toml",
    "fabric": "fabrics.toml",
    "system": "systems.toml",
    "pod": "systems.toml",
    "offer": "offers.toml",
    "model": "models.toml",
    "site": "site.toml",
}
LIST_CMD = {
    "accelerator": "gpuplan catalog gpus",
    "fabric": "gpuplan catalog fabrics",
    "system": "gpuplan catalog systems",
    "pod": "gpuplan catalog systems",
    "offer": "gpuplan catalog offers",
    "model": "gpuplan models",
    "site": "gpuplan catalog site",
}
KIND_WORD = {"accelerator": "GPU", "model": "model", "offer": "offer", "system": "system",
             "pod": "pod", "fabric": "fabric", "site": "site value"}
ENUMS = {
    ("accelerator", "vendor"): spec.VENDORS,
    ("accelerator", "scale_up_kind"): ("nvlink", "infinity-fabric", "pcie", "hccs", "ethernet"),
    ("accelerator", "export_cn"): ("allowed", "licensed", "license-required", "prohibited",
                                   "china-only"),
    ("fabric", "kind"): ("scale-up", "scale-out", "host"),
    ("system", "kind"): ("server", "workstation", "rack"),
    ("model", "mlp"): ("gelu", "swiglu"),
}


def normalize(name: str) -> str:
    """'H100 SXM5 80GB' -> 'h100-sxm5-80gb': the form every id and alias is compared in."""
    return re.sub(r"[\s_/]+", "-", name.strip().lower())


def _where(origin: str, kind: str, ident: str) -> str:
    return f"{origin}: {kind} '{ident}'"


def _check_value(origin: str, kind: str, ident: str, key: str, ftype: str, value: Any) -> Any:
    """Type/range check of one raw field; returns the value (not yet unit-converted)."""
    where = _where(origin, kind, ident)

    def num(v: Any, label: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CatalogError(f"{where}: {label} must be a number, got {v!r}")
        if not math.isfinite(v) or v < 0:
            raise CatalogError(f"{where}: {label} must be a finite number >= 0, got {v!r}")
        return float(v)

    if ftype == "str":
        if not isinstance(value, str):
            raise CatalogError(f"{where}: {key} must be text, got {value!r}")
        return value
    if ftype == "date":
        if not isinstance(value, str) or not _DATE.match(value):
            raise CatalogError(
                f"{where}: {key} must be a date YYYY-MM-DD or YYYY-MM, got {value!r}")
        return value
    if ftype == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CatalogError(f"{where}: {key} must be a whole number >= 0, got {value!r}")
        return value
    if ftype == "bool":
        if not isinstance(value, bool):
            raise CatalogError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if ftype in ("num", "optnum"):
        return num(value, key)
    if ftype == "list":
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise CatalogError(f"{where}: {key} must be a list of text, got {value!r}")
        return value
    if ftype in ("peak", "price"):
        allowed = spec.PEAK_KEYS if ftype == "peak" else spec.PRICING
        if not isinstance(value, dict):
            raise CatalogError(f"{where}: {key} must be a table such as {{{allowed[0]} = ...}}")
        for k, v in value.items():
            if k not in allowed:
                hint = suggest(k, allowed)
                raise CatalogError(
                    f"{where}: {key} has unknown key '{k}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else "")
                    + f" (allowed: {', '.join(allowed)})"
                )
            num(v, f"{key}.{k}")
        return value
    raise AssertionError(ftype)  # pragma: no cover - schema typo


def _convert(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Raw validated fields -> constructor keywords in code units."""
    out: dict[str, Any] = {}
    schema = SCHEMAS[kind]
    rename = {
        "memory_gib": "memory_bytes",
        "memory_bandwidth_gb_per_s": "memory_bandwidth_bytes_per_s",
        "peak_tflops": "peak_flops",
        "fp16_accumulate_tflops": "fp16_accumulate_flops",
        "scale_up_gb_per_s": "scale_up_bytes_per_s",
        "gb_per_s_per_direction": "bytes_per_s_per_direction",
        "latency_us": "latency_s",
        "ram_gib": "ram_bytes",
        "storage_tb": "storage_bytes",
        "network_gbit_per_s": "network_bytes_per_s",
    }
    for key, value in raw.items():
        ftype, _, factor = schema[key]
        if ftype in ("peak", "price"):
            value = {k: float(v) * (factor or 1.0) for k, v in value.items()}
        elif ftype in ("num", "optnum") and factor is not None:
            value = float(value) * factor
        elif ftype == "list":
            value = tuple(value)
        out[rename.get(key, key)] = value
    return out


_DEFAULTS: dict[str, dict[str, Any]] = {
    "accelerator": {"fp16_accumulate_flops": None, "launch_price_usd": None, "price_source": "",
                    "price_date": "", "consumer": False},
    "system": {"scale_out_fabric": "", "nics_per_node": 0, "cpu": "", "ram_bytes": 0.0,
               "storage_bytes": 0.0, "price_usd": None, "price_source": "", "price_date": ""},
    "offer": {"max_instances": 0, "name": ""},
    "model": {},
}
_BUILD: dict[str, Callable[..., Any]] = {
    "accelerator": spec.Accelerator,
    "fabric": spec.Fabric,
    "system": spec.System,
    "pod": spec.Pod,
    "offer": spec.Offer,
    "model": spec.ModelSpec,
}


def _build(kind: str, origin: str, raw: dict[str, Any]) -> Any:
    ident = str(raw.get("id", "?"))
    schema = SCHEMAS[kind]
    for key in raw:
        if key not in schema:
            hint = suggest(key, schema)
            raise CatalogError(
                f"{_where(origin, kind, ident)}: unknown field '{key}'"
                + (f"; did you mean '{hint[0]}'?" if hint else "")
                + " (units are part of field names, e.g. memory_gib, peak_tflops)"
            )
    for key, (ftype, required, _) in schema.items():
        if key not in raw:
            if required:
                raise CatalogError(f"{_where(origin, kind, ident)}: missing field '{key}'")
            continue
        _check_value(origin, kind, ident, key, ftype, raw[key])
    for (k, f), allowed in ENUMS.items():
        if k == kind and f in raw and raw[f] not in allowed:
            raise CatalogError(
                f"{_where(origin, kind, ident)}: {f} must be one of {', '.join(allowed)}, "
                f"got {raw[f]!r}"
            )
    if not str(raw["source"]).strip():
        raise CatalogError(f"{_where(origin, kind, ident)}: source must not be empty")
    kwargs = {**_DEFAULTS.get(kind, {}), **_convert(kind, raw)}
    if kind == "model":
        kwargs.pop("params_published_b", None)
    if kind == "offer" and not kwargs.get("name"):
        kwargs.pop("name", None)
    try:
        return _BUILD[kind](**kwargs)
    except (TypeError, ValueError, GpuplanError) as err:
        raise CatalogError(f"{_where(origin, kind, ident)}: {err}") from None


@dataclass
class Catalog:
    """All catalog tables, resolved and cross-checked. Build with `load_catalog`."""

    accelerators: dict[str, spec.Accelerator] = field(default_factory=dict)
    fabrics: dict[str, spec.Fabric] = field(default_factory=dict)
    systems: dict[str, spec.System] = field(default_factory=dict)
    pods: dict[str, spec.Pod] = field(default_factory=dict)
    offers: dict[str, spec.Offer] = field(default_factory=dict)
    models: dict[str, spec.ModelSpec] = field(default_factory=dict)
    site: dict[str, spec.SiteValue] = field(default_factory=dict)
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # other tables, raw
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> alias -> id
    origins: tuple[str, ...] = ()

    # --- lookups -------------------------------------------------------------------------
    def _table(self, kind: str) -> dict[str, Any]:
        tables: dict[str, dict[str, Any]] = {
                "accelerator": self.accelerators, "fabric": self.fabrics,
                "system": self.systems, "pod": self.pods, "offer": self.offers,
                "model": self.models, "site": self.site}
        return tables[kind]

    def resolve(self, kind: str, name: str) -> str:
        """An id or alias (any case, spaces or dashes) -> the canonical id, or UnknownIdError."""
        key = normalize(name)
        if kind == "site":  # site names are stored with underscores (see _merge_docs)
            key = key.replace("-", "_")
        table = self._table(kind)
        if key in table:
            return key
        alias = self.aliases.get(kind, {}).get(key)
        if alias:
            return alias
        aliases = self.aliases.get(kind, {})
        raise UnknownIdError(KIND_WORD[kind], name, list(table) + list(aliases), LIST_CMD[kind],
                             canonical=aliases)

    def accelerator(self, name: str) -> spec.Accelerator:
        return self.accelerators[self.resolve("accelerator", name)]

    def system(self, name: str) -> spec.System:
        return self.systems[self.resolve("system", name)]

    def pod(self, name: str) -> spec.Pod:
        return self.pods[self.resolve("pod", name)]

    def fabric(self, name: str) -> spec.Fabric:
        return self.fabrics[self.resolve("fabric", name)]

    def offer(self, name: str) -> spec.Offer:
        return self.offers[self.resolve("offer", name)]

    def model(self, name: str) -> spec.ModelSpec:
        return self.models[self.resolve("model", name)]

    def site_value(self, name: str) -> float:
        return self.site[self.resolve("site", name)].value

    def find(self, name: str) -> tuple[str, Any]:
        """Any id or alias of any kind -> (kind, entity); for `gpuplan catalog show ID`."""
        key = normalize(name)
        for kind in ("accelerator", "system", "pod", "fabric", "offer", "model", "site"):
            table = self._table(kind)
            ident = key if key in table else self.aliases.get(kind, {}).get(key)
            if ident:
                return kind, table[ident]
        known: list[str] = []
        canonical: dict[str, str] = {}
        for kind in ("accelerator", "system", "pod", "fabric", "offer", "model"):
            known += list(self._table(kind)) + list(self.aliases.get(kind, {}))
            canonical.update(self.aliases.get(kind, {}))
        raise UnknownIdError("catalog id", name, known, "gpuplan catalog gpus",
                             canonical=canonical)

    def offers_for(self, accelerator_id: str) -> list[spec.Offer]:
        return [o for o in self.offers.values() if o.accelerator == accelerator_id]

    def table(self, name: str) -> dict[str, Any]:
        """A raw extra table (e.g. 'efficiency', 'scenarios'), merged with overlays."""
        if name not in self.extra:
            raise CatalogError(f"the catalog has no table '{name}'")
        return self.extra[name]


def _read_toml(path: Path | str, origin: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise CatalogError(f"catalog file '{origin}' does not exist; check the path") from None
    except tomllib.TOMLDecodeError as err:
        raise CatalogError(f"{origin} is not valid TOML: {err}") from None
    except IsADirectoryError:
        raise CatalogError(f"catalog file '{origin}' is a folder; give a .toml file") from None


def package_data_path(name: str) -> Path:
    return Path(str(resources.files("gpuplan") / "data" / name))


def read_package_csv(name: str) -> list[dict[str, str]]:
    """Rows of a CSV data file shipped in the package (e.g. published_runs.csv)."""
    with open(package_data_path(name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


_EXTRA_FILES = ("efficiency.toml", "scenarios.toml", "runtime.toml")


def _merge_docs(docs: Iterable[tuple[str, dict[str, Any]]]) -> Catalog:
    """Merge package data and overlays (in order) into raw rows, then validate and build."""
    rows: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {k: {} for k in SCHEMAS}
    extra: dict[str, dict[str, Any]] = {}
    origins = []
    for origin, doc in docs:
        origins.append(origin)
        for top, value in doc.items():
            if top == "site":
                if not isinstance(value, dict):
                    raise CatalogError(f"{origin}: [site] must be a table of [site.NAME] tables")
                for sname, entry in value.items():
                    if not isinstance(entry, dict):
                        raise CatalogError(f"{origin}: site '{sname}' must be a table")
                    key = normalize(sname).replace("-", "_")
                    prev = rows["site"].get(key, (origin, {}))[1]
                    rows["site"][key] = (origin, {**prev, **entry})
                continue
            if top in SCHEMAS:
                if not isinstance(value, list):
                    raise CatalogError(f"{origin}: '{top}' must be written [[{top}]]")
                for entry in value:
                    if not isinstance(entry, dict) or "id" not in entry:
                        raise CatalogError(f"{origin}: every [[{top}]] needs an id")
                    if not isinstance(entry["id"], str) or not entry["id"].strip():
                        raise CatalogError(f"{origin}: [[{top}]] id must be non-empty text")
                    ident = normalize(entry["id"])
                    prev = rows[top].get(ident, (origin, {}))[1]
                    rows[top][ident] = (origin, {**prev, **entry, "id": ident})
                continue
            if isinstance(value, dict):
                extra[top] = {**extra.get(top, {}), **value}
                continue
            known = list(SCHEMAS) + list(extra)
            hint = suggest(top, known)
            raise CatalogError(
                f"{origin}: unknown table '{top}'"
                + (f"; did you mean '{hint[0]}'?" if hint else "")
                + f" (tables: {', '.join(k for k in SCHEMAS)})"
            )

    cat = Catalog(extra=extra, origins=tuple(origins))
    for kind, entries in rows.items():
        table = cat._table(kind)
        amap: dict[str, str] = {}
        for ident, (origin, raw) in entries.items():
            if kind == "site":
                _build_site(cat, ident, origin, raw)
                continue
            obj = _build(kind, origin, raw)
            table[ident] = obj
            for a in getattr(obj, "aliases", ()):
                na = normalize(a)
                if na in amap and amap[na] != ident:
                    raise CatalogError(
                        f"{origin}: alias '{a}' names both {kind} '{amap[na]}' and '{ident}'"
                    )
                amap[na] = ident
        cat.aliases[kind] = {a: i for a, i in amap.items() if a not in table}
    _cross_check(cat)
    return cat


def _build_site(cat: Catalog, ident: str, origin: str, raw: dict[str, Any]) -> None:
    schema = SCHEMAS["site"]
    for key in raw:
        if key not in schema:
            raise CatalogError(f"{_where(origin, 'site', ident)}: unknown field '{key}'")
    for key, (ftype, required, _) in schema.items():
        if key not in raw:
            if required:
                raise CatalogError(f"{_where(origin, 'site', ident)}: missing field '{key}'")
            continue
        _check_value(origin, "site", ident, key, ftype, raw[key])
    cat.site[ident] = spec.SiteValue(name=ident, value=float(raw["value"]), unit=raw["unit"],
                                     source=raw["source"], as_of=raw["as_of"],
                                     notes=raw.get("notes", ""))


def _cross_check(cat: Catalog) -> None:
    """References between tables must resolve."""
    def need(kind: str, ident: str, ref_kind: str, ref: str, table: dict[str, Any]) -> None:
        if ref and normalize(ref) not in table:
            hint = suggest(normalize(ref), table)
            raise CatalogError(
                f"{kind} '{ident}' refers to unknown {ref_kind} '{ref}'"
                + (f"; did you mean '{hint[0]}'?" if hint else "")
            )

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
        if o.count < 1:
            raise CatalogError(f"offer '{o.id}': count must be at least 1")
        if not o.usd_per_hour:
            raise CatalogError(f"offer '{o.id}': usd_per_hour needs at least one pricing mode")


def overlay_paths(explicit: Iterable[str] = ()) -> tuple[str, ...]:
    """Overlay files: $GPUPLAN_CATALOG (os.pathsep-separated) first, then --catalog files."""
    env = os.environ.get(ENV_VAR, "")
    paths = [p for p in env.split(os.pathsep) if p.strip()] if env else []
    return tuple(paths) + tuple(explicit)


@cache
def _load(overlays: tuple[str, ...]) -> Catalog:
    docs: list[tuple[str, dict[str, Any]]] = []
    for name in dict.fromkeys(list(FILES.values()) + list(_EXTRA_FILES)):
        path = package_data_path(name)
        if path.exists():
            docs.append((f"gpuplan/data/{name}", _read_toml(path, name)))
    for p in overlays:
        docs.append((p, _read_toml(p, p)))
    return _merge_docs(docs)


def load_catalog(overlays: Iterable[str] = ()) -> Catalog:
    """The package catalog merged with overlays; cached per overlay list."""
    return _load(overlay_paths(overlays))


def validate_file(path: str) -> Catalog:
    """Validate one overlay file on top of the package data (for `gpuplan catalog validate`)."""
    return _load((str(path),))
