"""Typed results of `estimate` and `plan` (L4): facts and structured reasons, no sentences.

Every field is a plain Python value (float, int, str, bool, None, tuples of those or of these
records), never a numpy value, so any result converts to JSON. Reasons are codes from
`search.feasibility`; `report/` alone turns them into text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --- estimate ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EstimateWarning:
    """A plan rule this configuration breaks (code from `search.feasibility`)."""

    code: str
    gpus: int = 0
    gpus_per_node: int = 0
    scale_up_domain: int = 0
    max_gpus: int = 0
    tp: int = 0


@dataclass(frozen=True, kw_only=True)
class FitOption:
    """One knob that makes a configuration fit: `flags` to add, the memory it leaves."""

    knob: str  # recompute | zero | offload | micro_batch | tp | pp | gpus | gpus+full
    flags: str  # e.g. '--recompute full' (for gpus / gpus+full: the GPU count)
    gpus: int | None  # the GPU count for the 'gpus' knobs
    memory_gib: float
    capacity_gib: float


@dataclass(frozen=True, kw_only=True)
class LayoutInfo:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    zero: int
    micro_batch: int
    global_batch: int
    seq_len: int
    microbatches: int
    precision: str
    recompute: str
    optimizer: str
    sp: bool
    flash: bool
    offload: bool  # anything offloaded to host memory
    stack: str = "megatron"  # a name of spec.STACKS
    # decoder layers given for the first / last pipeline stage (0 = the default split,
    # `estimators.shapes.stage_layers`)
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    # #11: HSDP shard group (0 = all data-parallel ranks), the offloaded parts, the Megatron-LM
    # modules of recompute 'modules', and full recompute's every-k-th layer
    shard_group: int = 0
    offload_parts: tuple[str, ...] = ()
    offload_layers: int = 0  # activations of only the first N layers per rank (0 = all)
    recompute_modules: tuple[str, ...] = ()
    recompute_every: int = 1
    # the pipeline schedule (spec.SCHEDULES) and the run's memory options
    # (estimators.buffers: optimizer moments dtype, activation cache, parameter EMA place)
    schedule: str = "1f1b"
    moments_dtype: str = "fp32"
    activation_cache: str = "stack"
    ema: str = "none"
    # FP8: whether Transformer Engine keeps each weight's FP8 transpose (buffers.fp8_transpose)
    fp8_transpose: bool = True
    # the PyTorch CUDA allocator setting (evaluate.ALLOCATORS) and its margin, reserved -
    # allocated as a fraction of the tensors (data/site.toml allocator_fragmentation_<setting>)
    allocator: str = "caching"
    allocator_fraction: float = 0.0
    moe_dispatcher: str = "flex"  # the MoE dispatch used (spec.MOE_DISPATCHERS, auto resolved)
    # whether the TP collectives hide behind compute ("overlapped") or block it ("blocking"):
    # the stack's [stack.NAME] tp_collectives, or --tp-collectives
    tp_collectives: str = "overlapped"


@dataclass(frozen=True, kw_only=True)
class MemoryGiB:
    """The memory summary of the most loaded GPU, GiB; the parts sum to `total`."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    total: float
    # fine-tuning only (None otherwise): weights = base_weights + adapter_weights (#15)
    base_weights: float | None = None
    adapter_weights: float | None = None
    adapter_optimizer: float | None = None


