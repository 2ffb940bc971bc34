"""`gpuplan plan`: constraints hold for every plan, the front and best plans agree, the export
filter excludes what it must, plan and estimate agree, bad input gets one line (#6)."""

from __future__ import annotations

import pytest

LLAMA = ["plan", "--model", "llama3-70b", "--tokens", "15T", "--deadline-days", "90"]
CONTROLLED = {"h100-sxm", "h100-pcie", "h100-nvl", "a100-40gb", "a100-80gb", "a100-pcie-80gb",
              "a800", "h800", "b200", "b300", "gb200"}


@pytest.fixture(scope="module")
def llama_plan():
    import contextlib
    import io
    import json

    from gpuplan.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*LLAMA, "--json"]) == 0
    return json.loads(buf.getvalue())


def test_contract_keys(llama_plan):
    r = llama_plan
    assert r["evaluated"] >= r["feasible"] > 0
    for key in ("plans", "pareto", "excluded"):
        assert key in r
    p = r["plans"][0]
    for key in ("gpu", "gpus", "tp", "pp", "dp", "zero", "micro_batch", "recompute",
                "precision", "acquisition", "offer", "pricing", "time_to_train_days",
                "cost_usd", "mfu", "memory_gib_per_gpu"):
        assert key in p
    assert p["acquisition"] in ("cloud", "own")
    assert (p["offer"] is None) == (p["acquisition"] == "own")


def test_every_plan_meets_the_constraints(llama_plan):
    for p in llama_plan["plans"] + llama_plan["pareto"]:
        assert p["time_to_train_days"] <= 90
        assert p["gpus"] == p["tp"] * p["pp"] * p["dp"] * p.get("cp", 1)
        assert p["memory_gib_per_gpu"] <= p["gpu_memory_gib"]


def test_ranking_and_front(llama_plan):
    plans, front, best = llama_plan["plans"], llama_plan["pareto"], llama_plan["best"]
    costs = [p["cost_usd"] for p in plans]
    assert costs == sorted(costs)  # objective: cost
    assert plans[0]["cost_usd"] == best["cost"]["cost_usd"]
    # the front holds the best of each objective
    assert min(p["cost_usd"] for p in front) == best["cost"]["cost_usd"]
    assert min(p["time_to_train_days"] for p in front) == best["time"]["time_to_train_days"]
    # nothing on the front is dominated by another front point
    for a in front:
        for b in front:
            assert not (b["cost_usd"] <= a["cost_usd"] and b["time_to_train_days"] <=
                        a["time_to_train_days"] and (b["cost_usd"] < a["cost_usd"] or
                                                     b["time_to_train_days"] <
                                                     a["time_to_train_days"]))


def test_budget_and_gpu_filters_hold(run_json):
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "1T", "--budget-usd", "2e6",
                 "--gpu", "h100", "--gpu", "a100-80gb", "--max-gpus", "256")
    assert r["plans"]
    for p in r["plans"] + r["pareto"]:
        assert p["cost_usd"] <= 2e6 and p["gpu"] in ("h100-sxm", "a100-80gb")
        assert p["gpus"] <= 256


def test_acquisition_and_vendor_filters(run_json):
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "1T", "--vendor", "amd",
                 "--acquisition", "cloud")
    for p in r["plans"]:
        assert p["vendor"] == "amd" and p["acquisition"] == "cloud"


def test_export_region_cn_excludes_controlled_parts(run_json):
    r = run_json("plan", "--model", "gpt3-175b", "--tokens", "300B", "--budget-usd", "5e6",
                 "--export-region", "cn")
    for p in r["plans"] + r["pareto"]:
        assert p["gpu"] not in CONTROLLED
        assert p["export_cn"] in ("allowed", "licensed", "china-only")
    reasons = " ".join(r["excluded_platforms"].get("export-controlled for China", []))
    for gpu in ("h100-sxm", "a100-80gb"):
        assert gpu in reasons


def test_plan_and_estimate_agree(llama_plan, run_json):
    p = llama_plan["plans"][0]
    argv = ["estimate", "--model", "llama3-70b", "--gpu", p["gpu"], "--gpus", str(p["gpus"]),
            "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--cp", str(p["cp"]),
            "--ep", str(p["ep"]), "--zero", str(p["zero"]),
            "--micro-batch", str(p["micro_batch"]), "--global-batch", str(p["global_batch"]),
            "--seq-len", str(p["seq_len"]), "--recompute", p["recompute"],
            "--precision", p["precision"], "--tokens", "15T", "--pricing", p["pricing"]]
    argv += ["--offer", p["offer"]] if p["offer"] else ["--system", p["system"]]
    e = run_json(*argv)
    assert e["fits"]
    for key_e, key_p in (("time_to_train_days", "time_to_train_days"), ("cost_usd", "cost_usd"),
                         ("mfu", "mfu"), ("tokens_per_s", "tokens_per_s")):
        assert e[key_e] == pytest.approx(p[key_p], rel=1e-9), key_e
    assert e["memory_gib"]["total"] == pytest.approx(p["memory_gib_per_gpu"], rel=1e-9)


