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
from .power import power_limited

__all__ = ["Platform", "attention_kernel", "best_stack", "check_precision", "default_system",
           "efficiency_for", "efficiency_rows", "family_constants", "hardware_for",
           "hardware_table", "limited", "pair_is_guess", "peak_row", "stack_group", "stack_row",
           "with_stack", "with_tp_collectives"]


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
        "gpus_per_node", "tdp_watts", "family", "host_memory_bytes", "host_bytes_per_s",
        "exp_per_s", "scale_out_dispatch_share", "fp8_gemm_any_layout")}
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
        cols["exp_per_s"].append(acc.exp_per_s or np.inf)
        cols["family"].append(acc.family)
        cols["host_memory_bytes"].append(host_memory_per_gpu(cat, acc, plat))
        host = cat.fabrics.get(acc.host_interface)
        cols["host_bytes_per_s"].append(host.bytes_per_s_per_direction if host else np.nan)
        cols["scale_out_dispatch_share"].append(plat.scale_out_dispatch_share)
        cols["fp8_gemm_any_layout"].append(float(acc.fp8_gemm_any_layout))
    peak = np.array(cols.pop("peak"), dtype=float).reshape(len(rows), len(PRECISIONS))
    family = np.array(cols.pop("family"), dtype=object)
    arrays = {k: np.array(v, dtype=float) for k, v in cols.items()}
    return Hardware(**arrays, peak_flops=peak[:, PRECISIONS.index("bf16")], family=family,
                    peak_flops_by_precision=peak)


def limited(hw: Hardware, acc: Accelerator, limit_watts: float | None) -> Hardware:
    """`hw` held to a power limit (`plan --power-limit-watts`, as `estimate` applies it:
    `power.power_limited`); unchanged without one."""
    return hw if limit_watts is None else power_limited(hw, acc, limit_watts)


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


# --- efficiency by family and software stack ----------------------------------------------------

# [efficiency.FAMILY] field (unit in the name) -> Efficiency field and factor to code units.
# The catalog has validated every row against its schema and resolved `inherits`.
EFFICIENCY_FIELDS = {"matmul_max": ("matmul_max", 1.0), "half_dim": ("half_dim", 1.0),
                     "fp8_ratio": ("fp8_ratio", 1.0), "memory_fraction": ("memory_fraction", 1.0),
                     "layer_overhead_us": ("layer_overhead_s", 1e-6),
                     "attention_ratio": ("attention_ratio", 1.0),
                     "tp_overlap": ("tp_overlap", 1.0)}
# [stack.NAME] fields that change the efficiency (pooled over families).
STACK_FIELDS = ("matmul_scale", "fp8_ratio")
# [stack.NAME] FP8 settings, stated (docs/calibration.md, "PyTorch-native FP8"), carried into
# the Efficiency fields of the same names as 1.0 / 0.0.
STACK_FP8_FLAGS = ("fp8_cast", "fp8_tp_gather")
# [stack.NAME] tp_collectives (stated; docs/calibration.md, "Blocking tensor-parallel
# collectives"): "blocking" hides none of the TP collectives (tp_overlap 0).
TP_BLOCKING, TP_OVERLAPPED = "blocking", "overlapped"
TP_COLLECTIVES = (TP_OVERLAPPED, TP_BLOCKING)
# [efficiency.FAMILY] field, stated (never fitted): an 'fa2' stack's attention speed relative
# to the fused kernel on the family (docs/calibration.md, "Attention kernel of a stack").
FA2_RATIO = "fa2_attention_ratio"
# [efficiency.FAMILY] field, stated (never fitted): the fused attention kernel's share of the
# family's peak relative to the share on the family it inherits attention_ratio from
# (docs/calibration.md, "A stated Blackwell attention factor").
ATTENTION_SCALE = "attention_scale"


def efficiency_rows(cat: Catalog) -> dict[str, dict[str, Any]]:
    """The [efficiency.FAMILY] rows of the catalog, inheritance resolved (file units)."""
    return cat.table("efficiency")


def stack_row(cat: Catalog, stack: str | None) -> dict[str, Any]:
    """The [stack.NAME] row (inheritance resolved); None = megatron."""
    name = stack or STACKS[0]
    table = cat.tables()["stack"]
    if name not in table:
        raise ConfigError(f"the catalog has no [stack.{name}] row (data/efficiency.toml); "
                          f"choose one of: {', '.join(sorted(table))}")
    return table[name]


def stack_group(cat: Catalog, stack: str | None) -> str:
    """The calibration group of a stack: the root of its `inherits` chain in [stack.NAME]
    (nemo -> megatron: NeMo 2 / Megatron-Bridge run Megatron-Core)."""
    table = cat.tables()["stack"]
    seen = [stack or STACKS[0]]
    while table.get(seen[-1], {}).get("inherits") and len(seen) <= len(table):
        seen.append(str(table[seen[-1]]["inherits"]))
    return seen[-1]


def best_stack(cat: Catalog, family: str) -> str:
    """The software stack `plan` assumes for a family when none is asked for: the first stack
    of `spec.STACKS` whose calibration covers the family (its `fitted_families`), else the
    first stack (a guess either way for a family no stack covers)."""
    table = cat.tables()["stack"]
    for name in STACKS:
        if family in table.get(name, {}).get("fitted_families", ()):
            return name
    return STACKS[0]


