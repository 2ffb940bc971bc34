"""`gpuplan estimate` end to end: contract keys, readable text, bad input, fit advice (#3 #4 #5)."""

from __future__ import annotations

import json
import math
import re
import shlex

import pytest

DONE = ("estimate --model llama2-70b --gpu a100-80gb --gpus 64 --tp 8 --pp 2 --zero 1 "
        "--seq-len 4096 --micro-batch 1 --global-batch 1024 --recompute selective").split()


def test_issue3_example_json_contract(run_json):
    r = run_json(*DONE)
    assert r["params"] == pytest.approx(69e9, rel=0.01)
    parts = r["memory_gib"]
    assert set(parts) >= {"weights", "gradients", "optimizer", "activations", "other", "total"}
    assert math.isclose(sum(parts[k] for k in ("weights", "gradients", "optimizer",
                                               "activations", "other")), parts["total"],
                        rel_tol=1e-9)
    assert r["gpu_memory_gib"] == pytest.approx(80.0)
    assert r["fits"] is (parts["total"] <= r["gpu_memory_gib"])
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "time_to_train_days", "gpu_hours",
                "bottleneck", "cost_usd"):
        assert key in r
    assert 0 < r["mfu"] < 1 and r["hfu"] >= r["mfu"]
    assert r["cost_usd"] is None  # no tokens, no price


def test_issue3_example_text(run_cli):
    code, out, _ = run_cli(*DONE)
    assert code == 0
    assert "GiB" in out and "weights" in out and "activations" in out
    assert re.search(r"fits, with [0-9.]+ GiB headroom|DOES NOT FIT", out)
    assert "tokens/s" in out and "MFU" in out


def test_tokens_suffixes_agree_and_cost_is_rate_times_gpu_hours(run_json):
    base = DONE + ["--tokens", "2T", "--usd-per-gpu-hour", "2.0"]
    a = run_json(*base)
    b = run_json(*DONE, "--tokens", "2e12", "--usd-per-gpu-hour", "2.0")
    assert a["time_to_train_days"] == b["time_to_train_days"]
    # on-demand at a flat rate: cost = rate x GPU-hours (wall time, goodput included)
    assert a["cost_usd"] == pytest.approx(2.0 * a["gpu_hours"], rel=1e-9)
    assert a["gpu_hours"] == pytest.approx(a["time_to_train_days"] * 24 * 64, rel=1e-9)
    # useful time is tokens / throughput; wall time divides by goodput
    useful_days = 2e12 / a["tokens_per_s"] / 86400
    assert a["time_to_train_days"] == pytest.approx(useful_days / a["goodput"], rel=1e-9)


@pytest.mark.parametrize("extra, message", [
    (["--gpus", "60"], "--gpus 60 is not divisible by tp*pp*cp = 16"),
    (["--tp", "3", "--gpus", "6"], "does not divide the model's 64 attention heads"),
    (["--pp", "4", "--gpus", "32", "--first-stage-layers", "78"], "leave 2 of the model's 80 "
     "layers for the other 3 pipeline stages; each needs at least one"),
    (["--micro-batch", "64", "--global-batch", "64"], "exceeds --global-batch"),
    (["--precision", "fp8"], "a100-80gb has no FP8"),
    (["--precision", "int4"], "unknown precision 'int4'"),
    (["--recompute", "some"], "unknown recompute mode 'some'"),
    (["--tokens", "lots"], "cannot read --tokens 'lots'"),
    (["--offer", "aws-p5.48xlarge-us-east-1"], "has h100-sxm GPUs, not a100-80gb"),
])
def test_bad_input_is_one_line(run_cli, extra, message):
    argv = [a for a in DONE]
    if "--gpus" in extra or "--tp" in extra or "--pp" in extra:
        i = argv.index("--gpus")
        del argv[i:i + 2]
        for flag in ("--tp", "--pp"):
            if flag in extra:
                j = argv.index(flag)
                del argv[j:j + 2]
    if "--micro-batch" in extra:
        for flag in ("--micro-batch", "--global-batch"):
            j = argv.index(flag)
            del argv[j:j + 2]
    code, out, err = run_cli(*argv, *extra)
    assert code == 2, (out, err)
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_gpu_suggests(run_cli):
    code, _, err = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h10")
    assert code == 2 and "did you mean" in err and "h100" in err


