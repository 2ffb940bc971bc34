"""Case generator: every command's real flags, overlays and config.json files, seeded.

`generate(seed, n, profile)` is deterministic. profile 'quick' keeps each case cheap (plans
restricted to one GPU family and at most 512 GPUs, no cross-validation) for the test slice;
'full' draws from everything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import files
from .combos import contradiction
from .values import GOOD, HOSTILE_LIST, HOSTILE_NUM, HOSTILE_TEXT, LIST_KINDS, invalid

TARGETS = ("cli",)  # hook: add "web" (and a runner in run.py) once the web API exists


@dataclass(frozen=True)
class Case:
    """One fuzz case. `argv` may hold '{dir}', replaced by a fresh folder holding `files`."""

    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    invalid: str = ""  # why the input is certainly invalid ('' = it may be valid)
    family: str = ""
    target: str = "cli"

    def show(self) -> str:
        """A short, copyable description (long values abbreviated)."""
        args = " ".join(a if len(a) < 60 else a[:20] + f"...({len(a)} chars)" for a in self.argv)
        extra = f" files={[n for n, _ in self.files]}" if self.files else ""
        env = f" env={dict(self.env)}" if self.env else ""
        return f"gpuplan {args!r}{extra}{env}".replace("\n", "\\n")


NUMERIC = {"posint", "gpus", "degree", "tokens", "days", "money", "fraction", "posfraction",
           "nonneg", "years",
           "pue", "nodes", "seq", "batch", "zero", "confidence", "watts", "stage-layers",
           "samples", "epochs"}
# the fine-tuning flags of estimate and plan (#15), --stack (#12), --format (#13)
FINETUNE = {"--method": "method", "--lora-rank": "posint", "--lora-targets": "lora-targets",
            "--quant": "quant", "--samples": "samples", "--epochs": "epochs",
            "--padding-efficiency": "posfraction", "--stack": "stack", "--format": "format"}
SITE = {"--allocator": "allocator", "--utilization": "posfraction", "--years": "years",
        "--electricity": "nonneg",
        "--pue": "pue", "--grid-intensity": "nonneg", "--interruptions": "nonneg",
        "--reuse": "fraction"}
PLAN = {"--tokens": "tokens", "--deadline-days": "days", "--budget-usd": "money",
        "--max-gpus": "posint", "--objective": "objective", "--top": "posint", "--seq-len": "seq",
        "--global-batch": "batch", "--gpu": "gpu", "--vendor": "vendor",
        "--acquisition": "acquisition", "--pricing": "pricing", "--cloud": "cloud",
        "--region": "region", "--precision": "precision", "--scenario": "scenario",
        "--model": "model", "--confidence": "confidence", "--power-limit-watts": "watts",
        **FINETUNE, **SITE}
ESTIMATE = {"--gpu": "gpu", "--gpus": "gpus", "--system": "system", "--tp": "degree",
            "--pp": "degree", "--cp": "degree", "--ep": "degree", "--dp": "degree",
            "--vpp": "degree", "--zero": "zero", "--micro-batch": "posint",
            "--precision": "precision", "--optimizer": "optimizer", "--recompute": "recompute",
            "--tokens": "tokens", "--offer": "offer", "--usd-per-gpu-hour": "nonneg",
            "--pricing": "pricing", "--seq-len": "seq", "--global-batch": "batch",
            "--model": "model", "--power-limit-watts": "watts",
            "--grad-reduce-dtype": "grad-dtype", "--first-stage-layers": "stage-layers",
            "--last-stage-layers": "stage-layers", "--shard-group": "posint",
            "--offload": "offload", "--recompute-modules": "rmodules",
            "--recompute-every": "posint", "--offload-layers": "stage-layers",
            "--schedule": "schedule", "--moe-dispatcher": "dispatcher",
            "--moments-dtype": "grad-dtype", "--activation-cache": "act-cache", "--ema": "ema",
            "--fp8-recipe": "fp8-recipe", "--export": "export", **FINETUNE, **SITE}
TCO = {"--system": "system", "--nodes": "nodes", "--utilization": "fraction",
       "--price": "nonneg", "--host-load-factor": "fraction", "--years": "years",
       "--electricity": "nonneg", "--pue": "pue", "--colocation": "nonneg",
       "--maintenance": "fraction", "--network": "nonneg", "--storage": "nonneg",
       "--install": "fraction", "--staff": "nonneg", "--residual": "fraction",
       "--load-factor": "fraction", "--reuse": "fraction", "--grid": "nonneg",
       "--spot-interruptions": "nonneg", "--pricing": "cloud-pricing", "--cloud": "cloud",
       "--model": "model", "--scenario": "scenario", "--format": "format"}
FLAGS_ONLY = {"plan": ("--json", "--allow-consumer", "--packing", "--no-packing"),
              "estimate": ("--json", "--fsdp", "--no-sp", "--no-flash-attention",
                           "--dropout", "--packing", "--no-packing"),
              "tco": ("--json", "--compare-cloud")}
REPEATABLE = {"--gpu", "--pricing", "--precision", "--catalog"}
# tco: zero utilization / years / nodes is not a cluster
TCO_POSITIVE = {"--utilization", "--years", "--nodes"}


def _value(rng: random.Random, kind: str) -> str:
    r = rng.random()
    if r < 0.45:
        return rng.choice(GOOD.get(kind, ("1",)))
    if kind in LIST_KINDS and r < 0.7:
        return rng.choice(HOSTILE_LIST)
    if r < 0.85:
        return rng.choice(HOSTILE_NUM if kind in NUMERIC else HOSTILE_TEXT)
    return rng.choice(HOSTILE_TEXT if kind in NUMERIC else HOSTILE_NUM)


def _mutate(rng: random.Random, base: dict[str, list[str]], table: dict[str, str],
            n: int) -> str:
    """Replace or add n flags with drawn values; return why the result is invalid ('')."""
    touched = []
    for _ in range(n):
        flag = rng.choice(sorted(table))
        value = _value(rng, table[flag])
        # repeatable only where the flag appends (plan, tco); elsewhere the last value wins
        if flag in REPEATABLE and flag in base and rng.random() < 0.3 and table in (PLAN, TCO):
            base[flag].append(value)
        else:
            base[flag] = [value]
        touched.append(flag)
    for flag in dict.fromkeys(touched):  # judged on the final values
        for value in base[flag]:
            bad = invalid(table[flag], value)
            if not bad and table is TCO and flag in TCO_POSITIVE:
                bad = "must be positive" if _is_zero(value) else ""
            if bad:
                return f"{flag} {value!r:.40}: {bad}"
    return ""


def _is_zero(value: str) -> bool:
    try:
        return float(value) == 0
    except ValueError:
        return False


def _argv(rng: random.Random, cmd: list[str], flags: dict[str, list[str]],
          extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    out = list(cmd)
    for flag, values in flags.items():
        for v in values:
            if flag == "--offload" and v == "optimizer" and rng.random() < 0.5:
                out.append(flag)  # bare --offload: its const, optimizer
            elif v.startswith("-") or rng.random() < 0.2:
                out.append(f"{flag}={v}")
            else:
                out += [flag, v]
    return tuple(out) + extra


def _bools(rng: random.Random, cmd: str) -> tuple[str, ...]:
    return tuple(f for f in FLAGS_ONLY.get(cmd, ()) if rng.random() < 0.15)


def _n(rng: random.Random, fixed: bool) -> int:
    return 0 if fixed else rng.choice((0, 1, 1, 2, 3))


def plan_case(rng: random.Random, quick: bool, model: str | None = None) -> Case:
    flags = {"--model": [model or rng.choice(GOOD["model"][:5])],
             "--tokens": [rng.choice(GOOD["tokens"])]}
    if quick or rng.random() < 0.5:
        flags["--gpu"] = [rng.choice(GOOD["gpu"][:5])]
        flags["--max-gpus"] = [rng.choice(("64", "256", "512"))]
    why = _mutate(rng, flags, PLAN, _n(rng, model is not None))
    if quick and "--scenario" in flags:
        flags["--gpu"] = flags.get("--gpu") or ["h100"]
    if quick and flags.get("--max-gpus", ["x"])[0].strip().isdigit():
        flags["--max-gpus"] = [str(min(512, int(flags["--max-gpus"][0])))]
    _samples_not_tokens(rng, flags)
    bools = _bools(rng, "plan")
    why = why or contradiction("plan", flags, bools)
    return Case(argv=_argv(rng, ["plan"], flags, ("--quiet",) + bools), invalid=why,
                family="plan")


def _samples_not_tokens(rng: random.Random, flags: dict[str, list[str]]) -> None:
    """--samples usually replaces --tokens (both together is one of the contradictions)."""
    if "--samples" in flags and "--tokens" in flags and rng.random() < 0.7:
        del flags["--tokens"]


def estimate_case(rng: random.Random, model: str | None = None) -> Case:
    tp, pp = rng.choice(((1, 1), (2, 1), (8, 1), (2, 2), (4, 2), (1, 2)))
    flags = {"--model": [model or rng.choice(GOOD["model"][:5])],
             "--gpu": [rng.choice(GOOD["gpu"][:6])], "--gpus": ["8"], "--tp": [str(tp)],
             "--pp": [str(pp)], "--tokens": [rng.choice(GOOD["tokens"])]}
    if rng.random() < 0.4:
        flags["--pricing"] = [rng.choice(("on-demand", "own", "spot"))]
    why = _mutate(rng, flags, ESTIMATE, _n(rng, model is not None))
    _samples_not_tokens(rng, flags)
    bools = _bools(rng, "estimate")
    why = why or contradiction("estimate", flags, bools)
    return Case(argv=_argv(rng, ["estimate"], flags, bools), invalid=why, family="estimate")


def tco_case(rng: random.Random, fixed: bool = False) -> Case:
    flags = {"--system": [rng.choice(("dgx-h100", "dgx-a100", "hgx-h100", "dgx-b200"))],
             "--nodes": [rng.choice(GOOD["nodes"])], "--utilization": ["0.7"]}
    if rng.random() < 0.15:
        flags = {"--scenario": [rng.choice(GOOD["scenario"])]}
    why = _mutate(rng, flags, TCO, _n(rng, fixed))
    bools = _bools(rng, "tco")
    why = why or contradiction("tco", flags, bools)
    return Case(argv=_argv(rng, ["tco"], flags, bools), invalid=why, family="tco")


def catalog_case(rng: random.Random, quick: bool) -> Case:
    r = rng.random()
    json_flag = ("--json",) if rng.random() < 0.4 else ()
    if r < 0.45:
        what = rng.choice(("gpus", "systems", "fabrics", "offers", "site"))
        flags: dict[str, list[str]] = {}
        why = ""
        if what == "offers" and rng.random() < 0.6:
            why = _mutate(rng, flags, {"--gpu": "gpu", "--cloud": "cloud", "--vendor": "vendor"},
                          rng.choice((1, 2)))
        if what == "gpus" and rng.random() < 0.3:
            why = _mutate(rng, flags, {"--vendor": "vendor"}, 1)
        return Case(argv=_argv(rng, ["catalog", what], flags, json_flag), invalid=why,
                    family="catalog")
    if r < 0.75:
        ident = rng.choice(GOOD["id"]) if rng.random() < 0.5 else rng.choice(HOSTILE_TEXT)
        why = "unknown id" if ident in HOSTILE_TEXT else ""
        argv = ("catalog", "show", "--", ident) if ident.startswith("-") else (
            "catalog", "show", ident)
        return Case(argv=argv + json_flag, invalid=why, family="catalog")
    if r < 0.85:
        return Case(argv=("models",) + json_flag, family="models")
    if r < 0.9:
        return Case(argv=("catalog", "validate"), family="catalog")
    opts: tuple[str, ...] = ()
    if rng.random() < 0.5:
        opts += ("--family", rng.choice(GOOD["family"] + HOSTILE_TEXT[:4]))
    if rng.random() < 0.3:
        opts += ("--calibrate",)
    if not quick and rng.random() < 0.1:
        opts += ("--cross-validate",)
    modes = ("--memory", "--finetune", "--residuals")
    if quick and "--calibrate" in opts:  # --calibrate --residuals cross-validates (~5 s)
        modes = modes[:2]
    opts += tuple(f for f in modes if rng.random() < 0.15)
    return Case(argv=("validate",) + opts + json_flag, family="validate",
                invalid=contradiction("validate", {}, opts + json_flag))


def _with_file(rng: random.Random, ref: str) -> tuple[str, ...]:
    """A command that reads the file named `ref` through --model."""
    if rng.random() < 0.5:
        return estimate_case(rng, model=ref).argv
    return plan_case(rng, True, model=ref).argv


def config_case(rng: random.Random, quick: bool) -> Case:
    data, why = files.config_json(rng)
    ref = "{dir}/m/config.json" if rng.random() < 0.7 else "{dir}/m"
    argv = _with_file(rng, ref)
    return Case(argv=argv, files=(("m/config.json", data),), invalid=why, family="config")


def overlay_case(rng: random.Random, quick: bool) -> Case:
    data, why = files.overlay(rng)
    ref = "{dir}/o.toml"
    r = rng.random()
    env: tuple[tuple[str, str], ...] = ()
    if r < 0.35:
        argv: tuple[str, ...] = ("catalog", "validate", ref)
    else:
        inner = rng.choice((
            lambda: estimate_case(rng, model="llama2-7b").argv,
            lambda: plan_case(rng, True, model="llama2-7b").argv,
            lambda: tco_case(rng, fixed=True).argv, lambda: ("catalog", "gpus"),
            lambda: ("models",),
            lambda: ("catalog", "show", "dgx-h100")))()
        if r < 0.5:
            argv, env = inner, (("GPUPLAN_CATALOG", ref),)
        else:
            argv = inner + (f"--catalog={ref}",)
    # a command that fails for its own reasons is no evidence about the overlay
    return Case(argv=argv, files=(("o.toml", data),), env=env, invalid=why, family="overlay")


def path_case(rng: random.Random) -> Case:
    long = "/" + "a" * 5000 + ".json"
    bad = rng.choice((long, "/nonexistent/config.json", "{dir}", "--", "",
                      "/" + "d/" * 3000 + "x.toml"))
    r = rng.random()
    if r < 0.4:
        return Case(argv=("estimate", f"--model={bad}", "--gpu", "h100", "--gpus", "8"),
                    invalid="bad --model path" if bad != "{dir}" else "", family="path")
    if r < 0.8:
        return Case(argv=("catalog", "gpus", f"--catalog={bad}"), invalid="bad --catalog path",
                    family="overlay-path")
    return Case(argv=("catalog", "gpus"), env=(("GPUPLAN_CATALOG", bad or long),),
                invalid="bad GPUPLAN_CATALOG path", family="overlay-path")


VOCAB = ("plan", "estimate", "tco", "catalog", "models", "validate", "show", "gpus", "--json",
         "--tp", "--gpu", "--tokens", "--model", "--catalog", "--", "-", "-h", "--help=x",
         "llama2-7b", "h100", "8", "-1", "1e309", "", "\n", "--version", "--nodes", "=", "--=x")


def raw_case(rng: random.Random) -> Case:
    return Case(argv=tuple(rng.choice(VOCAB) for _ in range(rng.randint(0, 6))), family="raw")


FAMILIES = (("plan", 14), ("estimate", 22), ("tco", 16), ("catalog", 10), ("config", 16),
            ("overlay", 12), ("path", 3), ("raw", 7))


def one(rng: random.Random, quick: bool) -> Case:
    fam = rng.choices([f for f, _ in FAMILIES], [w for _, w in FAMILIES])[0]
    if fam == "plan":
        return plan_case(rng, quick)
    if fam == "estimate":
        return estimate_case(rng)
    if fam == "tco":
        return tco_case(rng)
    if fam == "catalog":
        return catalog_case(rng, quick)
    if fam == "config":
        return config_case(rng, quick)
    if fam == "overlay":
        return overlay_case(rng, quick)
    if fam == "path":
        return path_case(rng)
    return raw_case(rng)


def generate(seed: int, n: int, profile: str = "full") -> list[Case]:
    """n cases from `seed`; the same seed and profile always give the same cases."""
    rng = random.Random(seed)
    return [one(rng, profile == "quick") for _ in range(n)]