@dataclass(frozen=True, kw_only=True)
class Estimate:
    model: str
    params: float
    active_params: float
    gpu: str
    gpus: int
    platform: str
    gpus_per_node: int
    layout: LayoutInfo
    memory_gib: MemoryGiB
    memory_detail_gib: tuple[tuple[str, float], ...]
    gpu_memory_gib: float
    headroom_gib: float
    fits: bool
    suggestions: tuple[FitOption, ...]
    feasible: bool  # runs at all: a finite step time and a run that ends
    infeasible_reason: str | None  # a feasibility code when not feasible
    warnings: tuple[EstimateWarning, ...]
    step_time_s: float | None  # None when the step cannot run
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    bottleneck: str
    micro_batch_too_small: bool
    efficiency_is_guess: bool
    time_breakdown_s: tuple[tuple[str, float], ...]
    # allocated (the tensors) and reserved (+ the allocator's margin), GiB; the lines of
    # memory_gib.other as (name, GiB, dtype) in estimators.buffers.BUFFER_LINES order
    allocated_gib: float = 0.0
    reserved_gib: float = 0.0
    memory_buffers: tuple[tuple[str, float, str], ...] = ()
    tokens: float | None = None
    time_to_train_days: float | None = None
    useful_days: float | None = None
    gpu_hours: float | None = None
    goodput: float | None = None
    energy_kwh: float | None = None
    co2e_kg: float | None = None
    checkpoint_write_s: float | None = None
    interruptions_per_hour: float | None = None
    pricing: str | None = None
    usd_per_gpu_hour: float | None = None
    cost_usd: float | None = None
    finetune: Any = None  # search.finetune.FineTuneInfo when the method is not 'full'
    # P10-P90 ranges (search.intervals): the figure x actual/predicted time of its group
    interval_group: str = ""  # the residual group: 'FAMILY/STACK', 'pooled', ...
    step_time_s_p10: float | None = None
    step_time_s_p90: float | None = None
    time_to_train_days_p10: float | None = None
    time_to_train_days_p90: float | None = None
    gpu_hours_p10: float | None = None
    gpu_hours_p90: float | None = None
    cost_usd_p10: float | None = None
    cost_usd_p90: float | None = None
    power_limit_watts: float | None = None  # the --power-limit-watts the GPUs ran at
    power: Any = None  # search.power.PowerScaling: factor, exponent and its basis, with a limit


# --- plan ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlanRow:
    """One ranked option: hardware, layout, way to pay, and its time, money and memory."""

    gpu: str
    gpus: int
    nodes: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    zero: int
    micro_batch: int
    global_batch: int
    seq_len: int
    recompute: str
    precision: str
    acquisition: str
    offer: str | None
    system: str | None
    platform: str
    pricing: str
    usd_per_gpu_hour: float
    time_to_train_days: float
    cost_usd: float
    energy_kwh: float
    goodput: float
    mfu: float
    tokens_per_s: float
    step_time_s: float
    memory_gib_per_gpu: float
    gpu_memory_gib: float
    headroom_gib: float
    bottleneck: str
    micro_batch_too_small: bool
    cash_up_front_usd: float
    export_cn: str
    vendor: str
    efficiency_is_guess: bool
    stack: str = "megatron"  # a name of spec.STACKS
    # spot rows of an offer with a recorded spread (`prices import`): the min and max per
    # GPU-hour over the observations whose median usd_per_gpu_hour is, and their count
    spot_spread_usd_per_gpu_hour: tuple[float, float] | None = None
    spot_observations: int = 0
    # P10-P90 ranges (search.intervals)
    step_time_s_p10: float | None = None
    step_time_s_p90: float | None = None
    time_to_train_days_p10: float | None = None
    time_to_train_days_p90: float | None = None
    cost_usd_p10: float | None = None
    cost_usd_p90: float | None = None
    vpp: int = 1  # interleaved pipeline chunks per rank
    # #11: HSDP shard group (0 = all data-parallel ranks) and the parts offloaded to the host
    shard_group: int = 0
    offload_parts: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Excluded:
    reason: str  # a code of search.feasibility
    count: int


