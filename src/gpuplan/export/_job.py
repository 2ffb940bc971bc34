"""One view of a plan row or an estimate, as every exporter needs it (L5).

Exporters read the JSON record that `gpuplan plan --json` (one row of `plans`) or
`gpuplan estimate --json` prints -- the `--json` contract -- so a saved result exports the same
way as a fresh one. `job_of` flattens both shapes into a frozen `Job`; `header` writes the
provenance every output starts with (gpuplan version, where the record came from, the
predicted step time, days and cost, and the record's `reproduce` line -- a plan row carries
it; for an older record or an estimate `report.command` writes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ..catalog import Catalog, load_catalog
from ..errors import ConfigError, GpuplanError
from ..report.command import estimate_command, number
from ..report.fmt import duration, num, usd
from ..search.results import LayoutInfo
from ..spec import ModelSpec, Offer

# the layout fields (`LayoutInfo`): a plan row has them at the top, an estimate under "layout"
_LAYOUT_KEYS = frozenset(f.name for f in fields(LayoutInfo))


@dataclass(frozen=True, kw_only=True)
class Job:
    """What a launcher needs: model, hardware, layout, and the prediction it rests on."""

    model_id: str
    model: ModelSpec | None  # None when the record names no catalog preset
    gpu: str
    gpus: int
    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    first_stage_layers: int  # 0 = the default split (estimators.shapes.stage_layers)
    last_stage_layers: int
    zero: int
    micro_batch: int
    global_batch: int
    seq_len: int
    recompute: str
    precision: str
    sp: bool
    offload: bool
    architecture: str  # accelerator architecture ('hopper', 'blackwell', ...), '' if unknown
    offer: Offer | None
    system: str
    pricing: str
    tokens: float | None
    step_time_s: float | None
    days: float | None
    cost_usd: float | None
    mfu: float | None
    memory_gib_per_gpu: float | None
    reproduce: str  # the `gpuplan estimate` line of the prediction (report.command)
    # #11: HSDP shard group (0 = all dp ranks), offloaded parts, Megatron-LM recompute
    # modules (recompute 'modules') and full recompute's every-k-th layer
    shard_group: int = 0
    offload_parts: tuple[str, ...] = ()
    recompute_modules: tuple[str, ...] = ()
    recompute_every: int = 1
    # the estimate's run options (layout echo): pipeline schedule (spec.SCHEDULES), Adam
    # moments dtype, activation cache, parameter EMA, activation offload of the first N layers
    # per rank (0 = all), MoE dispatcher ('' when the record predates the key)
    schedule: str = "1f1b"
    moments_dtype: str = "fp32"
    activation_cache: str = "stack"
    ema: str = "none"
    offload_layers: int = 0
    moe_dispatcher: str = ""
    # FP8: whether the estimate keeps each weight's FP8 transpose (False: a per-tensor recipe on
    # a GPU with any-layout FP8 GEMMs, `--fp8-recipe tensor`); the PyTorch CUDA allocator setting
    fp8_transpose: bool = True
    allocator: str = "caching"
    power_limit_watts: float | None = None  # the power every GPU was predicted at (None: TDP)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per replica per optimizer step (global = micro x accum x dp)."""
        return max(1, self.global_batch // (self.micro_batch * self.dp))

    @property
    def steps(self) -> int | None:
        if not self.tokens:
            return None
        return math.ceil(self.tokens / (self.global_batch * self.seq_len))

    @property
    def params(self) -> int | None:
        return self.model.total_params() if self.model else None


def _int(rec: dict[str, Any], key: str, default: int | None = None) -> int:
    value = rec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConfigError(f"the record's '{key}' must be a whole number, got {value!r}; "
                          "export a result that `gpuplan plan --json` or "
                          "`gpuplan estimate --json` wrote")
    return int(value)


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    """An estimate keeps its layout under 'layout' and its platform id under 'platform'."""
    rec = dict(record)
    if isinstance(record.get("layout"), dict):
        rec.update({k: v for k, v in record["layout"].items() if k in _LAYOUT_KEYS})
        rec.setdefault("memory_gib_per_gpu", (record.get("memory_gib") or {}).get("total"))
    return rec


def _platform(cat: Catalog, rec: dict[str, Any]) -> tuple[Offer | None, str]:
    """(cloud offer, system id) the record ran on; either may be absent."""
    offer_id = rec.get("offer")
    system = rec.get("system") or ""
    plat = rec.get("platform")
    if not offer_id and isinstance(plat, str) and not system:  # estimate: an id
        if plat in cat.offers:
            offer_id = plat
        elif plat in cat.systems:
            system = plat
    offer = None
    if offer_id:
        try:
            offer = cat.offer(offer_id)
        except GpuplanError:  # an offer from an overlay this export was not given
            offer = None
    return offer, system


def job_of(record: dict[str, Any], source: dict[str, Any] | None = None) -> Job:
    """The record (a plan row with 'model'/'tokens' merged in, or an estimate) as a Job;
    `source["catalog"]` lists the overlay files the result was computed with."""
    cat = load_catalog(tuple((source or {}).get("catalog", ())))
    rec = _flat(record)
    for key in ("gpu", "gpus", "tp", "pp", "dp", "micro_batch", "global_batch", "seq_len"):
        if rec.get(key) is None:
            raise ConfigError(f"the record has no '{key}'; export a plan row or an estimate "
                              "that gpuplan wrote with --json")
    model_id = str(rec.get("model") or "")
    try:
        model = cat.model(model_id) if model_id else None
    except GpuplanError:
        model = None
    offer, system = _platform(cat, rec)
    gpus = _int(rec, "gpus")
    per_node = rec.get("gpus_per_node") or (offer.count if offer else 0)
    nodes = rec.get("nodes") or (math.ceil(gpus / per_node) if per_node else 1)
    per_node = per_node or gpus // nodes
    try:
        arch = cat.accelerator(str(rec["gpu"])).architecture.lower()
    except GpuplanError:
        arch = ""
    tp = _int(rec, "tp")
    return Job(
        model_id=model_id, model=model, gpu=str(rec["gpu"]), gpus=gpus, nodes=int(nodes),
        gpus_per_node=int(per_node), tp=tp, pp=_int(rec, "pp"), dp=_int(rec, "dp"),
        cp=_int(rec, "cp", 1), ep=_int(rec, "ep", 1), vpp=_int(rec, "vpp", 1),
        first_stage_layers=_int(rec, "first_stage_layers", 0),
        last_stage_layers=_int(rec, "last_stage_layers", 0), zero=_int(rec, "zero", 0),
        micro_batch=_int(rec, "micro_batch"),
        global_batch=_int(rec, "global_batch"), seq_len=_int(rec, "seq_len"),
        recompute=str(rec.get("recompute") or "none"),
        precision=str(rec.get("precision") or "bf16"),
        sp=bool(rec.get("sp", tp > 1)) and tp > 1,
        offload=bool(rec.get("offload", False) or rec.get("offload_parts")),
        architecture=arch, offer=offer, system=str(system),
        pricing=str(rec.get("pricing") or ""), tokens=rec.get("tokens"),
        step_time_s=rec.get("step_time_s"), days=rec.get("time_to_train_days"),
        cost_usd=rec.get("cost_usd"), mfu=rec.get("mfu"),
        memory_gib_per_gpu=rec.get("memory_gib_per_gpu"),
        shard_group=_int(rec, "shard_group", 0),
        offload_parts=tuple(rec.get("offload_parts") or
                            (("optimizer",) if rec.get("offload") else ())),
        recompute_modules=tuple(rec.get("recompute_modules") or ()),
        recompute_every=_int(rec, "recompute_every", 1),
        schedule=str(rec.get("schedule") or "1f1b"),
        moments_dtype=str(rec.get("moments_dtype") or "fp32"),
        activation_cache=str(rec.get("activation_cache") or "stack"),
        ema=str(rec.get("ema") or "none"), offload_layers=_int(rec, "offload_layers", 0),
        moe_dispatcher=str(rec.get("moe_dispatcher") or ""),
        fp8_transpose=rec.get("fp8_transpose") is not False,
        allocator=str(rec.get("allocator") or "caching"),
        power_limit_watts=rec.get("power_limit_watts"),
        reproduce=str(rec.get("reproduce") or estimate_command(
            {**rec, "offer": offer.id if offer else None, "system": system},
            catalog=tuple((source or {}).get("catalog", ())))))


def header(job: Job, source: dict[str, Any]) -> list[str]:
    """Provenance lines (without a comment marker): version, origin, prediction."""
    from .. import __version__

    where = job.offer.id if job.offer else (job.system or "unspecified platform")
    lines = [
        f"generated by gpuplan {__version__} from {source.get('from', 'a gpuplan result')}",
        f"model {job.model_id or '(custom shape)'}, "
        + (f"{num(job.tokens)} tokens, " if job.tokens else "")
        + f"{job.gpus} x {job.gpu} on {job.nodes} node(s) ({where}"
        + (f", {job.pricing})" if job.pricing else ")"),
    ]
    pred = []
    if job.step_time_s is not None:
        pred.append(f"step {num(job.step_time_s)} s")
    if job.days is not None:
        pred.append(f"{duration(job.days)} to train")
    if job.cost_usd is not None:
        pred.append(f"{usd(job.cost_usd)}")
    if job.mfu is not None:
        pred.append(f"MFU {job.mfu:.0%}")
    if job.memory_gib_per_gpu is not None:
        pred.append(f"{num(job.memory_gib_per_gpu)} GiB/GPU")
    if pred:
        lines.append("predicted: " + ", ".join(pred) + " (an estimate; measure the first steps)")
    if job.power_limit_watts is not None:  # no launch config sets a GPU's power: say so
        w = number(job.power_limit_watts)
        lines.append(f"power limit: predicted with every GPU held to {w} W "
                     f"(--power-limit-watts), which this file does not set; cap each GPU "
                     f"before launch (NVIDIA: `sudo nvidia-smi -pl {w}` on every node)")
    lines.append("reproduce: " + job.reproduce)
    return lines


def commented(lines: list[str], mark: str = "#") -> str:
    return "\n".join(f"{mark} {ln}".rstrip() for ln in lines)
