"""Contradictory flag combinations the fuzzer knows are invalid (each alone may be valid).

`contradiction(command, flags, bools)` returns why the final flags of a case contradict each
other ('' when they may be valid). A rule is judged only when the values it reads are clean
(a hostile value is judged by `values.invalid` instead), so it never calls a valid case invalid.
"""

from __future__ import annotations

from collections.abc import Callable

# the presets the generator draws (values.MODELS[:5]): layers, hidden, mixture of experts
MODELS = {"llama2-7b": (32, 4096, False), "llama3-8b": (32, 4096, False),
          "llama2-13b": (40, 5120, False), "bert-large": (24, 1024, False),
          "mixtral-8x7b": (32, 4096, True)}
NO_CUDA = {"mi300x", "gaudi3", "ascend-910c"}  # no bitsandbytes NF4 kernels
MAX_WIDTH = 1 << 22  # rules.MAX_WIDTH: no model is wider, so no LoRA rank may be larger
ADAPTERS = ("lora", "qlora")


def _one(flags: dict[str, list[str]], flag: str, default: str = "") -> str:
    values = flags.get(flag)
    return values[-1].strip().lower() if values else default


def _int(flags: dict[str, list[str]], flag: str, default: int) -> int | None:
    values = flags.get(flag)
    if not values:
        return default
    try:
        return int(values[-1])
    except ValueError:
        return None


def _output(flags: dict[str, list[str]], bools: tuple[str, ...]) -> str:
    if _one(flags, "--format", "text") in ("csv", "markdown") and "--json" in bools:
        return "--format csv|markdown with --json"
    if "--packing" in bools and "--no-packing" in bools:
        return "--packing with --no-packing"
    if flags.get("--export") and ("--json" in bools or _one(flags, "--format", "text") in (
            "csv", "markdown")):
        return "--export without -o (prints the launch config) with --json or --format"
    return ""


def _finetune(flags: dict[str, list[str]], bools: tuple[str, ...], gpu: str) -> str:
    method = _one(flags, "--method", "full")
    if method not in ("full", "lora", "qlora", "freeze"):
        return ""
    quant = _one(flags, "--quant")
    if "--samples" in flags and "--tokens" in flags:
        return "--samples with --tokens"
    if "--epochs" in flags and "--samples" not in flags:
        return "--epochs without --samples"
    if ("--padding-efficiency" in flags or "--no-packing" in bools) and "--samples" not in flags:
        return "--padding-efficiency or --no-packing without --samples"
    if method not in ADAPTERS and ("--lora-rank" in flags or "--lora-targets" in flags):
        return f"--lora-rank/--lora-targets with --method {method}"
    rank = _int(flags, "--lora-rank", 16)
    if rank is not None and rank > MAX_WIDTH:
        return "--lora-rank larger than any hidden size"
    if quant in ("nf4", "int8", "fp8") and method in ("full", "freeze"):
        return f"--quant {quant} with --method {method}"
    if method == "qlora" and quant in ("none", "int8", "fp8"):
        return f"--method qlora with --quant {quant}"
    if (method == "qlora" or quant == "nf4") and gpu in NO_CUDA:
        return f"NF4 on {gpu}"
    return ""


def _layout(flags: dict[str, list[str]], bools: tuple[str, ...]) -> str:
    layers, _, moe = MODELS.get(_one(flags, "--model"), (0, 0, True))
    zero = 3 if "--fsdp" in bools else _int(flags, "--zero", 0)
    pp = _int(flags, "--pp", 1)
    first = _int(flags, "--first-stage-layers", 0)
    if pp == 1 and first not in (None, 0):
        return "--first-stage-layers with --pp 1"
    if layers and first is not None and first > layers:
        return "--first-stage-layers beyond the model's layers"
    parts = {p.strip() for p in _one(flags, "--offload").split(",")}
    if zero is not None and "params" in parts and zero != 3:
        return "--offload params without --zero 3"
    if zero is not None and "grads" in parts and zero < 2:
        return "--offload grads without --zero 2"
    sg = _int(flags, "--shard-group", 0)
    if sg and zero == 0:
        return "--shard-group without --zero"
    degrees = [_int(flags, f, d) for f, d in (("--gpus", 8), ("--tp", 1), ("--cp", 1))]
    if sg and pp and all(degrees) and "--dp" not in flags and "--system" not in flags:
        gpus, tp, cp = degrees  # type: ignore[misc]
        if gpus % (tp * pp * cp) == 0 and (gpus // (tp * pp)) % sg:
            return "--shard-group not dividing dp*cp"
    fp8 = _one(flags, "--precision", "bf16") == "fp8"
    if not fp8 and _one(flags, "--fp8-recipe", "auto") in ("tensor", "mxfp8"):
        return "--fp8-recipe tensor|mxfp8 without --precision fp8"
    if not fp8 and _one(flags, "--activation-cache", "stack") == "fp8":
        return "--activation-cache fp8 without --precision fp8"
    recompute = _one(flags, "--recompute", "none")
    every = _int(flags, "--recompute-every", 1)
    if every not in (None, 1) and recompute != "full":
        return "--recompute-every without --recompute full"
    mods = _one(flags, "--recompute-modules")
    if mods and recompute in ("full", "op"):
        return f"--recompute-modules with --recompute {recompute}"
    if layers and not moe and mods and {"moe", "moe_act"} & {m.strip() for m in mods.split(",")}:
        return "--recompute-modules moe on a dense model"
    return ""


def _validate(argv: tuple[str, ...]) -> str:
    modes = [m for m in ("--memory", "--finetune") if m in argv]
    if len(modes) > 1:
        return "--memory with --finetune"
    if modes and {"--calibrate", "--cross-validate", "--residuals", "--family"} & set(argv):
        return f"{modes[0]} with a flag of the main validation"
    if "--residuals" in argv and "--calibrate" not in argv:
        return "--residuals without --calibrate"
    if "--residuals" in argv and "--json" in argv:
        return "--residuals (TOML) with --json"
    return ""


RULES: dict[str, Callable[[dict[str, list[str]], tuple[str, ...]], str]] = {
    "estimate": lambda f, b: (_output(f, b) or _finetune(f, b, _one(f, "--gpu"))
                              or _layout(f, b)),
    "plan": lambda f, b: _output(f, b) or _finetune(f, b, ""),
    "tco": lambda f, b: _output(f, b),
}


def contradiction(command: str, flags: dict[str, list[str]], bools: tuple[str, ...]) -> str:
    """Why these flags of `command` contradict each other ('' when they may be valid)."""
    if command == "validate":
        return _validate(bools)
    rule = RULES.get(command)
    return rule(flags, bools) if rule else ""
