"""The public Python API: `gpuplan.estimate(...)`, `gpuplan.plan(...)`, `gpuplan.tco(...)` (L5).

Each takes the names of its command's flags (``--micro-batch`` is ``micro_batch``, a repeatable
flag takes a list) and returns the typed, frozen result of the library (`search.results`);
`gpuplan.report.estimate` / `gpuplan.report.plan` / `gpuplan.report.tco` turn it into text
(`render_text`) or JSON (`to_json`). The CLI is a thin layer over these functions::

    import gpuplan
    e = gpuplan.estimate(model="llama3-8b", gpu="h100-sxm", gpus=8, tp=2, tokens="1T")
    p = gpuplan.plan(model="llama3-70b", tokens="15T", deadline_days=90)
    p.plans[0].gpu, p.plans[0].time_to_train_days
    t = gpuplan.tco(system="dgx-h100", nodes=4, years=4, utilization=0.7, compare_cloud=True)
    t.own.usd_per_gpu_hour, t.break_even[0].utilization

Bad input raises a `gpuplan.errors.GpuplanError` subclass whose message is one line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from .catalog import Catalog, load_catalog
from .errors import ConfigError
from .search.inputs import check_input
from .search.results import Estimate, PlanResult
from .spec import (
    MOE_DISPATCHERS,
    OPTIMIZERS,
    PRECISIONS,
    R_MODULES,
    RECOMPUTE,
    SCHEDULES,
    STACKS,
    Layout,
    ModelSpec,
    code,
    modules_code,
    offload_code,
)
from .units import parse_count
from .workload import (
    check_tokens,
    default_global_batch,
    default_seq_len,
    finetune_of,
    finetune_spec,
    finetune_tokens,
    model_from_flags,
    resolve_model,
    with_finetune,
)

if TYPE_CHECKING:
    from .search.evaluate import SiteOverrides
    from .search.ownership import TcoResult

__all__ = ["estimate", "plan", "tco"]

SITE_FLAGS = {"utilization": "utilization", "years": "years",
              "electricity": "electricity_usd_per_kwh", "pue": "pue",
              "grid_intensity": "grid_kg_co2e_per_kwh",
              "interruptions": "spot_interruptions_per_hour", "reuse": "reuse_utilization"}
# the site flags whose `search.inputs.check_input` rule has another name (tco's flag)
SITE_RULES = {"grid_intensity": "grid", "interruptions": "spot_rate"}
MODEL_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "tied_embeddings")
ALLOCATOR_FLAG = "allocator"  # a name (search.evaluate.ALLOCATORS), not a number: apart
# the keywords `estimate` and `plan` take as flags
ESTIMATE_FLAGS = (*SITE_FLAGS, ALLOCATOR_FLAG, *MODEL_FLAGS)


def _catalog(catalog: Catalog | str | Sequence[str] | None) -> Catalog:
    if isinstance(catalog, Catalog):
        return catalog
    if isinstance(catalog, str):
        catalog = [catalog]
    return load_catalog(list(catalog or []))


def _model(cat: Catalog, model: str | ModelSpec | None, flags: dict[str, Any]) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if model and not flags:  # a preset or a config.json, no model flag beside it
        return resolve_model(cat, model)
    dims = {k: flags.get(k) for k in ("layers", "hidden", "heads", "vocab")}
    if model and any(v is not None for v in dims.values()):
        raise ConfigError("give either --model or explicit --layers/--hidden/--heads/--vocab, "
                          "not both")
    if model:
        return resolve_model(cat, model)
    missing = [f"--{k}" for k, v in dims.items() if v is None]
    if missing:
        raise ConfigError(
            f"no model given: pass --model ID (see `gpuplan models`) or all of "
            f"--layers --hidden --heads --vocab (missing {' '.join(missing)})")
    return model_from_flags(layers=flags["layers"], hidden=flags["hidden"],
                            heads=flags["heads"], vocab=flags["vocab"],
                            kv_heads=flags.get("kv_heads"), ffn=flags.get("ffn"),
                            mlp=flags.get("mlp") or "gelu",
                            tied_embeddings=bool(flags.get("tied_embeddings")))


def _site(cat: Catalog, flags: dict[str, Any], scen: dict[str, Any] | None = None) -> Any:
    from .search import scenario
    from .search.evaluate import site_from_catalog

    return site_from_catalog(cat, **scenario.site_overrides(scen or {}, _site_overrides(flags)))


def _site_overrides(flags: dict[str, Any]) -> SiteOverrides:
    """The site flags given, as `evaluate.Site` fields (None where not given), each checked by
    the rule `gpuplan tco` applies to the same input (`search.inputs.check_input`)."""
    return {**{field: None if flags.get(flag) is None else
                check_input(SITE_RULES.get(flag, flag), flags[flag], "--" + flag.replace("_", "-"))
                for flag, field in SITE_FLAGS.items()}, ALLOCATOR_FLAG: flags.get(ALLOCATOR_FLAG)}


def _checked_tokens(tokens: str | float | None, layout: Layout, from_samples: bool
                    ) -> float | None:
    """The tokens to train on, checked against one step's tokens (`check_tokens`; a count
    derived from --samples is not echoed back as if the user had typed it)."""
    value = _tokens(tokens)
    if value is not None:
        check_tokens(value, int(layout.global_batch) * int(layout.seq_len),
                     None if from_samples else tokens)
    return value


def _tokens(tokens: str | float | None) -> float | None:
    if tokens is None:
        return None
    value = parse_count(tokens, "--tokens")
    if not value > 0:
        raise ConfigError("--tokens must be more than 0, e.g. 2T")
    return value


def _layout(model: ModelSpec, *, gpus: int | None, tp: int, pp: int, cp: int, ep: int,
            dp: int | None, vpp: int, zero: int, fsdp: bool, micro_batch: int,
            global_batch: int | None, seq_len: int | None, precision: str, optimizer: str,
            recompute: str, offload: Any, sp: bool, flash_attention: bool, dropout: bool,
            stack: str = "megatron", shard_group: int = 0, recompute_modules: Any = None,
            recompute_every: int = 1, first_stage_layers: int = 0,
            last_stage_layers: int = 0, schedule: str = "1f1b",
            offload_layers: int = 0, moe_dispatcher: str = "auto") -> tuple[Any, int]:

    if fsdp and zero not in (0, 3):
        raise ConfigError("--fsdp means --zero 3; drop one of them")
    inner = tp * pp * cp
    if dp is None:
        gpus = gpus or inner
        if gpus % inner:
            raise ConfigError(f"--gpus {gpus} is not divisible by tp*pp*cp = {inner}; "
                              f"use a multiple of {inner}")
        dp = gpus // inner
    else:
        gpus = gpus or inner * dp
    seq = seq_len or default_seq_len(model)
    if (schedule or "1f1b").lower() == "dualpipe" and (pp < 2 or vpp > 1):
        raise ConfigError("--schedule dualpipe runs two pipeline stages per rank without "
                          "interleaving: use --pp 2 or more and no --vpp")
    rc = code(RECOMPUTE, recompute.lower(), "recompute mode")
    mods = 1
    if recompute_modules is not None:
        if rc not in (0, 1, R_MODULES):
            raise ConfigError(f"--recompute-modules needs --recompute modules (Megatron-LM's "
                              f"selective granularity), not --recompute {recompute}")
        rc, mods = R_MODULES, modules_code(recompute_modules)
    layout = Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, zero=3 if fsdp else zero,
        micro_batch=micro_batch, seq_len=seq,
        global_batch=global_batch or _default_batch(model, seq, dp * micro_batch),
        recompute=rc, recompute_modules=mods, recompute_every=recompute_every,
        shard_group=shard_group,
        precision=code(PRECISIONS, precision.lower(), "precision"),
        optimizer=code(OPTIMIZERS, optimizer.lower(), "optimizer"),
        sp=sp, flash=flash_attention, offload=offload_code(offload), dropout=dropout,
        offload_layers=offload_layers,
        stack=code(STACKS, (stack or "megatron").lower(), "software stack"),
        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
        schedule=code(SCHEDULES, (schedule or "1f1b").lower(), "pipeline schedule"),
        moe_dispatcher=code(MOE_DISPATCHERS, (moe_dispatcher or "auto").lower(), "MoE dispatcher"))
    layout.check(model, gpus)
    return layout, gpus


def _default_batch(model: ModelSpec, seq: int, multiple: int) -> int:
    """~4M tokens per step for training; a fine-tune's 16 sequences (workload), rounded up to
    a multiple of dp x micro-batch."""
    from .workload import FINETUNE_GLOBAL_BATCH

    if finetune_of(model) is None:
        return default_global_batch(seq, multiple)
    return -(-FINETUNE_GLOBAL_BATCH // multiple) * multiple


FINETUNE_ARGS = ("method", "lora_rank", "lora_targets", "quant", "samples", "epochs", "packing",
                 "padding_efficiency")


def _finetuned(m: ModelSpec, ft_args: dict[str, Any], tokens: Any, seq_len: int | None
               ) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """The model with its fine-tuning method (`workload.with_finetune`), the tokens (given, or
    from --samples x --seq-len x --epochs) and the facts `search.finetune.info` reports."""
    a = {k: ft_args.get(k) for k in FINETUNE_ARGS}
    ft = finetune_spec(m, method=a["method"] or "full", lora_rank=a["lora_rank"],
                       lora_targets=a["lora_targets"], quant=a["quant"])
    m = with_finetune(m, ft)
    packing = True if a["packing"] is None else bool(a["packing"])
    eff = 1.0 if a["padding_efficiency"] is None else a["padding_efficiency"]
    if a["samples"] is None:
        if a["epochs"] is not None:
            raise ConfigError("--epochs needs --samples (samples per epoch); or give --tokens")
        if a["padding_efficiency"] is not None or not packing:
            raise ConfigError("--padding-efficiency and --no-packing describe the samples: "
                              "give --samples N (with --seq-len), or drop them")
        return m, tokens, {"tokens": None}
    if tokens is not None:
        raise ConfigError("give either --tokens or --samples (with --seq-len and --epochs), "
                          "not both")
    epochs = 1.0 if a["epochs"] is None else a["epochs"]
    value = finetune_tokens(samples=a["samples"], seq_len=seq_len or default_seq_len(m),
                            epochs=epochs, packing=packing, padding_efficiency=eff)
    return m, value, {"tokens": value, "samples": a["samples"], "epochs": epochs,
                      "packing": packing, "padding_efficiency": eff}


def estimate(*, gpu: str, model: str | ModelSpec | None = None, gpus: int | None = None,
             tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, dp: int | None = None,
             vpp: int = 1, zero: int = 0, fsdp: bool = False, micro_batch: int = 1,
             global_batch: int | None = None, seq_len: int | None = None,
             precision: str = "bf16", optimizer: str = "adamw", recompute: str = "none",
             offload: bool | str | Sequence[str] = False, offload_layers: int = 0,
             sp: bool = True, flash_attention: bool = True, dropout: bool = False,
             stack: str = "megatron", shard_group: int = 0,
             recompute_modules: str | Sequence[str] | None = None, recompute_every: int = 1,
             first_stage_layers: int = 0, last_stage_layers: int = 0,
             tokens: str | float | None = None, offer: str | None = None,
             system: str | None = None, usd_per_gpu_hour: float | None = None,
             pricing: str | None = None, power_limit_watts: float | None = None,
             catalog: Catalog | str | Sequence[str] | None = None,
             method: str = "full", lora_rank: int | None = None, lora_targets: str | None = None,
             quant: str | None = None, samples: int | None = None, epochs: float | None = None,
             packing: bool | None = None, padding_efficiency: float | None = None,
             grad_reduce_dtype: str | None = None, schedule: str = "1f1b",
             moments_dtype: str | None = None, activation_cache: str | None = None,
             ema: str | None = None, moe_dispatcher: str = "auto", fp8_recipe: str | None = None,
             tp_collectives: str | None = None, **flags: Any) -> Estimate:
    """Memory, time and cost of one configuration (`gpuplan estimate`; `moments_dtype`,
    `activation_cache`, `ema`, `fp8_recipe`: estimators/buffers.py, `tp_collectives`
    overlapped|blocking: None = the stack's). `flags`: model flags (layers, hidden, heads,
    kv_heads, ffn, vocab, mlp, tied_embeddings), site flags (utilization, years, electricity,
    pue, grid_intensity, interruptions, reuse), `allocator` (caching|expandable). Fine-tuning
    (#15): `method` full|lora|qlora|freeze, `lora_rank`, `lora_targets`, `quant`, and the tokens
    as `samples` x `seq_len` x `epochs` (`packing`, `padding_efficiency`)."""
    from .search import finetune as sft
    from .search import single
    _check_flags(flags, ESTIMATE_FLAGS)
    cat = _catalog(catalog)
    m, tokens, ft_facts = _finetuned(_model(cat, model, flags), dict(
        method=method, lora_rank=lora_rank, lora_targets=lora_targets, quant=quant,
        samples=samples, epochs=epochs, packing=packing,
        padding_efficiency=padding_efficiency), tokens, seq_len)
    acc = cat.accelerator(gpu)
    sft.check_kernels(finetune_of(m), acc)
    sft.check_precision(finetune_of(m), precision.lower())
    layout, n = _layout(m, gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, vpp=vpp, zero=zero,
                        fsdp=fsdp, micro_batch=micro_batch, global_batch=global_batch,
                        seq_len=seq_len, precision=precision, optimizer=optimizer,
                        recompute=recompute, offload=offload, sp=sp,
                        flash_attention=flash_attention, dropout=dropout, stack=stack,
                        shard_group=shard_group, recompute_modules=recompute_modules,
                        recompute_every=recompute_every, first_stage_layers=first_stage_layers,
                        last_stage_layers=last_stage_layers, schedule=schedule,
                        offload_layers=offload_layers, moe_dispatcher=moe_dispatcher)
    if offer and usd_per_gpu_hour is not None:
        raise ConfigError("give either --offer or --usd-per-gpu-hour, not both")
    value = _checked_tokens(tokens, layout, bool(ft_facts.get("samples")))
    e = single.estimate(cat, m, acc, layout, gpus=n, tokens=value, offer=offer,
                        system=system, usd_per_gpu_hour=usd_per_gpu_hour, pricing=pricing,
                        overrides=_site_overrides(flags) if flags else {},
                        power_limit_watts=power_limit_watts, tp_collectives=tp_collectives,
                        grad_reduce_dtype=grad_reduce_dtype,
                        memory_options=(moments_dtype, activation_cache, ema, fp8_recipe))
    info = sft.info(m, tokens=value, days=e.time_to_train_days,
                    **{k: v for k, v in ft_facts.items() if k != "tokens"})
    return e if info is None and e.finetune is None else dataclasses.replace(e, finetune=info)


def _check_flags(flags: dict[str, Any], known: Collection[str], extra: Sequence[str] = ()
                 ) -> None:
    """No keyword outside `known`; a typo gets a did-you-mean from `known` and `extra` (the
    function's named arguments)."""
    if not flags:
        return
    unknown = sorted(set(flags) - set(known))
    if unknown:
        from .errors import suggest

        hint = suggest(unknown[0], [*known, *extra])
        raise ConfigError(f"unknown argument '{unknown[0]}'"
                          + (f"; did you mean '{hint[0]}'?" if hint else ""))


def _as_list(v: str | Sequence[str] | None) -> list[str]:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


# --- plan ------------------------------------------------------------------------------------

SCENARIO_KEYS = ("model", "deadline_days", "budget_usd", "tokens", "vendor", "acquisition",
                 "export_region", "max_gpus")


def _request(cat: Catalog, m: ModelSpec, a: dict[str, Any], flags: dict[str, Any],
             scen: dict[str, Any]) -> Any:
    from .search import finetune as sft
    from .search.plan import DEFAULT_MAX_GPUS, Request
    from .search.platforms import Filters

    seq = a["seq_len"] or default_seq_len(m)
    precisions = tuple(p.lower() for p in _as_list(a["precision"])) or ("bf16", "fp8")
    for p in precisions:
        if p not in ("fp32", "fp16", "bf16", "fp8"):
            raise ConfigError(f"unknown precision '{p}'; choose fp32, fp16, bf16 or fp8")
    gpus = tuple(dict.fromkeys(cat.resolve("accelerator", g) for g in _as_list(a["gpu"])))
    filters = Filters(gpus=gpus, vendor=a["vendor"] or "", acquisition=a["acquisition"] or "any",
                      pricing=tuple(_as_list(a["pricing"])),
                      clouds=tuple(c.lower() for c in _as_list(a["cloud"])),
                      region=a["region"] or "", export_region=a["export_region"] or "",
                      allow_consumer=bool(a["allow_consumer"]))
    filters = sft.plan_filters(finetune_of(m), filters)
    precisions = sft.plan_precisions(finetune_of(m), precisions, bool(_as_list(a["precision"])))
    budget = a["budget_usd"]
    gb = a["global_batch"] or _default_batch(m, seq, 1)
    return Request(
        model=m, tokens=check_tokens(parse_count(a["tokens"], "--tokens"), gb * seq,
                                      None if a.get("samples") else a["tokens"]),
        seq_len=seq, global_batch=gb,
        deadline_days=float(a["deadline_days"]) if a["deadline_days"] is not None else None,
        budget_usd=parse_count(budget, "--budget-usd") if budget is not None else None,
        max_gpus=int(a["max_gpus"] or DEFAULT_MAX_GPUS), objective=a["objective"],
        top=a["top"], filters=filters, precisions=precisions, site=_site(cat, flags, scen),
        stack=_stack(a["stack"]), confidence=_confidence(a["confidence"]),
        power_limit_watts=_power_limit(a["power_limit_watts"]))


def _power_limit(watts: float | None) -> float | None:
    """The power every GPU of a plan is held to (None: its TDP); refused in one line unless a
    finite number above 0 (`search.power.check_limit`, as `estimate` checks it)."""
    from .search.power import check_limit

    return None if watts is None else check_limit(watts)


def _stack(stack: str | None) -> str | None:
    """A software stack name (None: each family's best-supported stack)."""
    return None if not stack else STACKS[code(STACKS, stack.lower(), "software stack")]


def _confidence(confidence: float | None) -> float | None:
    """The quantile `plan` ranks on (None: the median), between 0.5 and 0.9."""
    if confidence is None:
        return None
    value = float(confidence)
    if not 0.5 <= value <= 0.9:
        raise ConfigError(f"--confidence must be between 0.5 (the median) and 0.9 (the P90), "
                          f"got {value:g}")
    return value


def plan(*, model: str | ModelSpec | None = None, tokens: str | float | None = None,
         deadline_days: float | None = None, budget_usd: str | float | None = None,
         max_gpus: int | None = None, objective: str = "cost", top: int = 10,
         scenario: str | None = None, gpu: str | Sequence[str] | None = None,
         vendor: str | None = None, acquisition: str | None = None,
         pricing: str | Sequence[str] | None = None, cloud: str | Sequence[str] | None = None,
         region: str | None = None, export_region: str | None = None,
         allow_consumer: bool = False, precision: str | Sequence[str] | None = None,
         seq_len: int | None = None, global_batch: int | None = None,
         stack: str | None = None, confidence: float | None = None,
         power_limit_watts: float | None = None,
         catalog: Catalog | str | Sequence[str] | None = None,
         progress: Callable[[int, int], None] | None = None, method: str = "full",
         lora_rank: int | None = None, lora_targets: str | None = None, quant: str | None = None,
         samples: int | None = None, epochs: float | None = None, packing: bool | None = None,
         padding_efficiency: float | None = None, workers: int = 1,
         **flags: Any) -> PlanResult:
    """Search every GPU x count x layout x way to pay (`gpuplan plan`); a scenario preset fills
    what the arguments leave unset. `flags`: explicit model flags and site flags, as for
    `estimate`. `workers`: processes a large search may fork (the same result; 1 in a server
    whose workers already use every core). `power_limit_watts`: every GPU held to this power,
    as `estimate --power-limit-watts` (peak FLOP/s x the family's factor, energy at the
    limit)."""
    from .search import scenario as scn
    from .search.plan import search

    t0 = time.perf_counter()
    _check_flags(flags, [*SITE_FLAGS, ALLOCATOR_FLAG, *MODEL_FLAGS])
    cat = _catalog(catalog)
    a = dict(locals())
    scen = scn.load(cat, scenario, "gpuplan plan --help")
    if scen:  # the scenario fills what the arguments leave unset
        cat = scn.with_scenario_price(cat, scen)
        for key in SCENARIO_KEYS:
            if a.get(key) in (None, [], "") and scen.get(key) not in (None, ""):
                a[key] = scen[key]
        if not a["gpu"] and scen.get("gpu"):
            a["gpu"] = scen["gpu"]
    m, a["tokens"], ft_facts = _finetuned(_model(cat, a["model"], flags), a, a["tokens"],
                                          a["seq_len"])
    if a["tokens"] is None:
        raise ConfigError("--tokens is required: how many tokens to train on (e.g. 15T, 300B), "
                          "or --samples N --seq-len L --epochs E for a fine-tune")
    req = _request(cat, m, a, flags, scen)
    result = search(cat, req, progress=progress, workers=workers)
    if finetune_of(m) is not None:
        result = _plan_finetune(cat, m, req, result, ft_facts)
    if scen:
        result = dataclasses.replace(result, scenario=(("name", scen["id"]), *scen.items()),
                                     scenario_pick=scn.pick(cat, req, scen))
    return dataclasses.replace(result, elapsed_s=time.perf_counter() - t0)


def _plan_finetune(cat: Catalog, m: ModelSpec, req: Any, result: PlanResult,
                   facts: dict[str, Any]) -> PlanResult:
    """The plan's fine-tuning facts: time per epoch, the memory of its first row, and the best
    single-GPU options (a second search held to one GPU, when the first allowed more)."""
    from .search import finetune as sft
    from .search.plan import search

    top = result.plans[0] if result.plans else None
    single = result.plans if req.max_gpus == 1 else search(
        cat, dataclasses.replace(req, max_gpus=1)).plans
    facts = {**facts, "tokens": req.tokens}
    return dataclasses.replace(result, finetune=sft.info(
        m, **facts, days=top.time_to_train_days if top else None,
        consumer_allowed=sft.CONSUMER_REASON,
        memory=sft.row_memory(m, top, req.site) if top else None,
        single_gpu=tuple(single)))


# --- tco -------------------------------------------------------------------------------------

# the site flags of `gpuplan tco` (Python name of the flag -> search.ownership input name)
TCO_SITE_FLAGS = {"years": "years", "electricity": "electricity", "pue": "pue",
                  "colocation": "colocation", "maintenance": "maintenance", "network": "network",
                  "storage": "storage", "install": "install", "staff": "staff",
                  "residual": "residual", "load_factor": "load_factor", "reuse": "reuse",
                  "grid": "grid", "spot_interruptions": "spot_rate"}


def tco(*, system: str | None = None, nodes: float | None = None,
        utilization: float | None = None, price: float | None = None,
        host_load_factor: float | None = None, compare_cloud: bool = False,
        pricing: str | Sequence[str] | None = None, cloud: str | None = None,
        model: str | None = None, scenario: str | None = None,
        catalog: Catalog | str | Sequence[str] | None = None,
        **flags: float | None) -> TcoResult:
    """Total cost of owning `nodes` x `system` (or a pod) over `years`, and with `compare_cloud`
    the same GPUs rented in every pricing mode (`gpuplan tco`). `flags`: the site flags (years,
    electricity, pue, colocation, maintenance, network, storage, install, staff, residual,
    load_factor, reuse, grid, spot_interruptions); each defaults to the catalog's site table."""
    from .search import ownership

    _check_flags(flags, TCO_SITE_FLAGS, extra=(
        "system", "nodes", "utilization", "price", "host_load_factor", "compare_cloud",
        "pricing", "cloud", "model", "scenario", "catalog"))
    site: dict[str, Any] = {TCO_SITE_FLAGS[k]: v for k, v in flags.items()}  # floats or None
    return ownership.tco(system=system, nodes=nodes, utilization=utilization, price=price,
                         host_load_factor=host_load_factor, compare_cloud=compare_cloud,
                         pricing=tuple(_as_list(pricing)), cloud=cloud, model=model,
                         scenario=scenario, cat=_catalog(catalog), **site)
