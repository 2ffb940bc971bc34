"""The accelerator catalog against the independent reference table
../shared/data/gpu_specs_reference.csv (moved from tests/test_catalog_data.py, #16).

Tolerances: MEM_RTOL 10% (device-reported GiB vs the vendor's GB: nvidia-smi and ECC reserves,
vendor rounding), RATE_RTOL 2% (rounding of derived dense figures); see
tests/test_catalog_data.py's docstring for the detail.
"""

from __future__ import annotations

import csv
import math
import re

import pytest
from conftest import shared_data

from gpuplan.catalog import load_catalog
from gpuplan.units import GB, TERA, GiB

MEM_RTOL = 0.10
RATE_RTOL = 0.02


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# --- cross-check against the independent reference table ------------------------------------

REFERENCE_ID = {
    "v100-sxm2-32gb": "v100_sxm2_32gb", "a100-40gb": "a100_sxm4_40gb",
    "a100-80gb": "a100_sxm4_80gb", "a100-pcie-80gb": "a100_pcie_80gb", "a800": "a800_sxm4_80gb",
    "h100-sxm": "h100_sxm5_80gb", "h100-pcie": "h100_pcie_80gb", "h100-nvl": "h100_nvl_94gb",
    "h800": "h800_sxm5_80gb", "h20": "h20_96gb", "h200": "h200_sxm_141gb", "b200": "b200_hgx",
    "gb200": "gb200_per_gpu", "b300": "b300_hgx", "gb300": "gb300_per_gpu", "l40s": "l40s",
    "l4": "l4", "a10g": "a10g",
    "rtx-4090": "rtx_4090", "rtx-5090": "rtx_5090", "rtx-6000-ada": "rtx_6000_ada",
    "mi210": "mi210", "mi250x": "mi250x", "mi300x": "mi300x", "mi325x": "mi325x",
    "mi355x": "mi355x", "gaudi2": "gaudi2", "gaudi3": "gaudi3",
}
REF_COLUMN = {"fp32": "fp32_tflops", "tf32": "tf32_tflops_dense", "fp16": "fp16_tflops_dense",
              "bf16": "bf16_tflops_dense", "fp8": "fp8_tflops_dense", "fp4": "fp4_tflops_dense"}
# Deliberate disagreements, each with its reason (our figure is sourced in accelerators.toml).
EXCEPTIONS = {
    # HGX B200 spec table: FP32 600 TFLOPS per 8 GPUs = 75; the reference has a per-GPU 80.
    ("b200", "fp32"): "HGX B200 table gives 75 TFLOPS FP32 per GPU",
    # A10G: NVIDIA publishes no tensor figures; we derive them (reference leaves them blank).
    ("a10g", "tf32"): "derived from SM count and clocks; reference has no value",
    ("a10g", "fp16"): "derived from SM count and clocks; reference has no value",
    ("a10g", "bf16"): "derived from SM count and clocks; reference has no value",
    # HGX B300 table: TF32 18 PF sparse per 8 GPUs = 1,125 dense; the reference (Epoch) has 1,100.
    ("b300", "tf32"): "HGX B300 table 18 PF sparse / 8 / 2 = 1,125; reference 1,100 (2.3% apart)",
    # GeForce TF32 runs at the FP32 rate; the reference leaves the 5090's TF32 blank.
    ("rtx-5090", "tf32"): "whitepaper TF32 dense = FP32 rate on GeForce; reference blank",
}


def _reference_rows() -> dict[str, dict[str, str]]:
    path = shared_data("gpu_specs_reference.csv")
    with open(path, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _num(text: str) -> float | None:
    m = re.match(r"^\s*([0-9.]+)\s*$", text or "")
    return float(m.group(1)) if m else None


def test_cross_check_against_reference_table(cat):
    ref = _reference_rows()
    problems = []
    for ours_id, ref_id in REFERENCE_ID.items():
        a, r = cat.accelerators[ours_id], ref[ref_id]
        mem = _num(r["memory_gb"])
        if mem is not None and not math.isclose(a.memory_bytes / GiB, mem, rel_tol=MEM_RTOL):
            problems.append(f"{ours_id} memory {a.memory_bytes / GiB:.2f} GiB vs {mem} GB")
        bw = _num(r["memory_bw_gbs"])
        if bw is not None and not math.isclose(a.memory_bandwidth_bytes_per_s / GB, bw,
                                               rel_tol=RATE_RTOL):
            problems.append(f"{ours_id} bandwidth {a.memory_bandwidth_bytes_per_s / GB} vs {bw}")
        for prec, col in REF_COLUMN.items():
            if (ours_id, prec) in EXCEPTIONS:
                continue
            theirs = _num(r[col])
            mine = a.peak_flops.get(prec)
            if theirs is None and mine is None:
                continue
            if theirs is None or mine is None:
                problems.append(f"{ours_id} {prec}: ours {mine}, reference {theirs}")
            elif not math.isclose(mine / TERA, theirs, rel_tol=RATE_RTOL):
                problems.append(f"{ours_id} {prec}: ours {mine / TERA} vs reference {theirs}")
    assert not problems, "\n".join(problems)


def test_cross_check_exceptions_are_real_disagreements(cat):
    """Each listed exception must still disagree; otherwise it should be removed from the list."""
    ref = _reference_rows()
    for (ours_id, prec) in EXCEPTIONS:
        theirs = _num(ref[REFERENCE_ID[ours_id]][REF_COLUMN[prec]])
        mine = cat.accelerators[ours_id].peak_flops.get(prec)
        same = theirs is not None and mine is not None and math.isclose(
            mine / TERA, theirs, rel_tol=RATE_RTOL)
        assert not same, (ours_id, prec)