def test_no_model_is_one_line(run_cli):
    code, _, err = run_cli("estimate", "--gpu", "h100")
    assert code == 2 and "no model given" in err


def test_explicit_model_flags_defaults(run_json):
    r = run_json("estimate", "--layers", "24", "--hidden", "2048", "--heads", "16", "--vocab",
                 "50257", "--gpu", "h100", "--gpus", "8")
    # GELU MLP of 4*hidden, untied embeddings: 24 * (4h^2 + 8h^2 + 2h) + 2 V h + h
    h, V = 2048, 50257
    assert r["params"] == 24 * (12 * h * h + 2 * h) + 2 * V * h + h


def test_advice_for_a_model_that_does_not_fit_is_computed(run_json):
    """Each suggestion names flags; re-running with them must fit (the advice is computed)."""
    argv = ["estimate", "--model", "llama2-13b", "--gpu", "a100-80gb", "--gpus", "8",
            "--seq-len", "4096", "--micro-batch", "2", "--global-batch", "64"]
    r = run_json(*argv)
    assert not r["fits"] and r["suggestions"]
    tried = 0
    for s in r["suggestions"]:
        flags = re.findall(r"(--[a-z-]+(?: [0-9a-z]+)?)", s)
        if not flags or "GPUs" in s:
            continue
        new = list(argv)
        for f in flags:
            parts = shlex.split(f)
            if parts[0] in new:
                j = new.index(parts[0])
                del new[j:j + len(parts)]
            new += parts
        r2 = run_json(*new)
        assert r2["fits"], (s, r2["memory_gib"])
        tried += 1
    assert tried >= 1


def test_json_output_is_plain(run_cli):
    code, out, _ = run_cli(*DONE, "--tokens", "1T", "--json")
    json.loads(out)  # no NaN, no numpy types
    assert "NaN" not in out and "Infinity" not in out


def test_pricing_modes_of_one_offer(run_json):
    """On-demand and reserved rates come from the offer; spot adds interruptions (lower goodput);
    owning uses the system's TCO per used GPU-hour."""
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "64", "--tp", "2",
            "--tokens", "1T"]
    od = run_json(*base, "--offer", "aws-p5.48xlarge-us-east-1", "--pricing", "on-demand")
    spot = run_json(*base, "--offer", "aws-p5.48xlarge-us-east-1", "--pricing", "spot")
    own = run_json(*base, "--system", "dgx-h100", "--pricing", "own")
    assert od["pricing"] == "on-demand" and od["usd_per_gpu_hour"] == pytest.approx(55.04 / 8)
    assert od["cost_usd"] == pytest.approx(od["usd_per_gpu_hour"] * od["gpu_hours"], rel=1e-9)
    assert spot["goodput"] < od["goodput"]
    assert spot["cost_usd"] < od["cost_usd"]
    assert own["pricing"] == "own" and 1.0 < own["usd_per_gpu_hour"] < 4.0
    for r in (od, spot, own):
        assert r["energy_kwh"] > 0 and r["co2e_kg"] > 0
        # energy = GPUs x (TDP + host) x load factor x hours x PUE: at least the GPUs' share
        assert r["energy_kwh"] >= 64 * 700 * 0.5 * r["time_to_train_days"] * 24 / 1000


def test_pricing_without_a_price_source_is_one_line(run_cli):
    code, _, err = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8",
                           "--tokens", "1T", "--pricing", "spot")
    assert code == 2 and "needs a cloud offer" in err
    code, _, err = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8",
                           "--tokens", "1T", "--pricing", "weekly")
    assert code == 2 and "unknown pricing mode 'weekly'" in err


