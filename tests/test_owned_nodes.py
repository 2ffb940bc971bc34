"""Issue 14: owning one node buys no scale-out network; owning two or more does (#14).

One rule (search/evaluate.scale_out_network_usd_per_gpu, inside evaluate.own_cost) prices the
owned rate of `plan`, `estimate --pricing own` and `gpuplan tco`, so they agree at every node
count: relative tolerance 1e-9 (JSON keeps 17 significant digits; only float rounding differs,
as in tests/test_agreement.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.catalog import load_catalog
from gpuplan.search.evaluate import own_cost, site_from_catalog

REL = 1e-9
SYSTEM = "dgx-h100"  # a priced rack server with an InfiniBand scale-out fabric


def _site_network() -> float:
    return float(load_catalog().site_value("network_usd_per_gpu"))


def _tco(run_json, nodes: int, *extra: str) -> dict:
    return run_json("tco", "--system", SYSTEM, "--nodes", str(nodes), *extra)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_tco_charges_the_scale_out_network_from_two_nodes_on(run_json, nodes):
    rec = _tco(run_json, nodes)
    network = rec["capex_usd_lines"]["network"]
    if nodes == 1:
        assert network == 0.0
        assert rec["assumptions"]["network"]["from"].startswith("one node")
    else:
        assert network == pytest.approx(8 * nodes * _site_network(), rel=REL)
        assert rec["assumptions"]["network"]["from"].startswith("site ")


def test_one_node_gets_the_network_the_user_gives(run_json):
    rec = _tco(run_json, 1, "--network", "2500")
    assert rec["capex_usd_lines"]["network"] == 8 * 2500.0
    assert rec["assumptions"]["network"] == {"value": 2500, "from": "flag"}


@pytest.fixture(scope="module")
def owned_plan():
    """plan's owned rows of the system at several node counts (computed once)."""
    import contextlib
    import io
    import json

    from gpuplan.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["plan", "--model", "llama3-8b", "--tokens", "300B", "--gpu", "h100-sxm",
                     "--acquisition", "own", "--top", "30", "--json", "--quiet"])
    assert code == 0
    return json.loads(buf.getvalue())


def test_plan_owned_rate_equals_tco_at_its_node_count(owned_plan, run_json):
    """Each plan row's owned rate and cash up front are tco's for the same system and nodes;
    the one-node row is the cheaper per GPU-hour (it buys no network)."""
    rows = [p for p in owned_plan["plans"] + owned_plan["pareto"] if p["system"] == SYSTEM]
    by_nodes = {p["nodes"]: p for p in rows}
    assert 1 in by_nodes and any(n > 1 for n in by_nodes), sorted(by_nodes)
    for nodes, row in sorted(by_nodes.items())[:4]:
        rec = _tco(run_json, nodes)
        assert row["usd_per_gpu_hour"] == pytest.approx(rec["usd_per_gpu_hour"], rel=REL), nodes
        assert row["cash_up_front_usd"] == pytest.approx(rec["capex_usd"], rel=REL), nodes
        assert row["cost_usd"] > 0
    one, more = by_nodes[1], by_nodes[min(n for n in by_nodes if n > 1)]
    assert one["usd_per_gpu_hour"] < more["usd_per_gpu_hour"]


@pytest.mark.parametrize("gpus", [8, 16])
def test_estimate_own_rate_equals_tco(run_json, gpus):
    e = run_json("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--system", SYSTEM,
                 "--gpus", str(gpus), "--pricing", "own", "--tokens", "10B")
    rec = _tco(run_json, gpus // 8)
    assert e["usd_per_gpu_hour"] == pytest.approx(rec["usd_per_gpu_hour"], rel=REL)


def test_owned_rate_per_gpu_is_flat_beyond_two_nodes():
    """plan stores the owned rate at one node and at two (search.single.price_rows): exact only
    because own_tco is linear in the node count once the network is bought. Checked here from
    2 to 1024 nodes (1e-12: the same sums in a different order)."""
    cat = load_catalog()
    system = cat.system(SYSTEM)
    acc = cat.accelerator(system.accelerator)
    nodes = np.array([1.0, 2.0, 3.0, 16.0, 1024.0])
    rate = np.asarray(own_cost(system, acc, site_from_catalog(cat), nodes).usd_per_gpu_hour)
    assert rate[0] < rate[1]  # one node: no network
    np.testing.assert_allclose(rate[2:], rate[1], rtol=1e-12)


def test_plan_outlook_prices_each_size_like_tco(owned_plan, run_json):
    """The winner's outlook (1/2x to 4x its GPUs, search.plan.at_size): cost = GPU-hours x tco's
    rate at that node count, and cash up front = tco's capex."""
    assert owned_plan["best"]["cost"]["system"] == SYSTEM
    sizes = [r for r in owned_plan["outlook"] if r["feasible"]]
    assert {r["gpus"] for r in sizes} >= {8, 16}
    for r in sizes:
        rec = _tco(run_json, r["gpus"] // 8)
        assert r["cost_usd"] == pytest.approx(r["gpu_hours"] * rec["usd_per_gpu_hour"], rel=REL)
        assert r["cash_up_front_usd"] == pytest.approx(rec["capex_usd"], rel=REL)
