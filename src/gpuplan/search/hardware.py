"""Hardware arrays from the catalog: one row per (accelerator, platform) candidate (L4).

A *platform* is where the accelerators sit: a catalog `System` (a server and its NICs), a cloud
`Offer` (an instance and its network bandwidth), a `Platform` given by hand, or None for the
default platform. Bandwidths in `Hardware` are per GPU and per direction.

Default platform (no system and no offer): the catalog system for that accelerator if one
exists (the first server, by id); otherwise `DEFAULT_GPUS_PER_NODE` GPUs per node sharing the
accelerator's own scale-up fabric (PCIe for cards without NVLink), and one
`DEFAULT_NIC_FABRIC` NIC per GPU -- a stated assumption, shown by `gpuplan estimate`.

Peak FLOP/s per precision: `Hardware.peak_flops_by_precision` has shape (n, 4) with columns in
`spec.PRECISIONS` order (fp32, fp16, bf16, fp8), nan where the accelerator has no tensor-core
support. FP32 training runs its matrix multiplies as TF32 where the part has it (the PyTorch
and Megatron-LM default on Ampere and later), so the fp32 column is the TF32 peak when listed.
`Hardware.peak_flops` is the column of the requested precision (bf16 in `hardware_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..catalog import Catalog
from ..errors import ConfigError
from ..estimate.compute import Efficiency
from ..spec import PRECISIONS, Accelerator, Hardware, Offer, System

DEFAULT_GPUS_PER_NODE = 8
DEFAULT_NIC_FABRIC = "roce-100g"
# Used only when the catalog lacks the fabric above: 100 Gbit/s = 12.5e9 B/s, 5 us (a guess).
DEFAULT_NIC_BYTES_PER_S = 12.5e9
DEFAULT_LATENCY_S = 5e-6


@dataclass(frozen=True, kw_only=True)
class Platform:
    """A platform given by hand (e.g. a published run's cluster)."""

    gpus_per_node: int
    scale_up_domain: int
    scale_out_bytes_per_s: float  # per GPU, per direction
    scale_out_latency_s: float = DEFAULT_LATENCY_S


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


def default_system(cat: Catalog, acc: Accelerator) -> System | None:
    """The first catalog server (by id) built around this accelerator, if any."""
    found = sorted((s for s in cat.systems.values() if s.accelerator == acc.id),
                   key=lambda s: (s.kind != "server", s.id))
    return found[0] if found else None


def platform_of(cat: Catalog, acc: Accelerator, platform: System | Offer | Platform | None
                ) -> Platform:
    """Resolve any platform (or None = default) to per-GPU scale-out figures."""
    if platform is None:
        platform = default_system(cat, acc)
    if isinstance(platform, Platform):
        return platform
    if isinstance(platform, System):
        fab = cat.fabrics.get(platform.scale_out_fabric)
        nics = platform.nics_per_node or platform.gpus_per_node
        per_gpu = (fab.bytes_per_s_per_direction * nics / platform.gpus_per_node if fab
                   else DEFAULT_NIC_BYTES_PER_S)
        return Platform(gpus_per_node=platform.gpus_per_node,
                        scale_up_domain=platform.scale_up_domain,
                        scale_out_bytes_per_s=per_gpu,
                        scale_out_latency_s=fab.latency_s if fab else DEFAULT_LATENCY_S)
    if isinstance(platform, Offer):
        return Platform(gpus_per_node=platform.count, scale_up_domain=platform.count,
                        scale_out_bytes_per_s=platform.network_bytes_per_s / platform.count,
                        scale_out_latency_s=DEFAULT_LATENCY_S)
    nic = cat.fabrics.get(DEFAULT_NIC_FABRIC)
    return Platform(gpus_per_node=DEFAULT_GPUS_PER_NODE, scale_up_domain=DEFAULT_GPUS_PER_NODE,
                    scale_out_bytes_per_s=nic.bytes_per_s_per_direction if nic
                    else DEFAULT_NIC_BYTES_PER_S,
                    scale_out_latency_s=nic.latency_s if nic else DEFAULT_LATENCY_S)


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
        "gpus_per_node", "tdp_watts", "family")}
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
    plat = Platform(gpus_per_node=gpn, scale_up_domain=domain,
                    scale_out_bytes_per_s=scale_out_bytes_per_s or plat.scale_out_bytes_per_s,
                    scale_out_latency_s=plat.scale_out_latency_s)
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


def efficiency_for(cat: Catalog, families: Any) -> Efficiency:
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
