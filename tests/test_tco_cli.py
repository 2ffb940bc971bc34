"""`gpuplan tco` on a tiny in-memory catalog overlay, checked against hand computations (#5).

The overlay below defines its own fabric, GPU, server, cloud offer and every site value, so no
figure here depends on the package catalog. Exact arithmetic: relative tolerance 1e-9 (the CLI
round-trips through JSON, which keeps 17 significant digits).
"""

from __future__ import annotations

import json
import math

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.report.fmt import usd

H_YEAR = 365.25 * 24
REL = 1e-9

SITE = {  # name -> value (the overlay writes each as [site.NAME])
    "electricity_usd_per_kwh": 0.10, "pue": 1.5, "colocation_usd_per_kw_month": 100,
    "maintenance_fraction_per_year": 0.05, "depreciation_years": 2, "network_usd_per_gpu": 1000,
    "storage_usd_per_gpu": 500, "install_fraction": 0.10, "staff_usd_per_gpu_year": 2000,
    "residual_value_fraction": 0.20, "gpu_load_factor": 0.8, "grid_kg_co2e_per_kwh": 0.4,
    "spot_interruptions_per_hour": 0.01, "gpu_mtbf_hours": 50_000,
    "checkpoint_bytes_per_s_per_node": 1e9, "restart_s": 600, "reserved_reuse_utilization": 0.5,
}

OVERLAY = """
[[fabric]]
id = "t-link"
name = "test scale-up link"
kind = "scale-up"
gb_per_s_per_direction = 100.0
latency_us = 2.0
source = "test"
as_of = "2026-01-01"

[[fabric]]
id = "t-host"
name = "test host link"
kind = "host"
gb_per_s_per_direction = 32.0
latency_us = 1.0
source = "test"
as_of = "2026-01-01"

[[fabric]]
id = "t-net"
name = "test scale-out network"
kind = "scale-out"
gb_per_s_per_direction = 50.0
latency_us = 5.0
source = "test"
as_of = "2026-01-01"

[[accelerator]]
id = "tgpu"
name = "Test GPU"
vendor = "nvidia"
architecture = "test"
family = "tgpu"
form_factor = "SXM"
memory_gib = 80.0
memory_bandwidth_gb_per_s = 2000.0
peak_tflops = { bf16 = 400.0 }
scale_up_kind = "nvlink"
scale_up_fabric = "t-link"
scale_up_gb_per_s = 200.0
host_interface = "t-host"
tdp_watts = 500.0
launch_date = "2026-01-01"
software = "CUDA"
export_cn = "allowed"
export_cn_rule = "test"
export_cn_date = "2026-01-01"
source = "test"
as_of = "2026-01-01"

[[system]]
id = "tbox"
name = "Test Box"
kind = "server"
accelerator = "tgpu"
gpus_per_node = 4
scale_up_domain = 4
scale_out_fabric = "t-net"
nics_per_node = 4
max_power_watts = 3000.0
price_usd = 100000.0
source = "test"
as_of = "2026-01-01"

[[system]]
id = "tbox-noprice"
name = "Test Box without a price"
kind = "server"
accelerator = "tgpu"
gpus_per_node = 4
scale_up_domain = 4
scale_out_fabric = "t-net"
nics_per_node = 4
max_power_watts = 3000.0
source = "test"
as_of = "2026-01-01"

[[system]]
id = "tstation"
name = "Test Station (one box, no scale-out NIC)"
kind = "workstation"
accelerator = "tgpu"
gpus_per_node = 4
scale_up_domain = 4
nics_per_node = 0
max_power_watts = 3000.0
price_usd = 100000.0
source = "test"
as_of = "2026-01-01"

[[system]]
id = "tbox-single"
name = "Test Box in a rack, not networked"
kind = "server"
accelerator = "tgpu"
gpus_per_node = 4
scale_up_domain = 4
max_power_watts = 3000.0
price_usd = 100000.0
source = "test"
as_of = "2026-01-01"

[[offer]]
id = "tcloud-4x"
cloud = "tcloud"
instance_type = "t.4x"
accelerator = "tgpu"
count = 4
region = "here"
usd_per_hour = { "on-demand" = 20.0, "spot" = 8.0, "reserved-1y" = 14.0, "reserved-3y" = 10.0 }
capacity_block_usd_per_hour = 16.0
network_gbit_per_s = 400.0
source = "test"
as_of = "2026-01-01"

[scenarios.tiny]
title = "a test scenario"
article_claim = "a test claim"
article_where = "nowhere"
model = "llama2-7b"
tokens = "1T"
budget_usd = 100000
deadline_days = 30
system = "tbox"
nodes = 2
utilization = 0.5
precision = "bf16"
mfu = 0.4
"""


