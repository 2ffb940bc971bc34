"""The `Catalog`: typed tables, aliases, per-value provenance, and lookups with suggestions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import spec
from ..errors import CatalogError, UnknownIdError
from .merge import PACKAGE_PREFIX
from .schema import KIND_WORD, LIST_CMD, table_key

# the order `locate` searches the kinds in (the first match wins)
FIND_ORDER = ("accelerator", "system", "pod", "fabric", "offer", "model", "site", "efficiency",
              "scenarios", "memory")


# kind -> the Catalog attribute holding its table; the other kinds live in `extra`
TABLE_ATTRS = {"accelerator": "accelerators", "fabric": "fabrics", "system": "systems",
               "pod": "pods", "offer": "offers", "model": "models", "site": "site"}
EXTRA_TABLES = ("efficiency", "scenarios", "stack", "residuals", "memory")


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
    # validated rows in file units: 'efficiency' (inheritance resolved) and 'scenarios'
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> alias -> id
    origins: tuple[str, ...] = ()  # the files merged, package data first
    # (kind, id) -> field path ('usd_per_hour.spot') -> the file that set it
    provenance: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    # --- lookups -------------------------------------------------------------------------
    def tables(self) -> dict[str, dict[str, Any]]:
        return {**{kind: getattr(self, attr) for kind, attr in TABLE_ATTRS.items()},
                **{kind: self.extra.get(kind, {}) for kind in EXTRA_TABLES}}

    def _kind_table(self, kind: str) -> dict[str, Any]:
        """`tables()[kind]` without building the others."""
        attr = TABLE_ATTRS.get(kind)
        return getattr(self, attr) if attr else self.tables()[kind]

    def _find(self, kind: str, name: str, table: dict[str, Any]) -> str | None:
        """The canonical id of an id or alias of `kind` in `table`, or None."""
        if name in table:  # an id as stored (stored ids are normalized): nothing to normalize
            return name
        key = table_key(kind, name)
        return key if key in table else self.aliases.get(kind, {}).get(key)

    def resolve(self, kind: str, name: str) -> str:
        """An id or alias (any case, spaces or dashes) -> the canonical id, or UnknownIdError."""
        table = self._kind_table(kind)
        ident = self._find(kind, name, table)
        if ident is not None:
            return ident
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

    def locate(self, name: str) -> tuple[str, str]:
        """Any id or alias of any kind -> (kind, canonical id), for `gpuplan catalog show ID`;
        kinds are searched in FIND_ORDER."""
        tables = self.tables()
        for kind in FIND_ORDER:
            ident = self._find(kind, name, tables[kind])
            if ident is not None:
                return kind, ident
        known: list[str] = []
        canonical: dict[str, str] = {}
        for kind in FIND_ORDER:
            known += list(tables[kind]) + list(self.aliases.get(kind, {}))
            canonical.update(self.aliases.get(kind, {}))
        raise UnknownIdError("catalog id", name, known, "gpuplan catalog gpus",
                             canonical=canonical)

    def overlay_values(self, kind: str, ident: str) -> dict[str, str]:
        """Field path -> overlay file, for every value of this entry an overlay set."""
        return {path: origin
                for path, origin in self.provenance.get((kind, ident), {}).items()
                if not origin.startswith(PACKAGE_PREFIX)}

    def offers_for(self, accelerator_id: str) -> list[spec.Offer]:
        return [o for o in self.offers.values() if o.accelerator == accelerator_id]

    def table(self, name: str) -> dict[str, Any]:
        """A validated extra table ('efficiency', 'scenarios') in file units."""
        if name not in self.extra:
            raise CatalogError(f"the catalog has no table '{name}'")
        return self.extra[name]

    def efficiency_parents(self) -> dict[str, str]:
        """family -> the family it inherits its constants from ([efficiency.X] inherits)."""
        return {f: table_key("efficiency", r["inherits"])
                for f, r in self.table("efficiency").items() if r.get("inherits")}
