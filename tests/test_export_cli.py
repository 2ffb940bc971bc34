"""`gpuplan export`: files in, config out; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
PLAN = str(FIXTURES / "plan_result.json")
ESTIMATE = str(FIXTURES / "estimate_result.json")


def one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpuplan")
    for n in needles:
        assert n in err


def test_export_plan_to_stdout(run_cli):
    code, out, err = run_cli("export", "--from", PLAN, "--target", "megatron")
    assert code == 0 and err == ""
    assert "--tensor-model-parallel-size 4" in out and "plan rank 1 of plan_result.json" in out


def test_export_rank_and_estimate(run_cli):
    code, out, _ = run_cli("export", "--from", PLAN, "--target", "slurm", "--rank", "3")
    assert code == 0 and "#SBATCH --nodes=8" in out
    code, out, _ = run_cli("export", "--from", ESTIMATE, "--target", "deepspeed")
    assert code == 0 and "estimate of estimate_result.json" in out


def test_output_file_never_overwritten_without_force(run_cli, tmp_path):
    dest = tmp_path / "job.toml"
    code, out, _ = run_cli("export", "--from", PLAN, "--target", "torchtitan", "-o", str(dest))
    assert code == 0 and out == "" and "[parallelism]" in dest.read_text()
    dest.write_text("mine")
    one_line_error(*run_cli("export", "--from", PLAN, "--target", "torchtitan",
                            "-o", str(dest)), "exists", "--force")
    assert dest.read_text() == "mine"
    code, _, _ = run_cli("export", "--from", PLAN, "--target", "torchtitan", "-o", str(dest),
                         "--force")
    assert code == 0 and "[parallelism]" in dest.read_text()


@pytest.mark.parametrize(("content", "args", "needle"), [
    ("not json {", (), "is not JSON"),
    (json.dumps({"plans": []}), (), "no plans"),
    (json.dumps([1, 2]), (), "not a JSON object"),
    (None, ("--rank", "9"), "out of range"),
    (None, ("--target", "megatrn"), "did you mean 'megatron'"),
])
def test_bad_input_is_one_line(run_cli, tmp_path, content, args, needle):
    path = PLAN
    if content is not None:
        path = str(tmp_path / "bad.json")
        Path(path).write_text(content)
    argv = ["export", "--from", path, "--target", "megatron", *args]
    if "--target" in args:
        argv = ["export", "--from", path, *args]
    one_line_error(*run_cli(*argv), needle)


def test_missing_file(run_cli, tmp_path):
    one_line_error(*run_cli("export", "--from", str(tmp_path / "nope.json"), "--target",
                            "megatron"), "does not exist")


def test_name_too_long_for_the_os_is_one_line(run_cli):
    """A 5,000-character --from used to end in an OSError traceback."""
    code, out, err = run_cli("export", "--from", "a" * 5000, "--target", "megatron")
    assert (code, out) == (2, "")
    assert err == ("gpuplan: error: result file '" + "a" * 77 + "...' cannot be opened "
                   "(File name too long); check the path\n")


def test_deep_nesting_is_one_line(run_cli, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(*run_cli("export", "--from", str(path), "--target", "megatron"),
                   "is nested too deeply to be a gpuplan result")


def test_output_name_too_long_for_the_os_is_one_line(run_cli):
    code, out, err = run_cli("export", "--from", PLAN, "--target", "megatron", "-o", "a" * 5000)
    assert (code, out) == (2, "")
    assert err == "gpuplan: error: cannot write '" + "a" * 77 + "...': File name too long\n"
