"""Megatron-LM / NeMo (Megatron Core) arguments for a plan (L5).

Flag names follow megatron/training/arguments.py and the config dataclasses it builds flags from
(TransformerConfig, ModelParallelConfig, TrainingConfig: field `x_y` -> `--x-y`), as of
Megatron-LM main in 2026. The output is a bash array, `MEGATRON_ARGS=( ... )`, for
`pretrain_gpt.py`; `gpuplan export --target torchrun` or `--target slurm` wraps it in a launch.

Mapping from the plan:
- ZeRO 1 and 2 -> `--use-distributed-optimizer` (Megatron shards the optimizer state and
  reduce-scatters gradients); ZeRO 3 -> Megatron-FSDP, sharding strategy optim_grads_params.
- recompute selective -> granularity selective (core attention); full -> full, uniform, 1 layer.
- FP8 -> `--fp8-format hybrid` with the delayed-scaling recipe, or MXFP8 on Blackwell; an
  estimate without the FP8 transpose (`--fp8-recipe tensor` on Blackwell) -> `--fp8-recipe
  tensorwise` (per-tensor current scaling). `--allocator expandable` -> the torchrun and slurm
  scripts export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`env_lines`).
- Pipeline stages as the plan split them (`estimators.shapes.stage_layers`): explicit first/last
  stage sizes -> `--decoder-first/last-pipeline-num-layers`; layers that pp*vpp does not divide
  -> `--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split` when
  layers + 2 divide (the same split), otherwise the first and last stage sizes of the split.
- The estimate's run options, each flag after a `#` line naming where Megatron-LM defines it
  (`SOURCES`, checked against NVIDIA/Megatron-LM main at commit d98e8a64, 2026-08-22): BF16
  Adam moments -> the precision-aware optimizer; activation offload of N layers ->
  `--cpu-offloading-num-layers` (which turns cpu_offloading on; `--cpu-offloading` itself is no
  flag); the MoE dispatcher -> `--moe-token-dispatcher-type` (flex: DeepEP backend;
  `--moe-enable-deepep` is deprecated); schedule 1f1b-a2a -> the EP all-to-all overlap. DualPipe,
  the FP8 activation cache and a parameter EMA have no Megatron-LM flag: a note says so.
"""

from __future__ import annotations

import math
from typing import Any

from ..estimators.shapes import stage_layers
from ._job import Job, commented, header, job_of

_ARGS = "megatron/training/arguments.py"
_MPC = "megatron/core/model_parallel_config.py ModelParallelConfig"
_TC = "megatron/core/transformer/transformer_config.py TransformerConfig"
# where each flag the run options add is defined (Megatron-LM main, commit d98e8a64)
SOURCES = {
    "--use-precision-aware-optimizer": f"{_ARGS}:3667 (_add_experimental_args)",
    "--exp-avg-dtype": f"{_ARGS}:3675 (_add_experimental_args)",
    "--exp-avg-sq-dtype": f"{_ARGS}:3680 (_add_experimental_args)",
    "--cpu-offloading-num-layers": f"{_MPC}.cpu_offloading_num_layers:461 "
                                   f"(set > 0, it turns cpu_offloading on: {_ARGS}:1950)",
    "--recompute-modules": f"{_TC}.recompute_modules:560 (mla_up_proj: MLA up projection "
                           "and RoPE)",
    "--moe-token-dispatcher-type": f"{_TC}.moe_token_dispatcher_type:891",
    "--moe-flex-dispatcher-backend": f"{_TC}.moe_flex_dispatcher_backend:898",
    "--overlap-moe-expert-parallel-comm": f"{_MPC}.overlap_moe_expert_parallel_comm:343",
    "--delay-wgrad-compute": f"{_MPC}.delay_wgrad_compute:348",
    "--fp8-recipe": f"{_TC}.fp8_recipe:594 ('tensorwise': per-tensor current scaling)",
}
# the environment line of `--allocator expandable` (torchrun, slurm): PyTorch CUDA semantics,
# https://pytorch.org/docs/stable/notes/cuda.html "Optimizing memory usage with
# PYTORCH_CUDA_ALLOC_CONF", expandable_segments (PyTorch >= 2.1)
EXPANDABLE_ENV = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
LAUNCH_HINT = "launch: gpuplan export --from RESULT.json --target torchrun (or slurm)"


