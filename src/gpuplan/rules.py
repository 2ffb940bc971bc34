"""Layout rules and size bounds (L1, beside spec and imported by it; numpy only).

One definition of which training layouts are structurally valid for a model: `_rules` yields
each rule with the mask of configurations that keep it. `valid` (`spec.Layout.valid_mask`) ANDs
them over a grid (the search), `first_broken` (`spec.Layout.check`) reports the first broken one
for a single configuration (the CLI) with its message from `_MESSAGES`, so `plan` and `estimate`
can never disagree. Range rules come first, bounded by the model's real sizes, and a single
configuration is evaluated in exact Python integers, so no typed number (10**30 included)
overflows or starts a search longer than the model allows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from types import SimpleNamespace
from typing import Any

import numpy as np

# Largest sizes the tool plans for: every search is bounded by the model's real sizes, and these
# bound the sizes themselves, so no number typed makes a loop run longer than they allow.
# Ten times or more beyond any published run: DeepNet trained 1,000 layers (Wang et al. 2022,
# arXiv 2203.00555); PEER routes over 1,048,576 experts (He 2024, arXiv 2407.04202); context
# windows reach ~10M tokens (Llama 4 Scout, 2025); the largest batches ~65,536 sequences
# (You et al. 2019, LAMB, arXiv 1904.00962).
MAX_LAYERS = 10_000
MAX_WIDTH = 1 << 22  # hidden, ffn, heads, vocabulary, ranks: 4,194,304
MAX_EXPERTS = 1 << 21
MAX_SEQ_LEN = 1 << 27  # 134,217,728 tokens
MAX_BATCH = 1 << 24  # sequences per step (and per micro-batch): 16,777,216
MODEL_MAX = {"layers": MAX_LAYERS, "hidden": MAX_WIDTH, "heads": MAX_WIDTH,
             "kv_heads": MAX_WIDTH, "ffn": MAX_WIDTH, "vocab": MAX_WIDTH,
             "head_dim": MAX_WIDTH, "experts": MAX_EXPERTS, "experts_per_token": MAX_EXPERTS,
             "moe_ffn": MAX_WIDTH, "shared_experts": MAX_EXPERTS, "dense_layers": MAX_LAYERS,
             "q_lora_rank": MAX_WIDTH, "kv_lora_rank": MAX_WIDTH, "rope_head_dim": MAX_WIDTH,
             "v_head_dim": MAX_WIDTH, "max_seq_len": MAX_SEQ_LEN}


# The integer fields of a Layout under the short names the formulas use.
LAYOUT_NAMES = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "vpp": "vpp",
                "zero": "zero", "mb": "micro_batch", "gb": "global_batch", "seq": "seq_len",
                "first": "first_stage_layers", "last": "last_stage_layers",
                "sg": "shard_group", "offl": "offload", "offn": "offload_layers",
                "rcm": "recompute",
                "rmods": "recompute_modules", "rk": "recompute_every"}


@dataclass(frozen=True, kw_only=True)
class LayoutArrays:
    """The integer fields of a Layout as arrays, named as in `LAYOUT_NAMES`. The rules hold
    them exact (`exact`); `estimate.timing` reads them as floats and adds the hardware."""

    tp: Any
    pp: Any
    dp: Any
    cp: Any
    ep: Any
    vpp: Any
    zero: Any
    mb: Any
    gb: Any
    seq: Any
    first: Any  # decoder layers on the first pipeline stage (0 = the default split)
    last: Any  # on the last stage
    sg: Any
    offl: Any
    offn: Any  # offload_layers (0 = every layer)
    rcm: Any
    rmods: Any
    rk: Any

    @staticmethod
    def read(layout: Any, dtype: Any = None) -> dict[str, np.ndarray]:
        """The fields as arrays of `dtype` (None: as given), keyed by short name."""
        return {k: np.asarray(getattr(layout, n), dtype=dtype) for k, n in LAYOUT_NAMES.items()}

    @classmethod
    def exact(cls, layout: Any) -> LayoutArrays:
        """A single configuration is held as Python integers (exact, never overflowing: a
        typed 10**30 is compared, not wrapped); a grid as numpy integer arrays."""
        a = cls.read(layout)
        if all(x.ndim == 0 for x in a.values()):
            return cls.single(layout)
        return cls(**a)

    @classmethod
    def single(cls, layout: Any) -> LayoutArrays:
        """One configuration (each field holds one value, of any shape) as Python integers."""
        return cls(**dict(zip(LAYOUT_NAMES, [x if type(x) is int else
                                             int(np.asarray(x).reshape(-1)[0])
                                             for x in _layout_values(layout)], strict=True)))

    @property
    def shape(self) -> tuple[int, ...]:
        return np.broadcast(*(getattr(self, f) for f in LAYOUT_NAMES)).shape

    def scalars(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in LAYOUT_NAMES}


_layout_values = attrgetter(*LAYOUT_NAMES.values())


def _rules(v: LayoutArrays, m: Any, gpus: int | None) -> Iterator[tuple[str, Any]]:
    """(rule, keep-mask) in the order `check` reports them; ranges come before arithmetic, so
    a divisor search never starts from a number larger than the model's real size."""
    yield "degree", ((v.tp >= 1) & (v.pp >= 1) & (v.cp >= 1) & (v.dp >= 1) & (v.ep >= 1)
                     & (v.vpp >= 1))
    yield "batch_range", (v.mb >= 1) & (v.gb >= 1) & (v.mb <= MAX_BATCH) & (v.gb <= MAX_BATCH)
    yield "seq_range", (v.seq >= 1) & (v.seq <= MAX_SEQ_LEN)
    yield "tp_range", v.tp <= m.heads
    # Uneven stages (Megatron-LM, torchtitan): pp*vpp virtual stages over the layers plus the
    # embedding and the loss counted as one layer each (`estimators.shapes.stage_layers`).
    yield "pp_range", (v.pp <= m.layers) & (v.vpp <= m.layers) & (v.pp * v.vpp <= m.layers + 2)
    yield "vpp", (v.vpp == 1) | (v.pp > 1)
    yield "stage_range", ((v.first >= 0) & (v.last >= 0) & (v.first <= m.layers)
                          & (v.last <= m.layers))
    if m.is_moe:
        yield "ep_range", v.ep <= m.experts
    else:
        yield "ep_dense", v.ep == 1
    yield "cp_range", (v.cp == 1) | (2 * v.cp <= v.seq)
    if gpus is not None:
        yield "gpus", v.tp * v.pp * v.cp * v.dp == gpus
    # KV heads are split across TP ranks, or replicated when tp exceeds them (Megatron-LM).
    yield "tp", (m.heads % v.tp == 0) & ((m.kv_heads % v.tp == 0) | (v.tp % m.kv_heads == 0))
    yield "stages", _stages_ok(v, m.layers)
    if m.is_moe:
        yield "ep", m.experts % v.ep == 0
    yield "ep_dp", v.dp % v.ep == 0
    yield "cp", (v.cp == 1) | (v.seq % (2 * v.cp) == 0)
    yield "zero", (v.zero >= 0) & (v.zero <= 3)
    yield "batch_dp", v.mb * v.dp <= v.gb
    yield "batch_multiple", v.gb % (v.mb * v.dp) == 0
    yield from _sharding_rules(v, m)


