"""The hardware catalog data: accelerators, fabrics, systems and pods (#2).

Tolerances, stated once and used below:
- MEM_RTOL 10%: our memory_gib is what the device reports (GiB), the reference lists the vendor's
  "GB"; they differ by the nvidia-smi reserve (0.4% on H100), the ECC reserve on GDDR6 data-center
  cards (1/16 = 6.25%, e.g. L40S 44.99 vs 48) and vendor rounding (B300 268.6 vs 270); GB300
  277.55 GiB reported vs the reference's 288 GB physical HBM is 3.6%.
- RATE_RTOL 2%: TFLOPS and GB/s are copied from the same datasheets; 2% absorbs rounding of
  derived dense figures (989.4 vs 989.5, 51.2 vs 51) and nothing more.
- SYSTEM_MEM_RTOL 1%: a system's total GPU memory from its datasheet ("640 GB") against
  gpus_per_node x our per-GPU figure; allows the device reserve (<= 0.6% for these parts).
"""

from __future__ import annotations

import math
from datetime import date

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.units import GB, GiB

MEM_RTOL = 0.10
RATE_RTOL = 0.02
SYSTEM_MEM_RTOL = 0.01

REQUIRED_IDS = [
    "a100-40gb", "a100-80gb", "a800", "h100-sxm", "h100-pcie", "h800", "h20", "h200", "b200",
    "l40s", "rtx-4090", "mi210", "mi250x", "mi300x", "gaudi3",
    "v100-sxm2-32gb", "a100-pcie-80gb", "h100-nvl", "b300", "gb200", "l4", "a10g",
    "rtx-4090d", "rtx-5090", "rtx-6000-ada", "l20", "mi325x", "mi355x", "gaudi2",
    "ascend-910b", "ascend-910c", "gb300",
]
ALIASES = {
    "a100": "a100-40gb", "A100": "a100-40gb", "h100": "h100-sxm", "H100": "h100-sxm",
    "H100 SXM5 80GB": "h100-sxm", "H100-80GB": "h100-sxm", "nvidia-h100-80gb-hbm3": "h100-sxm",
    "A100-80GB": "a100-80gb", "MI300X": "mi300x", "RTX4090": "rtx-4090", "4090": "rtx-4090",
    "H200": "h200", "B200": "b200", "L40S": "l40s", "L4": "l4", "A10G": "a10g",
    "H100-MEGA": "h100-sxm", "V100-32GB": "v100-sxm2-32gb", "RTX5090": "rtx-5090",
    "RTX6000-Ada": "rtx-6000-ada", "GB200": "gb200", "B300": "b300", "GB300": "gb300",
    "gb300-nvl72": "gb300",
    "H100-NVLINK": "h100-sxm",  # Fluidstack's 8x 80 GB HGX, not the 94 GB H100 NVL
}
REQUIRED_FABRICS = [
    "nvlink2", "nvlink3", "nvlink4", "nvlink5", "infinity-fabric-3", "infinity-fabric-4", "hccs",
    "gaudi-roce", "pcie3", "pcie4", "pcie5", "pcie6", "ib-hdr", "ib-ndr", "ib-xdr", "roce-100g",
    "roce-200g", "roce-400g", "roce-800g", "efa-v2", "efa-v3",
]
FAMILIES = {
    "v100", "a100", "h100", "h100-pcie", "h20", "h200", "b200", "gb200", "b300", "gb300", "ada",
    "l4", "a10g", "blackwell-consumer", "mi210", "mi250x", "mi300x", "mi325x", "mi355x", "gaudi2",
    "gaudi3", "ascend910b", "ascend910c",
}
SOFTWARE = {"CUDA", "ROCm", "SynapseAI", "CANN"}


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _valid_date(text: str) -> bool:
    parts = [int(p) for p in text.split("-")]
    try:
        date(parts[0], parts[1], parts[2] if len(parts) == 3 else 1)
    except (ValueError, IndexError):
        return False
    return 2010 <= parts[0] <= 2030


# --- coverage and provenance ---------------------------------------------------------------

def test_at_least_25_accelerators_and_required_ids(cat):
    assert len(cat.accelerators) >= 25
    missing = [i for i in REQUIRED_IDS if i not in cat.accelerators]
    assert not missing, missing


