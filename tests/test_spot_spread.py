"""Spot spread (#14 item 3): `prices import` keeps the median spot price and the spread of the
observations it was taken over (zones x snapshots), the offer schema carries that spread, and
`plan` shows the spread it ranked on (text and JSON `spot_spread_usd_per_gpu_hour`).

The fixture's p5.48xlarge us-east-1 spot prices are 10, 12 and 20 USD/instance-h in three zones;
a second snapshot in these tests adds 14, 16 and 30: every figure below is exact arithmetic on
those (medians of known lists, divided by 8 GPUs), so comparisons use pytest.approx only for
float division.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.errors import CatalogError
from gpuplan.prices import read_skypilot_csv

FIXTURE = Path(__file__).parent / "fixtures" / "skypilot" / "aws" / "vms.csv"
P5 = "aws-p5.48xlarge-us-east-1"
PLAN = ("plan", "--model", "llama3-8b", "--tokens", "1T", "--deadline-days", "30", "--gpu",
        "h100-sxm")


def _snapshot(tmp_path: Path, name: str, spots: tuple[str, str, str], price: str) -> Path:
    """A copy of the fixture in folder NAME/aws/ with the p5 zones' spot and on-demand set."""
    folder = tmp_path / name / "aws"
    folder.mkdir(parents=True)
    lines = FIXTURE.read_text().splitlines()
    zone = iter(spots)
    out = []
    for line in lines:
        if line.startswith("p5.48xlarge,"):
            head, tail = line.rsplit(",40.0,", 1)
            tail = tail.split(",", 1)[1]
            line = f"{head},{price},{next(zone)},{tail}"
        out.append(line)
    path = folder / "vms.csv"
    path.write_text("\n".join(out) + "\n")
    return path


def test_one_file_spread_over_zones():
    rows = {r["id"]: r for r in read_skypilot_csv(FIXTURE, load_catalog(),
                                                  as_of="2026-08-01").offers}
    p5 = rows[P5]
    assert p5["usd_per_hour"]["spot"] == 12.0
    assert (p5["spot_usd_per_hour_min"], p5["spot_usd_per_hour_max"]) == (10.0, 20.0)
    assert p5["spot_observations"] == 3
    assert "3 zone(s) x 1 snapshot(s)" in p5["notes"]
    # no spot in the CSV: no spread either
    assert "spot_observations" not in rows["aws-p4de.24xlarge-us-east-1"]


def test_snapshots_spread_over_dates_and_newest_on_demand(tmp_path):
    old = _snapshot(tmp_path, "may", ("10.0", "12.0", "20.0"), "44.0")
    new = _snapshot(tmp_path, "jun", ("14.0", "16.0", "30.0"), "40.0")
    imp = read_skypilot_csv([old, new], load_catalog(), as_of="2026-06-30")
    p5 = {r["id"]: r for r in imp.offers}[P5]
    assert p5["usd_per_hour"]["spot"] == 15.0  # median of 10, 12, 14, 16, 20, 30
    assert (p5["spot_usd_per_hour_min"], p5["spot_usd_per_hour_max"]) == (10.0, 30.0)
    assert p5["spot_observations"] == 6 and "3 zone(s) x 2 snapshot(s)" in p5["notes"]
    assert p5["usd_per_hour"]["on-demand"] == 40.0  # the newest snapshot's, not a median
    assert "2 snapshots" in imp.source and imp.skipped_unknown == {"QuantumGPU": 4}


