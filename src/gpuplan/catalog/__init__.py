"""The catalog: sourced hardware, fabrics, cloud offers, site defaults, efficiency constants,
scenario presets and model presets (L2).

Data lives in TOML files in ``gpuplan/data`` (TOML because every row carries prose -- a source,
a caveat -- beside its numbers, comments can explain a disputed figure next to it, and Python
reads it with the standard library). Files are read on first use, never at import. Users overlay
their own TOML (``--catalog FILE`` or ``GPUPLAN_CATALOG=FILE[:FILE...]``) with the same tables; an
entry whose id exists is merged field by field (nested tables such as ``usd_per_hour`` key by
key), a new id must be complete, every value remembers the file that set it, and the result is
validated exactly like the package data against the typed field specs in ``schema.py``.

Units in the files are the ones datasheets use and are named in each field (``memory_gib``,
``peak_tflops``, ``scale_up_gb_per_s``); they are converted to bytes, FLOP/s and seconds here.

Modules: ``schema`` (field specs), ``check`` (validation against them), ``merge`` (reading files,
merging per field with provenance), ``build`` (typed entries, inheritance, cross-references),
``model`` (the ``Catalog`` and its lookups), ``loader`` (package data + overlays, cached).
"""

from __future__ import annotations

from .loader import (
    ENV_VAR,
    load_catalog,
    overlay_paths,
    package_data_path,
    read_package_csv,
    validate_file,
)
from .model import Catalog
from .schema import FILES, SCHEMAS, normalize

__all__ = ["ENV_VAR", "FILES", "SCHEMAS", "Catalog", "load_catalog", "normalize",
           "overlay_paths", "package_data_path", "read_package_csv", "validate_file"]
