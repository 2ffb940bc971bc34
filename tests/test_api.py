"""The public Python API: `gpuplan.estimate` / `gpuplan.plan` / `gpuplan.tco` return typed, frozen
results that agree with the CLI's JSON; `import gpuplan` stays light (#9)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

import gpuplan
from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.report import estimate as estimate_report
from gpuplan.report import plan as plan_report
from gpuplan.report import tco as tco_report
from gpuplan.search.ownership import TcoResult
from gpuplan.search.results import Estimate, PlanResult, PlanRow

ESTIMATE = dict(model="llama2-70b", gpu="a100-80gb", gpus=64, tp=8, pp=2, zero=1, seq_len=4096,
                micro_batch=1, global_batch=1024, recompute="selective")


def test_import_is_light():
    """`import gpuplan` loads neither numpy nor the API; the first attribute use loads them."""
    code = ("import sys, gpuplan; a = [m in sys.modules for m in ('numpy', 'gpuplan.api')]; "
            "gpuplan.tco; print(*a, 'gpuplan.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True"]


def test_estimate_is_callable_after_the_estimators_are_imported():
    """`gpuplan.estimate` is also the estimators' package; calling it is the API call."""
    import gpuplan.estimators.memory  # noqa: F401  (binds the package to gpuplan.estimate)

    assert gpuplan.estimate(**ESTIMATE).gpus == 64


def test_estimate_is_typed_frozen_and_matches_the_cli(run_json):
    e = gpuplan.estimate(**ESTIMATE, tokens="2T", usd_per_gpu_hour=2.0)
    assert isinstance(e, Estimate) and e.feasible and e.warnings == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.gpus = 8  # type: ignore[misc]
    cli = run_json("estimate", "--model", "llama2-70b", "--gpu", "a100-80gb", "--gpus", "64",
                   "--tp", "8", "--pp", "2", "--zero", "1", "--seq-len", "4096",
                   "--micro-batch", "1", "--global-batch", "1024", "--recompute", "selective",
                   "--tokens", "2T", "--usd-per-gpu-hour", "2.0")
    assert estimate_report.to_json(e) == cli
    assert e.layout.tp == 8 and e.memory_gib.total == cli["memory_gib"]["total"]


def test_tco_is_typed_frozen_and_matches_the_cli(run_json):
    t = gpuplan.tco(system="dgx-h100", nodes=4, years=4, utilization=0.7, compare_cloud=True)
    assert isinstance(t, TcoResult) and t.own.gpus == 32 and t.cloud and t.break_even
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.nodes = 8  # type: ignore[misc]
    cli = run_json("tco", "--system", "dgx-h100", "--nodes", "4", "--years", "4",
                   "--utilization", "0.7", "--compare-cloud")
    assert tco_report.to_json(t) == cli


def test_tco_site_flags_use_the_cli_names(run_json):
    """`spot_interruptions` is `--spot-interruptions`; a pricing mode may be one string."""
    t = gpuplan.tco(system="dgx-h100", electricity=0.2, spot_interruptions=0.01,
                    compare_cloud=True, pricing="spot", cloud="aws")
    cli = run_json("tco", "--system", "dgx-h100", "--electricity", "0.2",
                   "--spot-interruptions", "0.01", "--compare-cloud", "--pricing", "spot",
                   "--cloud", "aws")
    assert tco_report.to_json(t) == cli
    assert {r.pricing for r in t.cloud} == {"spot"}


def test_tokens_as_number_or_text_agree():
    a = gpuplan.estimate(**ESTIMATE, tokens="15T")
    b = gpuplan.estimate(**ESTIMATE, tokens=15e12)
    assert a.time_to_train_days == b.time_to_train_days and a.time_to_train_days > 0


def test_plan_is_typed_and_its_json_is_the_cli_contract():
    r = gpuplan.plan(model="llama3-8b", tokens="300B", gpu=["h100", "a100-80gb"], max_gpus=256,
                     deadline_days=60)
    assert isinstance(r, PlanResult) and isinstance(r.plans[0], PlanRow)
    assert {p.gpu for p in r.plans} <= {"h100-sxm", "a100-80gb"}
    out = json.loads(json.dumps(plan_report.to_json(r), allow_nan=False))
    assert out["plans"][0]["gpu"] == r.plans[0].gpu
    assert out["why"][0].startswith("winner: cheapest")
    assert out["best"]["cost"]["cost_usd"] == r.plans[0].cost_usd
    assert "plan for llama3-8b" in plan_report.render_text(r)


def test_a_gpu_given_as_one_string_is_a_filter_of_one():
    r = gpuplan.plan(model="llama3-8b", tokens="300B", gpu="h100", max_gpus=64)
    assert {p.gpu for p in r.plans} == {"h100-sxm"}


@pytest.mark.parametrize("call, message", [
    (lambda: gpuplan.estimate(**ESTIMATE, utilisation=0.5), "did you mean 'utilization'"),
    (lambda: gpuplan.plan(model="llama3-8b"), "--tokens is required"),
    (lambda: gpuplan.plan(model="llama3-8b", tokens="1T", deadline_days=float("inf")),
     "--deadline-days must be in the future (> 0) and finite, got inf"),
    (lambda: gpuplan.estimate(gpu="h100", model="llama3-8b", tokens=""), "cannot read --tokens"),
    (lambda: gpuplan.tco(system="dgx-h100", utilisation=0.5), "did you mean 'utilization'"),
    (lambda: gpuplan.tco(system="dgx-h100", electricty=0.1), "did you mean 'electricity'"),
    (lambda: gpuplan.tco(system="dgx-h100", years=0), "--years must be more than 0"),
])
def test_bad_arguments_raise_one_line_errors(call, message):
    with pytest.raises(GpuplanError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_attribute():
    with pytest.raises(AttributeError):
        gpuplan.tco_everything  # noqa: B018


def test_config_error_is_a_gpuplan_error():
    assert issubclass(ConfigError, GpuplanError)
