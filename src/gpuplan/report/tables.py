"""The tables of `plan`, `estimate` and `tco` as CSV or Markdown (L5): `--format csv|markdown`.

Both read the `--json` document, so every value is the JSON's:

- **csv** (RFC 4180, the csv module): the command's main table only -- plan: the ranked plans;
  estimate: one summary row; tco: the cost per year by line -- one header row, then plain values
  as JSON holds them (floats in full, `true`/`false`, an empty cell for null). A header is the
  value's JSON key, its unit in the name (`cost_usd`, `time_to_train_days`); a dotted header is
  a path (`layout.tp`, `memory_gib.total`).
- **markdown**: every table of the result under a `##` heading (GitHub pipe tables, `|` and `\\`
  escaped), values formatted as in the text output (`report.fmt`); plan adds its reasons
  (the winner and the comparisons, or what to relax) as a list.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .estimate import MEMORY_PARTS
from .fmt import duration, num, pct, usd
from .reasons import reason
from .svg import layout_text

FORMATS = ("text", "csv", "markdown")


def _plain(v: Any) -> str:
    return "" if v is None else str(v)


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda v: "-" if v is None else f"{v:,.{digits}f}"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _num(v: Any) -> str:
    """`fmt.num` of a number; a word ('never') as it is."""
    return num(v) if _is_number(v) else _plain(v)


def _yes(v: Any) -> str:
    return {True: "yes", False: "no"}.get(v, _plain(v)) if isinstance(v, bool) else _plain(v)


def _when(v: Any) -> str:
    """A break-even utilization as the text says it: 'always' at 0, 'never', or a share."""
    return "always" if v == 0 else _share(v)


def _share(v: Any) -> str:
    """A fraction as a percentage ('never' and other words as they are)."""
    return pct(v * 100, 0) if _is_number(v) else _plain(v)


@dataclass(frozen=True)
class Column:
    """One column: `key` is the CSV header and the value's path in a row (dots go down into
    dicts) unless `get` computes it; `label` and `show` are the Markdown header and cell."""

    key: str
    label: str
    show: Callable[[Any], str] = _plain
    get: Callable[[dict[str, Any]], Any] | None = None
    right: bool = False  # right-aligned in Markdown (numbers)
    csv: bool = True
    markdown: bool = True

    def value(self, row: dict[str, Any]) -> Any:
        if self.get is not None:
            return self.get(row)
        v: Any = row
        for part in self.key.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        return v


def _n(key: str, label: str, show: Callable[[Any], str] = _num, **kw: Any) -> Column:
    """A numeric column (right-aligned)."""
    return Column(key, label, show, right=True, **kw)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[Column, ...]
    rows: Sequence[dict[str, Any]]
    vertical: bool = False  # Markdown shows one row as label | value lines (a summary)


# --- plan ------------------------------------------------------------------------------------
PLAN_COLUMNS = (
    _n("rank", "#", _plain), Column("gpu", "gpu"), _n("gpus", "n", _plain),
    *(_n(k, k, _plain, markdown=False) for k in ("nodes", "tp", "pp", "dp", "cp", "ep", "zero",
                                                  "micro_batch")),
    Column("layout", "layout", get=layout_text, csv=False),
    Column("precision", "prec"), Column("recompute", "recompute"),
    Column("acquisition", "acquisition", markdown=False), Column("platform", "where"),
    Column("offer", "offer", markdown=False), Column("system", "system", markdown=False),
    Column("pricing", "pricing"),
    _n("usd_per_gpu_hour", "$/GPU-h", usd, markdown=False),
    _n("time_to_train_days", "time", duration), _n("cost_usd", "cost", usd),
    _n("cash_up_front_usd", "up front", usd, markdown=False),
    _n("energy_kwh", "kWh", markdown=False), _n("tokens_per_s", "tokens/s", markdown=False),
    _n("mfu", "MFU", _share),
    _n("memory_gib_per_gpu", "GiB/GPU", csv=False,
       get=lambda p: f"{p['memory_gib_per_gpu']:.0f}/{p['gpu_memory_gib']:.0f}"),
    _n("memory_gib_per_gpu", "GiB/GPU", markdown=False),
    _n("gpu_memory_gib", "GPU GiB", markdown=False),
    Column("bottleneck", "bottleneck"),
)
OUTLOOK_COLUMNS = (
    _n("gpus", "GPUs", _plain), Column("feasible", "feasible", markdown=False),
    _n("time_to_train_days", "time", duration), _n("cost_usd", "cost", usd),
    _n("mfu", "MFU", _share), _n("scaling_efficiency", "scaling efficiency", _share),
    Column("reason", "reason"),
)
FRONT_COLUMNS = (_n("gpus", "n", _plain), Column("gpu", "gpu"), Column("platform", "where"),
                 Column("pricing", "pricing"), _n("time_to_train_days", "time", duration),
                 _n("cost_usd", "cost", usd))
EXCLUDED_COLUMNS = (Column("reason_code", "code", markdown=False), Column("reason", "reason"),
                    _n("count", "candidates", _fixed(0)))


def plan_tables(doc: dict[str, Any]) -> list[Table]:
    excluded = sorted(doc.get("excluded_codes", {}).items(), key=lambda kv: -kv[1])
    return [
        Table("Ranked plans", PLAN_COLUMNS,
              [{"rank": i, **p} for i, p in enumerate(doc.get("plans") or [], 1)]),
        Table("Excluded candidates", EXCLUDED_COLUMNS,
              [{"reason_code": k, "reason": reason(k), "count": n} for k, n in excluded]),
        Table("Scaling outlook for the winner", OUTLOOK_COLUMNS, doc.get("outlook") or []),
        Table("Cost/time Pareto front", FRONT_COLUMNS, doc.get("pareto") or []),
    ]


# --- estimate --------------------------------------------------------------------------------
ESTIMATE_COLUMNS = (
    Column("model", "model"), Column("gpu", "gpu"), _n("gpus", "GPUs", _plain),
    Column("platform", "platform"),
    *(_n(f"layout.{k}", k, _plain, markdown=False)
      for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero", "micro_batch")),
    Column("layout", "layout", get=lambda r: layout_text(r["layout"]), csv=False),
    _n("layout.global_batch", "global batch", _plain), _n("layout.seq_len", "sequence", _plain),
    Column("layout.precision", "precision"), Column("layout.recompute", "recompute"),
    Column("fits", "fits", _yes), _n("memory_gib.total", "memory per GPU (GiB)", _fixed(2)),
    _n("gpu_memory_gib", "GPU memory (GiB)", _fixed(2)), _n("headroom_gib", "headroom (GiB)",
                                                            _fixed(2)),
    _n("step_time_s", "step (s)"), _n("tokens_per_s", "tokens/s"),
    _n("mfu", "MFU", _share), _n("hfu", "HFU", _share), Column("bottleneck", "bottleneck"),
    _n("tokens", "tokens"), _n("time_to_train_days", "time to train", duration),
    _n("gpu_hours", "GPU-hours"), _n("goodput", "goodput", _share),
    _n("energy_kwh", "energy (kWh)"), _n("co2e_kg", "CO2e (kg)"), Column("pricing", "pricing"),
    _n("usd_per_gpu_hour", "$/GPU-hour", usd), _n("cost_usd", "cost", usd),
)
PART_COLUMNS = (Column("part", "part"), _n("gib", "GiB", _fixed(2)))
TIME_COLUMNS = (Column("part", "part"), _n("s", "ms", lambda v: f"{v * 1e3:,.1f}"))


def estimate_tables(doc: dict[str, Any]) -> list[Table]:
    memory = [{"part": k, "gib": doc["memory_gib"][k]} for k in MEMORY_PARTS]
    times = [{"part": k.removesuffix("_s").replace("_", " "), "s": v}
             for k, v in (doc.get("time_breakdown_s") or {}).items() if v]
    if doc.get("step_time_s") is not None:
        times.append({"part": "step", "s": doc["step_time_s"]})
    return [Table("Estimate", ESTIMATE_COLUMNS, [doc], vertical=True),
            Table("Memory per GPU (most loaded pipeline stage)", PART_COLUMNS,
                  memory + [{"part": "GPU memory", "gib": doc["gpu_memory_gib"]}]),
            Table("Time per step", TIME_COLUMNS, times)]


# --- tco -------------------------------------------------------------------------------------
COST_COLUMNS = (Column("line", "cost"), _n("usd_per_year", "per year", usd),
                _n("usd_per_used_gpu_hour", "per used GPU-hour", usd))
CLOUD_COLUMNS = (Column("offer", "offer"), Column("pricing", "pricing"),
                 _n("list_usd_per_gpu_hour", "list $/GPU-h", usd),
                 _n("usd_per_gpu_hour", "$/used GPU-h", lambda v: usd(v) if v != "never"
                    else "never finishes"),
                 _n("break_even_utilization", "own wins above", _when),
                 _n("break_even_months", "months to pay back"), Column("source", "source"))
BREAK_EVEN_COLUMNS = (Column("pricing", "pricing"), _n("utilization", "own wins above", _when),
                      _n("months", "months to pay back"))
ASSUMPTION_COLUMNS = (Column("input", "input"), _n("value", "value", lambda v: f"{v:g}"),
                      Column("from", "from"))


def tco_tables(doc: dict[str, Any]) -> list[Table]:
    per_hour = doc.get("usd_per_gpu_hour_lines") or {}
    costs = [{"line": k, "usd_per_year": v, "usd_per_used_gpu_hour": per_hour.get(k)}
             for k, v in (doc.get("usd_per_year") or {}).items()]
    costs.append({"line": "total", "usd_per_year": doc["usd_per_year_total"],
                  "usd_per_used_gpu_hour": doc["usd_per_gpu_hour"]})
    capex = [{"line": k, "usd": v} for k, v in (doc.get("capex_usd_lines") or {}).items()]
    capex.append({"line": "total (cash up front)", "usd": doc["capex_usd"]})
    months = doc.get("break_even_months") or {}
    out = [Table("Cost per year", COST_COLUMNS, costs),
           Table("Capex", (Column("line", "capex"), _n("usd", "USD", usd)), capex)]
    if "cloud" in doc:
        out += [Table("Renting the same GPUs", CLOUD_COLUMNS, doc["cloud"]),
                Table("Break-even against the cheapest offer of each mode", BREAK_EVEN_COLUMNS,
                      [{"pricing": k, "utilization": u, "months": months.get(k)}
                       for k, u in (doc.get("break_even_utilization") or {}).items()])]
    return out + [Table("Assumptions", ASSUMPTION_COLUMNS,
                        [{"input": k, **v} for k, v in (doc.get("assumptions") or {}).items()])]


TABLES = {"plan": plan_tables, "estimate": estimate_tables, "tco": tco_tables}


# --- rendering -------------------------------------------------------------------------------
def _csv_cell(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else v  # floats go through repr: every digit, no thousands comma


def to_csv(table: Table) -> str:
    """RFC 4180: one header row, then the rows; CRLF line ends as the RFC (and csv) write."""
    cols = [c for c in table.columns if c.csv]
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow([c.key for c in cols])
    w.writerows([_csv_cell(c.value(r)) for c in cols] for r in table.rows)
    return out.getvalue()


def md_escape(text: str) -> str:
    """A Markdown table cell: backslashes and pipes escaped, line breaks as spaces."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split("\n"))


