"""Which published runs are current: the newest software release of each configuration
(issue #12, L5).

NVIDIA publishes its Megatron-Bridge (and before it, NeMo Framework) performance tables once per
software release, and the same hardware runs the same model 1.5-2x faster a few releases later.
A planner predicts what current, well-tuned software achieves, so `gpuplan validate` judges each
configuration against its newest published release; older releases stay in the data, printed
and marked, and out of the summaries (`--all-releases` counts them again). The fit set does not
depend on this: calibration uses exactly the rows marked `fit`, superseded or not.

* **Release** (column `release` of published_runs.csv): the software release a row's source
  table was published for, as its source text names it (`release_from_source`): "25.11" for
  "section '25.11 NeMo Container'", "24.12" for "NeMo Framework 24.12 performance summary";
  empty for a one-off publication (a paper, a README table), which is never superseded.
* **Series**: the run id's source prefix without its release digits ("mbridge2604.01" ->
  "mbridge", "nemo2412" -> "nemo"): releases are compared within one publication only.
* **Configuration**: (series, accelerator, GPU count, model, precision) -- the question a user
  asks, "model M on N GPUs of X in precision P". The layout (parallelism, batch, FP8 recipe) is
  not part of it: the newest release's layout is what current software runs.
* A known row is **superseded** when a known row of the same configuration has a newer release;
  every row of the newest release is current (a release may publish several layouts or FP8
  recipes of one configuration, e.g. FP8 current scaling and MXFP8 on GB300).
"""

from __future__ import annotations

import re

# how a source names its release: Megatron-Bridge's per-release sections, NeMo's versioned docs
RELEASE_PATTERNS = (
    re.compile(r"section '(\d\d\.\d\d(?:\.\d\d)?) NeMo Container'"),
    re.compile(r"NeMo Framework (\d\d\.\d\d) performance summary"),
)
# what a model is when the row names no catalog model (its architecture columns)
MODEL_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "experts",
                 "experts_per_token", "moe_ffn", "head_dim")


def source_group(run_id: str) -> str:
    """The publication a run comes from: its id up to the first dash."""
    return run_id.split("-", 1)[0]


def release_from_source(source: str) -> str:
    """The software release a source text names ('' for a one-off publication)."""
    for pattern in RELEASE_PATTERNS:
        m = pattern.search(source)
        if m:
            return m[1]
    return ""


def release_order(release: str) -> tuple[int, ...]:
    """'26.04.01' -> (26, 4, 1): later releases sort higher ('26.04' < '26.04.01' < '26.06')."""
    return tuple(int(part) for part in release.split("."))


def series(row: dict[str, str]) -> str:
    """The release series a row belongs to: its id's source prefix without the release."""
    return re.sub(r"[\d.]+$", "", source_group(row["id"]))


def configuration(row: dict[str, str]) -> tuple[str, ...]:
    """(series, accelerator, GPU count, model, precision): what a newer release supersedes."""
    model = row.get("model", "").strip() or "/".join(row.get(k, "") for k in MODEL_COLUMNS)
    return (series(row), row["gpu"], row["gpus"].strip(), model, row["precision"])


def newest_runs(rows: list[dict[str, str]]) -> dict[str, str]:
    """Run id -> '' if the run is current, else the id of the first run (in file order) of
    its configuration's newest release. Only known rows with a release compete."""
    released = [r for r in rows if r.get("release", "").strip()
                and r.get("status", "known") == "known"]
    newest: dict[tuple[str, ...], dict[str, str]] = {}
    for r in released:
        key, best = configuration(r), newest.get(configuration(r))
        if best is None or release_order(r["release"]) > release_order(best["release"]):
            newest[key] = r
    out = {r["id"]: "" for r in rows}
    for r in released:
        top = newest[configuration(r)]
        if release_order(r["release"]) < release_order(top["release"]):
            out[r["id"]] = top["id"]
    return out
