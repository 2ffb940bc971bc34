"""`gpuplan tco` with the package catalog: the issue's "done when" and the article's scenarios
(#5). These depend on catalog figures (site defaults, systems, offers) and say so; the exact
arithmetic is tested on a tiny overlay in test_tco_cli.py.
"""

from __future__ import annotations

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.errors import GpuplanError


def _need(kind: str, ident: str) -> None:
    """The catalog entry these figures rest on must exist (a missing one is a failure)."""
    try:
        getattr(load_catalog(), kind)(ident)
    except GpuplanError as err:
        pytest.fail(f"the package catalog lacks {kind} '{ident}': {err}")


def test_owning_dgx_h100_four_years_70pct_in_public_range(run_json, capsys):
    """Issue #5 "done when": 4-year life, 70% utilization, catalog site defaults, DGX H100 at
    the hyperscale preset's price (~$270k, SemiAnalysis 2023, also systems.toml's). Public
    analyses put owned H100 cost at roughly $1.3-2.5 per GPU-hour; the range is
    the issue's, not tuned here. Prints the comparison against AWS p5 for the record."""
    _need("system", "dgx-h100")
    r = run_json("tco", "--scenario", "hyperscale", "--nodes", "4", "--years", "4",
                 "--utilization", "0.7", "--compare-cloud", "--cloud", "aws")
    assert r["system"] == "dgx-h100" and r["years"] == 4 and r["utilization"] == 0.7
    assert r["assumptions"]["electricity"]["from"].startswith("site ")
    assert 1.3 <= r["usd_per_gpu_hour"] <= 2.5, r["usd_per_gpu_hour"]
    p5 = [row for row in r["cloud"] if row["instance_type"].startswith("p5.48xlarge")]
    assert p5, "the catalog has no AWS p5.48xlarge offer"
    od = [row for row in p5 if row["pricing"] == "on-demand"]
    assert od and all(row["usd_per_gpu_hour"] > r["usd_per_gpu_hour"] for row in od)
    be = r["break_even_utilization"]["on-demand"]
    assert be is not None and 0 < be < 0.7  # owning at 70% beats p5 on-demand
    # the issue asks for p5 on-demand, 1-yr and 3-yr side by side, each with a break-even
    assert {"on-demand", "reserved-1y", "reserved-3y"} <= {row["pricing"] for row in p5}
    for row in p5:
        u = row["break_even_utilization"]
        assert u is None or 0 <= u <= 1
    with capsys.disabled():
        print(f"\nown DGX H100, 4 y, 70%: ${r['usd_per_gpu_hour']:.2f}/GPU-h "
              f"(capex ${r['capex_usd']:,.0f} for {r['gpus']} GPUs)")
        for row in p5:
            print(f"  {row['offer']:28s} {row['pricing']:15s} ${row['usd_per_gpu_hour']:.2f}"
                  f"/used GPU-h  break-even {row['break_even_utilization']}")
        print("  break-even by mode:", r["break_even_utilization"])


def test_every_scenario_runs_and_names_resolve(run_json):
    cat = load_catalog()
    scenarios = cat.table("scenarios")
    assert {"startup", "research", "hyperscale"} <= set(scenarios)
    for name, sc in scenarios.items():
        assert sc.get("title") and sc.get("article_claim") and sc.get("article_where"), name
        for key in ("system", "model"):
            if key in sc:
                _need(key, sc[key])
        r = run_json("tco", "--scenario", name)
        assert r["scenario"]["id"] == name
        assert r["usd_per_gpu_hour"] > 0


def test_gpt3_on_one_server_takes_years_and_does_not_fit(run_json):
    """The article (section 1.2) says 35 days. 6 N D = 3.15e23 FLOP on 8 A100s at even 100%
    of their 2.5 PFLOP/s dense BF16 takes 1,460 days; the preset's 40% MFU gives ~10 years.
    16 B/param of model state (~2.8 TB) cannot fit in 8 x 80 GB."""
    _need("system", "dgx-a100")
    ans = run_json("tco", "--scenario", "gpt3-one-server")["scenario"]["answer"]
    assert ans["training_flops"] == pytest.approx(3.15e23, rel=0.01)  # GPT-3 paper: 3.14e23
    assert ans["wall_days"] > 365 * 4
    assert ans["model_state_fits"] is False
    assert ans["run_longer_than_life"] is True


def test_superpod_fp8_peak_is_an_exaflop_not_1_28_pflops(run_json):
    """The article (section 4.3) says 64 x 8 H100 give 1.28 PFLOPS FP8; 512 x 1,979 TFLOPS
    dense FP8 = 1.01 EFLOPS (1% tolerance for the catalog's rounding)."""
    _need("system", "dgx-h100")
    ans = run_json("tco", "--scenario", "hyperscale")["scenario"]["answer"]
    assert ans["peak_flops_total_by_precision"]["fp8"] == pytest.approx(512 * 1979e12, rel=0.01)


def test_startup_article_plan_exceeds_its_budget(run_json):
    """Section 4.1 recommends a ~$65k DGX Station A100 to a team with under $50k: even at the
    article's own price the cash up front is over budget, and a 13B model on 260B tokens takes
    more than a year on 4 A100s at 40% MFU (6 N D / (4 x 312 TFLOPS x 0.4) = 470 days)."""
    _need("system", "dgx-station-a100")
    ans = run_json("tco", "--scenario", "startup")["scenario"]["answer"]
    assert ans["cash_up_front_over_budget_usd"] > 0
    assert ans["wall_days"] > 365
    assert ans["meets_deadline"] is False
