"""Issue 10 item 1: no typed number starts unbounded work. Each case gives one line and exit 2,
and the work done is counted (never timed): the rules reject the value before any memory or
timing evaluation, and every search left runs over the model's real sizes (#10)."""

from __future__ import annotations

import pytest

from gpuplan import rules
from gpuplan.errors import ConfigError
from gpuplan.spec import MAX_BATCH, Layout, ModelSpec

BIG = 1_000_000_000
HUGE = 10**30  # beyond int64: must be compared exactly, not wrapped


@pytest.fixture
def no_physics(monkeypatch):
    """Fail the test if the CLI gets as far as evaluating the configuration."""
    from gpuplan.search import single

    def refuse(*a, **k):
        raise AssertionError("the estimate ran; the layout should have been rejected first")

    monkeypatch.setattr(single, "estimate", refuse)


@pytest.fixture
def divisor_calls(monkeypatch):
    """Record the search length of every divisor hint (how many candidates it tries)."""
    calls: list[int] = []
    real = rules.largest_divisor

    def counted(n: int, at_most: int) -> int:
        calls.append(min(n, at_most))
        return real(n, at_most)

    monkeypatch.setattr(rules, "largest_divisor", counted)
    return calls


BASE = ["estimate", "--model", "llama2-7b", "--gpu", "h100"]


@pytest.mark.parametrize("extra, message", [
    (["--tp", str(BIG)], "--tp 1,000,000,000 is more than the model's 32 attention heads; "
                         "use a divisor such as 32"),
    (["--pp", str(BIG)], "--pp 1,000,000,000 x --vpp 1 pipeline stages are more than the "
                         "model's 32 layers"),
    (["--vpp", str(BIG)], "--pp 1 x --vpp 1,000,000,000 pipeline stages are more than the "
                          "model's 32 layers"),
    (["--first-stage-layers", str(BIG)], "--first-stage-layers 1,000,000,000 and "
     "--last-stage-layers 0 must be from 0 (the default split) to the model's 32 layers"),
    (["--micro-batch", str(BIG), "--global-batch", str(BIG)],
     "--micro-batch and --global-batch must be from 1 to 16,777,216 sequences, got "
     "1,000,000,000 and 1,000,000,000"),
    (["--dp", str(BIG)], "--micro-batch and --global-batch must be from 1 to 16,777,216"),
    (["--cp", str(BIG)], "--cp 1,000,000,000: the sequence length (4096) must be at least 2*cp"),
    (["--ep", str(BIG)], "--ep 1,000,000,000 needs a mixture-of-experts model; llama2-7b is "
                         "dense"),
    (["--seq-len", str(BIG)], "--seq-len must be from 1 to 134,217,728 tokens, got "
                              "1,000,000,000"),
    (["--tp", str(HUGE)], "--tp about 10^30 is more than the model's 32 attention heads"),
])
def test_huge_degrees_are_one_line_exit_2_before_any_work(run_cli, no_physics, divisor_calls,
                                                          extra, message):
    code, out, err = run_cli(*BASE, *extra)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and len(err) < 200
    assert all(n <= 32 for n in divisor_calls)  # hints search the model's sizes only


def test_moe_expert_degree_is_bounded_by_the_experts(run_cli, no_physics):
    code, _, err = run_cli("estimate", "--model", "mixtral-8x7b", "--gpu", "h100",
                           "--ep", str(BIG), "--dp", "8")
    assert code == 2 and "--ep 1,000,000,000 is more than the model's 8 experts" in err


def test_huge_layer_count_is_rejected_by_the_model(run_cli, no_physics):
    code, _, err = run_cli("estimate", "--layers", str(BIG), "--hidden", "4096", "--heads",
                           "32", "--vocab", "32000", "--gpu", "h100")
    assert code == 2
    assert ("model custom: layers must be a whole number from 0 to 10,000 (the largest this tool "
            "plans for), got 1000000000") in err


@pytest.mark.parametrize("field", ["layers", "hidden", "vocab", "experts", "max_seq_len"])
def test_model_sizes_are_bounded(field):
    """A config.json with num_hidden_layers >= 1e9 (or any size beyond the bounds) is rejected
    by ModelSpec itself, whatever parser built it."""
    kw = dict(id="m", name="m", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=100)
    kw[field] = BIG
    if field == "experts":
        kw["experts_per_token"] = 1
    with pytest.raises(ConfigError, match=f"model m: {field} must be a whole number from"):
        ModelSpec(**kw)


def test_max_seq_len_must_be_positive():
    with pytest.raises(ConfigError, match="max_seq_len must be a whole number from 1 to"):
        ModelSpec(id="m", name="m", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256,
                  vocab=100, max_seq_len=-100)


def test_largest_divisor_tries_at_most_n_candidates():
    """The hint's search is bounded by n, not by the typed number (it was range(1, at_most))."""
    assert rules.largest_divisor(32, 10**30) == 32
    assert rules.largest_divisor(80, 3) == 2
    assert rules.largest_divisor(7, 6) == 1


def test_fit_micro_batch_divisors_take_sqrt_steps(monkeypatch):
    """fit._variants finds the micro-batch divisors in isqrt(mb) steps (the loop is
    range(1, isqrt(mb) + 1)), so the largest accepted micro-batch costs 4,096 steps, not 16M;
    and the divisors found are exactly the proper divisors."""
    from gpuplan.search import fit

    seen: list[int] = []
    real = fit.math.isqrt

    class CountingMath:
        @staticmethod
        def isqrt(n: int) -> int:
            seen.append(n)
            return real(n)

    monkeypatch.setattr(fit, "math", CountingMath)
    model = ModelSpec(id="m", name="m", layers=4, hidden=64, heads=4, kv_heads=4, ffn=256,
                      vocab=100)
    base = {f: getattr(Layout(), f) for f in Layout.__dataclass_fields__}
    base.update(micro_batch=MAX_BATCH, global_batch=MAX_BATCH)
    got = [ov["micro_batch"] for k, _, ov in fit._variants(model, base, 1) if k == "micro_batch"]
    assert seen == [MAX_BATCH] and real(MAX_BATCH) == 4096
    assert got == [2**k for k in range(23, -1, -1)]


def test_layout_check_and_valid_mask_are_one_definition():
    """check raises exactly where valid_mask is False, over a grid with every rule broken once."""
    import numpy as np

    model = ModelSpec(id="m", name="m", layers=8, hidden=256, heads=8, kv_heads=2, ffn=1024,
                      vocab=1000)
    cases = [dict(), dict(tp=3), dict(tp=16), dict(pp=2, first_stage_layers=8), dict(pp=16),
             dict(pp=4, vpp=3), dict(last_stage_layers=9), dict(ep=2, dp=2,
             global_batch=2), dict(cp=3, seq_len=512), dict(cp=1024, seq_len=512),
             dict(zero=4), dict(micro_batch=4, global_batch=2), dict(dp=3, global_batch=4),
             dict(tp=0), dict(global_batch=MAX_BATCH + 1), dict(seq_len=0), dict(vpp=3)]
    grid = Layout(**{f: np.array([c.get(f, getattr(Layout(), f)) for c in cases])
                     for f in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch",
                               "global_batch", "seq_len", "first_stage_layers",
                               "last_stage_layers")})
    mask = grid.valid_mask(model)
    for ok, c in zip(mask, cases, strict=True):
        try:
            Layout(**c).check(model)
            raised = False
        except ConfigError:
            raised = True
        assert raised == (not ok), c
    assert mask.tolist() == [True] + [False] * (len(cases) - 1)
