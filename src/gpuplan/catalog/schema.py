"""Typed field specs of every catalog table: type, unit, range (data, not code paths).

Each table maps a field name *as written in the TOML file* (units in the name: `memory_gib`,
`peak_tflops`) to a `Field`: its kind, whether a new row must give it, the factor to the code's
unit (bytes, FLOP/s, seconds, USD, watts), the constructor keyword it becomes, and its range.
`check.py` validates rows against these specs; nothing else decides what is valid.

Ranges are physical limits (a node holds at least one GPU, a fraction lies in [0, 1]), never
plausibility bands; `NUM_MAX` caps every number so that products of a few catalog figures in
code units stay far from float overflow (1e15 of anything in the file's unit).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import spec
from ..units import GB, TB, TERA, GiB

NUM_MAX = 1e15
INT_MAX = 10**9


@dataclass(frozen=True)
class Field:
    """One field of a table.

    kind: 'text', 'date', 'int', 'num', 'bool', 'texts' (list of text), 'map' (key -> num,
    keys from `choices`), 'text_or_texts', 'count' (a number or text such as "15T").
    """

    kind: str
    required: bool = False
    unit: float | None = None  # factor from the file's unit to the code's unit
    to: str = ""  # constructor keyword when the unit in the name changes
    low: float = 0.0
    above: bool = False  # strictly greater than `low`
    high: float = NUM_MAX
    choices: tuple[str, ...] = ()  # allowed texts ('text'), allowed keys ('map')
    inherited: bool = True  # efficiency rows: taken from the parent row when absent

    def range_text(self) -> str:
        if self.high < NUM_MAX and self.kind != "int":
            return f"in {'(' if self.above else '['}{self.low:g}, {self.high:g}]"
        if self.kind == "int":
            return (f">= {int(self.low) + self.above}" if self.high >= INT_MAX
                    else f"in {int(self.low) + self.above}..{int(self.high)}")
        return f"{'>' if self.above else '>='} {self.low:g}"


def text(required: bool = True, choices: tuple[str, ...] = (), inherited: bool = True) -> Field:
    return Field("text", required, choices=choices, inherited=inherited)


def date(required: bool = True, inherited: bool = True) -> Field:
    return Field("date", required, inherited=inherited)


def whole(required: bool = True, low: int = 0, high: int = INT_MAX) -> Field:
    return Field("int", required, low=low, high=high)


def num(required: bool = True, unit: float | None = None, to: str = "", low: float = 0.0,
        above: bool = False, high: float = NUM_MAX) -> Field:
    return Field("num", required, unit=unit, to=to, low=low, above=above, high=high)


def pos(required: bool = True, unit: float | None = None, to: str = "",
        high: float = NUM_MAX) -> Field:
    """A number > 0 (a divisor somewhere, or a quantity that cannot be zero)."""
    return num(required, unit, to, above=True, high=high)


def fraction(required: bool = True, above: bool = False) -> Field:
    return num(required, low=0.0, above=above, high=1.0)


COMMON: dict[str, Field] = {
    "id": text(),
    "name": text(),
    "source": text(),
    "as_of": date(),
    "aliases": Field("texts"),
    "notes": text(False),
}

ROW_TABLES: dict[str, dict[str, Field]] = {
    "accelerator": {
        **COMMON,
        "vendor": text(choices=spec.VENDORS),
        "architecture": text(),
        "family": text(),
        "form_factor": text(),
        "memory_gib": pos(unit=GiB, to="memory_bytes", high=1e6),
        "memory_bandwidth_gb_per_s": pos(unit=GB, to="memory_bandwidth_bytes_per_s", high=1e7),
        "peak_tflops": Field("map", True, unit=TERA, to="peak_flops", above=True, high=1e7,
                             choices=spec.PEAK_KEYS),
        "fp16_accumulate_tflops": pos(False, TERA, "fp16_accumulate_flops", high=1e7),
        "exp_tera_per_s": pos(False, TERA, "exp_per_s", high=1e6),
        "scale_up_kind": text(choices=("nvlink", "infinity-fabric", "pcie", "hccs", "ethernet")),
        "scale_up_fabric": text(),
        "scale_up_gb_per_s": pos(unit=GB, to="scale_up_bytes_per_s", high=1e7),
        "host_interface": text(),
        "tdp_watts": pos(high=1e6),
        "launch_date": date(),
        "launch_price_usd": num(False),
        "price_source": text(False),
        "price_date": text(False),
        "software": text(),
        "consumer": Field("bool"),
        "fp8_gemm_any_layout": Field("bool"),  # FP8 GEMMs take non-TN layouts (no transpose)
        "export_cn": text(choices=("allowed", "licensed", "license-required", "prohibited",
                                   "china-only")),
        "export_cn_rule": text(),
        "export_cn_date": date(),
    },
    "fabric": {
        **COMMON,
        "kind": text(choices=("scale-up", "scale-out", "host")),
        "gb_per_s_per_direction": pos(unit=GB, to="bytes_per_s_per_direction", high=1e7),
        "latency_us": num(unit=1e-6, to="latency_s", high=1e9),
        "moe_dispatch_logical_share": pos(False, high=4.0),  # a rate ratio: > 0
    },
    "system": {
        **COMMON,
        "kind": text(choices=("server", "workstation", "rack")),
        "accelerator": text(),
        "gpus_per_node": whole(low=1, high=100_000),
        "scale_up_domain": whole(low=1, high=1_000_000),
        "scale_out_fabric": text(False),
        "nics_per_node": whole(False, high=100_000),
        "cpu": text(False),
        "ram_gib": num(False, GiB, "ram_bytes", high=1e9),
        "storage_tb": num(False, TB, "storage_bytes", high=1e9),
        "max_power_watts": pos(high=1e9),
        "price_usd": num(False),
        "price_source": text(False),
        "price_date": text(False),
    },
    "pod": {
        **COMMON,
        "system": text(),
        "nodes": whole(low=1, high=1_000_000),
    },
    "offer": {
        **{k: f for k, f in COMMON.items() if k != "name"},
        "cloud": text(),
        "instance_type": text(),
        "accelerator": text(),
        "count": whole(low=1, high=100_000),
        "region": text(),
        "usd_per_hour": Field("map", True, unit=1.0, choices=spec.PRICING),
        "capacity_block_usd_per_hour": num(False),
        # the spot spread the median in usd_per_hour["spot"] was taken over (zones x dates),
        # per instance-hour, and how many observations it rests on (`gpuplan prices import`)
        "spot_usd_per_hour_min": num(False),
        "spot_usd_per_hour_max": num(False),
        "spot_observations": whole(False, low=1),
        # 0 = no published inter-instance fabric (single-box offers, max_instances = 1)
        "network_gbit_per_s": num(unit=GB / 8, to="network_bytes_per_s", high=1e9),
        "max_instances": whole(False, high=10_000_000),
    },
    "model": {
        **COMMON,
        "layers": whole(low=1, high=10_000),
        "hidden": whole(low=1, high=1_048_576),
        "heads": whole(low=1, high=65_536),
        "kv_heads": whole(low=1, high=65_536),
        "ffn": whole(low=1, high=10_000_000),
        "vocab": whole(low=1, high=100_000_000),
        "mlp": text(choices=spec.MLPS),
        "tied_embeddings": Field("bool"),
        "head_dim": whole(False, high=65_536),
        "experts": whole(False, high=65_536),
        "experts_per_token": whole(False, high=65_536),
        "moe_ffn": whole(False, high=10_000_000),
        "shared_experts": whole(False, high=65_536),
        "dense_layers": whole(False, high=10_000),
        "max_seq_len": whole(False, low=1, high=100_000_000),
        "q_lora_rank": whole(False, high=1_048_576),
        "kv_lora_rank": whole(False, high=1_048_576),
        "rope_head_dim": whole(False, high=65_536),
        "v_head_dim": whole(False, high=65_536),
        "params_published_b": pos(False, 1e9),
    },
}

# [site.NAME]: every entry has these fields; the range of `value` depends on the name.
SITE_FIELDS: dict[str, Field] = {
    "value": num(),
    "unit": text(),
    "source": text(),
    "as_of": date(),
    "notes": text(False),
}
# name -> range of its value (the names the code reads; an overlay may not add others)
SITE_VALUES: dict[str, Field] = {
    "electricity_usd_per_kwh": num(),
    "pue": num(low=1.0, high=10.0),
    "colocation_usd_per_kw_month": num(),
    "maintenance_fraction_per_year": fraction(),
    "depreciation_years": pos(high=100.0),
    "network_usd_per_gpu": num(),
    "storage_usd_per_gpu": num(),
    "install_fraction": fraction(),
    "staff_usd_per_gpu_year": num(),
    "residual_value_fraction": fraction(),
    "gpu_load_factor": fraction(above=True),
    "grid_kg_co2e_per_kwh": num(high=100.0),
    "spot_interruptions_per_hour": num(high=3600.0),
    "gpu_mtbf_hours": pos(),
    "checkpoint_bytes_per_s_per_node": pos(),
    "restart_s": num(),
    "runtime_overhead_gib": num(high=1e6),
    "allocator_fragmentation_caching": fraction(),
    "allocator_fragmentation_expandable": fraction(),
    "reserved_reuse_utilization": fraction(),
    "utilization": fraction(above=True),
    "usd_per_cny": pos(high=1e6),  # converts China-region CNY list prices (offers.toml)
    "usd_per_cny_2023_06": pos(high=1e6),  # the same, for prices dated June 2023
}

# [efficiency.FAMILY]: a row gives every model constant or names a parent with `inherits`;
# source, as_of, notes and guess describe the row itself and are never inherited.
EFFICIENCY: dict[str, Field] = {
    "inherits": text(False, inherited=False),
    "matmul_max": fraction(above=True),
    "half_dim": num(high=1e9),
    "fp8_ratio": pos(False, high=4.0),  # times the stack's; absent = 1
    "memory_fraction": fraction(above=True),
    "layer_overhead_us": num(high=1e9),
    "attention_ratio": pos(high=4.0),
    "fa2_attention_ratio": pos(False, high=4.0),  # under an 'fa2' stack (stated); absent = 1
    "attention_scale": pos(False, high=4.0),  # times attention_ratio (stated); absent = 1
    "tp_overlap": fraction(),
    "guess": Field("bool", True, inherited=False),
    "source": text(inherited=False),
    "as_of": date(inherited=False),
    "notes": text(False, inherited=False),
}

# [stack.NAME] (efficiency.toml): what a training software stack changes, pooled over families
# (docs/calibration.md). matmul_scale multiplies the family's matmul_max; fp8_ratio is the
# stack's FP8 GEMM efficiency relative to BF16 (casts, amax and transposes included);
# fitted_families lists the families with a fit run of this stack (or of the stack it
# inherits); a (family, stack) pair outside it is a guess. `inherits` as for efficiency rows.
STACK: dict[str, Field] = {
    "inherits": text(False, inherited=False),
    "matmul_scale": pos(high=4.0),
    "fp8_ratio": pos(high=4.0),
    "attention_kernel": text(False, choices=("fused", "fa2")),  # stated; absent = fused
    # stated (docs/calibration.md, "PyTorch-native FP8"): how the stack's FP8 casts are counted
    # ("folded" into fp8_ratio, the default; "tensorwise": torchao's bytes, counted apart) and
    # whether its TP all-gathers run in float8 under FP8 (absent = false)
    "fp8_cast": text(False, choices=("folded", "tensorwise")),
    "fp8_tp_gather": Field("bool", False),
    # stated (docs/calibration.md, "Blocking tensor-parallel collectives"): whether the stack's
    # TP collectives can hide behind compute ("overlapped", the default: the family's
    # tp_overlap) or block it ("blocking": PyTorch DTensor TP without async TP, none hidden)
    "tp_collectives": text(False, choices=("overlapped", "blocking")),
    "fitted_families": Field("texts", False, inherited=False),
    "guess": Field("bool", True, inherited=False),
    "source": text(inherited=False),
    "as_of": date(inherited=False),
    "notes": text(False, inherited=False),
}

# [residuals.GROUP] (residuals.toml, written by `gpuplan validate --calibrate --residuals`):
# quantiles of actual / predicted time of the runs of one (family, stack) group under
# leave-one-source-out cross-validation; GROUP 'pooled' holds every run.
RESIDUALS: dict[str, Field] = {
    "family": text(),
    "stack": text(),
    "runs": whole(low=1),
    "p10": pos(high=100.0),
    "p50": pos(high=100.0),
    "p90": pos(high=100.0),
    "source": text(),
    "as_of": date(),
}

# [scenarios.NAME]: presets for `plan --scenario` and `tco --scenario` (see scenarios.toml).
SCENARIO: dict[str, Field] = {
    "title": text(),
    "article_claim": text(),
    "article_where": text(False),
    "model": text(False),
    "tokens": Field("count", above=True),
    "budget_usd": pos(False),
    "deadline_days": pos(False, high=1e6),
    "gpu": Field("text_or_texts"),
    "system": text(False),
    "nodes": whole(False, low=1, high=1_000_000),
    "max_gpus": whole(False, low=1, high=100_000_000),
    "price": pos(False),
    "price_source": text(False),
    "years": pos(False, high=100.0),
    "utilization": fraction(False, above=True),
    "acquisition": text(False, choices=("own", "cloud", "either", "any")),
    "vendor": text(False, choices=(*spec.VENDORS, "")),
    "export_region": text(False, choices=("", "cn")),
    "precision": text(False, choices=spec.PRECISIONS),
    "mfu": fraction(False, above=True),
    "mfu_source": text(False),
    "notes": text(False),
}

SPREAD_KEYS = ("spot_usd_per_hour_min", "spot_usd_per_hour_max", "spot_observations")


def _spread_complete(row: dict[str, Any]) -> bool:
    """All three spread fields or none; a spread needs the spot price it surrounds."""
    given = sum(k in row for k in SPREAD_KEYS)
    return given == 0 or (given == 3 and "spot" in row.get("usd_per_hour", {}))


# Rules between fields of one row (after each field is checked): table, test, what to fix.
RULES: tuple[tuple[str, Callable[[dict[str, Any]], bool], str], ...] = (
    ("accelerator", lambda r: bool(r["peak_tflops"]),
     "peak_tflops needs at least one precision, e.g. { bf16 = ... }"),
    ("model", lambda r: r.get("dense_layers", 0) <= r["layers"],
     "dense_layers must be at most layers"),
    ("offer", lambda r: r["network_gbit_per_s"] > 0 or r.get("max_instances") == 1,
     "network_gbit_per_s = 0 (no inter-instance fabric) needs max_instances = 1"),
    ("offer", lambda r: _spread_complete(r),
     "spot_usd_per_hour_min, spot_usd_per_hour_max and spot_observations go together, with a "
     "spot price in usd_per_hour"),
    ("offer", lambda r: "spot_usd_per_hour_min" not in r or (
        r["spot_usd_per_hour_min"] <= r["usd_per_hour"]["spot"] <= r["spot_usd_per_hour_max"]),
     "the spot price must lie within [spot_usd_per_hour_min, spot_usd_per_hour_max]"),
)

# [memory.STACK]: the buffers a software stack keeps (data/memory.toml; names from spec.STACKS).
STACK_MEMORY: dict[str, Field] = {
    "grad_reduce_dtype": text(choices=("fp32", "bf16")),
    "main_grad_always": Field("bool", True),
    "reduce_copy": Field("bool", True),
    "fp8_weight_bytes_per_param": num(high=16.0),
    "moe_token_buffers": num(high=16.0),
    "loss_fp32_copies": num(high=16.0),
    "pp_unsharded_step": Field("bool", False),
    "fp8_primary_weights": Field("bool", False),
    "fp8_input_bytes": num(False, high=4.0),
    "swiglu_saved_ffn": num(False, high=8.0),
    "loss_chunks": num(False, low=1.0, high=1024.0),
    "adapter_dtype": text(False, choices=("fp32", "bf16")),
    "adapter_input": text(False, choices=("autocast", "adapter", "shared")),
    "source": text(),
    "as_of": date(),
    "notes": text(False),
}

NAMED_TABLES: dict[str, dict[str, Field]] = {
    "site": SITE_FIELDS, "efficiency": EFFICIENCY, "scenarios": SCENARIO, "stack": STACK,
    "residuals": RESIDUALS, "memory": STACK_MEMORY}
SCHEMAS: dict[str, dict[str, Field]] = {**ROW_TABLES, **NAMED_TABLES}

# which file holds which table
FILES = {
    "accelerator": "accelerators.toml",
    "fabric": "fabrics.toml",
    "system": "systems.toml",
    "pod": "systems.toml",
    "offer": "offers.toml",
    "model": "models.toml",
    "site": "site.toml",
    "efficiency": "efficiency.toml",
    "scenarios": "scenarios.toml",
    "stack": "efficiency.toml",
    "residuals": "residuals.toml",
    "memory": "memory.toml",
}
LIST_CMD = {
    "accelerator": "gpuplan catalog gpus",
    "fabric": "gpuplan catalog fabrics",
    "system": "gpuplan catalog systems",
    "pod": "gpuplan catalog systems",
    "offer": "gpuplan catalog offers",
    "model": "gpuplan models",
    "site": "gpuplan catalog site",
    "efficiency": "data/efficiency.toml",
    "scenarios": "gpuplan plan --help",
    "stack": "data/efficiency.toml",
    "residuals": "data/residuals.toml",
    "memory": "data/memory.toml",
}
KIND_WORD = {"accelerator": "GPU", "model": "model", "offer": "offer", "system": "system",
             "pod": "pod", "fabric": "fabric", "site": "site value",
             "efficiency": "efficiency family", "scenarios": "scenario",
             "stack": "software stack", "residuals": "residual group",
             "memory": "software stack"}

DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def normalize(name: str) -> str:
    """'H100 SXM5 80GB' -> 'h100-sxm5-80gb': the form every id and alias is compared in."""
    return re.sub(r"[\s_/]+", "-", name.strip().lower())


def table_key(kind: str, name: str) -> str:
    """The stored key of a named-table entry: site names keep underscores, the rest dashes."""
    key = normalize(name)
    return key.replace("-", "_") if kind == "site" else key
