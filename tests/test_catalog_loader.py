"""The catalog loader: overlays, validation of bad files, lookups with suggestions (issue #2)."""

from __future__ import annotations

import json
import math

import pytest

from gpuplan import catalog as catalog_mod
from gpuplan.catalog import load_catalog, normalize, validate_file
from gpuplan.errors import CatalogError, ConfigError, UnknownIdError
from gpuplan.units import GiB
from gpuplan.workload import model_from_hf_config, resolve_model

NEW_GPU = """
[[accelerator]]
id = "my-gpu"
name = "My GPU"
vendor = "nvidia"
architecture = "Test"
family = "h100"
form_factor = "PCIe"
memory_gib = 48
memory_bandwidth_gb_per_s = 1000
peak_tflops = { fp32 = 50, bf16 = 200 }
scale_up_kind = "pcie"
scale_up_fabric = "pcie4"
scale_up_gb_per_s = 64
host_interface = "pcie4"
tdp_watts = 300
launch_date = "2025-01-01"
software = "CUDA"
export_cn = "allowed"
export_cn_rule = "none"
export_cn_date = "2025-01-01"
source = "my own measurement"
as_of = "2026-11-30"
aliases = ["MyGPU 48GB"]
"""


def write(tmp_path, text, name="overlay.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_overlay_adds_a_gpu_in_code_units(tmp_path):
    cat = load_catalog([write(tmp_path, NEW_GPU)])
    gpu = cat.accelerator("mygpu 48gb")
    assert gpu.id == "my-gpu"
    assert gpu.memory_bytes == 48 * GiB
    assert gpu.peak_flops == {"fp32": 50e12, "bf16": 200e12}
    assert gpu.memory_bandwidth_bytes_per_s == 1000e9
    assert "fp8" not in gpu.peak_flops


def test_overlay_changes_one_field_of_an_existing_offer(tmp_path):
    base = load_catalog()
    offer = next(iter(base.offers.values()))
    text = f'[[offer]]\nid = "{offer.id}"\nusd_per_hour = {{ "on-demand" = 1.5 }}\n'
    cat = load_catalog([write(tmp_path, text)])
    # merged key by key: the other pricing modes are kept (issue #9)
    assert cat.offer(offer.id).usd_per_hour == {**offer.usd_per_hour, "on-demand": 1.5}
    assert cat.offer(offer.id).count == offer.count  # the rest is kept


def test_env_var_overlay(tmp_path, monkeypatch):
    monkeypatch.setenv(catalog_mod.ENV_VAR, write(tmp_path, NEW_GPU))
    assert load_catalog().accelerator("my-gpu").tdp_watts == 300


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace('tdp_watts = 300\n', ''), "missing field 'tdp_watts'"),
        (lambda t: t.replace("memory_gib = 48", "memory_gib = -48"), "finite number in (0, 1e+06]"),
        (lambda t: t.replace("memory_gib = 48", "memory_gib = nan"), "finite number in (0, 1e+06]"),
        (lambda t: t.replace("memory_gib = 48", "memory_gb = 48"),
         "unknown field 'memory_gb'; did you mean 'memory_gib'"),
        (lambda t: t.replace("bf16 = 200", "bf16_sparse = 400"), "unknown key 'bf16_sparse'"),
        (lambda t: t.replace("{ fp32 = 50, bf16 = 200 }", "{}"),
         "peak_tflops needs at least one precision"),
        (lambda t: t.replace('as_of = "2026-11-30"', 'as_of = "last year"'),
         "as_of must be a date"),
        (lambda t: t.replace('source = "my own measurement"', 'source = ""'),
         "source must not be empty"),
        (lambda t: t.replace('fabric = "pcie4"', 'fabric = "pcie44"'), "unknown fabric 'pcie44'"),
        (lambda t: t.replace('vendor = "nvidia"', 'vendor = "nvdia"'), "vendor must be one of"),
        (lambda t: t + "\n[[acelerator]]\nid='x'\n", "unknown table 'acelerator'"),
        (lambda t: t.replace("[[accelerator]]", "[[accelerator"), "not valid TOML"),
    ],
)
def test_malformed_overlay_gets_one_clear_line(tmp_path, edit, message):
    with pytest.raises(CatalogError) as err:
        validate_file(write(tmp_path, edit(NEW_GPU)))
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_negative_price_in_overlay(tmp_path):
    offer = next(iter(load_catalog().offers.values()))
    text = f'[[offer]]\nid = "{offer.id}"\nusd_per_hour = {{ "on-demand" = -3 }}\n'
    with pytest.raises(CatalogError, match="on-demand must be a finite number >= 0"):
        validate_file(write(tmp_path, text))


def test_unknown_pricing_mode_in_overlay(tmp_path):
    offer = next(iter(load_catalog().offers.values()))
    text = f'[[offer]]\nid = "{offer.id}"\nusd_per_hour = {{ "ondemand" = 3 }}\n'
    with pytest.raises(CatalogError, match="did you mean 'on-demand'"):
        validate_file(write(tmp_path, text))


def test_missing_overlay_file():
    with pytest.raises(CatalogError, match="does not exist"):
        validate_file("no/such/file.toml")


def test_unknown_gpu_suggests_the_closest_ids():
    cat = load_catalog()
    with pytest.raises(UnknownIdError) as err:
        cat.accelerator("h10")
    assert "h100" in str(err.value) and "did you mean" in str(err.value)
    with pytest.raises(UnknownIdError, match="gpuplan models"):
        cat.model("lama3-70b")


def test_normalize_vendor_spellings():
    assert normalize(" H100 SXM5_80GB ") == "h100-sxm5-80gb"


def test_hf_config_reader(tmp_path):
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "hidden_act": "silu", "max_position_embeddings": 8192, "tie_word_embeddings": False}
    d = tmp_path / "llama3"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = resolve_model(load_catalog(), str(d))
    preset = load_catalog().model("llama3-8b")
    assert m.mlp == "swiglu" and m.kv_heads == 8
    assert m.total_params() == preset.total_params()


def test_hf_config_missing_fields(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(ConfigError, match="lacks num_hidden_layers, num_attention_heads"):
        model_from_hf_config(p)
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        model_from_hf_config(p)


def test_presets_match_published_parameter_counts():
    """Our parameter count vs the authors' figure, within 2% (biases and small norms omitted,
    and published counts are rounded)."""
    import tomllib

    raw = tomllib.loads(catalog_mod.package_data_path("models.toml").read_text())
    cat = load_catalog()
    for row in raw["model"]:
        m = cat.model(row["id"])
        assert math.isclose(m.total_params(), row["params_published_b"] * 1e9, rel_tol=0.02), m.id


def test_mixtral_active_parameters():
    """Mixtral 8x7B: 12.9B active parameters per token (Jiang et al. 2024), within 2%."""
    m = load_catalog().model("mixtral-8x7b")
    assert math.isclose(m.active_params(), 12.9e9, rel_tol=0.02)
