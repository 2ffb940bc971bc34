"""Hardware arrays from the catalog: one row per (accelerator, platform) candidate (L4).

A platform is a catalog `System`, a cloud `Offer`, a `platforms.Platform` (given by hand or
already resolved), or None for the default platform (see `platforms`). Bandwidths in
`Hardware` are per GPU and per direction.

Peak FLOP/s per precision: `Hardware.peak_flops_by_precision` has shape (n, 4) with columns in
`spec.PRECISIONS` order (fp32, fp16, bf16, fp8), nan where the accelerator has no tensor-core
support. FP32 training runs its matrix multiplies as TF32 where the part has it (the PyTorch
and Megatron-LM default on Ampere and later), so the fp32 column is the TF32 peak when listed.
`Hardware.peak_flops` is the column of the requested precision (bf16 in `hardware_table`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimators.compute import Efficiency
from ..spec import PRECISIONS, STACKS, Accelerator, Hardware, Offer, System
from .platforms import DEFAULT_LATENCY_S, Platform, default_system, platform_of

__all__ = ["Platform", "best_stack", "check_precision", "default_system", "efficiency_for",
           "efficiency_rows", "hardware_for", "hardware_table", "peak_row"]


def _accelerator(cat: Catalog, accelerator: Accelerator | str) -> Accelerator:
    return accelerator if isinstance(accelerator, Accelerator) else cat.accelerator(accelerator)


def _fabric_latency(cat: Catalog, fabric_id: str) -> float:
    fab = cat.fabrics.get(fabric_id)
    return fab.latency_s if fab else DEFAULT_LATENCY_S


def peak_row(acc: Accelerator) -> np.ndarray:
    """Dense peak FLOP/s per precision code (nan = unsupported)."""
    p = acc.peak_flops
    fp32 = p.get("tf32", p.get("fp32", np.nan))
    return np.array([fp32, p.get("fp16", np.nan), p.get("bf16", np.nan), p.get("fp8", np.nan)],
                    dtype=float)


def check_precision(acc: Accelerator, precision: str) -> int:
    """Precision name -> code, or a ConfigError saying what the part lacks and what to use."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision '{precision}'; choose one of: "
                          f"{', '.join(PRECISIONS)}")
    code = PRECISIONS.index(precision)
    if not np.isfinite(peak_row(acc)[code]):
        if precision == "fp8":
            raise ConfigError(f"{acc.id} has no FP8 tensor cores; use --precision bf16")
        usable = [p for p, v in zip(PRECISIONS, peak_row(acc), strict=True) if np.isfinite(v)]
        best = "bf16" if "bf16" in usable else (usable[-1] if usable else "fp32")
        raise ConfigError(f"{acc.id} has no {precision} tensor-core rate in the catalog; "
                          f"use --precision {best}")
    return code


def host_memory_per_gpu(cat: Catalog, acc: Accelerator, plat: Platform) -> float:
    """Host RAM per GPU of the platform's system (for a cloud offer or the default node: the
    catalog's first system of this accelerator); nan when the catalog has no ram_gib."""
    system = plat.system or default_system(cat, acc)
    if system is None or not system.ram_bytes > 0:
        return float("nan")
    return system.ram_bytes / system.gpus_per_node


def hardware_table(cat: Catalog, rows: list[tuple[Accelerator | str,
                                                  System | Offer | Platform | None]]
                   ) -> Hardware:
    """Hardware of many (accelerator, platform) rows as 1-D arrays (length len(rows)).

    Unsupported precisions are nan in `peak_flops_by_precision`, so the timing model masks
    them (infinite step time) instead of raising. `peak_flops` is the bf16 column.
    """
    cols: dict[str, list[Any]] = {k: [] for k in (
        "memory_bytes", "memory_bandwidth_bytes_per_s", "peak", "scale_up_bytes_per_s",
        "scale_up_latency_s", "scale_up_domain", "scale_out_bytes_per_s", "scale_out_latency_s",
        "gpus_per_node", "tdp_watts", "family", "host_memory_bytes", "host_bytes_per_s")}
    for accelerator, platform in rows:
        acc = _accelerator(cat, accelerator)
        plat = platform_of(cat, acc, platform)
        cols["memory_bytes"].append(acc.memory_bytes)
        cols["memory_bandwidth_bytes_per_s"].append(acc.memory_bandwidth_bytes_per_s)
        cols["peak"].append(peak_row(acc))
        cols["scale_up_bytes_per_s"].append(acc.scale_up_bytes_per_s_per_direction)
        cols["scale_up_latency_s"].append(_fabric_latency(cat, acc.scale_up_fabric))
        cols["scale_up_domain"].append(min(plat.scale_up_domain, plat.gpus_per_node)
                                       if acc.scale_up_kind == "pcie" else plat.scale_up_domain)
        cols["scale_out_bytes_per_s"].append(plat.scale_out_bytes_per_s)
        cols["scale_out_latency_s"].append(plat.scale_out_latency_s)
        cols["gpus_per_node"].append(plat.gpus_per_node)
        cols["tdp_watts"].append(acc.tdp_watts)
        cols["family"].append(acc.family)
        cols["host_memory_bytes"].append(host_memory_per_gpu(cat, acc, plat))
        host = cat.fabrics.get(acc.host_interface)
        cols["host_bytes_per_s"].append(host.bytes_per_s_per_direction if host else np.nan)
    peak = np.array(cols.pop("peak"), dtype=float).reshape(len(rows), len(PRECISIONS))
    family = np.array(cols.pop("family"), dtype=object)
    arrays = {k: np.array(v, dtype=float) for k, v in cols.items()}
    return Hardware(**arrays, peak_flops=peak[:, PRECISIONS.index("bf16")], family=family,
                    peak_flops_by_precision=peak)


