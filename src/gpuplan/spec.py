"""Frozen, keyword-only specs validated when built (L1). No file I/O here.

Units are in field names: bytes, FLOP/s, seconds, USD, watts. `peak_flops` is always *dense*.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .errors import ConfigError, quote
from .rules import LAYOUT_NAMES, MODEL_MAX, first_broken, valid
from .rules import MAX_BATCH as MAX_BATCH
from .rules import MAX_LAYERS as MAX_LAYERS
from .rules import MAX_SEQ_LEN as MAX_SEQ_LEN
from .rules import largest_divisor as largest_divisor

# Training precisions, in the order of their integer codes in vectorized layouts.
PRECISIONS = ("fp32", "fp16", "bf16", "fp8")
FP32, FP16, BF16, FP8 = range(4)
# Every precision a catalog row may list a dense peak for.
PEAK_KEYS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
# Activation recompute modes; codes 0-2 are the original three, new modes are appended.
# selective = Megatron-LM core attention; full = whole layers (every `recompute_every`-th layer
# with recompute_every > 1: torchtitan selective_ac_option = "k", Megatron-LM --recompute-method
# block); op = torchtitan's per-op selective checkpointing (selective_ac_option = "op");
# modules = Megatron-LM --recompute-granularity selective --recompute-modules (a bitmask of
# RECOMPUTE_MODULES in `Layout.recompute_modules`).
RECOMPUTE = ("none", "selective", "full", "op", "modules")
R_NONE, R_SELECTIVE, R_FULL, R_OP, R_MODULES = range(5)
# Megatron-LM --recompute-modules names, bit i = 1 << i in `Layout.recompute_modules`.
# mla_up_proj: multi-head latent attention's up-projections (and RoPE) recomputed from the
# latents (Megatron-Core's MLA recompute_up_proj; DeepSeek-V3 report section 3.2.3).
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj")
M_CORE_ATTN, M_MLP, M_MOE, M_MOE_ACT, M_LAYERNORM, M_MLA_UP_PROJ = (1 << i for i in range(6))
# What may be offloaded to host memory, bit i = 1 << i in `Layout.offload` (True = 1 =
# optimizer state, the original meaning of the flag).
OFFLOAD_PARTS = ("optimizer", "params", "grads", "activations")
O_OPTIMIZER, O_PARAMS, O_GRADS, O_ACTIVATIONS = (1 << i for i in range(4))
OPTIMIZERS = ("adamw", "sgd", "adafactor")
# Pipeline schedules: 1F1B (interleaved when vpp > 1; Narayanan et al. 2021), DeepSeek-V3's
# DualPipe (arXiv 2412.19437 section 3.2.1) and 1F1B with Megatron-Core's MoE all-to-all
# overlap (--overlap-moe-expert-parallel-comm: one micro-batch's forward merged with another's
# backward, each one's all-to-all under the other's compute; timing.py).
SCHEDULES = ("1f1b", "dualpipe", "1f1b-a2a")
S_1F1B, S_DUALPIPE, S_1F1B_A2A = range(3)
# MoE token dispatchers (`Layout.moe_dispatcher`): flex = a deduplicated dispatch, each token
# sent once per destination GPU / remote domain (DeepEP, HybridEP: Megatron-Core's
# --moe-token-dispatcher-type flex, which current Megatron-Bridge MoE recipes use); alltoall =
# Megatron-Core's MoEAlltoAllTokenDispatcher (and torchtitan's / DeepSpeed's all-to-all), one
# copy per (token, routed expert) pair; auto = flex under megatron and nemo, alltoall under
# the PyTorch-native stacks and DeepSpeed (`moe_dedup`; estimators/comm.py).
MOE_DISPATCHERS = ("auto", "flex", "alltoall")
D_AUTO, D_FLEX, D_ALLTOALL = range(3)
ADAMW, SGD, ADAFACTOR = range(3)
PRICING = ("on-demand", "spot", "reserved-1y", "reserved-3y", "savings-plan-1y", "savings-plan-3y")
VENDORS = ("nvidia", "amd", "intel", "huawei")
# Training software stacks, in the order of their integer codes in `Layout.stack`:
# megatron = Megatron-LM / Megatron-Core; nemo = NVIDIA NeMo 2 / Megatron-Bridge (on
# Megatron-Core); torchtitan = PyTorch-native FSDP2/TP/PP (torchtitan); fsdp = other
# PyTorch FSDP trainers (llm-foundry, OLMo, nanotron, HF accelerate); deepspeed = DeepSpeed and
# Megatron-DeepSpeed; torchtune = PyTorch's fine-tuning library (FSDP2, pure bf16, chunked
# cross-entropy; #15). docs/calibration.md says how each is calibrated.
STACKS = ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "torchtune")
MEGATRON, NEMO, TORCHTITAN, FSDP_STACK, DEEPSPEED, TORCHTUNE = range(6)


def moe_dedup(dispatcher: Any, stack: Any) -> Any:
    """True where the MoE dispatch is deduplicated (flex; auto under megatron and nemo), for
    Python integers or numpy arrays of the codes."""
    return (dispatcher == D_FLEX) | ((dispatcher == D_AUTO) & (stack <= NEMO))


def code(table: tuple[str, ...], name: str, what: str) -> int:
    """Name -> integer code, with a clear error listing the choices."""
    try:
        return table.index(name)
    except ValueError:
        raise ConfigError(
            f"unknown {what} {quote(name)}; choose one of: {', '.join(table)}") from None


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    id: str
    name: str
    vendor: str
    architecture: str
    family: str  # efficiency / validation family, e.g. 'a100', 'h100', 'mi300'
    form_factor: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    # dense FLOP/s per precision (FP32 accumulate); an absent key = unsupported
    peak_flops: dict[str, float]
    # GeForce/RTX headline rate with FP16 accumulate, if any
    fp16_accumulate_flops: float | None = None
    # exponentials/s of the special-function units (softmax's exp2); None = no figure, no term
    exp_per_s: float | None = None
    scale_up_kind: str  # 'nvlink', 'infinity-fabric', 'pcie', 'hccs', 'ethernet'
    scale_up_fabric: str  # fabric id
    scale_up_bytes_per_s: float  # per GPU, both directions added (as vendors quote)
    host_interface: str  # fabric id, e.g. 'pcie5'
    tdp_watts: float
    launch_date: str
    launch_price_usd: float | None = None
    price_source: str = ""
    price_date: str = ""
    software: str  # 'CUDA', 'ROCm', 'SynapseAI', 'CANN'
    consumer: bool = False  # GeForce-class card (no data-center licence, no NVLink)
    # FP8 GEMMs accept every operand layout, not only TN (CUDA compute capability 10.x,
    # Blackwell): Transformer Engine keeps no FP8 transpose (estimators/buffers.py)
    fp8_gemm_any_layout: bool = False
    # 'allowed', 'licensed' (licence required and being granted), 'license-required',
    # 'prohibited', 'china-only'
    export_cn: str
    export_cn_rule: str
    export_cn_date: str
    source: str
    as_of: str
    aliases: tuple[str, ...] = ()
    notes: str = ""

    @property
    def scale_up_bytes_per_s_per_direction(self) -> float:
        return self.scale_up_bytes_per_s / 2

    def supports(self, precision: str) -> bool:
        return precision in self.peak_flops


@dataclass(frozen=True, kw_only=True)
class Fabric:
    id: str
    name: str
    kind: str  # 'scale-up', 'scale-out', 'host'
    bytes_per_s_per_direction: float  # per GPU (scale-up) or per port (scale-out, host)
    latency_s: float
    source: str
    as_of: str
    aliases: tuple[str, ...] = ()
    notes: str = ""
    # scale-out only: the deduplicated MoE dispatch's internode rate (every (token, node hit)
    # pair, the own node's included) as a share of the line rate; None = not measured (#12)
    moe_dispatch_logical_share: float | None = None


@dataclass(frozen=True, kw_only=True)
class System:
    id: str
    name: str
    kind: str  # 'server', 'workstation', 'rack'
    accelerator: str
    gpus_per_node: int
    scale_up_domain: int  # GPUs that share the scale-up fabric (8 in a DGX, 72 in an NVL72)
    scale_out_fabric: str = ""  # fabric id ('' when the system is a single box)
    nics_per_node: int = 0  # 0 = one NIC per GPU
    cpu: str = ""
    ram_bytes: float = 0.0
    storage_bytes: float = 0.0
    max_power_watts: float
    price_usd: float | None = None
    price_source: str = ""
    price_date: str = ""
    source: str
    as_of: str
    aliases: tuple[str, ...] = ()
    notes: str = ""


@dataclass(frozen=True, kw_only=True)
class Pod:
    id: str
    name: str
    system: str
    nodes: int
    source: str
    as_of: str
    aliases: tuple[str, ...] = ()
    notes: str = ""


@dataclass(frozen=True, kw_only=True)
class Offer:
    id: str
    cloud: str
    instance_type: str
    accelerator: str
    count: int
    region: str
    usd_per_hour: dict[str, float]  # pricing name -> USD per instance-hour
    network_bytes_per_s: float  # scale-out bandwidth per instance, per direction
    max_instances: int = 0  # how many a user can usually get (0 = unknown, no cap)
    source: str
    as_of: str
    capacity_block_usd_per_hour: float | None = None
    # spread of the spot observations whose median is usd_per_hour['spot'] (None = one figure)
    spot_usd_per_hour_min: float | None = None
    spot_usd_per_hour_max: float | None = None
    spot_observations: int = 0
    aliases: tuple[str, ...] = ()
    notes: str = ""


@dataclass(frozen=True, kw_only=True)
class SiteValue:
    name: str
    value: float
    unit: str
    source: str
    as_of: str
    notes: str = ""


# MLP types: 'gelu' fc2(gelu(fc1 x)); 'relu2' fc2(relu(fc1 x)^2), the squared ReLU of Primer
# (So et al. 2021, arXiv 2109.08668) used by Nemotron-4; both non-gated, 2 matrices and the same
# FLOPs; 'swiglu' w2(silu(w1 x) * w3 x), gated, 3 matrices (Shazeer 2020, arXiv 2002.05202).
MLPS = ("gelu", "relu2", "swiglu")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder (or encoder) transformer. MoE when experts > 1."""

    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # dense MLP inner size
    vocab: int
    mlp: str = "gelu"  # one of MLPS: 'gelu', 'relu2' (2 matrices) or 'swiglu' (3 matrices)
    tied_embeddings: bool = False
    head_dim: int = 0  # 0 = hidden // heads
    experts: int = 0  # routed experts per MoE layer (0 = dense model)
    experts_per_token: int = 0  # top-k
    moe_ffn: int = 0  # inner size of one expert (0 = ffn)
    shared_experts: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    # Multi-head latent attention (DeepSeek-V2/V3); 0 = ordinary attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0  # decoupled rotary part of each query/key head
    v_head_dim: int = 0  # value head size (0 = d_head)
    max_seq_len: int = 2048
    source: str = ""
    as_of: str = ""
    aliases: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"model {self.id}: {f} must be a positive integer, got {v!r}")
        for f, most in MODEL_MAX.items():
            v = getattr(self, f)
            least = 1 if f == "max_seq_len" else 0
            if not isinstance(v, int) or isinstance(v, bool) or not least <= v <= most:
                raise ConfigError(f"model {self.id}: {f} must be a whole number from {least} to "
                                  f"{most:,} (the largest this tool plans for), got {v!r}")
        if self.mlp not in MLPS:
            raise ConfigError(f"model {self.id}: mlp must be one of "
                              f"{', '.join(repr(m) for m in MLPS)}, got {self.mlp!r}")
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"model {self.id}: heads ({self.heads}) must be a multiple of kv_heads "
                f"({self.kv_heads})"
            )
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise ConfigError(f"model {self.id}: experts_per_token must be in 1..experts")

    # --- sizes --------------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    # --- parameters (weights and biases ignored: < 0.1% for these models) ---------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def attention_params_per_layer(self) -> int:
        if self.is_mla:  # DeepSeek-V2 (arXiv 2405.04434) section 2.1.2
            qk_dim = self.d_head + self.rope_head_dim
            v_dim = self.v_head_dim or self.d_head
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk_dim
                 if self.q_lora_rank else self.hidden * self.heads * qk_dim)
            kv_a = self.hidden * (self.kv_lora_rank + self.rope_head_dim)
            kv_b = self.kv_lora_rank * self.heads * (self.d_head + v_dim)
            return q + kv_a + kv_b + self.heads * v_dim * self.hidden
        q_out = self.heads * self.d_head
        kv_out = 2 * self.kv_heads * self.d_head
        return self.hidden * (q_out + kv_out) + q_out * self.hidden

    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden * self.ffn

    def expert_params(self) -> int:
        """One routed expert's MLP."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden

    def embedding_params(self) -> int:
        """Input embedding plus LM head (once when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def layer_params(self, moe: bool) -> int:
        """Parameters of one transformer layer (all experts when moe)."""
        p = self.attention_params_per_layer() + self.norm_params_per_layer()
        if moe:
            p += (self.experts + self.shared_experts) * self.expert_params()
            p += self.hidden * self.experts  # router
        else:
            p += self.dense_mlp_params()
        return p

    def total_params(self) -> int:
        dense_layers = self.layers - self.moe_layers
        return (
            dense_layers * self.layer_params(False)
            + self.moe_layers * self.layer_params(True)
            + self.embedding_params()
            + self.hidden  # final norm
        )

    def active_params(self) -> int:
        """Parameters touched per token (top-k routed + shared experts)."""
        if not self.is_moe:
            return self.total_params()
        inactive = (self.experts - self.experts_per_token) * self.expert_params()
        return self.total_params() - self.moe_layers * inactive


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A training configuration; every field may be a numpy array (broadcast together).

    A scalar query is a grid of one. gpus = tp * pp * cp * dp; ep divides dp (experts are
    sharded across data-parallel ranks, as in Megatron-LM). vpp is the interleaving factor
    (virtual pipeline stages per rank).
    """

    tp: Any = 1
    pp: Any = 1
    dp: Any = 1
    cp: Any = 1
    ep: Any = 1
    vpp: Any = 1
    zero: Any = 0  # 0..3 (3 = FSDP)
    micro_batch: Any = 1  # sequences per micro-batch per replica
    global_batch: Any = 1  # sequences per optimizer step
    seq_len: Any = 2048
    recompute: Any = R_NONE  # code into RECOMPUTE
    precision: Any = BF16  # code into PRECISIONS
    optimizer: Any = ADAMW  # code into OPTIMIZERS
    sp: Any = True  # sequence parallelism (only has an effect when tp > 1)
    flash: Any = True  # flash attention
    offload: Any = False  # bitmask of OFFLOAD_PARTS; True (= 1) is the optimizer state
    # with activations offloaded: only the first N decoder layers of each pipeline rank
    # (Megatron-Core cpu_offloading_num_layers; `estimators.recompute`); 0 = every layer
    offload_layers: Any = 0
    dropout: Any = False
    stack: Any = 0  # code into STACKS (0 = megatron)
    schedule: Any = S_1F1B  # code into SCHEDULES
    moe_dispatcher: Any = D_AUTO  # code into MOE_DISPATCHERS
    # Decoder layers on the first / last pipeline stage (Megatron-LM's
    # --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers); 0 = the default
    # split of `estimators.shapes.stage_layers`.
    first_stage_layers: Any = 0
    last_stage_layers: Any = 0
    # ZeRO shard group (HSDP / hybrid sharding): shard over this many of the dp*cp ranks and
    # replicate across the groups; 0 = all of them (plain ZeRO / FSDP full sharding).
    shard_group: Any = 0
    recompute_modules: Any = 1  # bitmask of RECOMPUTE_MODULES (recompute = modules)
    recompute_every: Any = 1  # recompute = full: every k-th layer of a stage is checkpointed

    @property
    def gpus(self) -> Any:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def microbatches(self) -> Any:
        """Micro-batches per replica per step (gradient-accumulation steps)."""
        return self.global_batch / (self.dp * self.micro_batch)

    def scalars(self) -> dict[str, Any]:
        """The fields of a single configuration (each holding one value) as Python scalars."""
        return {f.name: np.asarray(getattr(self, f.name)).item() for f in fields(self)}

    def valid_mask(self, model: ModelSpec) -> np.ndarray:
        """Vectorized: which configurations are structurally valid for this model (the rules
        of `gpuplan.rules`, the same ones `check` reports)."""
        return valid(self, model)

    def check(self, model: ModelSpec, gpus: int | None = None) -> None:
        """Scalar check with one clear line for the first broken rule (the CLI calls this):
        the rules of `valid_mask` on a grid of one."""
        for name in LAYOUT_NAMES.values():
            if type(getattr(self, name)) is not int and np.size(getattr(self, name)) != 1:
                raise ConfigError(f"Layout.check takes one configuration; {name} has "
                                  f"{np.size(getattr(self, name))} values (use valid_mask)")
        problem = first_broken(self, model, gpus)
        if problem is not None:
            raise ConfigError(problem)


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """Per-candidate hardware figures as arrays (built by the search from the catalog)."""

    memory_bytes: Any
    memory_bandwidth_bytes_per_s: Any
    peak_flops: Any  # dense FLOP/s at the candidate's precision (nan where unsupported)
    scale_up_bytes_per_s: Any  # per GPU, per direction
    scale_up_latency_s: Any
    scale_up_domain: Any  # GPUs per scale-up domain
    scale_out_bytes_per_s: Any  # per GPU, per direction
    scale_out_latency_s: Any
    gpus_per_node: Any
    tdp_watts: Any
    family: Any = field(default="")  # efficiency family per candidate (array of str or int codes)
    # Dense peak FLOP/s per precision code (shape (..., 4) indexed like PRECISIONS, nan where
    # unsupported); when given, the timing model picks the column of each layout's precision.
    peak_flops_by_precision: Any = None
    # Host memory per GPU (the node's RAM / its GPUs; nan = not in the catalog) and the
    # GPU's host link per direction (its PCIe / NVLink-C2C host_interface fabric).
    host_memory_bytes: Any = float("nan")
    host_bytes_per_s: Any = float("nan")
    # Accelerator.exp_per_s (catalog exp_tera_per_s); inf = no figure (no exponential term)
    exp_per_s: Any = float("inf")
    scale_out_dispatch_share: Any = float("nan")  # the fabric's moe_dispatch_logical_share
    fp8_gemm_any_layout: Any = 0.0  # the Accelerator's, 1.0 / 0.0 (buffers.fp8_param_gathers)


def _bitmask(value: Any, names: tuple[str, ...], what: str, hint: str) -> int:
    """'a,b' (or a sequence of names) -> the bitmask of their positions in `names`, with a
    did-you-mean for a misspelt one."""
    import difflib

    items = value.split(",") if isinstance(value, str) else list(value)
    mask = 0
    for raw in items:
        name = str(raw).strip().lower().replace("-", "_")
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1)
            guess = f"did you mean {quote(near[0])}? " if near else ""
            raise ConfigError(f"unknown {what} {quote(str(raw).strip())}; {guess}choose from: "
                              f"{', '.join(names)} ({hint})")
        mask |= 1 << names.index(name)
    if not mask:
        raise ConfigError(f"no {what} given; choose from: {', '.join(names)} ({hint})")
    return mask


def offload_code(value: Any) -> int:
    """--offload value -> bitmask of OFFLOAD_PARTS: False/None/'' -> 0, True -> optimizer,
    'optimizer,params,grads,activations' (or a sequence of those names)."""
    if value is None or value is False or value == "" or value == ():
        return 0
    if value is True:
        return O_OPTIMIZER
    if isinstance(value, int):
        raise ConfigError(f"--offload takes part names, not a number; choose from: "
                          f"{', '.join(OFFLOAD_PARTS)}")
    return _bitmask(value, OFFLOAD_PARTS, "offload part", "e.g. --offload optimizer,params")


def offload_names(mask: int) -> tuple[str, ...]:
    return tuple(n for i, n in enumerate(OFFLOAD_PARTS) if int(mask) >> i & 1)


def modules_code(value: Any) -> int:
    """--recompute-modules 'core_attn,layernorm' -> bitmask of RECOMPUTE_MODULES."""
    return _bitmask(value, RECOMPUTE_MODULES, "recompute module",
                    "Megatron-LM --recompute-modules names")


def module_names(mask: int) -> tuple[str, ...]:
    return tuple(n for i, n in enumerate(RECOMPUTE_MODULES) if int(mask) >> i & 1)