@pytest.mark.parametrize(("alias", "ident"), sorted(ALIASES.items()))
def test_alias_resolves(cat, alias, ident):
    assert cat.accelerator(alias).id == ident


def test_required_fabrics_present(cat):
    assert not [f for f in REQUIRED_FABRICS if f not in cat.fabrics]


def test_every_row_has_source_and_valid_dates(cat):
    rows = [*cat.accelerators.values(), *cat.fabrics.values(), *cat.systems.values(),
            *cat.pods.values()]
    bad = [r.id for r in rows if len(r.source.strip()) < 10 or not _valid_date(r.as_of)]
    assert not bad, bad
    for a in cat.accelerators.values():
        assert _valid_date(a.launch_date), a.id
        assert _valid_date(a.export_cn_date), a.id
        assert a.export_cn_rule.strip(), a.id
        if a.launch_price_usd is not None:
            assert a.price_source and a.price_date, a.id


def test_enumerated_fields(cat):
    for a in cat.accelerators.values():
        assert a.family in FAMILIES, (a.id, a.family)
        assert a.software in SOFTWARE, (a.id, a.software)
    assert {a.software for a in cat.accelerators.values() if a.vendor == "huawei"} == {"CANN"}
    assert {a.scale_up_kind for a in cat.accelerators.values() if a.vendor == "huawei"} == {"hccs"}


# --- anchored figures -----------------------------------------------------------------------

def test_h100_sxm_dense_bf16_bandwidth_and_nvlink(cat):
    """989 TFLOPS dense BF16 (not the 1,979 sparse headline), within 0.5% (989.4 rounds)."""
    h = cat.accelerator("h100-sxm")
    assert h.peak_flops["bf16"] == pytest.approx(989e12, rel=0.005)
    assert h.peak_flops["fp8"] == pytest.approx(1979e12, rel=0.005)
    assert h.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12, rel=1e-9)
    assert h.scale_up_fabric == "nvlink4"
    assert h.scale_up_bytes_per_s == pytest.approx(900 * GB, rel=1e-9)  # both directions
    assert h.scale_up_bytes_per_s_per_direction == pytest.approx(450 * GB, rel=1e-9)
    assert cat.fabric("nvlink4").bytes_per_s_per_direction == pytest.approx(450 * GB, rel=1e-9)


def test_gb300_per_gpu_figures_are_the_nvl72_rack_totals_over_72(cat):
    """GB300 NVL72 lists rack totals: FP4 1,080 PF dense, FP8 720 PF and BF16 360 PF sparse
    (dense = half), 576 TB/s HBM; per GPU = total / 72, exact to 1e-9. NVLink 5: 1.8 TB/s
    both directions per GPU."""
    g = cat.accelerator("gb300")
    assert g.peak_flops["fp4"] == pytest.approx(1080e15 / 72, rel=1e-9)
    assert g.peak_flops["fp8"] == pytest.approx(720e15 / 2 / 72, rel=1e-9)
    assert g.peak_flops["bf16"] == pytest.approx(360e15 / 2 / 72, rel=1e-9)
    assert g.memory_bandwidth_bytes_per_s == pytest.approx(576e12 / 72, rel=1e-9)
    assert g.scale_up_bytes_per_s == pytest.approx(1800 * GB, rel=1e-9)
    assert cat.systems["gb300-nvl72"].accelerator == "gb300"


def test_nvlink_generations_per_direction(cat):
    want = {"nvlink2": 150, "nvlink3": 300, "nvlink4": 450, "nvlink5": 900}
    for ident, gb in want.items():
        assert cat.fabrics[ident].bytes_per_s_per_direction == pytest.approx(gb * GB), ident


def test_pcie_and_network_port_rates(cat):
    """PCIe x16 doubles per generation; network ports are their Gb/s rate / 8."""
    for n, gen in enumerate(("pcie3", "pcie4", "pcie5", "pcie6")):
        assert cat.fabrics[gen].bytes_per_s_per_direction == pytest.approx(16 * GB * 2**n)
    gbit = {"ib-hdr": 200, "ib-ndr": 400, "ib-xdr": 800, "roce-100g": 100, "roce-200g": 200,
            "roce-400g": 400, "roce-800g": 800}
    for ident, g in gbit.items():
        assert cat.fabrics[ident].bytes_per_s_per_direction == pytest.approx(g * GB / 8), ident