def test_files_of_two_clouds_are_one_line(tmp_path, run_cli):
    gcp = tmp_path / "gcp"
    gcp.mkdir()
    shutil.copy(FIXTURE, gcp / "vms.csv")
    code, out, err = run_cli("prices", "import", str(FIXTURE), str(gcp / "vms.csv"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "one cloud at a time" in err


def test_plan_shows_the_spread_it_ranked_on(tmp_path, run_cli, run_json):
    overlay = tmp_path / "aws.toml"
    old = _snapshot(tmp_path, "may", ("10.0", "12.0", "20.0"), "40.0")
    new = _snapshot(tmp_path, "jun", ("14.0", "16.0", "30.0"), "40.0")
    code, _, err = run_cli("prices", "import", str(old), str(new), "--as-of", "2026-06-30",
                           "-o", str(overlay))
    assert code == 0, err
    doc = tomllib.loads(overlay.read_text())
    assert {r["id"]: r for r in doc["offer"]}[P5]["spot_observations"] == 6
    code, out, _ = run_cli("catalog", "validate", str(overlay))
    assert code == 0 and "valid" in out

    res = run_json(*PLAN, "--catalog", str(overlay))
    spot = [p for p in res["plans"] if p["offer"] == P5 and p["pricing"] == "spot"]
    assert spot, "the plan should rank the imported p5 spot offer"
    assert spot[0]["usd_per_gpu_hour"] == pytest.approx(15.0 / 8)
    assert spot[0]["spot_spread_usd_per_gpu_hour"] == pytest.approx([10.0 / 8, 30.0 / 8])
    assert spot[0]["spot_observations"] == 6
    others = [p for p in res["plans"] if p["offer"] != P5 or p["pricing"] != "spot"]
    assert all(p["spot_spread_usd_per_gpu_hour"] is None for p in others)

    code, text, _ = run_cli(*PLAN, "--catalog", str(overlay))
    rank = res["plans"].index(spot[0]) + 1
    assert f"#{rank} $1.88 (range $1.25-$3.75 over 6 observations)" in text


def test_package_plan_has_no_spread_line(run_cli):
    code, text, _ = run_cli(*PLAN)
    assert code == 0 and "spot prices ranked on" not in text


BASE = """[[offer]]
id = "aws-p5.48xlarge-us-east-1"
usd_per_hour = {{ "spot" = 12.0 }}
{extra}
"""


@pytest.mark.parametrize(("extra", "needle"), [
    ("spot_usd_per_hour_min = 10.0\nspot_usd_per_hour_max = 20.0", "go together"),
    ("spot_observations = 3", "go together"),
    ("spot_usd_per_hour_min = 13.0\nspot_usd_per_hour_max = 20.0\nspot_observations = 3",
     "must lie within"),
    ("spot_usd_per_hour_min = 10.0\nspot_usd_per_hour_max = 11.0\nspot_observations = 3",
     "must lie within"),
    ("spot_usd_per_hour_min = 10.0\nspot_usd_per_hour_max = 20.0\nspot_observations = 0",
     "spot_observations must be a whole number >= 1"),
])
def test_bad_spread_is_one_line(tmp_path, extra, needle):
    path = tmp_path / "o.toml"
    path.write_text(BASE.format(extra=extra))
    with pytest.raises(CatalogError, match=needle) as err:
        load_catalog([str(path)])
    assert "\n" not in str(err.value)


def test_spread_without_spot_is_rejected(tmp_path):
    path = tmp_path / "o.toml"
    path.write_text('[[offer]]\nid = "aws-p5en.48xlarge-us-east-2"\nusd_per_hour = '
                    '{ "on-demand" = 60.0 }\nspot_usd_per_hour_min = 5.0\n'
                    'spot_usd_per_hour_max = 12.0\nspot_observations = 2\n')
    # p5en us-east-2 has a package spot price (9.3944) in [5, 12]: the merged row is valid
    assert load_catalog([str(path)]).offers["aws-p5en.48xlarge-us-east-2"].spot_observations == 2
    path = tmp_path / "o2.toml"  # a new file: the loader caches by path and modification time
    path.write_text('[[offer]]\nid = "azure-nd96isr-h100-v5-eastus"\nspot_usd_per_hour_min = 1.0'
                    '\nspot_usd_per_hour_max = 2.0\nspot_observations = 2\n')
    # the ND H100 v5 row has no spot price at all
    with pytest.raises(CatalogError, match="with a spot price"):
        load_catalog([str(path)])
