"""Prices from the CSV catalogs SkyPilot users keep, as a gpuplan overlay (L2).

A SkyPilot catalog (`~/.sky/catalogs/<version>/<cloud>/vms.csv`, or the skypilot-catalog
repository) has one row per instance type, region and availability zone, with the columns
InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice,
Region, AvailabilityZone. `read_skypilot_csv` turns the GPU rows into `[[offer]]` rows for
gpuplan's catalog: one per (instance type, region), on-demand price from Price, spot price the
MEDIAN over the observations (SkyPilot itself keeps the minimum).

Spread: several files of one cloud may be given, each a snapshot taken on another date (oldest
first). The spot observations of an (instance type, region) are then its zones x snapshots; the
row keeps their median as the spot price and their minimum, maximum and count as
`spot_usd_per_hour_min`, `spot_usd_per_hour_max` and `spot_observations`, which `plan` shows
beside the spot rows it ranks. On-demand is the median over the zones of the newest snapshot
that lists the instance (list prices move rarely; the newest one is the price today).

The scale-out network of an instance is not in the CSV: it is taken from a package offer of the
same cloud and instance type; an instance gpuplan does not know gets 0 Gbit/s and
max_instances = 1 (a single box), and its notes say so. Accelerator names are matched through
the catalog's aliases; rows whose accelerator the catalog does not know are skipped and counted.

A row carries only the prices the CSV gives: the catalog merges an overlay's usd_per_hour key by
key, so a package offer's other pricing modes (reserved terms; spot when the CSV has none) stay.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .catalog import Catalog, normalize
from .errors import CatalogError, GpuplanError, quote
from .userfile import display_path, read_text

COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
           "GpuInfo", "Price", "SpotPrice", "Region", "AvailabilityZone")
_NEEDED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region")

# gpuplan accelerator id -> SkyPilot's accelerator name (`sky show-gpus`), for task YAMLs
SKYPILOT_NAMES = {
    "v100-sxm2-32gb": "V100-32GB", "a100-40gb": "A100", "a100-80gb": "A100-80GB",
    "a100-pcie-80gb": "A100-80GB", "h100-sxm": "H100", "h100-pcie": "H100",
    "h100-nvl": "H100-NVL", "h200": "H200", "b200": "B200", "b300": "B300", "gb200": "GB200",
    "l40s": "L40S", "l4": "L4", "a10g": "A10G", "rtx-4090": "RTX4090", "rtx-5090": "RTX5090",
    "rtx-6000-ada": "RTX6000-Ada", "mi300x": "MI300X", "mi325x": "MI325X", "mi355x": "MI355X",
    "gaudi2": "Gaudi2", "gaudi3": "Gaudi3",
}
MAX_ACCELERATORS = 64  # GPUs in one instance: the largest cloud instance has 8 or 16 (GB200: 4)
CLOUDS = ("aws", "gcp", "azure", "lambda", "oci", "runpod", "nebius", "vast", "digitalocean",
          "do", "fluidstack", "cudo", "paperspace", "coreweave", "hyperbolic", "scp", "ibm")


@dataclass(frozen=True, kw_only=True)
class Imported:
    """The overlay rows read from one CSV, and what was left out."""

    offers: tuple[dict[str, Any], ...]
    skipped_unknown: dict[str, int] = field(default_factory=dict)  # accelerator name -> rows
    skipped_no_gpu: int = 0
    source: str = ""
    as_of: str = ""


def _read_rows(path: Path) -> list[dict[str, str]]:
    text = read_text(path, "price file", "give a SkyPilot vms.csv", encoding="utf-8-sig")
    if not text.strip():
        raise CatalogError(f"{display_path(path)} is empty; give a SkyPilot catalog CSV with a "
                           f"header row ({', '.join(COLUMNS)})")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _NEEDED if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"{display_path(path)} lacks column(s) {', '.join(missing)}; a "
                           f"SkyPilot catalog CSV has {', '.join(COLUMNS)}")
    try:
        return list(reader)
    except csv.Error as err:
        raise CatalogError(f"{display_path(path)} is not a readable CSV: {err}") from None


def _price(text: str | None, where: str, column: str) -> float | None:
    """A price cell: empty -> None; otherwise a finite number >= 0."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}: {column} must be a number, got {quote(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise CatalogError(f"{where}: {column} must be a finite price >= 0, got {quote(text)}")
    return value


def _count(text: str | None, where: str) -> int:
    try:
        value = float(text or "")
    except ValueError:
        raise CatalogError(f"{where}: AcceleratorCount must be a number, got {quote(text or '')}"
                           ) from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise CatalogError(f"{where}: AcceleratorCount must be a whole number, "
                           f"got {quote(text)}")
    if value > MAX_ACCELERATORS:
        raise CatalogError(f"{where}: AcceleratorCount must be at most {MAX_ACCELERATORS} "
                           f"(accelerators in one instance), got {quote(text)}")
    return int(value)


def guess_cloud(path: Path) -> str | None:
    """SkyPilot keeps one folder per cloud (catalogs/v7/aws/vms.csv)."""
    folder = path.resolve().parent.name.lower()
    return folder if folder in CLOUDS else None