def test_precisions_the_hardware_lacks(cat):
    for ident in ("a100-40gb", "a100-80gb", "a100-pcie-80gb", "a800", "mi250x", "mi210",
                  "v100-sxm2-32gb", "a10g", "ascend-910b", "ascend-910c"):
        assert "fp8" not in cat.accelerators[ident].peak_flops, ident
    v100 = cat.accelerators["v100-sxm2-32gb"].peak_flops
    assert "bf16" not in v100 and "tf32" not in v100
    assert "tf32" not in cat.accelerators["mi250x"].peak_flops


def test_mi250x_is_the_whole_module(cat):
    m = cat.accelerators["mi250x"]
    assert m.memory_bytes == pytest.approx(128 * GiB, rel=0.01)
    assert m.memory_bandwidth_bytes_per_s == pytest.approx(3.2768e12, rel=1e-6)
    assert m.peak_flops["bf16"] == pytest.approx(383e12, rel=1e-6)
    assert "2 GCD" in m.notes or "2 GCDs" in m.notes


# --- invariants ------------------------------------------------------------------------------

def test_tensor_precisions_are_ordered(cat):
    """On tensor-core parts: fp16 >= tf32 >= fp32; fp8 >= bf16; fp4 >= fp8 (never slower)."""
    for a in cat.accelerators.values():
        p = a.peak_flops
        assert p, a.id
        assert all(v > 0 and math.isfinite(v) for v in p.values()), a.id
        if "tf32" in p:
            assert p["fp16"] >= p["tf32"] >= p.get("fp32", 0.0), a.id
        if "fp8" in p:
            assert p["fp8"] >= p["bf16"], a.id
        if "fp4" in p:
            assert p["fp4"] >= p["fp8"], a.id


def test_geforce_fp16_is_half_the_fp16_accumulate_headline(cat):
    consumer = [a for a in cat.accelerators.values() if a.consumer]
    assert {a.id for a in consumer} >= {"rtx-4090", "rtx-4090d", "rtx-5090"}
    for a in consumer:
        assert a.fp16_accumulate_flops is not None, a.id
        assert a.peak_flops["fp16"] == pytest.approx(a.fp16_accumulate_flops / 2, rel=0.005)
        assert a.peak_flops["bf16"] == pytest.approx(a.peak_flops["fp16"], rel=1e-9)
    for a in cat.accelerators.values():
        if not a.consumer:
            assert a.fp16_accumulate_flops is None, a.id


def test_scale_up_links_are_consistent_with_their_fabric(cat):
    """A part's scale-up figure never exceeds its fabric generation's full rate (both ways);
    PCIe-only parts quote exactly their slot, both directions; host links are host fabrics."""
    for a in cat.accelerators.values():
        fab = cat.fabrics[a.scale_up_fabric]
        host = cat.fabrics[a.host_interface]
        assert host.kind == "host", a.id
        if a.scale_up_kind == "pcie":
            assert fab.kind == "host", a.id
            assert a.scale_up_bytes_per_s == pytest.approx(2 * fab.bytes_per_s_per_direction)
        else:
            assert fab.kind == "scale-up", a.id
            if a.scale_up_kind == "nvlink":
                assert a.scale_up_bytes_per_s <= 2 * fab.bytes_per_s_per_direction * 1.0001
    assert cat.accelerators["a800"].scale_up_bytes_per_s == pytest.approx(400 * GB)
    assert cat.accelerators["h800"].scale_up_bytes_per_s == pytest.approx(400 * GB)


def test_export_status_values(cat):
    status = {a.id: a.export_cn for a in cat.accelerators.values()}
    for ident in ("l20", "rtx-4090d", "ascend-910b", "ascend-910c"):
        assert status[ident] == "china-only", ident
    for ident in ("a100-80gb", "h100-sxm", "h800", "a800", "rtx-4090", "mi300x", "gb300"):
        assert status[ident] == "license-required", ident
    # licence required since 2025-04, and the US said in 2025-07 that licences are granted
    assert status["h20"] == "licensed"
    assert status["v100-sxm2-32gb"] == "allowed"
    assert cat.accelerators["h20"].export_cn_date >= "2025-04"


