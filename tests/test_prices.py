"""`gpuplan prices import`: a SkyPilot catalog CSV becomes an overlay the catalog accepts."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.prices import read_skypilot_csv

FIXTURE = Path(__file__).parent / "fixtures" / "skypilot" / "aws" / "vms.csv"
HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
          "SpotPrice,Region,AvailabilityZone\n")


def test_rows_median_spot_and_skips():
    imp = read_skypilot_csv(FIXTURE, load_catalog(), as_of="2026-08-01")
    rows = {r["id"]: r for r in imp.offers}
    p5 = rows["aws-p5.48xlarge-us-east-1"]
    assert p5["accelerator"] == "h100-sxm" and p5["count"] == 8
    assert p5["usd_per_hour"]["on-demand"] == 40.0
    assert p5["usd_per_hour"]["spot"] == 12.0  # median of 10, 12, 20 (not SkyPilot's min)
    assert "min 10, max 20" in p5["notes"]
    assert p5["network_gbit_per_s"] == 3200.0  # from the package p5 row
    assert rows["aws-p9.fake-eu-north-1"]["accelerator"] == "h100-sxm"  # H100-MEGA alias
    assert rows["aws-p9.fake-eu-north-1"]["max_instances"] == 1  # unknown network
    # only the CSV's prices are written: no spot in the CSV, and no package mode copied
    assert set(rows["aws-p4de.24xlarge-us-east-1"]["usd_per_hour"]) == {"on-demand"}
    assert "kept from the package" not in rows["aws-p5.48xlarge-us-east-1"]["notes"]
    assert imp.skipped_unknown == {"QuantumGPU": 2} and imp.skipped_no_gpu == 1
    assert imp.as_of == "2026-08-01" and "vms.csv" in imp.source


def test_cli_overlay_validates_and_changes_plan_prices(run_cli, tmp_path):
    overlay = tmp_path / "aws.toml"
    code, out, err = run_cli("prices", "import", str(FIXTURE), "--as-of", "2026-08-01",
                             "-o", str(overlay))
    assert code == 0 and out == "" and "wrote 3 offer(s)" in err and "skipped 2" in err
    doc = tomllib.loads(overlay.read_text())
    assert all(r["source"].startswith("SkyPilot catalog CSV vms.csv") for r in doc["offer"])
    code, out, _ = run_cli("catalog", "validate", str(overlay))
    assert code == 0 and "valid" in out
    # the catalog merges prices key by key: the package's reserved prices stay under the import
    package = load_catalog().offers["aws-p4de.24xlarge-us-east-1"].usd_per_hour
    merged = load_catalog([str(overlay)]).offers["aws-p4de.24xlarge-us-east-1"].usd_per_hour
    assert merged["on-demand"] == 20.0 and merged["on-demand"] != package["on-demand"]
    assert {k: merged[k] for k in ("reserved-1y", "reserved-3y")} == {
        k: package[k] for k in ("reserved-1y", "reserved-3y")}

    def p5_price(*extra):
        import json

        code, out, err = run_cli("plan", "--model", "llama3-8b", "--tokens", "1T",
                                 "--deadline-days", "30", "--gpu", "h100-sxm", "--json", *extra)
        assert code == 0, err
        rows = [p for p in json.loads(out)["plans"]
                if p["offer"] == "aws-p5.48xlarge-us-east-1" and p["pricing"] == "spot"]
        assert rows, "the plan should list the p5 us-east-1 spot offer"
        return rows[0]["usd_per_gpu_hour"]

    assert p5_price() != pytest.approx(1.5)
    assert p5_price("--catalog", str(overlay)) == pytest.approx(12.0 / 8)  # exact: 12 / 8 GPUs


def test_never_overwrites_without_force(run_cli, tmp_path):
    dest = tmp_path / "o.toml"
    dest.write_text("keep")
    code, _, err = run_cli("prices", "import", str(FIXTURE), "-o", str(dest))
    assert code == 2 and "exists" in err and dest.read_text() == "keep"


def test_cloud_from_option_when_folder_does_not_say(run_cli, tmp_path):
    csv = tmp_path / "prices.csv"
    shutil.copy(FIXTURE, csv)
    code, _, err = run_cli("prices", "import", str(csv))
    assert code == 2 and "--cloud" in err and err.count("\n") == 1
    code, out, _ = run_cli("prices", "import", str(csv), "--cloud", "aws")
    assert code == 0 and 'cloud = "aws"' in out


@pytest.mark.parametrize(("content", "needle"), [
    (b"", "is empty"),
    (b"InstanceType,Price\np5,1\n", "lacks column(s) AcceleratorName"),
    ((HEADER + "p5.48xlarge,H100,8,1,1,,cheap,,us-east-1,a\n").encode(),
     "line 2: Price must be a number, got 'cheap'"),
    ((HEADER + "p5.48xlarge,H100,8,1,1,,-3,,us-east-1,a\n").encode(), "finite price >= 0"),
    ((HEADER + "p5.48xlarge,H100,eight,1,1,,3,,us-east-1,a\n").encode(), "AcceleratorCount"),
    ((HEADER + "p5.48xlarge,H100,65,1,1,,3,,us-east-1,a\n").encode(),
     "line 2: AcceleratorCount must be at most 64 (accelerators in one instance), got '65'"),
    ((HEADER + "p5.48xlarge,H100,1e300,1,1,,3,,us-east-1,a\n").encode(), "at most 64"),
    (b"\xff\xfe\x00bad", "not UTF-8"),
    (HEADER.encode(), "no GPU rows"),
])
def test_malformed_csv_is_one_line(run_cli, tmp_path, content, needle):
    folder = tmp_path / "aws"
    folder.mkdir()
    csv = folder / "vms.csv"
    csv.write_bytes(content)
    code, out, err = run_cli("prices", "import", str(csv))
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err


def test_bad_as_of(run_cli):
    code, _, err = run_cli("prices", "import", str(FIXTURE), "--as-of", "August")
    assert code == 2 and "YYYY-MM-DD" in err


def test_long_values_are_quoted_short(run_cli, tmp_path):
    code, out, err = run_cli("prices", "import", str(FIXTURE), "--as-of", "9" * 5000)
    assert (code, out) == (2, "")
    assert err == ("gpuplan: error: --as-of must be a date YYYY-MM-DD, got '" + "9" * 60
                   + "...' (5,000 characters)\n")
    csv = tmp_path / "p.csv"
    csv.write_text(HEADER + "p5,H100," + "1" * 100 + "x,1,1,x,1,1,r,z\n")
    code, _, err = run_cli("prices", "import", str(csv), "--cloud", "aws")
    assert code == 2 and err.count("\n") == 1
    assert "AcceleratorCount must be a number, got '" + "1" * 60 + "...' (101 characters)" in err