# Codes of spec.RECOMPUTE / OFFLOAD_PARTS / RECOMPUTE_MODULES (rules sit below spec).
_R_FULL, _R_MODULES, _N_RECOMPUTE = 2, 4, 5
_O_PARAMS, _O_GRADS, _O_ACTIVATIONS, _N_OFFLOAD = 2, 4, 8, 16
_M_MOE_PARTS, _M_MLA_UP_PROJ, _N_MODULES = 4 | 8, 32, 64


def _sharding_rules(v: LayoutArrays, m: Any) -> Iterator[tuple[str, Any]]:
    """HSDP shard groups, offload and the recompute modes (#11)."""
    yield "shard_range", (v.sg >= 0) & (v.sg <= MAX_WIDTH)
    yield "shard_group", (v.sg == 0) | ((v.dp * v.cp) % _at_least_one(v.sg) == 0)
    yield "shard_zero", (v.sg == 0) | (v.zero >= 1)
    yield "offload_range", (v.offl >= 0) & (v.offl < _N_OFFLOAD)
    yield "offload_params", ((v.offl & _O_PARAMS) == 0) | (v.zero == 3)
    yield "offload_grads", ((v.offl & _O_GRADS) == 0) | (v.zero >= 2)
    yield "offload_layers", (v.offn >= 0) & (v.offn < m.layers)  # Megatron-Core's range
    yield "offload_layers_acts", (v.offn == 0) | ((v.offl & _O_ACTIVATIONS) != 0)
    yield "recompute_range", (v.rcm >= 0) & (v.rcm < _N_RECOMPUTE)
    other = v.rcm != _R_MODULES  # not `~(==)`: a Python bool inverts to -1 or -2
    yield "modules_range", other | ((v.rmods >= 1) & (v.rmods < _N_MODULES))
    if not m.is_moe:
        yield "modules_moe", other | ((v.rmods & _M_MOE_PARTS) == 0)
    if not getattr(m, "kv_lora_rank", 0):
        yield "modules_mla", other | ((v.rmods & _M_MLA_UP_PROJ) == 0)
    yield "every_range", (v.rk >= 1) & (v.rk <= m.layers)
    yield "every_full", (v.rk == 1) | (v.rcm == _R_FULL)


