"""DeepSpeed JSON config and launcher line for a plan (L5).

The output is a shell script: it writes `ds_config.json` (keys of DeepSpeed's config:
train_batch_size = micro x accumulation x data-parallel size, zero_optimization, bf16/fp16,
activation_checkpointing) and then starts the `deepspeed` launcher. JSON has no comments, so
what DeepSpeed cannot express from its config (FP8, pipeline stages, context parallelism,
experts) is said in the script's comments.
"""

from __future__ import annotations

import json
from typing import Any

from ._job import Job, commented, header, job_of

CONFIG_FILE = "ds_config.json"
JSON_MARK = "GPUPLAN_DS_CONFIG"


def config(job: Job) -> tuple[dict[str, Any], list[str]]:
    """The DeepSpeed config dict and notes on what it cannot express."""
    notes: list[str] = []
    zero: dict[str, Any] = {"stage": job.zero, "overlap_comm": True,
                            "contiguous_gradients": True}
    parts = job.offload_parts
    if "optimizer" in parts or "grads" in parts:  # ZeRO-Offload moves gradients with it
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if job.zero == 0:
            notes.append("optimizer offload needs ZeRO stage 1 or more")
    if "params" in parts:  # ZeRO-Infinity (stage 3 only)
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if "activations" in parts:
        notes.append("activation offload: set activation_checkpointing.cpu_checkpointing "
                     "(DeepSpeed moves the checkpointed activations to the CPU)")
    if job.shard_group:
        zero["zero_hpz_partition_size"] = job.shard_group
        notes.append(f"HSDP shard group {job.shard_group}: ZeRO++ hpZ keeps a secondary "
                     f"parameter partition in groups of {job.shard_group} "
                     "(zero_hpz_partition_size); optimizer state stays fully sharded")
    cfg: dict[str, Any] = {
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": job.micro_batch,
        "gradient_accumulation_steps": job.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
    }
    if job.precision in ("bf16", "fp8"):
        cfg["bf16"] = {"enabled": True}
    elif job.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if job.precision == "fp8":
        notes.append("FP8 is not a DeepSpeed config option: use Transformer Engine layers in "
                     "the model (bf16 is set for the rest)")
    if job.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": job.tp > 1, "contiguous_memory_optimization": False,
            "cpu_checkpointing": "activations" in job.offload_parts}
        if job.recompute == "selective":
            notes.append("selective recompute is chosen in the model code; the config's "
                         "activation_checkpointing applies where the model calls "
                         "deepspeed.checkpointing.checkpoint")
    if job.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": job.tp}
        notes.append(f"TP {job.tp} via AutoTP training (tensor_parallel.autotp_size, DeepSpeed "
                     ">= 0.16.4) or Megatron-DeepSpeed's mpu")
    if job.pp > 1:
        notes.append(f"PP {job.pp}: wrap the model in deepspeed.pipe.PipelineModule with "
                     f"num_stages={job.pp}" + (" (ZeRO-3 does not combine with it)"
                                               if job.zero == 3 else ""))
    if job.cp > 1:
        notes.append(f"context parallel {job.cp}: DeepSpeed-Ulysses sequence parallelism "
                     "is set up in the model code, not in this config")
    if job.ep > 1:
        notes.append(f"expert parallel {job.ep}: deepspeed.moe.layer.MoE(ep_size={job.ep}) in "
                     "the model code")
    notes += _run_option_notes(job)
    return cfg, notes


def _run_option_notes(job: Job) -> list[str]:
    """What DeepSpeed's config cannot say about the estimate's run options."""
    notes = []
    if job.moments_dtype != "fp32":
        notes.append(f"{job.moments_dtype} Adam moments have no DeepSpeed config key: the ZeRO "
                     "optimizer keeps fp32 moments")
    if job.activation_cache == "fp8":
        notes.append("the FP8 activation cache has no DeepSpeed config key")
    if job.ema != "none":
        notes.append(f"parameter EMA on the {job.ema}: no DeepSpeed config key; keep it in "
                     "train.py")
    if job.schedule != "1f1b" and job.pp > 1:
        notes.append(f"schedule {job.schedule}: deepspeed.pipe runs its own 1F1B-style "
                     "schedule; there is no DualPipe or MoE all-to-all overlap option")
    if job.offload_layers and "activations" in job.offload_parts:
        notes.append(f"activation offload of the first {job.offload_layers} layers per rank: "
                     "cpu_checkpointing offloads every checkpointed layer")
    return notes


def launcher(job: Job) -> str:
    return (f"deepspeed --num_nodes {job.nodes} --num_gpus {job.gpus_per_node} "
            f"--hostfile hostfile train.py --deepspeed --deepspeed_config {CONFIG_FILE}")


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    cfg, notes = config(job)
    top = ["DeepSpeed config and launch"] + header(job, source)
    top += [f"note: {n}" for n in notes]
    top.append(f"hostfile: one line per node, 'HOSTNAME slots={job.gpus_per_node}'")
    body = json.dumps(cfg, indent=2)
    return (commented(top) + f"\ncat > {CONFIG_FILE} <<'{JSON_MARK}'\n{body}\n{JSON_MARK}\n"
            + launcher(job) + "\n")
