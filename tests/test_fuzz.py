"""A fixed-seed slice of the fuzz campaign (issue #10), and regressions for what it found.

The slice: SLICE in-process cases of the 'quick' profile plus PROCESSES real processes, classed
by tests/fuzz/classify.py. Each class is asserted to be empty. The full campaign:
`python benchmarks/fuzz.py --seed N --cases 10000 --processes 300`.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from fuzz.classify import classify
from fuzz.gen import Case, generate
from fuzz.run import run_inproc, run_process

from gpuplan.cli import main

SEED = 10
SLICE = 2000
PROCESSES = 6
MY_FAMILIES = {"config", "path", "raw", "plan", "estimate", "catalog", "models"}


@pytest.fixture(scope="module")
def found() -> dict[str, list[tuple[Case, str]]]:
    """class -> [(case, detail)] over the slice."""
    out: dict[str, list[tuple[Case, str]]] = defaultdict(list)
    runs = [run_inproc(c) for c in generate(SEED, SLICE, "quick")]
    runs += [run_process(c) for c in generate(SEED + 1, PROCESSES, "quick")]
    for o in runs:
        for cls, detail in classify(o):
            out[cls].append((o.case, detail))
    return out


def _none(found, cls: str, families: set[str] | None = None) -> None:
    hits = [(c, d) for c, d in found.get(cls, []) if families is None or c.family in families]
    assert not hits, f"{len(hits)} {cls}; first: {hits[0][0].show()} -> {hits[0][1]}"


# --- classes fixed: hard assertions ---------------------------------------------------------
def test_no_messy_errors(found):
    """Every error is one line of at most 400 characters (no echoed newline or 3,000 chars)."""
    _none(found, "messy_error")


def test_no_warnings(found):
    _none(found, "warning")


def test_no_tracebacks_from_flags_config_json_or_paths(found):
    _none(found, "traceback", {"config", "path", "raw", "plan", "estimate", "catalog"})


def test_no_bad_config_json_or_path_accepted(found):
    _none(found, "bad_accepted", {"config", "path", "raw", "plan", "estimate", "catalog"})


def test_no_hangs_from_flags_or_config_json(found):
    _none(found, "hang", {"config", "path", "raw", "plan", "estimate", "catalog", "tco"})


def test_no_invariant_violations(found):
    """JSON that parses; memory parts that sum; plans within their deadline, budget, memory."""
    _none(found, "invariant")


# --- classes fixed in the catalog, tco, physics and validate layers --------------------------
def test_no_tracebacks(found):
    _none(found, "traceback")


def test_no_bad_input_accepted(found):
    _none(found, "bad_accepted")


def test_no_nonfinite_or_negative_output(found):
    _none(found, "nonfinite")


def test_no_hangs(found):
    _none(found, "hang")


def test_validate_calibrate_json_prints_json(capsys):
    """Issue item 4 (fixed on main by the validate command's owner)."""
    assert main(["validate", "--calibrate", "--json"]) == 0
    json.loads(capsys.readouterr().out)


# --- regressions: each class fixed here, with its exact message -----------------------------
def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(("argv", "message"), [
    (["estimate", "--model", "llama2-7b", "--gpu=--"],
     "gpuplan estimate: error: argument --gpu: '--' is not a value; write the value after --gpu"
     " (see `gpuplan estimate --help`)\n"),
    (["estimate", "--model", "llama2-7b", "--gpu", "h100", "--tp=--"],
     "gpuplan estimate: error: argument --tp: '--' is not a value; write the value after --tp "
     "(see `gpuplan estimate --help`)\n"),
    (["catalog", "gpus", "--catalog=--"],
     "gpuplan catalog gpus: error: argument --catalog: '--' is not a value; write the value after"
     " --catalog (see `gpuplan catalog gpus --help`)\n"),
    (["plan", "--model", "llama2-7b", "--tokens", ""],
     "gpuplan plan: error: argument --tokens: the value is empty; give a value or leave --tokens "
     "out (see `gpuplan plan --help`)\n"),
    (["plan", "--model", "llama2-7b", "--tokens", "1T", "--pricing", ""],
     "gpuplan plan: error: argument --pricing: the value is empty; give a value or leave "
     "--pricing out (see `gpuplan plan --help`)\n"),
    (["estimate", "--model", "llama2-7b", "--gpu", "h100", "--offer", " "],
     "gpuplan estimate: error: argument --offer: the value is empty; give a value or leave "
     "--offer out (see `gpuplan estimate --help`)\n"),
    (["plan", "--model", "llama2-7b", "--tokens", "1T", "--deadline-days", "1e309"],
     "gpuplan: error: --deadline-days must be in the future (> 0) and finite, got inf\n"),
    (["plan", "--model", "llama2-7b", "--tokens", "1T", "--deadline-days=-5"],
     "gpuplan: error: --deadline-days must be in the future (> 0) and finite, got -5\n"),
    (["plan", "--model", "llama2-7b", "--tokens", "1T", "--pue", "0.5"],
     "gpuplan plan: error: argument --pue: must be at least 1 (facility power / IT power), got "
     "'0.5' (see `gpuplan plan --help`)\n"),
    (["estimate", "--model", "llama2-7b", "--gpu", "h100", "--years", "0"],
     "gpuplan estimate: error: argument --years: must be a number above 0, got '0' "
     "(see `gpuplan estimate --help`)\n"),
    (["plan", "--model", "llama2-7b", "--tokens", "1T", "--seq-len=-100"],
     "gpuplan plan: error: argument --seq-len: must be at least 1, got -100 "
     "(see `gpuplan plan --help`)\n"),
])
def test_flag_values_that_are_not_values(capsys, argv, message):
    assert run(capsys, *argv) == (2, "", message)


@pytest.mark.parametrize("tokens", ["1e-320", "1", "4194303"])
def test_tokens_below_one_step_are_refused(capsys, tokens):
    """1e-320 raised ZeroDivisionError; a handful of tokens printed a 0-day plan."""
    rc, out, err = run(capsys, "plan", "--model", "llama2-7b", "--tokens", tokens, "--quiet")
    assert (rc, out) == (2, "")
    assert err == (f"gpuplan: error: --tokens '{tokens}' is fewer than one optimizer step "
                   "(4,194,304 tokens = global batch x sequence length); give at least "
                   "4,194,304 tokens or a smaller --global-batch\n")


def test_estimate_tokens_below_one_step(capsys):
    rc, _, err = run(capsys, "estimate", "--model", "llama2-7b", "--gpu", "h100", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "1024", "--tokens", "8000")
    assert (rc, err) == (2, "gpuplan: error: --tokens '8000' is fewer than one optimizer step "
                            "(8,192 tokens = global batch x sequence length); give at least "
                            "8,192 tokens or a smaller --global-batch\n")


def test_long_and_multiline_values_are_quoted_on_one_line(capsys):
    long = "A" * 3000
    rc, _, err = run(capsys, "estimate", "--model", "llama2-7b", "--gpu", "h100", f"--tp={long}")
    assert (rc, err) == (2, "gpuplan estimate: error: argument --tp: '" + "A" * 60 + "...' "
                            "(3,000 characters) is not a whole number "
                            "(see `gpuplan estimate --help`)\n")
    rc, _, err = run(capsys, "catalog", "show", long)
    assert err == ("gpuplan: error: unknown catalog id '" + "A" * 60 + "...' (3,000 characters);"
                   " `gpuplan catalog gpus` lists them\n")
    rc, _, err = run(capsys, "estimate", "--model", "h100\nrm -rf /", "--gpu", "h100")
    assert (rc, err) == (2, "gpuplan: error: unknown model 'h100\\nrm -rf /'; `gpuplan models` "
                            "lists them\n")
    rc, _, err = run(capsys, "estimate", "--model", "llama2-7b", "--gpu", "h100",
                     f"--recompute={long}")
    assert (rc, err) == (2, "gpuplan: error: unknown recompute mode '" + "a" * 60 + "...' "
                            "(3,000 characters); choose one of: none, selective, full, op, "
                            "modules\n")


def test_the_runner_sees_a_traceback():
    """The classifier is not blind: an escaping exception is a traceback, exit 0 on a known-bad
    input is bad_accepted, and inf in an answer is nonfinite."""
    from fuzz.run import Outcome

    case = Case(argv=("estimate",), invalid="x", family="estimate")
    classes = {c for c, _ in classify(Outcome(case=case, rc=0, stdout="step inf s\n", stderr="",
                                              seconds=0.1, exception="ZeroDivisionError"))}
    assert classes == {"traceback", "bad_accepted", "nonfinite"}
    ok = Case(argv=("tco", "--json"), family="tco")
    assert classify(Outcome(case=ok, rc=0, stdout='{"a": -1.0}', stderr="", seconds=0.1)) == [
        ("nonfinite", ".a = -1.0")]
