"""Metamorphic properties through the CLI (issue #10): change one input in a known way and check
that the answer changes the way it must. Memory properties of the estimators themselves are in
tests/test_memory_properties.py.

- doubling the tokens doubles the time and the on-demand cost (every part of a run scales with
  its length: steps, failures, checkpoints, GPU-hours);
- a tighter deadline never yields a cheaper winner (objective cost), and a tighter budget never
  an earlier one (objective time): a minimum over fewer options cannot be lower; and the
  winner always keeps to the tighter limit;
- full recomputation never raises activation memory.
"""

from __future__ import annotations

import contextlib
import io
import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main

# 1e-9: both runs do the same float operations on values that differ by a factor of two,
# which is exact in binary; only the goodput terms round differently (observed < 1e-12).
REL = 1e-9
MODELS = ("llama2-7b", "llama2-13b", "llama3-8b", "mixtral-8x7b", "bert-large")
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)


def cli_json(*argv: str) -> dict | None:
    """The JSON answer, or None when the command refused the input (exit 2)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "--json"])
    assert rc in (0, 2), err.getvalue()
    return json.loads(out.getvalue()) if rc == 0 else None


def plan(model: str, gpu: str, tokens: float, *extra: str) -> dict | None:
    return cli_json("plan", "--model", model, "--gpu", gpu, "--tokens", repr(tokens),
                    "--max-gpus", "256", "--quiet", *extra)


def winner(result: dict | None) -> dict | None:
    return result["plans"][0] if result and result.get("plans") else None


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(("h100", "a100-80gb")),
       gpus=st.sampled_from((8, 16, 64)), tp=st.sampled_from((1, 2, 8)),
       tokens=st.floats(1e10, 1e13))
def test_doubling_tokens_doubles_time_and_on_demand_cost(model, gpu, gpus, tp, tokens):
    offer = {"h100": "aws-p5.48xlarge-us-east-1", "a100-80gb": "aws-p4de.24xlarge-us-east-1"}
    args = ("estimate", "--model", model, "--gpu", gpu, "--gpus", str(gpus), "--tp", str(tp),
            "--zero", "3", "--offer", offer[gpu], "--pricing", "on-demand")
    one = cli_json(*args, "--tokens", repr(tokens))
    assume(one is not None)
    two = cli_json(*args, "--tokens", repr(2 * tokens))
    assert two is not None
    for key in ("time_to_train_days", "gpu_hours", "cost_usd", "energy_kwh"):
        assert close(two[key], 2 * one[key]), (key, one[key], two[key])


@SETTINGS
@given(model=st.sampled_from(MODELS[:4]), gpu=st.sampled_from(("h100", "a100-80gb")),
       tokens=st.floats(5e10, 2e12))
def test_plan_on_demand_scales_with_tokens(model, gpu, tokens):
    """With one pricing mode whose cost is per hour, every candidate's time and cost double,
    so the winner is the same layout at twice the time and cost. (A deadline far beyond both
    runs replaces the default one of 365 days, which would rule out the doubled run.)"""
    args = ("--pricing", "on-demand", "--deadline-days", "1e6")
    one = winner(plan(model, gpu, tokens, *args))
    assume(one is not None)
    two = winner(plan(model, gpu, 2 * tokens, *args))
    assert two is not None
    assert close(two["time_to_train_days"], 2 * one["time_to_train_days"])
    assert close(two["cost_usd"], 2 * one["cost_usd"])


@SETTINGS
@given(model=st.sampled_from(MODELS[:4]), gpu=st.sampled_from(("h100", "a100-80gb")),
       tokens=st.floats(5e10, 2e12), loose=st.floats(5, 400), shrink=st.floats(0.2, 0.95))
def test_tighter_deadline_never_gives_a_cheaper_or_later_winner(model, gpu, tokens, loose,
                                                                shrink):
    a = winner(plan(model, gpu, tokens, "--deadline-days", f"{loose:.6g}"))
    assume(a is not None)
    tight = float(f"{loose * shrink:.6g}")
    b = winner(plan(model, gpu, tokens, "--deadline-days", f"{tight:.6g}"))
    if b is None:
        return  # nothing meets the tighter deadline: an answer, not a violation
    assert b["time_to_train_days"] <= tight * (1 + REL)
    assert b["cost_usd"] >= a["cost_usd"] * (1 - REL)


@SETTINGS
@given(model=st.sampled_from(MODELS[:4]), gpu=st.sampled_from(("h100", "a100-80gb")),
       tokens=st.floats(5e10, 2e12), loose=st.floats(1e4, 1e7), shrink=st.floats(0.2, 0.95))
def test_tighter_budget_never_gives_an_earlier_or_dearer_winner(model, gpu, tokens, loose,
                                                                shrink):
    args = ("--objective", "time", "--budget-usd")
    a = winner(plan(model, gpu, tokens, *args, f"{loose:.6g}"))
    assume(a is not None)
    tight = float(f"{loose * shrink:.6g}")
    b = winner(plan(model, gpu, tokens, *args, f"{tight:.6g}"))
    if b is None:
        return
    assert max(b["cost_usd"], b["cash_up_front_usd"]) <= tight * (1 + REL)
    assert b["time_to_train_days"] >= a["time_to_train_days"] * (1 - REL)


@SETTINGS
@given(model=st.sampled_from(MODELS), tp=st.sampled_from((1, 2, 4)),
       pp=st.sampled_from((1, 2, 4)), dp=st.sampled_from((1, 2)),
       mb=st.sampled_from((1, 2, 4)), seq=st.sampled_from((512, 2048, 4096)),
       zero=st.sampled_from(("0", "1", "3")), no_sp=st.booleans(), no_flash=st.booleans())
def test_full_recompute_never_raises_activation_memory(model, tp, pp, dp, mb, seq, zero,
                                                       no_sp, no_flash):
    args = ["estimate", "--model", model, "--gpu", "h100", "--tp", str(tp), "--pp", str(pp),
            "--dp", str(dp), "--micro-batch", str(mb), "--seq-len", str(seq), "--zero", zero]
    args += ["--no-sp"] * no_sp + ["--no-flash-attention"] * no_flash
    results = {}
    for mode in ("none", "selective", "full"):
        results[mode] = cli_json(*args, "--recompute", mode)
        assume(results[mode] is not None)
    act = {m: r["memory_gib"]["activations"] for m, r in results.items()}
    assert act["full"] <= act["selective"] * (1 + REL) and act["full"] <= act["none"] * (1 + REL)
    assert act["selective"] <= act["none"] * (1 + REL)
