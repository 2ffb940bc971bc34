"""Values for the fuzzer: good and hostile flag values, and which of them are invalid per kind.

`invalid(kind, value)` returns why a value is certainly invalid for a flag of that kind ('' when
it may be valid): a command that exits 0 on such a value has accepted bad input.
"""

from __future__ import annotations

import math
import re

LONG = "A" * 3000
HOSTILE_TEXT = ("", " ", "--", "-", "x", "\n", "h100\nrm -rf /", LONG, "none", "NULL", "é✓",
                "'; DROP", "../../etc/passwd", "%s%n", "{}")
HOSTILE_NUM = ("0", "-0", "-1", "1.5", "1e3", "1e9", "1000000000", "99999999999999999999",
               "1e309", "-1e309", "inf", "-inf", "nan", "NaN", "1e-320", "1e300", "0x10",
               " 8 ", "1_000", "٨", "5e", "+3", "2T", "1e-9", "0.0001",
               "1" + "0" * 400)

GPUS = ("h100", "a100-80gb", "mi300x", "h100-sxm", "a100-40gb", "rtx-4090", "h20", "ascend-910c",
        "b200", "gaudi3", "l40s", "v100-sxm2-32gb")
MODELS = ("llama2-7b", "llama3-8b", "llama2-13b", "bert-large", "mixtral-8x7b", "llama2-70b",
          "gpt3-175b", "llama3-70b")
SYSTEMS = ("dgx-h100", "dgx-a100", "hgx-h100", "mi300x-8x", "dgx-station-a100", "gb200-nvl72",
           "rtx-4090-8x", "dgx-h100-superpod-512", "dgx-b200")
PRICING = ("on-demand", "spot", "reserved-1y", "reserved-3y", "savings-plan-1y",
           "savings-plan-3y", "capacity-block", "own")
SCENARIOS = ("startup", "research", "hyperscale", "gpt3-one-server")
OFFERS = ("aws-p5.48xlarge-us-east-1", "aws-p4d.24xlarge-us-east-1")
PRECISIONS = ("fp32", "fp16", "bf16", "fp8")

# kind -> good values (the generator picks from these, or from the hostile pools)
GOOD: dict[str, tuple[str, ...]] = {
    "posint": ("1", "2", "4", "8", "16", "64"),
    "samples": ("1000", "50000", "1000000"),
    "epochs": ("1", "2", "3", "0.5"),
    "gpus": ("8", "16", "64", "256"),
    "degree": ("1", "2", "4", "8"),
    "tokens": ("1T", "300B", "2e12", "15T", "50B", "1.5T"),
    "days": ("7", "30", "90", "365", "1000"),
    "money": ("5e6", "500k", "1e7", "50000", "2e8"),
    "fraction": ("0.5", "0.7", "0.9", "1"),
    "posfraction": ("0.5", "0.7", "0.9", "1"),
    "nonneg": ("0.1", "0.05", "3", "1000"),
    "years": ("3", "4", "5"),
    "pue": ("1.1", "1.3", "1.56"),
    "gpu": GPUS,
    "model": MODELS,
    "system": SYSTEMS,
    "pricing": PRICING,
    "cloud-pricing": PRICING[:-1],
    "scenario": SCENARIOS,
    "precision": PRECISIONS,
    "offer": OFFERS,
    "objective": ("cost", "time", "energy"),
    "vendor": ("nvidia", "amd", "intel", "huawei"),
    "acquisition": ("cloud", "own", "any"),
    "recompute": ("none", "selective", "full", "op", "modules"),
    "stack": ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "torchtune"),
    "confidence": ("0.5", "0.7", "0.9"),
    "watts": ("300", "450", "700", "1000"),
    "grad-dtype": ("fp32", "bf16"),
    "stage-layers": ("0", "1", "2", "4", "8"),
    "offload": ("optimizer", "params", "grads", "activations", "optimizer,params",
                "optimizer,grads,params", "activations,optimizer"),
    "rmodules": ("core_attn", "mlp", "layernorm", "core_attn,mlp", "moe", "moe_act"),
    "method": ("full", "lora", "qlora", "freeze"),
    "lora-targets": ("attn", "mlp", "all"),
    "quant": ("none", "nf4", "int8", "fp8"),
    "format": ("text", "csv", "markdown"),
    "optimizer": ("adamw", "sgd", "adafactor"),
    "zero": ("0", "1", "2", "3"),
    "cloud": ("aws", "gcp", "azure", "lambda"),
    "region": ("us", "eu", "us-east-1"),
    "nodes": ("1", "2", "4", "64"),
    "seq": ("1024", "2048", "4096", "8192"),
    "batch": ("256", "512", "1024", "2048"),
    "family": ("a100", "h100", "mi250x", "v100"),
    "schedule": ("1f1b", "dualpipe", "1f1b-a2a"),
    "dispatcher": ("auto", "flex", "alltoall"),
    "act-cache": ("stack", "fp8"),
    "ema": ("none", "gpu", "host"),
    "fp8-recipe": ("auto", "tensor", "mxfp8"),
    "allocator": ("caching", "expandable"),
    "export": ("megatron", "torchtitan", "deepspeed", "torchrun", "slurm", "skypilot"),
    "id": ("h100-sxm", "dgx-h100", "ib-ndr", "aws-p5.48xlarge-us-east-1", "pue", "llama2-7b",
           "electricity_usd_per_kwh", "nvlink4"),
}
CHOICE_KINDS = {"pricing", "cloud-pricing", "scenario", "precision", "objective", "vendor",
                "acquisition", "recompute", "optimizer", "zero", "gpu", "system", "model", "offer",
                "stack", "grad-dtype", "method", "lora-targets", "quant", "format", "schedule",
                "dispatcher", "act-cache", "ema", "fp8-recipe", "export", "allocator"}