def test_time_breakdown_sums_to_the_step(run_json):
    r = run_json(*DONE)
    assert sum(r["time_breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-9)


def test_single_node_offer_without_a_network_runs_and_two_nodes_do_not(run_json):
    """An 8-GPU box with no inter-instance network trains on its own NVLink/Infinity Fabric; a
    second box would need a network it does not have (infinite step time, not a crash)."""
    base = ["estimate", "--model", "llama2-7b", "--gpu", "mi300x",
            "--offer", "do-gpu-mi300x8-1536gb-atl1", "--tokens", "140B"]
    one = run_json(*base, "--gpus", "8")
    assert one["tokens_per_s"] > 0 and one["time_to_train_days"] > 0
    two = run_json(*base, "--gpus", "16")
    assert two["tokens_per_s"] == 0 and two["time_to_train_days"] is None


def test_a_layout_the_platform_cannot_run_is_infeasible_with_its_reason(run_json, run_cli):
    """Issue #10: two 8-GPU instances without a network used to print `step inf` and null
    times; now the answer is `feasible: false` with the reason, in JSON and in the text."""
    argv = ["estimate", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "16",
            "--offer", "do-gpu-mi300x8-1536gb-atl1", "--tokens", "140B"]
    r = run_json(*argv)
    assert r["feasible"] is False and r["infeasible_code"] == "no_link"
    assert r["infeasible_reason"].startswith("cannot run: traffic must cross a link")
    assert r["step_time_s"] is None and r["time_to_train_days"] is None
    code, out, _ = run_cli(*argv)
    assert code == 0 and "cannot run:" in out and "inf" not in out.replace("infeasible", "")


def test_a_million_gpus_never_finish_and_say_so(run_json, run_cli):
    """Issue #10: `--gpus 1000000` gave `inf days` (goodput 0%); the cluster fails faster than
    it can checkpoint and restart, so the run is infeasible, with that reason."""
    argv = ["estimate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "1000000", "--tp",
            "8", "--tokens", "1T"]
    r = run_json(*argv)
    assert r["feasible"] is False and r["infeasible_code"] == "no_goodput"
    assert r["time_to_train_days"] is None and r["cost_usd"] is None
    code, out, _ = run_cli(*argv)
    assert code == 0 and "cannot finish: at this GPU count" in out
    assert " inf " not in out and "nan" not in out.lower()


@pytest.mark.parametrize("argv, code", [
    (["--model", "llama3-8b", "--gpu", "rtx-4090", "--gpus", "64", "--zero", "3",
      "--recompute", "full"], "consumer_beyond_one_node"),
    (["--model", "llama3-8b", "--gpu", "h100", "--gpus", "32", "--tp", "16"],
     "tp_beyond_scale_up"),
])
def test_estimate_warns_with_the_rules_plan_excludes_with(run_json, run_cli, argv, code):
    """Issue #9 item 4: one feasibility module; `estimate` runs the configuration and warns
    (JSON `warnings` with code and message, a text line), `plan` excludes with the same code."""
    r = run_json("estimate", *argv)
    assert [w["code"] for w in r["warnings"]] == [code]
    _, out, _ = run_cli("estimate", *argv)
    assert "warnings (`gpuplan plan` would exclude this configuration):" in out
    assert r["warnings"][0]["message"] in out


def test_bottleneck_is_the_largest_part_and_a_small_micro_batch_is_named(run_json, run_cli):
    """Issue #10 item 10: BERT-Large on one A100 spends most of its step in fixed per-layer
    overhead; the bottleneck says so and the text says the micro-batch is too small."""
    argv = ["estimate", "--model", "bert-large", "--gpu", "a100-80gb", "--gpus", "1"]
    r = run_json(*argv)
    parts = r["time_breakdown_s"]
    assert parts["overhead_s"] == max(parts.values())
    assert r["bottleneck"] == "fixed overhead" and r["micro_batch_too_small"] is True
    _, out, _ = run_cli(*argv)
    assert "bottleneck: fixed overhead" in out and "micro-batch is too small" in out
    big = run_json("estimate", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "64",
                   "--tp", "8", "--zero", "1", "--micro-batch", "1")
    assert big["bottleneck"] == "compute" and big["micro_batch_too_small"] is False
