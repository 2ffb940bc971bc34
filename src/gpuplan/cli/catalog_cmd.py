"""`gpuplan catalog ...` and `gpuplan models`: list, show and validate the sourced catalog."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from . import common_options

TFLOPS = 1e12


def register(sub: Any) -> None:
    cat = sub.add_parser(
        "catalog",
        help="list and show the sourced hardware, fabrics, cloud offers and site defaults",
        description="The built-in catalog (every number with its source and date), merged with "
        "any overlay given by --catalog FILE or $GPUPLAN_CATALOG.",
        epilog="examples:\n  gpuplan catalog gpus\n  gpuplan catalog show h100-sxm\n"
        "  gpuplan catalog offers --gpu h100-sxm --json\n  gpuplan catalog validate my.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    csub = cat.add_subparsers(dest="catalog_command", metavar="WHAT", required=True)
    for name, helptext in (
        ("gpus", "accelerators: memory, bandwidth, dense peak FLOP/s, links, TDP, export status"),
        ("systems", "servers, workstations, racks and pods"),
        ("fabrics", "scale-up, scale-out and host links: bandwidth per direction, latency"),
        ("offers", "cloud instances and their prices per pricing mode"),
        ("site", "defaults for owning hardware: electricity, PUE, colocation, staff, ..."),
    ):
        p = csub.add_parser(name, help=helptext, description=helptext)
        common_options(p)
        if name == "offers":
            p.add_argument("--gpu", help="only offers with this accelerator")
            p.add_argument("--cloud", help="only offers of this cloud (aws, gcp, azure, ...)")
        if name == "gpus":
            p.add_argument("--vendor", type=str.lower, choices=("nvidia", "amd", "intel", "huawei"),
                           help="only this vendor")
        p.set_defaults(func=_run_list, what=name)
    show = csub.add_parser("show", help="everything about one id (any kind), with its sources",
                           description="Show one catalog entry: a GPU, system, pod, fabric, "
                           "offer, model or site value, by id or alias.")
    show.add_argument("id", help="an id or alias, e.g. h100-sxm, 'H100 SXM5 80GB', dgx-h100")
    common_options(show)
    show.set_defaults(func=_run_show)
    val = csub.add_parser("validate", help="validate an overlay file (or the built-in catalog)",
                          description="Check a catalog overlay exactly as the built-in data is "
                          "checked: fields, units, ranges, references. Exit 0 when valid.")
    val.add_argument("file", nargs="?", help="overlay TOML file; omit to check the built-in data")
    common_options(val)
    val.set_defaults(func=_run_validate)

    models = sub.add_parser("models", help="list the model presets",
                            description="Model presets (dimensions from each paper/config).")
    common_options(models)
    models.set_defaults(func=_run_models)


def _load(args: argparse.Namespace) -> Any:
    from ..catalog import load_catalog

    return load_catalog(args.catalog)


def gpu_record(a: Any) -> dict[str, Any]:
    """JSON object for one accelerator (the contract keys of issue 2 plus the rest)."""
    d = dataclasses.asdict(a)
    d["aliases"] = list(a.aliases)
    d["scale_up_bytes_per_s_per_direction"] = a.scale_up_bytes_per_s_per_direction
    return d


def offer_record(o: Any) -> dict[str, Any]:
    d = dataclasses.asdict(o)
    d["aliases"] = list(o.aliases)
    d["usd_per_gpu_hour"] = {k: v / o.count for k, v in o.usd_per_hour.items()}
    return d


def model_record(m: Any) -> dict[str, Any]:
    """JSON object for one model preset: its fields, total and active parameters."""
    d = dataclasses.asdict(m)
    d["params"] = m.total_params()
    d["active_params"] = m.active_params()
    return d


def _records(cat: Any, what: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    if what == "gpus":
        rows = [gpu_record(a) for a in cat.accelerators.values()
                if not args.vendor or a.vendor == args.vendor]  # --vendor is lower-cased
        return rows
    if what == "offers":
        gpu = cat.resolve("accelerator", args.gpu) if args.gpu else None
        return [offer_record(o) for o in cat.offers.values()
                if (gpu is None or o.accelerator == gpu)
                and (not args.cloud or o.cloud == args.cloud.lower())]
    if what == "systems":
        out = []
        for s in cat.systems.values():
            d = dataclasses.asdict(s)
            d["type"] = "system"
            out.append(d)
        for p in cat.pods.values():
            d = dataclasses.asdict(p)
            d["type"] = "pod"
            d["gpus"] = p.nodes * cat.systems[p.system].gpus_per_node
            out.append(d)
        return out
    if what == "fabrics":
        return [dataclasses.asdict(f) for f in cat.fabrics.values()]
    return [dataclasses.asdict(v) for v in cat.site.values()]


def _run_list(args: argparse.Namespace) -> int:
    from ..report.fmt import dumps, num, table

    cat = _load(args)
    recs = _records(cat, args.what, args)
    if args.json:
        print(dumps(recs))
        return 0
    if args.what == "gpus":
        rows = [(r["id"], r["vendor"], f"{r['memory_bytes'] / 2**30:.0f}",
                 f"{r['memory_bandwidth_bytes_per_s'] / 1e12:.2f}",
                 *(num(r["peak_flops"][k] / TFLOPS) if k in r["peak_flops"] else "-"
                   for k in ("fp32", "bf16", "fp8", "fp4")),
                 f"{r['scale_up_fabric']} {r['scale_up_bytes_per_s'] / 1e9:.0f}",
                 f"{r['tdp_watts']:.0f}", r["export_cn"]) for r in recs]
        print(table(rows, ["id", "vendor", "GiB", "TB/s", "fp32", "bf16", "fp8", "fp4",
                           "scale-up GB/s (both dirs)", "TDP W", "export CN"],
                    "llrrrrrrlrl"))
        print("\nTFLOPS are dense (no sparsity). `gpuplan catalog show ID` gives sources.")
    elif args.what == "offers":
        modes = ("on-demand", "spot", "reserved-1y", "reserved-3y")
        rows = [(r["id"], r["accelerator"], r["count"], r["region"],
                 *(f"{r['usd_per_gpu_hour'][m]:.2f}" if m in r["usd_per_gpu_hour"] else "-"
                   for m in modes), r["as_of"]) for r in recs]
        print(table(rows, ["offer", "gpu", "n", "region", *modes, "as of"], "llrlrrrrl"))
        print("\nPrices are USD per GPU-hour (instance price / GPUs); `--json` gives both.")
    elif args.what == "systems":
        rows = []
        for r in recs:
            if r["type"] == "system":
                rows.append((r["id"], r["kind"], r["accelerator"], r["gpus_per_node"],
                             r["scale_up_domain"], r["scale_out_fabric"] or "-",
                             f"{r['max_power_watts'] / 1e3:.1f}",
                             f"{r['price_usd']:,.0f}" if r["price_usd"] else "-"))
            else:
                rows.append((r["id"], "pod", r["system"], f"{r['gpus']} ({r['nodes']} nodes)",
                             "", "", "", ""))
        print(table(rows, ["id", "kind", "gpu", "GPUs/node", "scale-up", "scale-out",
                           "max kW", "price USD"], "lllrrlrr"))
    elif args.what == "fabrics":
        rows = [(r["id"], r["kind"], f"{r['bytes_per_s_per_direction'] / 1e9:g}",
                 f"{r['latency_s'] * 1e6:g}", r["name"]) for r in recs]
        print(table(rows, ["id", "kind", "GB/s per direction", "latency us", "name"], "llrrl"))
    else:
        rows = [(r["name"], f"{r['value']:g}", r["unit"], r["as_of"]) for r in recs]
        print(table(rows, ["name", "value", "unit", "as of"], "lrll"))
    return 0


def _show_record(cat: Any, kind: str, ident: str) -> dict[str, Any]:
    obj = cat.tables()[kind][ident]
    if kind in ("efficiency", "scenarios"):
        rec = {"id": ident, **obj}
    elif kind == "accelerator":
        rec = gpu_record(obj)
    elif kind == "offer":
        rec = offer_record(obj)
    elif kind == "model":
        rec = model_record(obj)
    else:
        rec = dataclasses.asdict(obj)
    rec["kind"] = kind
    rec["overlay_values"] = cat.overlay_values(kind, ident)
    return rec


def _run_show(args: argparse.Namespace) -> int:
    from ..report.fmt import dumps

    cat = _load(args)
    kind, ident = cat.locate(args.id)
    rec = _show_record(cat, kind, ident)
    if args.json:
        print(dumps(rec))
        return 0
    print(f"{kind} {rec.get('id') or rec.get('name')}: {rec.get('name', rec.get('title', ''))}")
    for key, value in rec.items():
        if key in ("id", "name", "kind", "overlay_values"):
            continue
        print(f"  {key:34} {_human(key, value)}")
    if rec["overlay_values"]:
        print("  values set by overlay files (field: file):")
        for path, origin in rec["overlay_values"].items():
            print(f"    {path:32} {origin}")
    return 0


def _human(key: str, value: Any) -> str:
    if key == "peak_flops":
        return ", ".join(f"{k} {v / TFLOPS:g} TFLOPS" for k, v in value.items()) + " (dense)"
    if key == "usd_per_hour" or key == "usd_per_gpu_hour":
        return ", ".join(f"{k} ${v:,.2f}" for k, v in value.items())
    if isinstance(value, float):
        if key.endswith("bytes"):
            return f"{value:,.0f} ({value / 2**30:,.1f} GiB)"
        if key.endswith("bytes_per_s") and "scale_up" in key:
            return f"{value / 1e9:,.0f} GB/s"
        if key.endswith("bytes_per_s") or key.endswith("bytes_per_s_per_direction"):
            return f"{value / 1e9:,.1f} GB/s"
        if key.endswith("flops"):
            return f"{value / TFLOPS:g} TFLOPS"
        if key.endswith("latency_s"):
            return f"{value * 1e6:g} us"
        return f"{value:,.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    if value is None or value == "":
        return "-"
    return str(value)


def _run_validate(args: argparse.Namespace) -> int:
    from ..catalog import load_catalog, validate_file
    from ..report.fmt import dumps

    cat = validate_file(args.file) if args.file else load_catalog(args.catalog)
    counts = {"accelerators": len(cat.accelerators), "systems": len(cat.systems),
              "pods": len(cat.pods), "fabrics": len(cat.fabrics), "offers": len(cat.offers),
              "models": len(cat.models), "site": len(cat.site),
              "efficiency": len(cat.table("efficiency")),
              "scenarios": len(cat.table("scenarios"))}
    if args.json:
        print(dumps({"valid": True, "file": args.file, "counts": counts}))
    else:
        what = args.file or "the built-in catalog"
        print(f"{what}: valid (" + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")")
    return 0


def _run_models(args: argparse.Namespace) -> int:
    from ..report.fmt import dumps, table

    cat = _load(args)
    recs = [model_record(m) for m in cat.models.values()]
    if args.json:
        print(dumps(recs))
        return 0
    rows = [(r["id"], f"{r['params'] / 1e9:.1f}B",
             f"{r['active_params'] / 1e9:.1f}B" if r["experts"] else "", r["layers"], r["hidden"],
             f"{r['heads']}/{r['kv_heads']}", r["ffn"], r["mlp"], r["vocab"],
             f"{r['experts']}x top-{r['experts_per_token']}" if r["experts"] else "")
            for r in recs]
    print(table(rows, ["id", "params", "active", "layers", "hidden", "heads/kv", "ffn", "mlp",
                       "vocab", "experts"], "lrrrrrrlrl"))
    print("\nUse --model ID, --model path/to/config.json, or explicit --layers --hidden ... flags.")
    return 0