def hardware_for(cat: Catalog, accelerator: Accelerator | str, *, precision: str,
                 gpus_per_node: int | None = None, scale_up_domain: int | None = None,
                 scale_out_bytes_per_s: float | None = None, system: System | str | None = None,
                 offer: Offer | str | None = None) -> Hardware:
    """Hardware of one candidate (arrays of shape (1,)); raises ConfigError on an unsupported
    precision (e.g. FP8 on A100). Keyword overrides replace the platform's figures."""
    acc = _accelerator(cat, accelerator)
    code = check_precision(acc, precision)
    if system is not None and offer is not None:
        raise ConfigError("give either --system or --offer, not both")
    platform: System | Offer | None = None
    if system is not None:
        platform = system if isinstance(system, System) else cat.system(system)
    elif offer is not None:
        platform = offer if isinstance(offer, Offer) else cat.offer(offer)
    plat = platform_of(cat, acc, platform)
    gpn = gpus_per_node or plat.gpus_per_node
    domain = scale_up_domain or (min(plat.scale_up_domain, gpn) if gpus_per_node
                                 else plat.scale_up_domain)
    for name, v in (("gpus per node", gpn), ("scale-up domain", domain)):
        if v < 1:
            raise ConfigError(f"{name} must be at least 1, got {v}")
    plat = replace(plat, gpus_per_node=gpn, scale_up_domain=domain,
                   scale_out_bytes_per_s=scale_out_bytes_per_s or plat.scale_out_bytes_per_s)
    hw = hardware_table(cat, [(acc, plat)])
    return Hardware(**{**hw.__dict__, "peak_flops": hw.peak_flops_by_precision[:, code]})


# --- efficiency by family ----------------------------------------------------------------------

# [efficiency.FAMILY] field (unit in the name) -> Efficiency field and factor to code units.
# The catalog has validated every row against its schema and resolved `inherits`.
EFFICIENCY_FIELDS = {"matmul_max": ("matmul_max", 1.0), "half_dim": ("half_dim", 1.0),
                     "fp8_ratio": ("fp8_ratio", 1.0), "memory_fraction": ("memory_fraction", 1.0),
                     "layer_overhead_us": ("layer_overhead_s", 1e-6),
                     "attention_ratio": ("attention_ratio", 1.0),
                     "tp_overlap": ("tp_overlap", 1.0)}


def efficiency_rows(cat: Catalog) -> dict[str, dict[str, Any]]:
    """The [efficiency.FAMILY] rows of the catalog, inheritance resolved (file units)."""
    return cat.table("efficiency")


def best_stack(cat: Catalog, family: str) -> str:
    """The software stack `plan` assumes for a family when none is asked for: the one with the
    most calibration runs on that family (ties: the first in `spec.STACKS`)."""
    return STACKS[0]


def efficiency_for(cat: Catalog, families: Any, stack: str | None = None) -> Efficiency:
    """Efficiency arrays for an array of family names; unknown families get the default row,
    flagged `guess=True` (as is the default row itself)."""
    table = efficiency_rows(cat)
    fams = np.atleast_1d(np.asarray(families, dtype=object))
    rows = [table.get(str(f), table["default"]) for f in fams.ravel()]
    out = {name: np.array([float(r[key]) * factor for r in rows]).reshape(fams.shape)
           for key, (name, factor) in EFFICIENCY_FIELDS.items()}
    guess = np.array([bool(r["guess"]) or str(f) not in table
                      for f, r in zip(fams.ravel(), rows, strict=True)]).reshape(fams.shape)
    return Efficiency(**out, guess=guess)