def family_constants(cat: Catalog, family: str) -> dict[str, float]:
    """The constants of one family's row in code units (Efficiency field names); the default
    row for a family without one."""
    table = efficiency_rows(cat)
    row = table.get(family, table["default"])
    out = {name: float(row.get(key, 1.0)) * factor
           for key, (name, factor) in EFFICIENCY_FIELDS.items()}
    for key in (FA2_RATIO, ATTENTION_SCALE):  # stated, consumed by with_stack
        out[key] = float(row.get(key, 1.0))
    return out


def attention_kernel(stack: dict[str, Any]) -> str:
    """The attention kernel a [stack.NAME] row states: 'fused' (Transformer Engine's cuDNN
    fused attention; the default) or 'fa2' (an Ampere-generation flash-attention kernel)."""
    return str(stack.get("attention_kernel") or "fused")


def fp8_flags(stack: dict[str, Any]) -> dict[str, float]:
    """The stack's stated FP8 settings as Efficiency fields: fp8_cast 1.0 where the casts are
    counted apart (torchao tensorwise), fp8_tp_gather 1.0 where TP all-gathers run in float8."""
    return {"fp8_cast": float(stack.get("fp8_cast") == "tensorwise"),
            "fp8_tp_gather": float(bool(stack.get("fp8_tp_gather", False)))}


def with_stack(values: dict[str, Any], stack: dict[str, Any]) -> dict[str, Any]:
    """Family constants under a stack: matmul_max x matmul_scale (at most 1), fp8_ratio x the
    stack's fp8_ratio (not under fp8_cast = 'tensorwise', whose casts are counted apart and
    whose FP8 GEMMs keep the BF16 share of their doubled peak), the stack's FP8 flags
    (`fp8_flags`), and under a stack whose attention kernel is 'fa2' attention_ratio x the
    family's stated fa2_attention_ratio (FlashAttention-2 against the fused kernel on that
    family; 1 where absent); under every stack attention_ratio x the family's stated
    attention_scale (1 where absent); tp_overlap 0 under a stack whose TP collectives are
    'blocking' (`tp_collectives`). Broadcasts (the calibration passes grids)."""
    out = dict(values)
    fa2 = out.pop(FA2_RATIO, 1.0)
    scale = out.pop(ATTENTION_SCALE, 1.0)
    flags = fp8_flags(stack)
    out["matmul_max"] = np.minimum(np.asarray(values["matmul_max"], dtype=float)
                                   * np.asarray(stack["matmul_scale"], dtype=float), 1.0)
    stack_fp8 = 1.0 if flags["fp8_cast"] else stack["fp8_ratio"]
    out["fp8_ratio"] = (np.asarray(values.get("fp8_ratio", 1.0), dtype=float)
                        * np.asarray(stack_fp8, dtype=float))
    out.update(flags)
    kernel = np.asarray(fa2, dtype=float) if attention_kernel(stack) == "fa2" else 1.0
    out["attention_ratio"] = (np.asarray(values["attention_ratio"], dtype=float) * kernel
                              * np.asarray(scale, dtype=float))
    if stack.get("tp_collectives") == TP_BLOCKING:
        out["tp_overlap"] = np.zeros_like(np.asarray(values.get("tp_overlap", 0.0), dtype=float))
    return out


def pair_is_guess(cat: Catalog, family: str, stack: str | None) -> bool:
    """A (family, stack) pair is a guess unless the family has a row that is not a guess and
    a fit run of its own under this stack's calibration (`fitted_families`)."""
    table = efficiency_rows(cat)
    srow = stack_row(cat, stack)
    return (family not in table or bool(table[family]["guess"]) or bool(srow["guess"])
            or family not in srow.get("fitted_families", ()))


def efficiency_for(cat: Catalog, families: Any, stack: str | None = None) -> Efficiency:
    """Efficiency arrays for an array of family names under one software stack (None =
    megatron); unknown families get the default row. `guess` is True where the (family,
    stack) pair has no calibration run of its own (`pair_is_guess`)."""
    srow = stack_row(cat, stack)
    fams = np.atleast_1d(np.asarray(families, dtype=object))
    rows = [with_stack(family_constants(cat, str(f)), srow) for f in fams.ravel()]
    names = (*(name for name, _ in EFFICIENCY_FIELDS.values()), *STACK_FP8_FLAGS)
    out = {name: np.array([float(r[name]) for r in rows]).reshape(fams.shape) for name in names}
    guess = np.array([pair_is_guess(cat, str(f), stack) for f in fams.ravel()]
                     ).reshape(fams.shape)
    return Efficiency(**out, guess=guess)


def with_tp_collectives(cat: Catalog, eff: Efficiency, family: str, stack: str,
                        setting: str | None) -> tuple[Efficiency, str]:
    """(efficiency, setting) with the TP collectives `setting` (None: the stack's [stack.NAME]
    tp_collectives, as `eff` has): the tp_overlap `with_stack` gives the family under the
    stack's row with that setting."""
    row = stack_row(cat, stack)
    if setting is None:
        return eff, str(row.get("tp_collectives") or TP_OVERLAPPED)
    if setting not in TP_COLLECTIVES:
        raise ConfigError(f"tp_collectives must be {' or '.join(TP_COLLECTIVES)}, got "
                          f"'{setting}'")
    values = with_stack(family_constants(cat, family), {**row, "tp_collectives": setting})
    return replace(eff, tp_overlap=float(values["tp_overlap"])), setting