@pytest.fixture
def overlay(tmp_path):
    text = OVERLAY + "".join(
        f'\n[site.{k}]\nvalue = {v}\nunit = "test"\nsource = "test"\nas_of = "2026-01-01"\n'
        for k, v in SITE.items())
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return str(path)


def tco(run_cli, overlay, *argv):
    code, out, err = run_cli("tco", *argv, "--catalog", overlay, "--json")
    assert code == 0, err
    return json.loads(out)


def hand_own(nodes=2, util=0.5, pue=1.5, kwh=0.10, years=2.0, network=1000, colocation=100):
    """The test_cost hand computation, for the overlay's box (host load = GPU load = 0.8)."""
    gpus = 4 * nodes
    servers, network, storage = nodes * 100_000, gpus * network, gpus * 500
    capex = (servers + network + storage) * 1.10
    it_w = gpus * 500 * 0.8 + nodes * (3000 - 4 * 500) * 0.8
    opex = {"power": it_w / 1000 * H_YEAR * pue * kwh, "colocation": nodes * 3.0 * colocation * 12,
            "maintenance": 0.05 * capex, "staff": gpus * 2000}
    total = capex + years * sum(opex.values()) - 0.20 * servers
    return {"capex": capex, "opex": opex, "total": total, "gpus": gpus,
            "per_used": total / (gpus * years * H_YEAR * util),
            "full": total / (gpus * years * H_YEAR), "it_w": it_w}


def test_tco_json_matches_hand_computation(run_cli, overlay):
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2", "--utilization", "0.5")
    h = hand_own()
    assert r["capex_usd"] == pytest.approx(h["capex"], rel=REL)
    assert set(r["opex_usd_per_year"]) == {"power", "colocation", "maintenance", "staff"}
    for k, v in h["opex"].items():
        assert r["opex_usd_per_year"][k] == pytest.approx(v, rel=REL), k
    assert r["usd_per_gpu_hour"] == pytest.approx(h["per_used"], rel=REL)
    # the per-GPU-hour lines add up to the total
    assert sum(r["usd_per_gpu_hour_lines"].values()) == pytest.approx(r["usd_per_gpu_hour"],
                                                                      rel=REL)
    assert r["co2e_kg_per_year"] == pytest.approx(h["it_w"] / 1000 * H_YEAR * 1.5 * 0.4, rel=REL)
    assert r["assumptions"]["years"]["from"].startswith("site depreciation_years")
    assert "cloud" not in r


def test_flags_override_site_values(run_cli, overlay):
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
            "--electricity", "0.2", "--pue", "1.2", "--years", "4")
    h = hand_own(pue=1.2, kwh=0.2, years=4.0)
    assert r["usd_per_gpu_hour"] == pytest.approx(h["per_used"], rel=REL)
    assert r["assumptions"]["pue"] == {"value": 1.2, "from": "flag"}


