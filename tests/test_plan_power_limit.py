"""`plan --power-limit-watts W` (#12): every candidate GPU held to W as `estimate` holds one
(peak FLOP/s x min(1, (W / TDP)^k) with its family's k, energy at min(TDP, W)); the plan says
so in text, JSON, reproduce lines and exports, and without the flag nothing changes."""

from __future__ import annotations

import json
import math
import shlex

import pytest

import gpuplan
from gpuplan.errors import ConfigError
from gpuplan.report.plan import render_text, to_json
from gpuplan.search.evaluate import site_from_catalog
from gpuplan.web import adapter

# the 8B model on at most one H100 node, the fastest option: a compute-bound winner
H100 = dict(model="llama3-8b", tokens="100B", gpu="h100-sxm", max_gpus=8, objective="time",
            pricing="on-demand")
# Hopper's k from the datasheet figures written out here (NVIDIA H100 datasheet: H100 NVL
# 835.5 TFLOP/s dense BF16 at 400 W, H100 SXM 989 at 700 W), not from search.power
HOPPER_K = math.log(835.5 / 989.0) / math.log(400.0 / 700.0)


@pytest.fixture(scope="module")
def pair():
    """The same plan without and with a 500 W cap (Meta's Grand Teton H100 setting)."""
    return gpuplan.plan(**H100), gpuplan.plan(**H100, power_limit_watts=500)


def _estimate(row, **kw):
    return gpuplan.estimate(model="llama3-8b", gpu=row.gpu, gpus=row.gpus, tp=row.tp,
                            pp=row.pp, zero=row.zero, micro_batch=row.micro_batch,
                            global_batch=row.global_batch, seq_len=row.seq_len,
                            precision=row.precision, recompute=row.recompute, **kw)


def test_a_compute_bound_plan_slows_by_the_hopper_factor(pair):
    """The matmul time of the winner's layout grows by exactly 1 / factor (1e-9: the same
    arithmetic with the peak scaled), factor = (500/700)^k from the datasheet; the step,
    which also holds unscaled memory-bound and overhead time, grows by more than 1 and at
    most 1 / factor, and so does the fastest plan's step (any layout's step lies there)."""
    free, capped = pair
    factor = (500.0 / 700.0) ** HOPPER_K
    assert dict(capped.power)["h100-sxm"].factor == pytest.approx(factor, rel=1e-12)
    w = capped.plans[0]
    assert w.bottleneck == "compute"
    e0, e1 = _estimate(w), _estimate(w, power_limit_watts=500)
    c0, c1 = dict(e0.time_breakdown_s)["compute_s"], dict(e1.time_breakdown_s)["compute_s"]
    assert c1 == pytest.approx(c0 / factor, rel=1e-9)
    assert e1.step_time_s == pytest.approx(w.step_time_s, rel=1e-9)
    assert 1 < e1.step_time_s / e0.step_time_s <= 1 / factor + 1e-12
    ratio = w.step_time_s / free.plans[0].step_time_s
    assert 1 < ratio <= 1 / factor + 1e-12


def test_energy_per_day_drops_by_the_gpu_power_cut(pair, cat):
    """Each GPU draws W instead of its TDP: the facility energy per wall-clock day falls by
    gpus x (TDP - W) x GPU load x PUE x 24 h (host power unchanged), and the run's energy
    falls although it runs longer."""
    free, capped = pair
    site = site_from_catalog(cat)
    a, b = free.plans[0], capped.plans[0]
    assert a.gpus == b.gpus
    cut = b.gpus * (700.0 - 500.0) * site.gpu_load_factor * site.pue * 24 / 1000
    assert (a.energy_kwh / a.time_to_train_days - b.energy_kwh / b.time_to_train_days
            == pytest.approx(cut, rel=1e-9))
    assert b.energy_kwh < a.energy_kwh


def test_a_gpu_under_the_limit_runs_unchanged():
    """A100 80GB (SXM) has a 400 W TDP: capped at 400 W (factor min(1, 1^k) = 1) and at
    450 W every row is the uncapped one, energy included; only the reproduce line and the
    factor differ."""
    kw = dict(model="llama3-8b", tokens="100B", gpu="a100-80gb", max_gpus=16, top=5)
    base = to_json(gpuplan.plan(**kw))
    for watts in (400, 450):
        doc = to_json(gpuplan.plan(**kw, power_limit_watts=watts))
        assert doc["power"]["a100-80gb"]["factor"] == 1.0
        for x, y in zip(base["plans"], doc["plans"], strict=True):
            assert y.pop("power_factor") == 1.0
            assert y.pop("reproduce") == x["reproduce"] + f" --power-limit-watts {watts}"
            assert {**x, "reproduce": None} == {**y, "reproduce": None}


def test_the_plan_says_the_limit_and_each_factor(pair):
    free, capped = pair
    text = render_text(capped, timing=False)
    head = text.splitlines()[0]
    assert head.endswith("power limit 500 W per GPU")
    line = next(ln for ln in text.splitlines() if ln.startswith("power limit 500 W per GPU"))
    assert "h100-sxm peak FLOP/s x 0.904 = (500 / 700 W)^0.301" in line
    assert "from vendor peaks" in line
    doc = json.loads(json.dumps(to_json(capped)))
    assert doc["assumptions"]["power_limit_watts"] == 500.0
    assert doc["power"]["h100-sxm"]["basis"] == "vendor-peak"
    assert all(r["power_factor"] == doc["power"][r["gpu"]]["factor"] for r in doc["plans"])
    # without the flag: no key, no line (the goldens hold the rest byte for byte)
    plain = to_json(free)
    assert "power" not in plain and "power_limit_watts" not in plain["assumptions"]
    assert all("power_factor" not in r for r in plain["plans"])
    assert "power limit" not in render_text(free, timing=False)


