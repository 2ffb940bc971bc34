"""`gpuplan tco` with the package catalog: the issue's "done when" and the article's scenarios
(#5). These depend on catalog figures (site defaults, systems, offers) and say so; the exact
arithmetic is tested on a tiny overlay in test_tco_cli.py.
"""

from __future__ import annotations

import pytest
from conftest import golden

from gpuplan.catalog import load_catalog
from gpuplan.errors import GpuplanError


def _need(kind: str, ident: str) -> None:
    """The catalog entry these figures rest on must exist (a missing one is a failure)."""
    try:
        getattr(load_catalog(), kind)(ident)
    except GpuplanError as err:
        pytest.fail(f"the package catalog lacks {kind} '{ident}': {err}")


def test_owning_dgx_h100_four_years_70pct_in_public_range(run_json):
    """Issue #5 "done when": 4-year life, 70% utilization, catalog site defaults, DGX H100 at
    the hyperscale preset's price (~$270k, SemiAnalysis 2023, also systems.toml's). Public
    analyses put owned H100 cost at roughly $1.3-2.5 per GPU-hour; the range is
    the issue's, not tuned here."""
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
        assert u == "never" or 0 <= u <= 1, u  # "never" is explicit, never null
    # owning at its full-use cost beats p5 on-demand at every utilization above the break-even
    assert be * od[0]["usd_per_gpu_hour"] == pytest.approx(r["usd_per_gpu_hour_at_full_use"],
                                                           rel=1e-9)


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


def test_gpt3_on_one_server_does_not_fit(run_json):
    """The article (section 1.2) says 35 days. GPT-3 175B's weights, gradients and AdamW state
    (about 16 B/param, 2.8 TB) cannot fit in 8 x 80 GB under any layout the plan considers:
    the estimate path says so (as `plan --scenario gpt3-one-server` does). Since #11 the plan
    also tries CPU offload, which needs more than the server's 2 TB of host memory: that is
    the binding reason."""
    _need("system", "dgx-a100")
    ans = run_json("tco", "--scenario", "gpt3-one-server")["scenario"]["answer"]
    assert ans["feasible"] is False
    assert ans["reason"] == "offloaded state beyond the node's host memory"
    assert ans["model_state_fits"] is False
    assert "wall_days" not in ans  # no time for a run that cannot start


def test_superpod_fp8_peak_is_an_exaflop_not_1_28_pflops(run_json):
    """The article (section 4.3) says 64 x 8 H100 give 1.28 PFLOPS FP8; 512 x 1,979 TFLOPS
    dense FP8 = 1.01 EFLOPS (1% tolerance for the catalog's rounding)."""
    _need("system", "dgx-h100")
    ans = run_json("tco", "--scenario", "hyperscale")["scenario"]["answer"]
    assert ans["peak_flops_total_by_precision"]["fp8"] == pytest.approx(512 * 1979e12, rel=0.01)


def test_startup_article_plan_exceeds_its_budget(run_json):
    """Section 4.1 recommends a ~$65k DGX Station A100 to a team with under $50k: even at the
    article's own price the cash up front is over budget, and a 13B model on 260B tokens takes
    about a year on 4 A100s (the estimate path: ~58% MFU, 366 days; 6 N D at 40% MFU would
    say 470), far past the 90-day deadline."""
    _need("system", "dgx-station-a100")
    ans = run_json("tco", "--scenario", "startup")["scenario"]["answer"]
    assert ans["cash_up_front_over_budget_usd"] > 0
    assert ans["wall_days"] > 300
    assert ans["meets_deadline"] is False


def test_golden_text_dgx_h100_four_nodes(run_cli):
    """The README's tco command, exact text. Rests on the package catalog (prices, offers, site
    values): after an intended data or report change regenerate with
    `GPUPLAN_REGEN_GOLDEN=1 python -m pytest tests/test_tco_catalog.py` and review the diff."""
    code, out, err = run_cli("tco", "--system", "dgx-h100", "--nodes", "4", "--years", "4",
                             "--utilization", "0.7", "--compare-cloud")
    assert code == 0, err
    golden("tco_dgx_h100.txt", out)