@pytest.mark.parametrize("flag, dest, value", [
    ("--colocation", "colocation", 0.0), ("--staff", "staff", 750.0),
    ("--residual", "residual", 0.0), ("--maintenance", "maintenance", 0.08),
    ("--load-factor", "load_factor", 0.6), ("--network", "network", 2500.0),
    ("--storage", "storage", 0.0), ("--install", "install", 0.02),
])
def test_each_site_flag_overrides_its_default(run_cli, overlay, flag, dest, value):
    """The flag's value is used (origin 'flag') and changes the cost as the hand formula says."""
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
            flag, str(value))
    assert r["assumptions"][dest] == {"value": value, "from": "flag"}
    gpus, nodes, servers = 8, 2, 200_000
    network = gpus * (value if dest == "network" else 1000)
    storage = gpus * (value if dest == "storage" else 500)
    install = value if dest == "install" else 0.10
    capex = (servers + network + storage) * (1 + install)
    lf = value if dest == "load_factor" else 0.8
    it_w = gpus * 500 * lf + nodes * 1000 * lf
    colo = nodes * 3.0 * (value if dest == "colocation" else 100) * 12
    maint = (value if dest == "maintenance" else 0.05) * capex
    staff = gpus * (value if dest == "staff" else 2000)
    opex = it_w / 1000 * H_YEAR * 1.5 * 0.10 + colo + maint + staff
    residual = (value if dest == "residual" else 0.20) * servers
    total = capex + 2 * opex - residual
    assert r["usd_per_gpu_hour"] == pytest.approx(total / (gpus * 2 * H_YEAR * 0.5), rel=REL)


def test_compare_cloud_rows_and_break_even_by_hand(run_cli, overlay):
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
            "--compare-cloud")
    h = hand_own()
    rows = {row["pricing"]: row for row in r["cloud"]}
    assert set(rows) == {"on-demand", "spot", "reserved-1y", "reserved-3y", "capacity-block"}
    for row in r["cloud"]:
        assert {"offer", "pricing", "usd_per_gpu_hour"} <= set(row)
        assert row["instances"] == 2  # 8 GPUs in 4-GPU instances
    # on-demand: $20 / 4 GPUs = $5 per GPU-hour; owning wins above F / 5
    assert rows["on-demand"]["usd_per_gpu_hour"] == pytest.approx(5.0, rel=REL)
    assert r["break_even_utilization"]["on-demand"] == pytest.approx(h["full"] / 5.0, rel=REL)
    # reserved-3y: $2.50 list; at 50% use with half the idle hours reused:
    # 2.5 (0.5 + 0.5 / 0.5) = $3.75 per used GPU-hour; u* = (F - 2.5 x 0.5) / (2.5 x 0.5)
    assert rows["reserved-3y"]["usd_per_gpu_hour"] == pytest.approx(3.75, rel=REL)
    u3 = (h["full"] - 1.25) / 1.25
    assert 0 < u3 <= 1  # the overlay's figures put this break-even inside (0, 1]
    assert r["break_even_utilization"]["reserved-3y"] == pytest.approx(u3, rel=REL)
    # spot without --model: the list price, no interruption overhead (goodput not applied)
    assert rows["spot"]["usd_per_gpu_hour"] == pytest.approx(2.0, rel=REL)
    assert rows["spot"]["goodput"] is None
    # months to pay back against on-demand: capex / (5 x 8 x 0.5 x 730.5 - opex / 12)
    m = h["capex"] / (5 * 8 * 0.5 * H_YEAR / 12 - sum(h["opex"].values()) / 12)
    assert r["break_even_months"]["on-demand"] == pytest.approx(m, rel=REL)


def test_spot_with_model_applies_goodput(run_cli, overlay):
    """llama2-7b checkpoint (params x 14 B) over 2 instances at 1 GB/s each, 0.01 interruptions
    per instance-hour, restart 600 s: spot per used hour = $2 / goodput (Young-Daly)."""
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
            "--compare-cloud", "--pricing", "spot", "--model", "llama2-7b")
    (row,) = r["cloud"]
    from gpuplan.catalog import load_catalog

    params = load_catalog().model("llama2-7b").total_params()
    delta = params * 14 / (2 * 1e9)
    lam = 2 * 0.01 / 3600
    root = math.sqrt(delta * lam / 2)
    g = (1 - lam * 600 - root) / (1 + root)
    assert row["goodput"] == pytest.approx(g, rel=REL)
    assert row["usd_per_gpu_hour"] == pytest.approx(2.0 / g, rel=REL)