def _md_rows(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
             ) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(md_escape(c) for c in cells) + " |"

    return [line(header), "|" + "|".join("---:" if r else "---" for r in right) + "|",
            *(line(r) for r in rows)]


def to_markdown(table: Table) -> str:
    """A `##` heading and a GitHub pipe table (a vertical table: one line per column)."""
    cols = [c for c in table.columns if c.markdown]
    cells = [[c.show(c.value(r)) for c in cols] for r in table.rows]
    if table.vertical and len(cells) == 1:
        lines = _md_rows(["quantity", "value"], [[c.label, v] for c, v in zip(cols, cells[0],
                                                                      strict=True)],
                         [False, True])
    else:
        lines = _md_rows([c.label for c in cols], cells, [c.right for c in cols])
    return "\n".join([f"## {table.title}", "", *lines])


def _reasons(doc: dict[str, Any]) -> str:
    if doc.get("plans"):
        lines = [f"- {md_escape(w)}" for w in doc.get("why") or []]
        if doc.get("reproduce"):
            lines.append(f"- reproduce the winner: `{doc['reproduce']}`")
        return "\n".join(["## Why", "", *lines])
    return "\n".join(["## No feasible plan", ""]
                     + [f"- {md_escape(x)}" for x in doc.get("relax") or []])


def render(kind: str, doc: dict[str, Any], fmt: str) -> str:
    """The tables of a `kind` (plan, estimate, tco) result's JSON in `fmt` (csv or markdown):
    csv the main table alone, markdown every non-empty table (the main one always)."""
    tables = TABLES[kind](doc)
    if fmt == "csv":
        return to_csv(tables[0])
    parts = [to_markdown(t) for i, t in enumerate(tables) if t.rows or i == 0]
    if kind == "plan":
        parts.insert(1, _reasons(doc))
    return "\n\n".join(parts) + "\n"