def test_the_reproduce_line_round_trips_to_estimate(run_cli, run_json):
    """The winner's line carries --power-limit-watts; `estimate` of it gives the row's step
    time, days, cost and energy (1e-9: the same vectorized arithmetic)."""
    argv = ("plan", "--model", "llama3-8b", "--tokens", "100B", "--gpu", "h100-sxm",
            "--max-gpus", "16", "--power-limit-watts", "512.5")
    code, text, err = run_cli(*argv, "--no-timing")
    assert code == 0, err
    line = next(ln for ln in text.splitlines() if ln.startswith("reproduce the winner: "))
    line = line.removeprefix("reproduce the winner: ")
    plan = run_json(*argv)
    assert plan["reproduce"] == line and line.endswith("--power-limit-watts 512.5")
    words = shlex.split(line)
    e = run_json(*words[1:])
    w = plan["plans"][0]
    for key in ("step_time_s", "time_to_train_days", "cost_usd", "energy_kwh"):
        assert e[key] == pytest.approx(w[key], rel=1e-9), key
    assert e["power"]["factor"] == pytest.approx(w["power_factor"], rel=1e-12)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "abc", "1e30"])
def test_bad_input_is_one_line_on_the_cli(run_cli, value):
    code, out, err = run_cli("plan", "--model", "llama3-8b", "--tokens", "1T",
                             f"--power-limit-watts={value}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--power-limit-watts" in err and "Traceback" not in err


@pytest.mark.parametrize("value", [0, -5.0, float("nan"), float("inf"), "abc", True])
def test_bad_input_is_one_line_in_the_api(value):
    with pytest.raises(ConfigError, match="--power-limit-watts must be a number above 0") as e:
        gpuplan.plan(model="llama3-8b", tokens="1T", gpu="h100-sxm", power_limit_watts=value)
    assert "\n" not in str(e.value)


def test_exports_state_the_limit(run_cli):
    """No launch config can set a GPU's power: each export's header says the prediction
    assumed it, how to set it, and the reproduce line carries it; without it, no line."""
    base = ("plan", "--model", "llama3-8b", "--tokens", "100B", "--gpu", "h100-sxm",
            "--max-gpus", "16")
    for target in ("megatron", "torchtitan", "deepspeed", "torchrun", "slurm", "skypilot"):
        code, out, err = run_cli(*base, "--power-limit-watts", "500", "--export", target)
        assert code == 0, err
        assert "every GPU held to 500 W" in out and "nvidia-smi -pl 500" in out, target
        assert "--power-limit-watts 500" in out, target
        code, out, err = run_cli(*base, "--export", target)
        assert code == 0 and "power limit" not in out and "--power-limit-watts" not in out


def test_the_web_request_takes_the_limit():
    """The web's plan fields come from the CLI parser: the flag is a number field with the
    CLI's bounds, and the JSON the server returns is the library's."""
    f = adapter.fields("plan")["power_limit_watts"]
    assert (f.kind, f.minimum, f.exclusive_minimum) == ("number", 0, True)
    doc = adapter.run("plan", {"model": "llama3-8b", "tokens": "100B", "gpu": ["h100-sxm"],
                               "max_gpus": 8, "power_limit_watts": 500})
    assert doc["assumptions"]["power_limit_watts"] == 500.0
    assert doc["reproduce"].endswith("--power-limit-watts 500")


def test_the_fuzzer_draws_the_flag():
    from fuzz.gen import PLAN

    assert PLAN["--power-limit-watts"] == "watts"


def _doc(result) -> dict:
    d = to_json(result)
    d.pop("elapsed_s", None)
    return d


def test_the_limit_is_part_of_the_search_cache_key():
    """The web workers' search cache keys on the request shape: a limited plan after an
    unlimited one of the same shape misses, and equals the plan computed without a cache."""
    from gpuplan.search import cache

    store = cache.SearchCache()
    cache.install(store)
    try:
        gpuplan.plan(**H100)
        cached = _doc(gpuplan.plan(**H100, power_limit_watts=500))
        assert (store.hits, store.misses) == (0, 2)
    finally:
        cache.install(None)
    assert cached == _doc(gpuplan.plan(**H100, power_limit_watts=500))


def test_pruning_stays_exact_under_a_limit(monkeypatch):
    """The search skips rows by a lower bound computed from each group's (limited) hardware:
    with and without the skipping, the whole JSON of a limited plan over two families with
    different factors is the same, and rows were skipped."""
    from gpuplan.search import prune

    ask = dict(model="llama3-8b", tokens="300B", gpu=["h100-sxm", "b200"], max_gpus=64,
               power_limit_watts=600)
    monkeypatch.setattr(prune, "stats", prune.Stats())
    monkeypatch.setattr(prune, "ENABLED", True)
    pruned = _doc(gpuplan.plan(**ask))
    assert prune.stats.skipped > 0 and not prune.stats.fell_back
    monkeypatch.setattr(prune, "ENABLED", False)
    assert pruned == _doc(gpuplan.plan(**ask))