@pytest.mark.parametrize("system, nodes, network, colocation, why", [
    ("tstation", 1, 0, 0, "single box"),  # a workstation: one box, in an office
    ("tbox-single", 1, 0, 100, "single box"),  # one box in a colocated rack: no network
    ("tbox", 1, 0, 100, "one node"),  # one node of a networked server: nothing to cable to
    ("tbox", 2, 1000, 100, "site "),  # two nodes: the scale-out network and colocation
])
def test_single_box_buys_no_network_and_a_workstation_no_colocation(run_cli, overlay, system,
                                                                    nodes, network, colocation,
                                                                    why):
    """Issue 14: a system with no scale-out NIC and no scale-out fabric is one box, and one node
    of any server is cabled to nothing; their TCO has no scale-out network, and a workstation no
    colocation, unless the user asks for them."""
    r = tco(run_cli, overlay, "--system", system, "--nodes", str(nodes), "--utilization", "0.5")
    h = hand_own(nodes=nodes, network=network, colocation=colocation)
    assert r["capex_usd_lines"]["network"] == 4 * nodes * network
    assert r["opex_usd_per_year"]["colocation"] == pytest.approx(h["opex"]["colocation"], rel=REL)
    assert r["usd_per_gpu_hour"] == pytest.approx(h["per_used"], rel=REL)
    a = r["assumptions"]
    assert a["network"]["value"] == network and a["colocation"]["value"] == colocation
    assert a["network"]["from"].startswith(why)
    assert a["colocation"]["from"].startswith("workstation" if colocation == 0 else "site ")


def test_a_single_box_charges_network_and_colocation_when_asked(run_cli, overlay):
    r = tco(run_cli, overlay, "--system", "tstation", "--nodes", "1", "--utilization", "0.5",
            "--network", "1000", "--colocation", "100")
    assert r["usd_per_gpu_hour"] == pytest.approx(hand_own(nodes=1)["per_used"], rel=REL)
    assert r["assumptions"]["network"] == {"value": 1000, "from": "flag"}
    assert r["assumptions"]["colocation"] == {"value": 100, "from": "flag"}


def test_estimate_own_prices_a_single_box_like_tco(run_cli, run_json, overlay):
    """One owned-cost path: `estimate --pricing own` charges the station what `tco` does."""
    t = tco(run_cli, overlay, "--system", "tstation", "--nodes", "1", "--utilization", "0.5")
    e = run_json("estimate", "--model", "llama2-7b", "--gpu", "tgpu", "--gpus", "4",
                 "--system", "tstation", "--pricing", "own", "--tokens", "1B",
                 "--utilization", "0.5", "--catalog", overlay)
    assert e["usd_per_gpu_hour"] == pytest.approx(t["usd_per_gpu_hour"], rel=REL)


def test_text_output_is_a_readable_table(run_cli, overlay):
    code, out, err = run_cli("tco", "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
                             "--compare-cloud", "--catalog", overlay)
    assert code == 0, err
    for word in ("capex", "per year", "per used GPU-hour", "depreciation", "power",
                 "colocation", "maintenance", "staff", "tcloud-4x", "reserved-3y",
                 "own wins above", "assumption"):
        assert word in out, word
    h = hand_own()
    assert usd(h["per_used"]) in out  # the report's one money formatter