def test_infeasible_says_what_to_relax(run_json):
    r = run_json("plan", "--model", "llama3-70b", "--tokens", "15T", "--deadline-days", "90",
                 "--budget-usd", "1000")
    assert r["feasible"] == 0 and not r["plans"]
    assert any("feasible from a budget of $" in x for x in r["relax"])


def test_text_output_explains(run_cli):
    code, out, _ = run_cli(*LLAMA)
    assert code == 0
    assert "winner:" in out and "scaling outlook" in out and "excluded candidates" in out


def test_favourite_gpu_that_cannot_make_it(run_json):
    r = run_json("plan", "--model", "llama3-70b", "--tokens", "15T", "--deadline-days", "30",
                 "--gpu", "rtx-4090")
    assert not r["plans"]
    assert r["favourite"] and r["favourite"][0].startswith("rtx-4090")


@pytest.mark.parametrize("argv, message", [
    (["plan", "--model", "llama3-8b"], "--tokens is required"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--deadline-days", "-3"],
     "--deadline-days must be in the future"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--budget-usd", "0"],
     "--budget-usd must be more than 0"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--max-gpus", "1000000000000"],
     "above the cap"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--gpu", "h1000"], "did you mean"),
    (["plan", "--model", "llama3-8b", "--tokens", "1T", "--pricing", "cheap"],
     "unknown pricing mode 'cheap'"),
])
def test_bad_input(run_cli, argv, message):
    code, out, err = run_cli(*argv)
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("name", ["startup", "research", "hyperscale"])
def test_scenarios_state_assumptions_and_the_articles_pick(run_json, name):
    r = run_json("plan", "--scenario", name)
    s = r["scenario"]
    assert s["name"] == name and s["article_claim"]
    pick = r["scenario_pick"]
    assert pick is not None and pick["system"] == s["system"]
    if pick["feasible"]:
        assert pick["gpus"] == s["nodes"] * 8 or pick["gpus"] == s["nodes"] * 4
        assert pick["time_to_train_days"] > 0 and pick["cost_usd"] > 0


def test_startup_scenario_contradicts_the_article(run_json):
    """The article's 4x A100 for a ~13B model on 260B tokens misses a 90-day deadline: 6 x 13e9 x
    260e9 = 2.0e22 FLOP at 4 x 312 TFLOPS and <= 60% MFU is >= 310 days."""
    r = run_json("plan", "--scenario", "startup")
    pick = r["scenario_pick"]
    assert pick["feasible"] and pick["time_to_train_days"] > 300
    assert pick["meets_deadline"] is False
    assert r["plans"], "a cheaper, faster rented option exists within the budget"
    assert r["plans"][0]["cost_usd"] <= 50_000


def test_unknown_scenario(run_cli):
    code, _, err = run_cli("plan", "--scenario", "startp")
    assert code == 2 and "did you mean 'startup'" in err


def test_budget_counts_the_purchase_of_owned_hardware(run_json):
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "300B", "--budget-usd", "1e6",
                 "--acquisition", "own")
    for p in r["plans"]:
        assert max(p["cost_usd"], p["cash_up_front_usd"]) <= 1e6


def test_consumer_cards_stay_on_one_node_unless_allowed(run_json, tmp_path):
    """GeForce cards: multi-node candidates are excluded with a reason by default, and allowed
    with --allow-consumer (an overlay gives the 8x RTX 4090 server a price to buy it)."""
    overlay = tmp_path / "price.toml"
    overlay.write_text('[[system]]\nid = "rtx-4090-8x"\nprice_usd = 40000\n'
                       'price_source = "test overlay"\nprice_date = "2026-11-30"\n')
    argv = ["plan", "--model", "llama3-8b", "--tokens", "100B", "--gpu", "rtx-4090",
            "--acquisition", "own", "--catalog", str(overlay)]
    default = run_json(*argv)
    assert default["excluded"].get("consumer GPUs beyond one node (pass --allow-consumer)", 0) > 0
    assert all(p["gpus"] <= 8 for p in default["plans"] + default["pareto"])
    allowed = run_json(*argv, "--allow-consumer")
    assert "consumer GPUs beyond one node (pass --allow-consumer)" not in allowed["excluded"]
    assert any(p["gpus"] > 8 for p in allowed["pareto"])