def _model_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    m = job.model
    if m is None:
        return [], [f"model '{job.model_id}' is not a catalog preset: add --num-layers, "
                    "--hidden-size, --num-attention-heads, --ffn-hidden-size, --vocab-size"]
    args: list[tuple[str, Any]] = [
        ("--num-layers", m.layers), ("--hidden-size", m.hidden),
        ("--num-attention-heads", m.heads), ("--ffn-hidden-size", m.ffn),
    ]
    notes = []
    if m.kv_heads < m.heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.kv_heads)]
    if m.head_dim and not m.is_mla:
        args.append(("--kv-channels", m.head_dim))
    args += [("--vocab-size", m.vocab),
             ("--max-position-embeddings", max(m.max_seq_len, job.seq_len))]
    if m.mlp == "swiglu":
        args += [("--swiglu", None), ("--normalization", "RMSNorm"),
                 ("--position-embedding-type", "rope"), ("--disable-bias-linear", None)]
        notes.append("assumed Llama-style blocks (RMSNorm, RoPE, no biases): the preset does "
                     "not record them")
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if m.is_mla:
        args += [("--multi-latent-attention", None), ("--kv-lora-rank", m.kv_lora_rank),
                 ("--qk-head-dim", m.d_head), ("--qk-pos-emb-head-dim", m.rope_head_dim),
                 ("--v-head-dim", m.v_head_dim or m.d_head)]
        if m.q_lora_rank:
            args.append(("--q-lora-rank", m.q_lora_rank))
    if m.is_moe:
        args += [("--num-experts", m.experts), ("--moe-router-topk", m.experts_per_token),
                 ("--moe-ffn-hidden-size", m.expert_ffn)]
        if m.shared_experts:
            args.append(("--moe-shared-expert-intermediate-size",
                         m.shared_experts * m.expert_ffn))
        if m.dense_layers:
            freq = f"([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})"
            args.append(("--moe-layer-freq", freq))
    return args, notes


def _stage_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    """Megatron-LM flags for the plan's pipeline split (module docstring)."""
    m, pp, vpp = job.model, job.pp, job.vpp
    explicit = job.first_stage_layers > 0 or job.last_stage_layers > 0
    if m is None or pp < 2 or (m.layers % (pp * vpp) == 0 and not explicit):
        return [], []
    if not explicit and (m.layers + 2) % (pp * vpp) == 0:
        return [("--account-for-embedding-in-pipeline-split", None),
                ("--account-for-loss-in-pipeline-split", None)], []
    first, _, last = (int(x) for x in stage_layers(m, pp, vpp, job.first_stage_layers,
                                                    job.last_stage_layers))
    args: list[tuple[str, Any]] = [("--decoder-first-pipeline-num-layers", first),
                                   ("--decoder-last-pipeline-num-layers", last)]
    rest = m.layers - first - last
    if pp > 2 and rest % ((pp - 2) * vpp) or (first % vpp or last % vpp):
        return args, [f"Megatron-LM needs the middle stages' {rest} layers to split evenly over "
                      f"{pp - 2} x {vpp} chunks (and each end's over {vpp}): adjust the first/"
                      "last stage sizes or give --pipeline-model-parallel-layout"]
    return args, []


