"""Text rendering of `gpuplan estimate` results (L5)."""

from __future__ import annotations

from typing import Any

from .fmt import num, table, usd


def render(r: dict[str, Any]) -> str:
    lay = r["layout"]
    lines = [
        f"{r['model']} ({r['params'] / 1e9:.1f}B parameters"
        + (f", {r['active_params'] / 1e9:.1f}B active" if r["active_params"] != r["params"] else "")
        + f") on {r['gpus']} x {r['gpu']} ({r['platform']}, {r['gpus_per_node']} per node)",
        f"layout: tp {lay['tp']}  pp {lay['pp']}"
        + (f" (x{lay['vpp']} interleaved)" if lay["vpp"] > 1 else "")
        + f"  cp {lay['cp']}  ep {lay['ep']}  dp {lay['dp']}  zero {lay['zero']}  "
        f"micro-batch {lay['micro_batch']}  global batch {lay['global_batch']} x "
        f"{lay['seq_len']} tokens ({lay['microbatches']} micro-batches)",
        f"        {lay['precision']}  {lay['optimizer']}  recompute {lay['recompute']}  "
        f"SP {'on' if lay['sp'] else 'off'}  flash attention {'on' if lay['flash'] else 'off'}"
        + ("  optimizer offloaded to CPU" if lay["offload"] else ""),
        "",
        "memory per GPU (most loaded pipeline stage), GiB = 2^30 bytes",
    ]
    m = r["memory_gib"]
    rows = [(k, f"{m[k]:.2f}") for k in ("weights", "gradients", "optimizer", "activations",
                                         "other")]
    rows.append(("total", f"{m['total']:.2f}"))
    rows.append(("GPU memory", f"{r['gpu_memory_gib']:.2f}"))
    lines.append(table(rows, ["part", "GiB"], "lr"))
    if r["fits"]:
        lines.append(f"fits, with {r['headroom_gib']:.1f} GiB headroom")
    else:
        lines.append(f"DOES NOT FIT: {-r['headroom_gib']:.1f} GiB over")
        for s in r["suggestions"]:
            lines.append(f"  - {s}")
        if not r["suggestions"]:
            lines.append("  - no single change of recompute, ZeRO, offload, micro-batch, TP, PP "
                         "or GPU count makes it fit; `gpuplan plan --model "
                         f"{r['model']} --gpu {r['gpu']} --tokens N` searches combinations")
    lines += ["", "time per step"]
    tb = r["time_breakdown_s"]
    rows = [(k.removesuffix("_s").replace("_", " "), f"{v * 1e3:,.1f}")
            for k, v in tb.items() if v > 0]
    rows.append(("step", f"{r['step_time_s'] * 1e3:,.1f}"))
    lines.append(table(rows, ["part", "ms"], "lr"))
    lines.append(
        f"tokens/s {num(r['tokens_per_s'])} (cluster), {num(r['tokens_per_s_per_gpu'])} per GPU;"
        f" MFU {r['mfu'] * 100:.1f}%  HFU {r['hfu'] * 100:.1f}%  bottleneck: {r['bottleneck']}")
    if not r["tokens_per_s"]:
        lines.append("cannot run: traffic must cross a link this platform lacks (e.g. more GPUs "
                     "than one instance that has no network between instances)")
    if r["efficiency_is_guess"]:
        lines.append("note: no published run calibrates this GPU family; its efficiency is a "
                     "stated guess (see docs/calibration.md)")
    if r["tokens"] is not None and r["tokens_per_s"]:
        lines += ["", f"training on {num(r['tokens'])} tokens"]
        lines.append(f"  {r['time_to_train_days']:,.1f} days wall clock "
                     f"({r['useful_days']:,.1f} days of useful compute, goodput "
                     f"{r['goodput'] * 100:.1f}% after failures and checkpoints)")
        lines.append(f"  {r['gpu_hours']:,.0f} GPU-hours, energy {r['energy_kwh']:,.0f} kWh, "
                     f"{r['co2e_kg'] / 1000:,.1f} t CO2e")
        if r["cost_usd"] is not None:
            lines.append(f"  cost {usd(r['cost_usd'])} ({r['pricing']}, "
                         f"{usd(r['usd_per_gpu_hour'])} per GPU-hour)")
        else:
            lines.append("  cost: give --offer ID, --usd-per-gpu-hour X or --pricing own")
    return "\n".join(lines)