def test_constraints_hold_for_random_deadlines_and_budgets():
    """Property: whatever the deadline and budget, every returned plan (and front point)
    meets them, and when nothing is feasible the answer says what to relax."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from gpuplan.catalog import load_catalog
    from gpuplan.search.evaluate import site_from_catalog
    from gpuplan.search.plan import Request, search
    from gpuplan.search.platforms import Filters

    cat = load_catalog()
    model = cat.model("llama3-8b")
    site = site_from_catalog(cat)

    @settings(max_examples=25, deadline=None)
    @given(st.floats(0.5, 400), st.floats(1e3, 1e7), st.sampled_from(["cost", "time", "energy"]))
    def check(deadline, budget, objective):
        req = Request(model=model, tokens=3e11, seq_len=8192, global_batch=512,
                      deadline_days=deadline, budget_usd=budget, objective=objective,
                      max_gpus=1024, filters=Filters(gpus=("h100-sxm", "a100-80gb")), site=site,
                      top=5)
        r = search(cat, req)
        for p in r.plans + r.pareto:
            assert p.time_to_train_days <= deadline
            assert max(p.cost_usd, p.cash_up_front_usd) <= budget
            assert p.gpus <= 1024 and p.gpu in ("h100-sxm", "a100-80gb")
        if not r.plans:
            assert r.relax
        else:
            key = {"cost": "cost_usd", "time": "time_to_train_days",
                   "energy": "energy_kwh"}[objective]
            values = [getattr(p, key) for p in r.plans]
            assert values == sorted(values)

    check()


def test_cloud_and_region_filters(run_json):
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "300B", "--cloud", "aws",
                 "--region", "us-east", "--acquisition", "cloud")
    assert r["plans"]
    for p in r["plans"] + r["pareto"]:
        assert p["offer"].startswith("aws-") and "us-east" in p["offer"]


def test_pricing_filter(run_json):
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "300B", "--pricing", "on-demand",
                 "--pricing", "reserved-3y")
    assert r["plans"]
    assert {p["pricing"] for p in r["plans"] + r["pareto"]} <= {"on-demand", "reserved-3y"}


def test_progress_bar_only_after_a_moment(monkeypatch, capsys):
    """The bar stays silent for quick searches and draws on a terminal once 0.5 s have gone."""
    import sys

    from gpuplan.cli import plan_cmd

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    clock = iter([0.0, 0.1, 0.2, 5.0, 5.1])
    monkeypatch.setattr(plan_cmd.time, "perf_counter", lambda: next(clock))
    bar = plan_cmd._Progress(enabled=True)  # t0 = 0.0
    bar(1, 4)  # 0.1 s: silent
    assert capsys.readouterr().err == ""
    bar(2, 4)  # 0.2 s: silent
    bar(3, 4)  # 5.0 s: drawn
    err = capsys.readouterr().err
    assert "searching [" in err and "3/4" in err
    quiet = plan_cmd._Progress(enabled=False)
    quiet(1, 4)
    assert capsys.readouterr().err == ""


def test_an_infinite_deadline_is_rejected(run_cli):
    """Issue #10: `--deadline-days 1e309` printed `deadline inf days`."""
    code, _, err = run_cli("plan", "--model", "llama3-8b", "--tokens", "1T", "--deadline-days",
                           "1e309")
    assert code == 2 and "--deadline-days must be in the future (> 0) and finite, got inf" in err


def test_without_a_deadline_the_plan_says_it_uses_a_year(run_json, run_cli):
    """Issue #10 item 7: without --deadline-days the hyperscale scenario picked a 732-day
    spot plan; the default deadline (365 days) is applied and said."""
    r = run_json("plan", "--scenario", "hyperscale")
    assert r["deadline_days"] == 365 and r["deadline_is_default"] is True
    assert r["plans"] and all(p["time_to_train_days"] <= 365 for p in r["plans"] + r["pareto"])
    _, out, _ = run_cli("plan", "--scenario", "hyperscale", "--quiet")
    assert "deadline 365.0 days (default)" in out
    assert "(the default deadline; --deadline-days sets it)" in out


def test_scaling_efficiency_above_100_percent_says_why(run_json, run_cli):
    """Issue #10 item 10: GPT-3 on 64 GPUs and more runs micro-batch 8 where 32 GPUs need 4
    (memory), so tokens/s per GPU rises: each such row is marked with the reason."""
    r = run_json("plan", "--model", "gpt3-175b", "--tokens", "300B")
    above = [o for o in r["outlook"] if o["feasible"] and o["scaling_efficiency"] > 1]
    assert above and all(o["scaling_note"] == "faster_layout" for o in above)
    _, out, _ = run_cli("plan", "--model", "gpt3-175b", "--tokens", "300B", "--quiet")
    assert "* above 100%: at" in out and "allows a faster layout" in out


def test_owned_options_show_their_cash_up_front(run_json):
    """Issue #10 item 6: every owned option shows its cash up front beside its cost."""
    r = run_json("plan", "--model", "llama3-8b", "--tokens", "300B", "--acquisition", "own")
    w = r["plans"][0]
    assert w["acquisition"] == "own" and w["cash_up_front_usd"] > 0
    assert "up front" in r["why"][0]


def test_exclusions_carry_codes_beside_the_sentences(llama_plan):
    codes, text = llama_plan["excluded_codes"], llama_plan["excluded"]
    assert sum(codes.values()) == sum(text.values())
    assert codes["out_of_memory"] == text["out of memory"]