def test_scenario_prints_assumptions_and_answer(run_cli, overlay):
    """The scenario's job runs through the plan's estimate path (no 6ND here: see
    test_agreement.py for plan == tco and the 6ND cross-check)."""
    r = tco(run_cli, overlay, "--scenario", "tiny")
    ans = r["scenario"]["answer"]
    assert r["system"] == "tbox" and r["nodes"] == 2
    assert ans["feasible"] is True and ans["reason"] is None
    assert ans["run"]["gpus"] == 8 and ans["run"]["pricing"] == "own"
    assert ans["wall_days"] == pytest.approx(ans["useful_days"] / ans["goodput"], rel=REL)
    assert ans["meets_deadline"] is False  # hundreds of days on 8 GPUs, not 30
    assert ans["cash_up_front_over_budget_usd"] == pytest.approx(hand_own()["capex"] - 1e5,
                                                                 rel=REL)
    # the owned run costs its GPU-hours at the owned cost per used GPU-hour
    assert ans["own_job_cost_usd"] == pytest.approx(ans["gpu_hours"] * hand_own()["per_used"],
                                                    rel=REL)
    code, out, _ = run_cli("tco", "--scenario", "tiny", "--catalog", overlay)
    assert code == 0 and "a test claim" in out and "missed" in out and "over budget" in out
    assert f"owned {usd(ans['own_job_cost_usd'])} of the cluster's cost " \
           f"({usd(hand_own()['capex'])} up front)" in out


@pytest.mark.parametrize("argv, message", [
    (["--system", "tbox", "--utilization", "1.5"],
     "--utilization must be a fraction between 0 and 1, got 1.5"),
    (["--system", "tbox", "--utilization", "0"], "--utilization must be more than 0"),
    (["--system", "tbox", "--utilization", "0.5", "--nodes", "0"], "--nodes must be more than 0"),
    (["--system", "tbox", "--utilization", "0.5", "--electricity", "-0.1"],
     "--electricity must be a number >= 0, got -0.1"),
    (["--system", "tbox", "--utilization", "0.5", "--price", "-5"],
     "--price must be a number >= 0, got -5"),
    (["--system", "tbox", "--utilization", "0.5", "--pue", "0.8"], "--pue must be at least 1"),
    (["--system", "tbox", "--utilization", "0.5", "--compare-cloud", "--pricing", "reserved-5y"],
     "unknown pricing mode 'reserved-5y'; did you mean"),
    (["--system", "tbx", "--utilization", "0.5"], "unknown system 'tbx'; did you mean 'tbox'"),
    (["--utilization", "0.5"], "give --system"),
    (["--system", "tbox-noprice", "--utilization", "0.5"], "has no price in the catalog"),
    (["--scenario", "tinny"], "unknown scenario 'tinny'; did you mean 'tiny'"),
])
def test_bad_input_one_line_exit_2(run_cli, overlay, argv, message):
    code, out, err = run_cli("tco", *argv, "--catalog", overlay)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert message in err


# --- issue #10: bad or edge input gives one exact line or an explicit value -----------------
@pytest.mark.parametrize("argv, message", [
    (["--system", "tbox", "--nodes", "1000000000"],
     "gpuplan: error: --nodes 1,000,000,000 gives 4,000,000,000 GPUs, above the 1,048,576 GPUs "
     "gpuplan models; lower --nodes\n"),
    (["--system", "tbox", "--storage", "1e308"],
     "gpuplan: error: --storage must be at most 1e+12, got 1e+308; fix the value\n"),
    (["--system", "tbox", "--nodes", "0.5"],
     "gpuplan: error: --nodes must be a whole number, got 0.5\n"),
])
def test_overflowing_input_is_refused_in_one_line(run_cli, overlay, argv, message):
    code, out, err = run_cli("tco", *argv, "--catalog", overlay)
    assert (code, out, err) == (2, "", message)


def test_minus_zero_is_zero(run_cli, overlay):
    """--install=-0 is 0: no '$-0' anywhere, a positive zero in JSON."""
    r = tco(run_cli, overlay, "--system", "tbox", "--install=-0")
    assert r["capex_usd_lines"]["install"] == 0.0
    assert math.copysign(1.0, r["capex_usd_lines"]["install"]) == 1.0
    assert r["assumptions"]["install"] == {"value": 0.0, "from": "flag"}
    code, out, _ = run_cli("tco", "--system", "tbox", "--install=-0", "--catalog", overlay)
    assert code == 0 and "$-0" not in out and "-0 " not in out