def _at_least_one(x: Any) -> Any:
    """max(x, 1): exact Python for one configuration's integer, numpy for a grid."""
    return max(x, 1) if type(x) is int else np.maximum(x, 1)


def _explicit_stages(v: Any, layers: int) -> tuple[Any, Any]:
    """(other stages, layers left for them) once --first/--last-stage-layers are placed."""
    explicit = (v.first > 0) * 1 + (v.last > 0) * 1
    return v.pp - explicit, layers - v.first - v.last


def _stages_ok(v: LayoutArrays, layers: int) -> Any:
    """Explicit first/last stage sizes need pp > 1 and leave at least one layer for each other
    stage (none, and exactly no layer, when both ends are given with pp = 2)."""
    left, rest = _explicit_stages(v, layers)
    default = (v.first == 0) & (v.last == 0)
    return default | ((v.pp > 1) & (((left == 0) & (rest == 0)) | ((left > 0) & (rest >= left))))


def _stages_message(v: dict[str, int], m: Any) -> str:
    given = f"--first-stage-layers {v['first']} and --last-stage-layers {v['last']}"
    if v["pp"] == 1:
        return f"{given} need pipeline parallelism: use --pp 2 or more, or drop them"
    left = v["pp"] - (v["first"] > 0) - (v["last"] > 0)  # the other stages
    rest = m.layers - v["first"] - v["last"]  # their layers
    if left == 0:
        return (f"{given} must add up to the model's {m.layers} layers with --pp 2 "
                f"(they add up to {v['first'] + v['last']})")
    return (f"{given} leave {rest} of the model's {m.layers} layers for the other {left} "
            f"pipeline stages; each needs at least one: lower them")


def _n(x: int) -> str:
    """A typed number for a one-line message: with thousands separators, or its order of
    magnitude when it has more than 15 digits (a 3,000-digit value is not echoed)."""
    if abs(x) < 10**15:
        return f"{x:,}"
    return f"about 10^{int(math.log10(abs(x)) + 1e-9)}"