# comma lists: each part must be one of these (an empty part is junk too)
LIST_KINDS = {"offload": ("optimizer", "params", "grads", "activations"),
              "rmodules": ("core_attn", "mlp", "moe", "moe_act", "layernorm")}
# hostile comma lists for the list kinds: junk parts, empty parts, a part repeated
HOSTILE_LIST = ("optimizer,junk", ",", "params,,grads", "optimizer,optimizer", "core_attn,bogus",
                "mlp,", " , ", "ALL", "optimizer;params")


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _count(value: str) -> float | None:
    """As units.parse_count reads it: ',' and '_' are digit separators."""
    value = value.replace(",", "").replace("_", "")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*", value)
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12,
                                "p": 1e15}[m.group(2).lower()]


def invalid(kind: str, value: str) -> str:
    """Why `value` is certainly invalid for a flag of `kind`; '' when it may be valid."""
    if value.strip() in ("", "--"):
        return "an empty value or '--'"
    if kind in ("cloud", "region", "family", "id"):
        return ""  # free text: an unknown one may just match nothing
    if kind in LIST_KINDS:
        parts = [x.strip().lower() for x in value.split(",")]
        bad = [x for x in parts if x not in LIST_KINDS[kind]]
        return f"unknown part {bad[0]!r}" if bad else ""
    if kind == "stage-layers":
        try:
            n = int(value)
        except ValueError:
            return "not a whole number"
        return "negative or beyond any model's layers" if not 0 <= n <= 10_000 else ""
    if kind in ("confidence", "watts", "epochs"):
        v = _float(value)
        if v is None or not math.isfinite(v):
            return "not a finite number"
        if kind == "confidence" and not 0.5 <= v <= 0.9:
            return "a quantile outside 0.5..0.9"
        if kind == "watts" and v > 10_000:
            return "a power cap above 10 kW per GPU"
        return "must be positive" if v <= 0 else ""
    if kind == "samples":
        kind = "posint"
    if kind in ("posint", "gpus", "degree", "nodes", "seq", "batch"):
        try:
            return "below 1" if int(value) < 1 else ""  # int() takes ' 8 ', '1_000', '٨'
        except ValueError:
            f = _float(value)  # '1e3' may be read as 1000: not certainly invalid
            return "" if f is not None and math.isfinite(f) and f.is_integer() and f >= 1 \
                else "not a whole number"
    if kind == "zero":
        try:
            return "" if int(value) in (0, 1, 2, 3) else "ZeRO stage must be 0..3"  # '+3', '-0'
        except ValueError:
            return "ZeRO stage must be 0..3"
    if kind in CHOICE_KINDS - {"gpu", "system", "model", "offer"}:
        return "" if value in GOOD[kind] else f"not one of the {kind} choices"
    if kind == "tokens":
        v = _count(value)
        if v is None or not math.isfinite(v):
            return "not a finite token count"
        if v > 1e18:  # workload.MAX_TOKENS
            return "more than 1e18 tokens"
        return "fewer than one token" if v < 1 else ""
    if kind == "money":
        v = _count(value)
        return "" if v is not None and math.isfinite(v) else "not a finite amount"
    v = _float(value)
    if kind in ("days", "years", "fraction", "posfraction", "nonneg", "pue"):
        if v is None or not math.isfinite(v):
            return "not a finite number"
        if kind in ("days", "posfraction") and v <= 0:
            return "must be positive"
        if kind == "years" and v <= 0:
            return "years must be positive"
        if v < 0:
            return "negative"
        if kind in ("fraction", "posfraction") and v > 1:
            return "a fraction above 1"
        if kind == "pue" and v < 1:
            return "PUE below 1"
        return ""
    if kind in ("gpu", "system", "model", "offer"):
        return "" if value in GOOD[kind] else ("unknown id" if value in HOSTILE_TEXT else "")
    return ""
