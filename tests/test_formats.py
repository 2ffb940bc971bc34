"""`--format csv|markdown` of plan, estimate and tco (report/tables.py): the CSV reads back
(csv.reader) to exactly the values of the `--json` document -- floats compared with ==, since
Python writes a float's shortest repr and float() reads it back to the same number (tolerance
0) -- the Markdown is golden, and commas, quotes, pipes and line breaks are escaped."""

from __future__ import annotations

import csv
import io
import re

import pytest
from conftest import golden

from gpuplan.report.tables import Column, Table, md_escape, render, to_csv, to_markdown

PLAN = ["plan", "--model", "llama3-8b", "--tokens", "1T", "--gpu", "h100-sxm", "--top", "3",
        "--deadline-days", "60"]
ESTIMATE = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--zero",
            "1", "--recompute", "selective", "--tokens", "1T", "--pricing", "own"]
TCO = ["tco", "--system", "dgx-h100", "--nodes", "2", "--utilization", "0.7", "--compare-cloud"]


def _out(run_cli, *argv):
    code, out, err = run_cli(*argv)
    assert code == 0, err
    return out


def _rows(text):
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert text.endswith("\r\n") and all(len(r) == len(rows[0]) for r in rows)  # RFC 4180
    return rows[0], rows[1:]


def _same(cell, value):
    """A CSV cell holds the JSON value: null empty, booleans true/false, numbers exactly."""
    if value is None:
        return cell == ""
    if isinstance(value, bool):
        return cell == ("true" if value else "false")
    if isinstance(value, int | float):
        return float(cell) == value and "," not in cell
    return cell == value


def _path(doc, key):
    for part in key.split("."):
        doc = doc[part]
    return doc


def test_plan_csv_is_the_ranked_plans_of_the_json(run_cli, run_json):
    doc = run_json(*PLAN)
    header, rows = _rows(_out(run_cli, *PLAN, "--format", "csv"))
    assert len(rows) == len(doc["plans"]) == 3
    assert header[0] == "rank" and {"gpu", "gpus", "tp", "cost_usd", "time_to_train_days",
                                    "mfu", "memory_gib_per_gpu"} <= set(header)
    for i, (row, plan) in enumerate(zip(rows, doc["plans"], strict=True), 1):
        assert row[0] == str(i)
        for key, cell in zip(header[1:], row[1:], strict=True):
            assert _same(cell, plan[key]), (key, cell, plan[key])


def test_estimate_csv_is_one_row_of_the_json(run_cli, run_json):
    doc = run_json(*ESTIMATE)
    header, rows = _rows(_out(run_cli, *ESTIMATE, "--format", "csv"))
    assert len(rows) == 1 and {"layout.tp", "memory_gib.total", "step_time_s", "cost_usd",
                               "fits"} <= set(header)
    for key, cell in zip(header, rows[0], strict=True):
        assert _same(cell, _path(doc, key)), (key, cell)


def test_tco_csv_is_the_cost_per_year_of_the_json(run_cli, run_json):
    doc = run_json(*TCO)
    header, rows = _rows(_out(run_cli, *TCO, "--format", "csv"))
    assert header == ["line", "usd_per_year", "usd_per_used_gpu_hour"]
    assert [r[0] for r in rows] == [*doc["usd_per_year"], "total"]
    for line, per_year, per_hour in rows[:-1]:
        assert _same(per_year, doc["usd_per_year"][line])
        assert _same(per_hour, doc["usd_per_gpu_hour_lines"][line])
    assert _same(rows[-1][1], doc["usd_per_year_total"])
    assert _same(rows[-1][2], doc["usd_per_gpu_hour"])
    assert sum(float(r[1]) for r in rows[:-1]) == pytest.approx(float(rows[-1][1]), rel=1e-12)


@pytest.mark.parametrize("argv, name", [(PLAN, "plan_llama3_8b.md"),
                                        (ESTIMATE, "estimate_llama3_8b.md"),
                                        (TCO, "tco_dgx_h100.md")])
def test_markdown_golden(run_cli, run_json, argv, name):
    out = _out(run_cli, *argv, "--format", "markdown")
    golden(name, out)
    assert out == render(argv[0], run_json(*argv), "markdown")  # the CLI only picks the format
    for block in out.split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("|"):  # every row has the header's cells
            width = {len(re.split(r"(?<!\\)\|", x)) for x in lines}
            assert len(width) == 1, block


def test_markdown_prints_every_table_of_a_plan_under_a_heading(run_cli):
    out = _out(run_cli, *PLAN, "--format", "markdown")
    assert re.findall(r"^## (.*)$", out, re.M) == [
        "Ranked plans", "Why", "Excluded candidates", "Scaling outlook for the winner",
        "Cost/time Pareto front"]
    assert "- reproduce the winner: `gpuplan estimate --model llama3-8b" in out


def test_no_feasible_plan(run_cli):
    argv = [*PLAN, "--budget-usd", "1"]
    header, rows = _rows(_out(run_cli, *argv, "--format", "csv"))
    assert header[0] == "rank" and rows == []
    out = _out(run_cli, *argv, "--format", "markdown")
    assert "## No feasible plan\n\n- feasible from a budget of" in out
    assert out.startswith("## Ranked plans\n\n| # | gpu |")


def test_commas_quotes_pipes_and_line_breaks_are_escaped():
    values = ["a,b", 'say "hi"', "x|y", "two\nlines", "back\\slash|", 1.5, None, True]
    cols = tuple(Column(f"c{i}", f"c|{i}") for i in range(len(values)))
    t = Table("T", cols, [{f"c{i}": v for i, v in enumerate(values)}])
    header, rows = _rows(to_csv(t))
    assert header == [f"c{i}" for i in range(len(values))]
    assert rows == [["a,b", 'say "hi"', "x|y", "two\nlines", "back\\slash|", "1.5", "", "true"]]
    md = to_markdown(t).splitlines()
    assert md[:2] == ["## T", ""]
    assert md[2].startswith("| c\\|0 | c\\|1 |")
    assert md[4] == ('| a,b | say "hi" | x\\|y | two lines | back\\\\slash\\| | 1.5 |  | True |')
    assert len(re.split(r"(?<!\\)\|", md[4])) == len(values) + 2
    assert md_escape("a|b\\|c") == "a\\|b\\\\\\|c"


@pytest.mark.parametrize("argv", [PLAN, ESTIMATE, TCO])
def test_format_with_json_is_one_line(run_cli, argv):
    code, out, err = run_cli(*argv, "--format", "csv", "--json")
    assert code == 2 and out == ""
    assert err == "gpuplan: error: --format csv and --json both choose the output; give one " \
                  "of them\n"


def test_format_with_export_to_stdout_is_one_line(run_cli, tmp_path):
    code, out, err = run_cli(*PLAN, "--format", "markdown", "--export", "megatron")
    assert code == 2 and out == "" and err.count("\n") == 1 and "add -o FILE" in err
    code, out, err = run_cli(*PLAN, "--format", "csv", "--export", "megatron",
                             "-o", str(tmp_path / "launch.sh"))
    assert code == 0 and out.startswith("rank,gpu,gpus,") and (tmp_path / "launch.sh").exists()
