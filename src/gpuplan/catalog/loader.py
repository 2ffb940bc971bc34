"""Find and read the catalog files: the package data, then overlays, merged and cached."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path

from ..userfile import display_path
from .build import build_catalog
from .merge import PACKAGE_PREFIX, Doc, read_doc
from .model import Catalog
from .schema import FILES

ENV_VAR = "GPUPLAN_CATALOG"


def package_data_path(name: str) -> Path:
    return Path(str(resources.files("gpuplan") / "data" / name))


def read_package_csv(name: str) -> list[dict[str, str]]:
    """Rows of a CSV data file shipped in the package (e.g. published_runs.csv)."""
    with open(package_data_path(name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def overlay_paths(explicit: Iterable[str] = ()) -> tuple[str, ...]:
    """Overlay files: $GPUPLAN_CATALOG (os.pathsep-separated) first, then --catalog files."""
    env = os.environ.get(ENV_VAR, "")
    paths = [p for p in env.split(os.pathsep) if p.strip()] if env else []
    return tuple(paths) + tuple(explicit)


@cache
def _load(overlays: tuple[str, ...]) -> Catalog:
    docs: list[Doc] = []
    for name in dict.fromkeys(FILES.values()):
        docs.append(read_doc(package_data_path(name), PACKAGE_PREFIX + name, overlay=False))
    for p in overlays:
        docs.append(read_doc(p, display_path(p), overlay=True))
    return build_catalog(docs)


def load_catalog(overlays: Iterable[str] = ()) -> Catalog:
    """The package catalog merged with overlays; cached per overlay list."""
    return _load(overlay_paths(overlays))


def validate_file(path: str) -> Catalog:
    """Validate one overlay file on top of the package data (for `gpuplan catalog validate`)."""
    return _load((str(path),))