# --- systems and pods -----------------------------------------------------------------------

# datasheet total GPU memory per system, in the vendor's GB (binary-sized HBM)
SYSTEM_TOTAL_GB = {
    "dgx-a100": 640, "dgx-h100": 640, "dgx-h200": 1128, "dgx-b200": 1440,
    "dgx-station-a100": 320, "mi300x-8x": 1536, "gb200-nvl72": 13400, "frontier-node": 512,
}


def test_systems_reference_accelerators_and_shapes(cat):
    required = {"dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "hgx-h100", "dgx-station-a100",
                "mi300x-8x", "mi210-8x", "rtx-4090-8x", "gb200-nvl72", "hgx-h20", "l40s-8x",
                "atlas-800t-a2", "gaudi3-8x", "gb300-nvl72"}
    assert required <= set(cat.systems)
    for s in cat.systems.values():
        assert s.accelerator in cat.accelerators, s.id
        assert 1 <= s.scale_up_domain <= s.gpus_per_node, s.id
        assert s.gpus_per_node % s.scale_up_domain == 0, s.id
        if s.kind != "workstation":  # the DGX Station runs its A100s below 400 W (1.5 kW box)
            gpu_watts = s.gpus_per_node * cat.accelerators[s.accelerator].tdp_watts
            assert s.max_power_watts >= gpu_watts, s.id
        if s.scale_out_fabric:
            assert cat.fabrics[s.scale_out_fabric].kind == "scale-out", s.id
            assert s.nics_per_node >= 1, s.id
    for ident in ("gb200-nvl72", "gb300-nvl72"):
        nvl = cat.systems[ident]
        assert (nvl.kind, nvl.gpus_per_node, nvl.scale_up_domain) == ("rack", 72, 72), ident
    assert cat.systems["dgx-station-a100"].gpus_per_node == 4


@pytest.mark.parametrize(("ident", "total_gb"), sorted(SYSTEM_TOTAL_GB.items()))
def test_system_memory_matches_datasheet_total(cat, ident, total_gb):
    s = cat.systems[ident]
    ours = s.gpus_per_node * cat.accelerators[s.accelerator].memory_bytes
    assert ours == pytest.approx(total_gb * GiB, rel=SYSTEM_MEM_RTOL)


def test_pods(cat):
    gpus = {p.id: p.nodes * cat.systems[p.system].gpus_per_node for p in cat.pods.values()}
    assert gpus["dgx-h100-superpod-su"] == 256
    assert gpus["dgx-h100-superpod-512"] == 512
    assert gpus["dgx-a100-superpod-su"] == 160
    assert gpus["dgx-a100-superpod"] == 1120
    assert gpus["gb200-nvl72-superpod"] == 576
    # the README's correction: 64 DGX H100 = ~1.01 EFLOPS dense FP8 (not 1.28 PFLOPS); 1%
    fp8 = cat.accelerators["h100-sxm"].peak_flops["fp8"] * gpus["dgx-h100-superpod-512"]
    assert fp8 == pytest.approx(1.01e18, rel=0.01)


def test_system_purchase_prices_are_sourced(cat):
    """DGX A100 and DGX H100 carry a purchase price (TCO and buy-vs-rent need one); every priced
    system names its source and a valid date. Units guard: price per accelerator must lie within
    $1,000-$100,000 (a price typed in thousands of dollars, or per GPU, falls outside)."""
    for ident in ("dgx-a100", "dgx-h100"):
        assert cat.systems[ident].price_usd, ident
    priced = [s for s in cat.systems.values() if s.price_usd is not None]
    for s in priced:
        assert len(s.price_source.strip()) >= 10, s.id
        assert _valid_date(s.price_date), (s.id, s.price_date)
        assert 1e3 <= s.price_usd / s.gpus_per_node <= 1e5, (s.id, s.price_usd)