_Msg = Callable[[dict[str, int], Any, "int | None"], str]
_MESSAGES: dict[str, _Msg] = {
    "degree": lambda v, m, g: next(
        f"--{k} must be at least 1, got {_n(v[k])}" for k in ("tp", "pp", "cp", "dp", "ep", "vpp")
        if v[k] < 1),
    "batch_range": lambda v, m, g: (
        f"--micro-batch and --global-batch must be from 1 to {MAX_BATCH:,} sequences, got "
        f"{_n(v['mb'])} and {_n(v['gb'])}"),
    "seq_range": lambda v, m, g: (
        f"--seq-len must be from 1 to {MAX_SEQ_LEN:,} tokens, got {_n(v['seq'])}"),
    "gpus": lambda v, m, g: (
        f"tp*pp*cp*dp = {v['tp']}*{v['pp']}*{v['cp']}*{_n(v['dp'])} = "
        f"{_n(v['tp'] * v['pp'] * v['cp'] * v['dp'])} does not equal --gpus {_n(g or 0)}; "
        f"change a degree or the GPU count"),
    "tp_range": lambda v, m, g: (
        f"--tp {_n(v['tp'])} is more than the model's {m.heads} attention heads; use a divisor "
        f"such as {m.heads}"),
    "tp": lambda v, m, g: (
        f"--tp {v['tp']} does not divide the model's {m.heads} attention heads "
        f"({m.kv_heads} KV heads); use a divisor such as {largest_divisor(m.heads, v['tp'])}"),
    "pp_range": lambda v, m, g: (
        f"--pp {_n(v['pp'])} x --vpp {_n(v['vpp'])} pipeline stages are more than the model's "
        f"{m.layers} layers (+ the embedding and the loss, {m.layers + 2} in all, when stages "
        f"are uneven); lower --pp or --vpp"),
    "vpp": lambda v, m, g: (
        f"--vpp {_n(v['vpp'])} interleaves pipeline stages: it needs --pp 2 or more"),
    "stage_range": lambda v, m, g: (
        f"--first-stage-layers {_n(v['first'])} and --last-stage-layers {_n(v['last'])} must "
        f"be from 0 (the default split) to the model's {m.layers} layers"),
    "stages": lambda v, m, g: _stages_message(v, m),
    "ep_range": lambda v, m, g: (
        f"--ep {_n(v['ep'])} is more than the model's {m.experts} experts"),
    "ep": lambda v, m, g: f"--ep {v['ep']} does not divide the model's {m.experts} experts",
    "ep_dense": lambda v, m, g: (
        f"--ep {_n(v['ep'])} needs a mixture-of-experts model; {m.id} is dense"),
    "ep_dp": lambda v, m, g: f"--ep {v['ep']} must divide the data-parallel degree {v['dp']}",
    "cp_range": lambda v, m, g: (
        f"--cp {_n(v['cp'])}: the sequence length ({v['seq']}) must be at least 2*cp"),
    "cp": lambda v, m, g: f"--cp {v['cp']}: the sequence length must be a multiple of 2*cp",
    "zero": lambda v, m, g: f"--zero must be 0, 1, 2 or 3, got {_n(v['zero'])}",
    "batch_dp": lambda v, m, g: (
        f"--micro-batch {v['mb']} x dp {v['dp']} = {v['mb'] * v['dp']} sequences exceeds "
        f"--global-batch {v['gb']}; lower the micro-batch or raise the global batch"),
    "batch_multiple": lambda v, m, g: (
        f"--global-batch {v['gb']} is not a multiple of micro-batch x dp = {v['mb'] * v['dp']}; "
        f"use e.g. {-(-v['gb'] // (v['mb'] * v['dp'])) * v['mb'] * v['dp']}"),
    "shard_range": lambda v, m, g: (
        f"--shard-group must be from 1 to the data-parallel ranks (0 = all), got {_n(v['sg'])}"),
    "shard_group": lambda v, m, g: (
        f"--shard-group {v['sg']} does not divide the data-parallel ranks dp*cp = "
        f"{v['dp'] * v['cp']}; use a divisor such as "
        f"{largest_divisor(v['dp'] * v['cp'], v['sg'])}"),
    "shard_zero": lambda v, m, g: (
        f"--shard-group {v['sg']} shards ZeRO state; add --zero 1, 2 or 3 (3 = HSDP)"),
    "offload_range": lambda v, m, g: f"offload must be a set of {_N_OFFLOAD - 1:b} bits, "
                                     f"got {_n(v['offl'])}",
    "offload_params": lambda v, m, g: (
        "offloading parameters needs --zero 3 (ZeRO-Infinity offload_param, FSDP CPUOffload): "
        "add --zero 3"),
    "offload_grads": lambda v, m, g: (
        "offloading gradients needs --zero 2 or 3 (they are offloaded shard by shard): add "
        "--zero 2"),
    "offload_layers": lambda v, m, g: (
        f"--offload-layers must be from 1 to {m.layers - 1} (fewer than the model's {m.layers} "
        f"layers, as Megatron-Core's cpu_offloading_num_layers; leave it out for all layers), "
        f"got {_n(v['offn'])}"),
    "offload_layers_acts": lambda v, m, g: (
        f"--offload-layers {_n(v['offn'])} offloads those layers' activations: add --offload "
        f"activations"),
    "recompute_range": lambda v, m, g: f"unknown recompute code {_n(v['rcm'])}",
    "modules_range": lambda v, m, g: (
        "--recompute modules needs at least one module: give --recompute-modules, e.g. "
        "core_attn,layernorm"),
    "modules_moe": lambda v, m, g: (
        f"--recompute-modules moe and moe_act need a mixture-of-experts model; {m.id} is dense"),
    "modules_mla": lambda v, m, g: (
        f"--recompute-modules mla_up_proj needs a model with multi-head latent attention "
        f"(kv_lora_rank > 0, e.g. deepseek-v3); {m.id} has none"),
    "every_range": lambda v, m, g: (
        f"--recompute-every must be from 1 to the model's {m.layers} layers, got {_n(v['rk'])}"),
    "every_full": lambda v, m, g: (
        f"--recompute-every {_n(v['rk'])} checkpoints every k-th layer and needs --recompute "
        f"full"),
}


