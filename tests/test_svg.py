"""The SVG charts: golden structure (title, axes, ticks, marks, legend) on small hand-made
results, and every plotted mark placed where its JSON value says, on real results too."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from conftest import golden

from gpuplan.report import svg
from gpuplan.report.html import render_html

NS = {"s": "http://www.w3.org/2000/svg"}
PX = 0.01  # coordinates are written with 2 decimals: half a hundredth of a pixel, plus slack


def _row(gpu, n, days, cost, pricing, **kw):
    return {"gpu": gpu, "gpus": n, "tp": 2, "pp": 1, "dp": n // 2, "cp": 1, "ep": 1, "zero": 1,
            "micro_batch": 2, "precision": "bf16", "recompute": "none", "platform": "p",
            "pricing": pricing, "time_to_train_days": days, "cost_usd": cost, **kw}


PLAN = {"deadline_days": 30.0, "budget_usd": None,
        "plans": [_row("h100-sxm", 64, 20.0, 4.0e5, "spot"), _row("a100-80gb", 64, 28.0, 5.0e5,
                                                                   "on-demand")],
        "pareto": [_row("h100-sxm", 64, 20.0, 4.0e5, "spot"), _row("h100-sxm", 256, 5.5, 7.0e5,
                                                                   "spot"),
                   _row("h100-sxm", 1024, 1.5, 2.1e6, "on-demand")],
        "outlook": [{"gpus": 32, "feasible": True, "time_to_train_days": 40.0, "cost_usd": 3.9e5,
                     "scaling_efficiency": 1.0},
                    {"gpus": 64, "feasible": True, "time_to_train_days": 20.0, "cost_usd": 4.0e5,
                     "scaling_efficiency": 0.98},
                    {"gpus": 128, "feasible": False, "reason": "x"},
                    {"gpus": 256, "feasible": True, "time_to_train_days": 5.5, "cost_usd": 7.0e5,
                     "scaling_efficiency": 0.9}]}
EST = {"gpu": "h100-sxm", "gpus": 8, "gpu_memory_gib": 79.65, "fits": True,
       "memory_gib": {"weights": 2.0, "gradients": 2.0, "optimizer": 12.0, "activations": 30.0,
                      "other": 8.0, "total": 54.0}}
TCO = {"accelerator": "h100-sxm", "gpus": 32, "years": 4.0, "utilization": 0.7,
       "cash_up_front_usd": 1.2e6, "opex_usd_per_year_total": 1.8e5,
       "break_even_months": {"on-demand": 37.5}, "cloud": [
           {"offer": "a", "pricing": "on-demand", "usd_per_gpu_hour": 2.95},
           {"offer": "b", "pricing": "on-demand", "usd_per_gpu_hour": 3.5},
           {"offer": "c", "pricing": "spot", "usd_per_gpu_hour": 1.2}]}
TCO["break_even_months"]["on-demand"] = TCO["cash_up_front_usd"] / (
    2.95 * 32 * 0.7 * 730.5 - 1.8e5 / 12)


def _root(text):
    return ET.fromstring(text)


def structure(text: str) -> str:
    """What a reader sees, without coordinates: title, axis labels and ticks, marks, legend."""
    r = _root(text)
    out = [f"chart {r.get('data-chart')}: {r.find('s:title', NS).text}"]
    for ax in r.iterfind(".//s:g[@class]", NS):
        cls = ax.get("class")
        if "axis" in cls or cls == "panel" or cls == "legend":
            texts = [t.text for t in ax.iterfind(".//s:text", NS)]
            out.append(f"{cls} {ax.get('data-series') or ''}: {' | '.join(texts)}".replace(
                " :", ":"))
    for cls in ("point", "bar", "part", "margin", "capacity", "series", "break-even"):
        n = len([e for e in r.iter() if e.get("class") == cls])
        if n:
            out.append(f"{cls}: {n}")
    return "\n".join(out) + "\n"


def _inverse_ok(root, v, px, axis, el=None):
    el = root if el is None else el
    lo, hi = float(el.get(f"data-{axis}-min")), float(el.get(f"data-{axis}-max"))
    p0, p1 = float(el.get(f"data-{axis}0")), float(el.get(f"data-{axis}1"))
    log = el.get(f"data-{axis}-log") == "1"
    f = (lambda x: math.log10(x)) if log else (lambda x: x)
    want = p0 + (f(v) - f(lo)) / (f(hi) - f(lo)) * (p1 - p0)
    return abs(want - px) <= PX


def check_pareto(plan, text):
    root = _root(text)
    marks = root.findall(".//s:g[@class='point']", NS)
    want = {(p["gpu"], p["gpus"], p["pricing"], p["time_to_train_days"], p["cost_usd"])
            for p in plan["plans"] + plan["pareto"] if p.get("cost_usd") is not None}
    got = set()
    for g in marks:
        days, cost = float(g.get("data-days")), float(g.get("data-cost"))
        dot = g.findall("s:circle", NS)[-1]
        assert _inverse_ok(root, days, float(dot.get("cx")), "x")
        assert _inverse_ok(root, cost, float(dot.get("cy")), "y")
        got.add((g.get("data-gpu"), int(g.get("data-gpus")), g.get("data-pricing"), days, cost))
    assert got == want  # every plan plotted once, nothing else


def check_outlook(plan, text):
    root = _root(text)
    feasible = [o for o in plan["outlook"] if o.get("feasible")]
    for panel, key in (("days", "time_to_train_days"), ("cost", "cost_usd"),
                       ("efficiency", "scaling_efficiency")):
        g = root.find(f".//s:g[@data-series='{panel}']", NS)
        dots = g.findall("s:circle", NS)
        assert [(int(d.get("data-gpus")), float(d.get("data-value"))) for d in dots] == \
            [(o["gpus"], o[key]) for o in feasible]
        for d in dots:
            assert _inverse_ok(root, float(d.get("data-gpus")), float(d.get("cx")), "x")
            assert _inverse_ok(g, float(d.get("data-value")), float(d.get("cy")), "y")


def check_memory(estimates, text):
    root = _root(text)
    bars = root.findall(".//s:g[@class='bar']", NS)
    assert len(bars) == len(estimates)
    for bar, e in zip(bars, estimates, strict=True):
        parts = {r.get("data-part"): r for r in bar.iterfind("s:rect[@class='part']", NS)}
        assert set(parts) == {k for k, _, _ in svg.PARTS}
        assert sum(float(r.get("data-gib")) for r in parts.values()) == pytest.approx(
            e["memory_gib"]["total"], rel=1e-9)  # the stack sums to the total
        base = 0.0
        for key, rect in parts.items():
            assert float(rect.get("data-gib")) == e["memory_gib"][key]
            top = base + e["memory_gib"][key]
            assert _inverse_ok(root, top, float(rect.get("y")), "y")
            base = top
        cap = bar.find("s:line[@class='capacity']", NS)
        assert _inverse_ok(root, e["gpu_memory_gib"], float(cap.get("y1")), "y")


def check_buy_rent(tco, text):
    root = _root(text)
    s = svg.buy_rent_series(tco)
    lines = {ln.get("data-series"): ln for ln in root.iterfind(".//s:line[@class='series']", NS)}
    assert set(lines) == {"own", *s["rent"]}
    own = lines["own"]
    assert float(own.get("data-start")) == tco["cash_up_front_usd"]
    assert _inverse_ok(root, tco["cash_up_front_usd"], float(own.get("y1")), "y")
    for mode, r in s["rent"].items():
        ln = lines[mode]
        assert float(ln.get("data-end")) == pytest.approx(r["usd_per_month"] * s["months"])
        assert _inverse_ok(root, float(ln.get("data-end")), float(ln.get("y2")), "y")
    for mark in root.iterfind(".//s:g[@class='break-even']", NS):
        mode, m = mark.get("data-mode"), float(mark.get("data-months"))
        assert m == tco["break_even_months"][mode]
        # the mark sits where the own line meets that mode's rent line
        own_at = s["own"]["up_front_usd"] + s["own"]["usd_per_month"] * m
        assert own_at == pytest.approx(s["rent"][mode]["usd_per_month"] * m, rel=1e-9)
        c = mark.find("s:circle", NS)
        assert _inverse_ok(root, m, float(c.get("cx")), "x")
        assert _inverse_ok(root, own_at, float(c.get("cy")), "y")


def test_golden_structure():
    text = "".join(structure(s) for s in (svg.pareto_svg(PLAN), svg.outlook_svg(PLAN),
                                          svg.memory_svg([EST, {**EST, "gpu_memory_gib": 40.0,
                                                                "fits": False}]),
                                          svg.buy_rent_svg(TCO)))
    golden("svg_structure.txt", text)


def test_marks_match_the_json_synthetic():
    check_pareto(PLAN, svg.pareto_svg(PLAN))
    check_outlook(PLAN, svg.outlook_svg(PLAN))
    check_memory([EST], svg.memory_svg([EST]))
    check_buy_rent(TCO, svg.buy_rent_svg(TCO))


def test_marks_match_the_json_real(run_json):
    plan = run_json("plan", "--model", "llama3-8b", "--tokens", "1T", "--deadline-days", "30",
                    "--gpu", "h100-sxm", "--gpu", "b200", "--gpu", "a100-80gb")
    check_pareto(plan, svg.pareto_svg(plan))
    check_outlook(plan, svg.outlook_svg(plan))
    est = run_json("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8")
    check_memory([est], svg.memory_svg([est]))  # does not fit: the stack passes the capacity
    tco = run_json("tco", "--system", "dgx-h100", "--nodes", "4", "--utilization", "0.7",
                   "--compare-cloud")
    text = svg.buy_rent_svg(tco)
    check_buy_rent(tco, text)
    assert _root(text).findall(".//s:g[@class='break-even']", NS)


def test_empty_results_draw_a_note_not_an_error():
    for text in (svg.pareto_svg({"plans": [], "pareto": []}), svg.outlook_svg({"outlook": []}),
                 svg.memory_svg([]), svg.buy_rent_svg({**TCO, "cloud": []})):
        assert _root(text).find(".//s:text[@class='empty']", NS) is not None


def test_html_report_is_self_contained(run_json):
    plan = run_json("plan", "--model", "llama3-8b", "--tokens", "1T", "--gpu", "h100-sxm")
    page = render_html("plan", plan)
    assert page.startswith("<!doctype html>") and page.count("<svg") == 2
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").split(
        "<h2>Sources</h2>")[0]  # nothing fetched: links only in the cited sources
    assert "<script" not in page and "Ranked plans" in page and "Sources" in page
    tco = run_json("tco", "--system", "dgx-h100", "--utilization", "0.7", "--compare-cloud")
    assert 'data-chart="buy-rent"' in render_html("tco", tco)
    est = run_json("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8")
    assert 'data-chart="memory"' in render_html("estimate", est)


def test_layout_text_is_the_text_tables_layout_with_vpp_hsdp_and_offload():
    """The page, the charts and the text table name a layout the same way: an interleaved
    pipeline as pp2x4, the HSDP shard group and the offloaded parts are not dropped."""
    import dataclasses

    import gpuplan
    from gpuplan.report.plan import _layout
    from gpuplan.report.plan import to_json as plan_json
    from gpuplan.report.svg import layout_text

    result = gpuplan.plan(model="llama3-8b", tokens="1T", gpu="h100-sxm", max_gpus=64, top=2)
    row = dataclasses.replace(result.plans[0], tp=4, pp=2, vpp=4, dp=8, zero=3,
                              micro_batch=1, shard_group=8, offload_parts=("optimizer",))
    assert _layout(row) == "tp4 pp2x4 dp8 z3 mb1 hsdp8 off:opt"
    doc = plan_json(dataclasses.replace(result, plans=(row,)))
    assert layout_text(doc["plans"][0]) == _layout(row)