def test_utilization_defaults_from_the_site(run_cli, overlay):
    """Without --utilization tco uses the site's default (as its help says), not an error."""
    r = tco(run_cli, overlay, "--system", "tbox", "--nodes", "2")
    assert r["utilization"] == 0.7
    assert r["assumptions"]["utilization"]["value"] == 0.7  # the site row `utilization`
    assert r["assumptions"]["utilization"]["from"].startswith("site utilization: ")
    assert r["usd_per_gpu_hour"] == pytest.approx(hand_own(util=0.7)["per_used"], rel=REL)


def test_never_breaks_even_is_explicit(run_cli, overlay):
    """A $10M box never beats renting: "never" in JSON (not null) and in the text."""
    r = tco(run_cli, overlay, "--system", "tbox", "--price", "1e7", "--compare-cloud")
    assert set(r["break_even_utilization"].values()) == {"never"}
    assert set(r["break_even_months"].values()) == {"never"}
    assert {row["break_even_utilization"] for row in r["cloud"]} == {"never"}
    code, out, _ = run_cli("tco", "--system", "tbox", "--price", "1e7", "--compare-cloud",
                           "--catalog", overlay)
    assert code == 0 and "on-demand never, spot never" in out


def test_owned_cost_shows_cash_up_front(run_cli, overlay):
    """Every owned figure is shown with the cash it needs up front (#10 item 6)."""
    code, out, _ = run_cli("tco", "--system", "tbox", "--nodes", "2", "--utilization", "0.5",
                           "--compare-cloud", "--catalog", overlay)
    capex = usd(hand_own()["capex"])
    assert code == 0
    assert f"{capex} of it up front" in out
    assert f"(own: {usd(hand_own()['per_used'])} per used GPU-hour, {capex} up front)" in out


def test_a_pod_is_its_system_times_its_nodes(run_json):
    """`catalog systems` lists pods; tco takes them (--nodes then counts pods)."""
    cat = load_catalog()
    pod = cat.pod("dgx-h100-superpod-512")
    r = run_json("tco", "--system", "dgx-h100-superpod-512")
    assert (r["system"], r["pod"], r["nodes"]) == (pod.system, pod.id, pod.nodes)
    assert r["gpus"] == pod.nodes * cat.system(pod.system).gpus_per_node == 512
    r2 = run_json("tco", "--system", "dgx-h100-superpod-512", "--nodes", "2")
    assert r2["nodes"] == 128
    assert r2["capex_usd"] == pytest.approx(2 * r["capex_usd"], rel=REL)


def test_estimate_own_pricing_names_the_unpriced_system(run_cli):
    """`estimate --system ID --pricing own` on an unpriced system used to say "give --system".
    (The DGX Station A100 served here until issue 14 priced it; the DGX H200 has no price.)"""
    cat = load_catalog()
    assert not cat.system("dgx-h200").price_usd  # the case rests on this
    code, out, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "h200",
                             "--system", "dgx-h200", "--tokens", "1T",
                             "--pricing", "own")
    assert (code, out) == (2, "")
    assert err == ("gpuplan: error: system dgx-h200 has no price in the catalog, so "
                   "--pricing own cannot be costed; give --usd-per-gpu-hour X (e.g. from "
                   "`gpuplan tco --system dgx-h200 --price USD`) or price it in a "
                   "--catalog overlay\n")


def test_zero_utilization_with_owned_pricing_is_refused(run_cli):
    """`--utilization 0 --pricing own` printed `cost -` and a numpy RuntimeWarning."""
    code, out, err = run_cli("estimate", "--model", "llama2-7b", "--gpu", "h100",
                             "--system", "dgx-h100", "--tokens", "1T", "--pricing", "own",
                             "--utilization", "0")
    assert (code, out) == (2, "")
    assert err == ("gpuplan: error: --utilization must be more than 0, got 0: an owned cluster "
                   "that does no useful work has no cost per GPU-hour; give the share of hours "
                   "it trains, e.g. 0.7\n")