def largest_divisor(n: int, at_most: int) -> int:
    """Largest divisor of n that is <= at_most (for 'use a divisor such as ...' hints); the
    search runs over at most n candidates, whatever `at_most` is."""
    return max(d for d in range(1, max(1, min(n, at_most)) + 1) if n % d == 0)


def valid(layout: Any, model: Any) -> np.ndarray:
    """Which configurations of the grid keep every rule (gpus = tp*pp*cp*dp by construction)."""
    v = LayoutArrays.exact(layout)
    ok = np.asarray(True)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _, keep in _rules(v, model, None):
            ok = ok & np.asarray(keep, dtype=bool)
    return np.broadcast_to(ok, v.shape)


def first_broken(layout: Any, model: Any, gpus: int | None = None) -> str | None:
    """The one-line message of the first rule a single configuration (each integer field of
    `LAYOUT_NAMES` holding one value) breaks, or None."""
    values = dict(zip(LAYOUT_NAMES, [x if type(x) is int else int(np.asarray(x).reshape(-1)[0])
                                     for x in _layout_values(layout)], strict=True))
    v = SimpleNamespace(**values)  # `LayoutArrays.single`'s fields, without a frozen record
    for rule, keep in _rules(v, model, gpus):  # type: ignore[arg-type]
        if keep is True:  # Python ints compare to the bool singletons
            continue
        if not (keep if type(keep) is bool else bool(np.all(keep))):
            return _MESSAGES[rule](values, model, gpus)
    return None