def _parallel_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    args: list[tuple[str, Any]] = [("--tensor-model-parallel-size", job.tp),
                                   ("--pipeline-model-parallel-size", job.pp)]
    notes: list[str] = []
    if job.vpp > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", job.vpp))
    split_args, split_notes = _stage_args(job)
    args += split_args
    notes += split_notes
    if job.cp > 1:
        args.append(("--context-parallel-size", job.cp))
    if job.ep > 1:
        args.append(("--expert-model-parallel-size", job.ep))
    if job.sp:
        args.append(("--sequence-parallel", None))
    if job.zero in (1, 2):
        args += [("--use-distributed-optimizer", None), ("--overlap-grad-reduce", None),
                 ("--overlap-param-gather", None)]
        if job.zero == 2:
            notes.append("ZeRO-2 maps to the distributed optimizer (optimizer state sharded, "
                         "gradients reduce-scattered)")
    elif job.zero == 3:
        args += [("--use-megatron-fsdp", None),
                 ("--data-parallel-sharding-strategy", "optim_grads_params")]
    if "optimizer" in job.offload_parts:
        args.append(("--optimizer-cpu-offload", None))
    if "activations" in job.offload_parts:
        a, n = _offload_args(job)
        args += a
        notes += n
    if {"params", "grads"} & set(job.offload_parts):
        notes.append("Megatron-LM cannot offload parameters or gradients: use FSDP CPU "
                     "offload or DeepSpeed ZeRO-Infinity for this plan")
    if job.shard_group:
        args.append(("--num-distributed-optimizer-instances", job.dp // max(
            job.shard_group // job.cp, 1)))
        if job.zero == 0:
            notes.append("--optimizer-cpu-offload needs the distributed optimizer: add "
                         "--use-distributed-optimizer")
    return args, notes


def _cited(*pairs: tuple[str, Any]) -> list[tuple[str, Any]]:
    """The flags, each after a comment line naming where Megatron-LM defines it."""
    out: list[tuple[str, Any]] = []
    for flag, value in pairs:
        out += [(f"# {flag}: {SOURCES[flag]}", None), (flag, value)]
    return out


def _offload_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    """Activation offload: Megatron-Core offloads the first N layers of each rank's chunk, N
    below the model's layer count (TransformerConfig.__post_init__)."""
    if job.offload_layers:
        return _cited(("--cpu-offloading-num-layers", job.offload_layers)), []
    layers = job.model.layers if job.model else 0
    per_rank = min(math.ceil(layers / (job.pp * job.vpp)), layers - 1)
    if per_rank < 1:
        return [], ["activation offload of every layer: add --cpu-offloading-num-layers N "
                    "(N below the model's layer count)"]
    return _cited(("--cpu-offloading-num-layers", per_rank)), [
        f"activation offload of every layer: --cpu-offloading-num-layers {per_rank} (the "
        "layers of one rank; Megatron-LM keeps N below the model's layer count)"]


def _run_option_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    """The estimate's memory and schedule options (module docstring)."""
    args: list[tuple[str, Any]] = []
    notes: list[str] = []
    if job.moments_dtype != "fp32":
        args += _cited(("--use-precision-aware-optimizer", None),
                       ("--exp-avg-dtype", job.moments_dtype),
                       ("--exp-avg-sq-dtype", job.moments_dtype))
    if job.activation_cache == "fp8":
        notes.append("FP8 activation cache (DeepSeek-V3's FP8/E5M6 caching of linear inputs) "
                     "has no Megatron-LM flag: the estimate assumes it, Megatron-LM will "
                     "store these activations in bf16 (more memory)")
    if job.ema != "none":
        notes.append(f"parameter EMA on the {job.ema}: Megatron-LM has no EMA flag; keep it "
                     "in your training loop (DeepSeek-V3 keeps it in host memory)")
    if job.model is not None and job.model.is_moe and job.moe_dispatcher:
        args += _cited(("--moe-token-dispatcher-type", job.moe_dispatcher))
        if job.moe_dispatcher == "flex":
            args += _cited(("--moe-flex-dispatcher-backend", "deepep"))
    if job.schedule == "1f1b-a2a":
        args += _cited(("--overlap-moe-expert-parallel-comm", None),
                       ("--delay-wgrad-compute", None))
    elif job.schedule == "dualpipe":
        notes.append("DualPipe is DeepSeek's own pipeline schedule (github.com/deepseek-ai/"
                     "DualPipe): Megatron-LM has no flag for it, so this runs 1F1B (interleaved "
                     "if vpp > 1); --overlap-moe-expert-parallel-comm is the nearest")
    return args, notes


def _train_args(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    args: list[tuple[str, Any]] = [("--micro-batch-size", job.micro_batch),
                                   ("--global-batch-size", job.global_batch),
                                   ("--seq-length", job.seq_len)]
    if job.tokens:
        args.append(("--train-samples", math.ceil(job.tokens / job.seq_len)))
    notes = []
    if job.recompute in ("selective", "modules"):
        mods = tuple(job.recompute_modules) or ("core_attn",)
        args.append(("--recompute-granularity", "selective"))
        args += (_cited(("--recompute-modules", mods)) if "mla_up_proj" in mods
                 else [("--recompute-modules", mods)])
    elif job.recompute == "full" and job.recompute_every > 1:
        per_stage = (job.model.layers // (job.pp * job.vpp)) if job.model else 0
        args += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                 ("--recompute-num-layers", max(per_stage // job.recompute_every, 1))]
    elif job.recompute == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    elif job.recompute == "op":
        notes.append("per-op selective recompute (torchtitan op) has no Megatron-LM form: "
                     "--recompute-modules core_attn mlp is the nearest")
        args += [("--recompute-granularity", "selective"),
                 ("--recompute-modules", ("core_attn", "mlp"))]
    if job.precision in ("bf16", "fp8"):
        args.append(("--bf16", None))
    elif job.precision == "fp16":
        args.append(("--fp16", None))
    else:
        notes.append(f"precision {job.precision}: no mixed-precision flag (fp32 training)")
    if job.precision == "fp8" and not job.fp8_transpose:  # --fp8-recipe tensor, no transpose
        args += [("--fp8-format", "hybrid"), *_cited(("--fp8-recipe", "tensorwise"))]
    elif job.precision == "fp8":
        recipe = "mxfp8" if job.architecture.startswith("blackwell") else "delayed"
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", recipe)]
    return args, notes


def env_lines(job: Job) -> list[str]:
    """The launch environment the estimate assumes (torchrun and slurm scripts)."""
    return [EXPANDABLE_ENV] if job.allocator == "expandable" else []


def arguments(job: Job) -> tuple[list[tuple[str, Any]], list[str]]:
    """(flag, value or None) pairs in Megatron's names, and notes on what could not map."""
    args: list[tuple[str, Any]] = []
    notes: list[str] = []
    for part in (_model_args, _parallel_args, _train_args, _run_option_args):
        a, n = part(job)
        args += a
        notes += n
    return args, notes


def bash_array(name: str, args: list[tuple[str, Any]]) -> str:
    lines = [f"{name}=("]
    for flag, value in args:  # a '# ...' flag is a comment line (bash allows them here)
        text = flag if value is None else f"{flag} {value}"
        if isinstance(value, tuple):  # an nargs='*' flag: one word per value
            text = " ".join([flag, *map(str, value)])
        elif value is not None and any(c in str(value) for c in "()*[]+ "):
            text = f"{flag} '{value}'"
        lines.append(f"    {text}")
    lines.append(")")
    return "\n".join(lines)


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    args, notes = arguments(job)
    top = ["Megatron-LM / NeMo (Megatron Core) arguments for pretrain_gpt.py"]
    top += header(job, source)
    top += [f"note: {n}" for n in notes]
    top += ["add your data and tokenizer: --data-path ... --tokenizer-type ...",
            LAUNCH_HINT]
    return commented(top) + "\n" + bash_array("MEGATRON_ARGS", args) + "\n"
