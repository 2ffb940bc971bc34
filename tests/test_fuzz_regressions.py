"""Regressions for what the fuzzer found once it knew the flags of #11-#15 (stack, fine-tuning,
shard groups, offload, recompute modes, power limits, --format, validate's modes): each case
was a silent wrong answer, an absurd number or a traceback; each is now one line and exit 2."""

from __future__ import annotations

import pytest
from fuzz.combos import contradiction
from fuzz.gen import generate
from fuzz.values import invalid

EST = ("estimate", "--model", "llama2-7b", "--gpu", "h100", "--gpus", "8")


@pytest.mark.parametrize(("argv", "message"), [
    # --lora-targets was silently ignored by full and freeze (--lora-rank was refused)
    ((*EST, "--lora-targets", "attn"),
     "gpuplan: error: --lora-targets applies to --method lora or qlora, not full\n"),
    ((*EST, "--method", "freeze", "--lora-targets", "mlp"),
     "gpuplan: error: --lora-targets applies to --method lora or qlora, not freeze\n"),
    # --padding-efficiency and --no-packing describe --samples: without them they did nothing
    ((*EST, "--padding-efficiency", "0.5"),
     "gpuplan: error: --padding-efficiency and --no-packing describe the samples: give "
     "--samples N (with --seq-len), or drop them\n"),
    (("plan", "--model", "llama2-7b", "--tokens", "1T", "--no-packing", "--quiet"),
     "gpuplan: error: --padding-efficiency and --no-packing describe the samples: give "
     "--samples N (with --seq-len), or drop them\n"),
    # 1e300 tokens printed days, GPU-hours and dollars 300 digits long
    ((*EST, "--tokens", "1e300"),
     "gpuplan: error: --tokens '1e300' is more than 1e+18 tokens (about 70,000 times Llama 3's "
     "15T); check the value\n"),
    # a 400-digit --samples raised OverflowError (int too large to convert to float)
    ((*EST, "--samples", "1" + "0" * 400),
     "gpuplan: error: --samples x --seq-len x --epochs is more than 1e+18 tokens (about 70,000 "
     "times Llama 3's 15T); check the values\n"),
    # samples x epochs overflowing to inf was reported as "--tokens 'inf'", a flag not given
    ((*EST, "--samples", "99999999999999999999", "--epochs", "1e300"),
     "gpuplan: error: --samples x --seq-len x --epochs is more than 1e+18 tokens (about 70,000 "
     "times Llama 3's 15T); check the values\n"),
    # too few samples named --tokens '409600.0', a flag not given
    ((*EST, "--samples", "100", "--no-packing"),
     "gpuplan: error: --samples x --seq-len x --epochs = 409,600 tokens is fewer than one "
     "optimizer step (4,194,304 tokens = global batch x sequence length); give at least "
     "4,194,304 tokens or a smaller --global-batch\n"),
    # validate's modes ignored each other's flags (--memory --family h100 printed every run)
    (("validate", "--memory", "--finetune"),
     "gpuplan: error: --memory and --finetune are separate validations; give one of them\n"),
    (("validate", "--memory", "--family", "h100"),
     "gpuplan: error: --memory validates its own data set and takes no --family; drop --family "
     "or run it without --memory\n"),
    (("validate", "--finetune", "--cross-validate"),
     "gpuplan: error: --finetune validates its own data set and takes no --cross-validate; "
     "drop --cross-validate or run it without --finetune\n"),
    (("validate", "--residuals"),
     "gpuplan: error: --residuals prints the residual table of --calibrate: give --calibrate "
     "--residuals\n"),
    # --json printed TOML (the flag that does not do what it says, as in #10 item 4)
    (("validate", "--calibrate", "--residuals", "--json"),
     "gpuplan: error: --residuals prints TOML (data/residuals.toml), not JSON; drop --json\n"),
])
def test_refused_in_one_line(run_cli, argv, message):
    assert run_cli(*argv) == (2, "", message)


@pytest.mark.parametrize("value", ["1e30", "10001", "nan", "-5", "0"])
def test_power_limit_is_a_bounded_number_of_watts(run_cli, value):
    """1e30 W was accepted and echoed as a 31-digit cap (above the TDP it changes nothing)."""
    rc, out, err = run_cli(*EST, f"--power-limit-watts={value}")
    assert (rc, out) == (2, "")
    assert err.startswith("gpuplan estimate: error: argument --power-limit-watts: must be ")
    assert "\n" not in err.rstrip("\n")


def test_power_limit_in_range_still_runs(run_cli):
    rc, out, _ = run_cli(*EST, "--power-limit-watts", "10000")
    assert rc == 0 and "power limit 10,000 W" in out


# --- the fuzzer's own judgement of the new flags: it must not call a valid case invalid ------

@pytest.mark.parametrize(("command", "flags", "bools", "why"), [
    ("estimate", {"--format": ["csv"]}, ("--json",), "--format csv|markdown with --json"),
    ("estimate", {"--offload": ["params"], "--model": ["llama2-7b"]}, (),
     "--offload params without --zero 3"),
    ("estimate", {"--offload": ["params"], "--model": ["llama2-7b"]}, ("--fsdp",), ""),
    ("estimate", {"--shard-group": ["3"], "--zero": ["3"], "--gpus": ["8"]}, (),
     "--shard-group not dividing dp*cp"),
    ("estimate", {"--shard-group": ["2"], "--zero": ["3"], "--gpus": ["8"]}, (), ""),
    ("estimate", {"--method": ["qlora"], "--gpu": ["mi300x"]}, (), "NF4 on mi300x"),
    ("estimate", {"--first-stage-layers": ["40"], "--pp": ["2"], "--model": ["llama2-7b"]}, (),
     "--first-stage-layers beyond the model's layers"),
    ("plan", {"--samples": ["1000"], "--tokens": ["1T"]}, (), "--samples with --tokens"),
    ("plan", {"--samples": ["1000"], "--method": ["lora"]}, (), ""),
    ("validate", {}, ("--memory", "--family", "h100"), "--memory with a flag of the main "
     "validation"),
])
def test_contradictions(command, flags, bools, why):
    assert contradiction(command, flags, bools) == why


@pytest.mark.parametrize(("kind", "value", "bad"), [
    ("offload", "optimizer,params", False), ("offload", "optimizer,junk", True),
    ("offload", ",", True), ("rmodules", "core_attn,mlp", False), ("rmodules", "mlp,", True),
    ("confidence", "0.9", False), ("confidence", "0.95", True), ("watts", "700", False),
    ("watts", "1e30", True), ("stage-layers", "-1", True), ("stage-layers", "8", False),
    ("tokens", "1e300", True), ("stack", "torchtitan", False), ("method", "LoRA!", True),
])
def test_values_of_the_new_kinds(kind, value, bad):
    assert bool(invalid(kind, value)) == bad


def test_the_generator_reaches_the_new_flags():
    """The CI slice (tests/test_fuzz.py, seed 10, 2,000 quick cases) draws every new flag
    (--residuals, on ~30 validate cases, only in the full campaign)."""
    argv = " ".join(a for c in generate(10, 2000, "quick") for a in c.argv)
    for flag in ("--stack", "--confidence", "--power-limit-watts", "--grad-reduce-dtype",
                 "--first-stage-layers", "--last-stage-layers", "--shard-group", "--offload",
                 "--recompute-modules", "--recompute-every", "--method", "--lora-rank",
                 "--lora-targets", "--quant", "--samples", "--epochs", "--no-packing",
                 "--padding-efficiency", "--format", "--memory", "--finetune"):
        assert flag in argv, flag
