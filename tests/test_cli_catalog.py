"""`gpuplan catalog ...`, `gpuplan models` from the command line (issue #2)."""

from __future__ import annotations

import json
import subprocess
import sys

REQUIRED_GPUS = ["a100-40gb", "a100-80gb", "a800", "h100-sxm", "h100-pcie", "h800", "h20", "h200",
                 "b200", "l40s", "rtx-4090", "mi210", "mi250x", "mi300x", "gaudi3"]
REQUIRED_MODELS = ["gpt3-175b", "bert-large", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
                   "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3"]


def test_gpus_json_contract(run_json):
    gpus = run_json("catalog", "gpus")
    assert len(gpus) >= 25
    for g in gpus:
        for key in ("id", "name", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops",
                    "scale_up_bytes_per_s", "tdp_watts", "source", "as_of"):
            assert key in g, (g["id"], key)
        assert set(g["peak_flops"]) <= {"fp32", "tf32", "fp16", "bf16", "fp8", "fp4"}
        assert g["source"].strip()


def test_offers_json_contract(run_json):
    offers = run_json("catalog", "offers")
    assert offers
    for o in offers:
        for key in ("id", "cloud", "instance_type", "accelerator", "count", "region",
                    "usd_per_hour", "source", "as_of"):
            assert key in o
        assert set(o["usd_per_hour"]) <= {"on-demand", "spot", "reserved-1y", "reserved-3y",
                                          "savings-plan-1y", "savings-plan-3y"}


def test_required_names_resolve(run_cli):
    for name in REQUIRED_GPUS + ["dgx-a100", "dgx-h100", "dgx-station-a100"] + REQUIRED_MODELS:
        code, out, err = run_cli("catalog", "show", name, "--json")
        assert code == 0, (name, err)
        assert json.loads(out)["kind"] in ("accelerator", "system", "model")


def test_show_h100_dense_figures(run_cli):
    code, out, _ = run_cli("catalog", "show", "h100-sxm")
    assert code == 0
    assert "bf16 989 TFLOPS" in out and "1979 TFLOPS" not in out.split("fp8")[0]
    assert "3,350.0 GB/s" in out
    assert "nvlink4" in out and "900 GB/s" in out


def test_show_typo_suggests(run_cli):
    code, out, err = run_cli("catalog", "show", "h10")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "did you mean" in err and "h100" in err


def test_every_list_command_has_text_and_json(run_cli):
    for what in ("gpus", "systems", "fabrics", "offers", "site"):
        code, out, err = run_cli("catalog", what)
        assert code == 0 and out.strip(), (what, err)
        code, out, err = run_cli("catalog", what, "--json")
        assert code == 0 and isinstance(json.loads(out), list)
    code, out, _ = run_cli("models")
    assert code == 0 and "llama3-70b" in out


def test_validate_builtin_and_bad_overlay(run_cli, tmp_path):
    code, out, _ = run_cli("catalog", "validate")
    assert code == 0 and "valid" in out
    bad = tmp_path / "bad.toml"
    bad.write_text('[[offer]]\nid = "nope"\ncloud = "aws"\n')
    code, out, err = run_cli("catalog", "validate", str(bad))
    assert code == 2 and "missing field" in err and "Traceback" not in err


def test_console_script_help_and_json_pipe():
    """The installed entry point runs, and --json output is valid for json.tool."""
    out = subprocess.run([sys.executable, "-m", "gpuplan", "catalog", "gpus", "--json"],
                         capture_output=True, text=True, check=True).stdout
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=out, capture_output=True,
                          text=True)
    assert tool.returncode == 0
    helptext = subprocess.run([sys.executable, "-m", "gpuplan", "--help"], capture_output=True,
                              text=True, check=True).stdout
    assert "catalog" in helptext and "examples" in helptext


def test_usage_errors_are_one_line(run_cli):
    for argv in (["frob"], ["catalog", "gpuz"], ["estimate", "--gpu"],
                 ["estimate", "--model", "llama3-8b", "--gpu", "h100", "--zero", "5"],
                 ["plan", "--top", "0"]):
        code, out, err = run_cli(*argv)
        assert code == 2 and out == "", argv
        assert err.count("\n") == 1 and "error:" in err and "--help" in err, (argv, err)


def test_bare_command_shows_help(run_cli):
    code, out, _ = run_cli()
    assert code == 0 and "plan" in out and "estimate" in out


def test_catalog_gpus_text_golden(run_cli):
    """Exact text of `gpuplan catalog gpus`; regenerate with GPUPLAN_REGEN_GOLDEN=1 after an
    intended catalog change and review the diff."""
    from conftest import golden

    code, out, err = run_cli("catalog", "gpus")
    assert code == 0 and err == ""
    golden("catalog_gpus.txt", out)


def test_show_a_site_value_by_its_underscored_name(run_cli):
    for name in ("electricity_usd_per_kwh", "electricity-usd-per-kwh", "PUE"):
        code, out, err = run_cli("catalog", "show", name, "--json")
        assert code == 0, (name, err)
        assert json.loads(out)["kind"] == "site"
    code, out, _ = run_cli("catalog", "show", "electricity_usd_per_kwh")
    assert out.startswith("site electricity_usd_per_kwh:") and "USD/kWh" in out


def test_show_efficiency_and_scenario_rows(run_cli):
    code, out, _ = run_cli("catalog", "show", "default", "--json")
    rec = json.loads(out)
    assert code == 0 and rec["kind"] == "efficiency" and rec["guess"] is True
    code, out, _ = run_cli("catalog", "show", "gpt3-one-server", "--json")
    assert code == 0 and json.loads(out)["kind"] == "scenarios"
    assert json.loads(out)["overlay_values"] == {}


def test_validate_counts_every_table(run_json):
    counts = run_json("catalog", "validate")["counts"]
    assert counts["efficiency"] >= 10 and counts["scenarios"] >= 4