def _group(rows: list[dict[str, str]], cat: Catalog, path: Path, snapshot: int,
           groups: dict[tuple[str, str], dict[str, Any]]) -> tuple[dict[str, int], int]:
    """Add one file's GPU rows to `groups` ((instance, region) -> prices by snapshot)."""
    unknown: dict[str, int] = {}
    no_gpu = 0
    for line, row in enumerate(rows, start=2):
        where = f"{display_path(path.name)} line {line}"
        name = (row.get("AcceleratorName") or "").strip()
        count = _count(row.get("AcceleratorCount"), where) if name else 0
        if not name or count == 0:
            no_gpu += 1
            continue
        try:
            gpu = cat.resolve("accelerator", name)
        except GpuplanError:
            unknown[name] = unknown.get(name, 0) + 1
            continue
        inst, region = row["InstanceType"].strip(), row["Region"].strip()
        if not inst or not region:
            raise CatalogError(f"{where}: InstanceType and Region must not be empty")
        g = groups.setdefault((inst, region), {"gpu": gpu, "count": count, "od": {},
                                               "spot": [], "zones": set(), "snaps": set()})
        for key, column in (("od", "Price"), ("spot", "SpotPrice")):
            value = _price(row.get(column), where, column)
            if value is None:
                continue
            if key == "od":
                g["od"].setdefault(snapshot, []).append(value)
            else:
                g["spot"].append(value)
                g["zones"].add((row.get("AvailabilityZone") or "").strip())
                g["snaps"].add(snapshot)
    return unknown, no_gpu


def _network(cat: Catalog, cloud: str, instance: str) -> tuple[float, int] | None:
    """(Gbit/s, max instances) of a package offer of the same instance type, if any."""
    for o in cat.offers.values():
        if o.cloud == cloud and o.instance_type == instance:
            return o.network_bytes_per_s * 8 / 1e9, o.max_instances
    return None


def _offer_row(cat: Catalog, cloud: str, key: tuple[str, str], g: dict[str, Any],
               source: str, as_of: str) -> dict[str, Any] | None:
    inst, region = key
    prices: dict[str, float] = {}
    notes = [f"imported by `gpuplan prices import` from {source}"]
    spread: dict[str, Any] = {}
    if g["od"]:
        newest = g["od"][max(g["od"])]
        prices["on-demand"] = statistics.median(newest)
        if min(newest) != max(newest):
            notes.append(f"on-demand differs across zones: median of {len(newest)}")
    if g["spot"]:
        spot = g["spot"]
        prices["spot"] = statistics.median(spot)
        spread = {"spot_usd_per_hour_min": round(min(spot), 6),
                  "spot_usd_per_hour_max": round(max(spot), 6), "spot_observations": len(spot)}
        notes.append(f"spot: median over {len(spot)} observation(s) ({len(g['zones'])} "
                     f"zone(s) x {len(g['snaps'])} snapshot(s)), min {min(spot):.4g}, "
                     f"max {max(spot):.4g} USD/instance-h")
    if not prices:
        return None
    ident = normalize(f"{cloud}-{inst}-{region}")
    net = _network(cat, cloud, inst)
    if net is None:
        notes.append("network: not in the CSV and no package offer of this instance type; "
                     "0 Gbit/s, treated as a single box")
        net = (0.0, 1)
    return {"id": ident, "cloud": cloud, "instance_type": inst,
            "accelerator": g["gpu"], "count": g["count"], "region": region,
            "usd_per_hour": {k: round(v, 6) for k, v in prices.items()}, **spread,
            "network_gbit_per_s": round(net[0], 3), "max_instances": net[1],
            "source": source, "as_of": as_of, "notes": "; ".join(notes)}


def read_skypilot_csv(path: str | Path | Sequence[str | Path], cat: Catalog, *,
                      cloud: str | None = None, as_of: str | None = None) -> Imported:
    """The GPU offers of one SkyPilot catalog CSV, or of several snapshots of one cloud's
    (oldest first), as overlay rows (see the module docstring). `as_of` defaults to the newest
    file's modification date."""
    paths = [Path(p) for p in ([path] if isinstance(path, str | Path) else path)]
    if not paths:
        raise CatalogError("no price file given; give a SkyPilot vms.csv")
    tables = [_read_rows(p) for p in paths]
    clouds = {(cloud or guess_cloud(p) or "").lower() for p in paths}
    if "" in clouds:
        raise CatalogError(f"cannot tell the cloud of {display_path(paths[0])} from its folder; "
                           "give --cloud (e.g. --cloud aws)")
    if len(clouds) > 1:
        raise CatalogError(f"the files hold prices of several clouds ({', '.join(sorted(clouds))}"
                           "); import one cloud at a time")
    cloud = clouds.pop()
    if as_of is None:
        newest = max(p.stat().st_mtime for p in paths)
        as_of = datetime.fromtimestamp(newest, tz=UTC).strftime("%Y-%m-%d")
    names = ", ".join(p.name for p in paths)
    source = (f"SkyPilot catalog CSV {names} ({cloud}), file dated {as_of}" if len(paths) == 1
              else f"SkyPilot catalog CSVs {names} ({cloud}, {len(paths)} snapshots, oldest "
              f"first), newest dated {as_of}")
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    unknown: dict[str, int] = {}
    no_gpu = 0
    for snapshot, (p, rows) in enumerate(zip(paths, tables, strict=True)):
        skipped, none = _group(rows, cat, p, snapshot, groups)
        no_gpu += none
        for name, n in skipped.items():
            unknown[name] = unknown.get(name, 0) + n
    offers = [r for key, g in sorted(groups.items())
              if (r := _offer_row(cat, cloud, key, g, source, as_of)) is not None]
    return Imported(offers=tuple(offers), skipped_unknown=unknown, skipped_no_gpu=no_gpu,
                    source=source, as_of=as_of)