@dataclass(frozen=True, kw_only=True)
class Relax:
    """What to relax when nothing meets the constraints (kind says which fields are set).

    budget: feasible from `budget_usd` (keeping `keep_deadline_days` if set);
    deadline: feasible from `deadline_days` (keeping `keep_budget_usd` if set);
    both: the fastest option takes `deadline_days`, the cheapest costs `budget_usd`;
    filters: no platform passes the filters; memory: nothing fits up to `max_gpus`;
    allow_consumer: consumer cards were held to one node; invalid: `excluded` says why.
    """

    kind: str
    budget_usd: float | None = None
    deadline_days: float | None = None
    keep_budget_usd: float | None = None
    keep_deadline_days: float | None = None
    max_gpus: int | None = None
    excluded: tuple[Excluded, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Another option beside the winner (`label`: runner_up, best_without_spot, best_own,
    best_cloud), with its cost and time as multiples of the winner's."""

    label: str
    row: PlanRow
    cost_ratio: float | None  # None when the winner costs nothing
    time_ratio: float


@dataclass(frozen=True, kw_only=True)
class Note:
    """A fact about the winner: spot_assumption (value: interruptions per instance-hour),
    efficiency_guess, export_licence, no_option (acquisition), long_run (value: days),
    micro_batch_too_small."""

    code: str
    gpu: str = ""
    acquisition: str = ""
    value: float | None = None


@dataclass(frozen=True, kw_only=True)
class Favourite:
    """Why a GPU the user named is missing from the feasible plans."""

    gpu: str
    platforms: tuple[Any, ...] = ()  # platforms.PlatformExclusion records
    excluded: tuple[Excluded, ...] = ()  # top candidate exclusions


@dataclass(frozen=True, kw_only=True)
class SizeResult:
    """The fastest layout at one GPU count on one platform and pricing (outlook, picks)."""

    gpus: int
    feasible: bool
    reason: str | None = None
    gpu: str | None = None
    platform: str | None = None
    pricing: str | None = None
    time_to_train_days: float | None = None
    useful_days: float | None = None
    cost_usd: float | None = None
    goodput: float | None = None
    gpu_hours: float | None = None
    energy_kwh: float | None = None
    co2e_kg: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    precision: str | None = None
    recompute: str | None = None
    memory_gib_per_gpu: float | None = None
    cash_up_front_usd: float | None = None
    scaling_efficiency: float | None = None
    # why scaling efficiency is above 1: 'faster_layout' (more GPUs free memory for a layout
    # with less recompute, sharding or pipelining than the reference size's)
    scaling_note: str | None = None


@dataclass(frozen=True, kw_only=True)
class Assumptions:
    own_years: float
    own_utilization: float
    commitment_reuse_utilization: float
    spot_interruptions_per_instance_hour: float
    gpu_mtbf_hours: float
    electricity_usd_per_kwh: float
    pue: float
    # the PyTorch CUDA allocator setting whose margin the memory includes (evaluate.ALLOCATORS)
    allocator: str = "caching"
    power_limit_watts: float | None = None  # plan --power-limit-watts: every GPU held to it


@dataclass(frozen=True, kw_only=True)
class PlanResult:
    model: str
    tokens: float
    seq_len: int
    global_batch: int
    objective: str
    deadline_days: float | None
    deadline_is_default: bool
    budget_usd: float | None
    evaluated: int
    physics_evaluated: int
    physically_feasible: int
    feasible: int
    options: int  # distinct ways to get GPUs among the feasible candidates
    plans: tuple[PlanRow, ...]
    pareto: tuple[PlanRow, ...]
    best: tuple[tuple[str, PlanRow], ...]  # objective -> its best row
    excluded: tuple[Excluded, ...]
    excluded_platforms: tuple[Any, ...]  # platforms.PlatformExclusion
    why: tuple[Comparison | Note, ...]
    relax: tuple[Relax, ...]
    favourite: tuple[Favourite, ...]
    outlook: tuple[SizeResult, ...]
    assumptions: Assumptions
    export_region: str = ""
    elapsed_s: float | None = None
    scenario: tuple[tuple[str, Any], ...] | None = None
    scenario_pick: Any = None  # search.scenario.Pick: the article's own pick
    stack: str | None = None  # the --stack asked for (None: each family's best-supported)
    confidence: float | None = None  # the quantile plans were ranked on (None: the median)
    finetune: Any = None  # search.finetune.FineTuneInfo when the method is not 'full'
    # with --power-limit-watts: (gpu id, search.power.PowerScaling) of every GPU considered
    power: tuple[tuple[str, Any], ...] = ()
