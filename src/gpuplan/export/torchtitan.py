"""torchtitan TOML job config for a plan (L5).

The schema is torchtitan's JobConfig as of release v0.2.2 (torchtitan/config/job_config.py), the
last release configured by TOML (`--job.config_file FILE`); later torchtitan builds configs in
Python (config_registry.py) and takes the same fields as `--section.field value` overrides.

Mapping from the plan:
- ZeRO 3 -> FSDP (data_parallel_shard_degree = dp). torchtitan has no ZeRO-1/2: ZeRO 1/2 become
  FSDP with `fsdp_reshard_after_forward = "never"` (weights stay gathered between forward and
  backward, as in ZeRO-2), which uses no more memory than the plan; ZeRO 0 -> replicate (DDP).
- Gradient accumulation follows from global_batch_size / (local_batch_size x dp).
- FP8 -> the `quantize.linear.float8` converter (torchao, tensorwise scaling).
- Pipeline stages: `pipeline_parallel_layers_per_stage` counts the embedding and the output
  as one layer each (torchtitan's generate_llm_fqn_per_model_part, input/output weight 1,
  remainder on the first stages): n = ceil((layers + 2) / (pp * vpp)), the same split as the
  plan's when pp*vpp does not divide the layers; explicit first/last sizes become a note.
"""

from __future__ import annotations

import math
from typing import Any

from ._emit import toml_table
from ._job import Job, commented, header, job_of

# gpuplan model preset -> (torchtitan model name, flavor) in v0.2.2
FLAVORS = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
}


def _model(job: Job, notes: list[str]) -> dict[str, Any]:
    name, flavor = FLAVORS.get(job.model_id, ("llama3", "custom"))
    if job.model_id not in FLAVORS:
        m = job.model
        shape = (f"n_layers={m.layers}, dim={m.hidden}, n_heads={m.heads}, "
                 f"n_kv_heads={m.kv_heads}, ffn={m.ffn}, vocab_size={m.vocab}" if m else
                 "its shape")
        notes.append(f"torchtitan has no flavor for '{job.model_id}': register flavor "
                     f"'custom' with {shape}")
    out: dict[str, Any] = {"name": name, "flavor": flavor,
                           "hf_assets_path": f"./assets/hf/{job.model_id or 'model'}"}
    if job.precision == "fp8":
        out["converters"] = ["quantize.linear.float8"]
    return out


def _parallelism(job: Job, notes: list[str]) -> dict[str, Any]:
    shard = job.zero > 0
    group = max(job.shard_group // job.cp, 1) if job.shard_group and shard else job.dp
    par: dict[str, Any] = {  # HSDP: shard inside the group, replicate across the groups
        "data_parallel_replicate_degree": job.dp // group if shard else job.dp,
        "data_parallel_shard_degree": group if shard else 1,
        "fsdp_reshard_after_forward": "default" if job.zero == 3 else "never",
        "tensor_parallel_degree": job.tp,
        "enable_async_tensor_parallel": False,
        "pipeline_parallel_degree": job.pp,
        "context_parallel_degree": job.cp,
        "expert_parallel_degree": job.ep,
    }
    if job.zero in (1, 2):
        notes.append(f"ZeRO-{job.zero} has no torchtitan equivalent: FSDP without resharding "
                     "after forward (ZeRO-2-like) stands in")
    if job.pp > 1:
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if job.vpp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = job.micro_batch
        notes += _layers_per_stage(job, par)
    if not job.sp and job.tp > 1:
        notes.append("torchtitan always uses sequence parallelism with TP")
    _run_options(job, par, notes)
    return par


def _run_options(job: Job, par: dict[str, Any], notes: list[str]) -> None:
    """The estimate's schedule, dispatcher and memory options (job_config.py, v0.2.2)."""
    if job.schedule == "dualpipe" and job.pp > 1:
        par["pipeline_parallel_schedule"] = "DualPipeV"
        notes.append("DualPipe -> DualPipeV (the V-shaped variant, one copy of the weights; "
                     "torchtitan/config/job_config.py:422 and torchtitan/distributed/"
                     "dual_pipe_v.py); with expert parallelism it needs activation "
                     "checkpointing off")
    elif job.schedule == "1f1b-a2a":
        notes.append("1F1B with the MoE all-to-all overlap has no torchtitan option: plain 1F1B "
                     "is written (the EP overlap exists only under DualPipeV)")
    if job.moe_dispatcher == "flex" and job.ep > 1 and job.model and job.model.is_moe:
        par["expert_parallel_comm_backend"] = "deepep"  # job_config.py:474 (v0.2.2)
    if job.moments_dtype != "fp32":
        notes.append(f"{job.moments_dtype} Adam moments have no torchtitan option: AdamW keeps "
                     "its moments in the fp32 parameter dtype")
    if job.activation_cache == "fp8":
        notes.append("the FP8 activation cache has no torchtitan option: activations are "
                     "stored in bf16")
    if job.ema != "none":
        notes.append(f"parameter EMA on the {job.ema}: torchtitan has no EMA option; keep it in "
                     "your training loop")


def _training(job: Job, notes: list[str]) -> dict[str, Any]:
    local = job.global_batch // job.dp if job.pp > 1 else job.micro_batch
    train: dict[str, Any] = {
        "local_batch_size": local,
        "global_batch_size": job.global_batch,
        "seq_len": job.seq_len,
        "steps": job.steps or 1000,
        "mixed_precision_param": "float32" if job.precision == "fp32" else "bfloat16",
        "mixed_precision_reduce": "float32",
        "enable_cpu_offload": bool({"params", "grads"} & set(job.offload_parts)),
        "dataset": "c4",
    }
    if job.precision == "fp16":
        notes.append("torchtitan trains in bf16 or fp32, not fp16: bf16 is written")
    parts = set(job.offload_parts)
    if parts and not {"params", "grads"} & parts:
        notes.append("torchtitan's enable_cpu_offload moves FSDP parameters, gradients and the "
                     "optimizer step to the CPU; the plan offloads the optimizer alone, so it "
                     "is left off")
    if "activations" in parts:
        notes.append("activation offload has no torchtitan option: wrap the layers in "
                     "torch.autograd.graph.save_on_cpu")
    if not job.steps:
        notes.append("no token count in the record: steps = 1000 is a placeholder")
    return train


def _activation_checkpoint(job: Job, notes: list[str]) -> dict[str, Any]:
    """[activation_checkpoint]: full; full every k-th layer = selective with option "k";
    op = selective "op"; Megatron-LM's selective modes have no torchtitan form."""
    if job.recompute == "full" and job.recompute_every > 1:
        return {"mode": "selective", "selective_ac_option": str(job.recompute_every)}
    if job.recompute in ("none", "full"):
        return {"mode": job.recompute, "selective_ac_option": "op"}
    if job.recompute != "op":
        notes.append(f"recompute {job.recompute} (Megatron-LM modules) has no torchtitan form: "
                     "per-op selective checkpointing (op) is written, which saves less")
    return {"mode": "selective", "selective_ac_option": "op"}


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    notes: list[str] = []
    ac = _activation_checkpoint(job, notes)
    tables = [
        toml_table("job", {"dump_folder": "./outputs",
                           "description": f"{job.model_id} planned by gpuplan"}),
        toml_table("model", _model(job, notes)),
        toml_table("optimizer", {"name": "AdamW", "lr": 1.5e-4, "eps": 1e-8}),
        toml_table("training", _training(job, notes)),
        toml_table("parallelism", _parallelism(job, notes)),
        toml_table("activation_checkpoint", ac),
    ]
    if job.precision == "fp8":
        fsdp8 = job.zero > 0
        tables.append(toml_table("quantize.linear.float8", {
            "enable_fsdp_float8_all_gather": fsdp8,
            "precompute_float8_dynamic_scale_for_fsdp": fsdp8,
            "recipe_name": "tensorwise", "filter_fqns": ["output"]}))
    top = ["torchtitan job config (v0.2.2 schema): torchrun ... -m torchtitan.train "
           "--job.config_file THIS.toml"] + header(job, source)
    top += [f"note: {n}" for n in notes]
    return commented(top) + "\n\n" + "\n\n".join(tables) + "\n"


def _layers_per_stage(job: Job, par: dict[str, Any]) -> list[str]:
    """Set `pipeline_parallel_layers_per_stage` (module docstring); the notes it needs."""
    m, stages = job.model, job.pp * job.vpp
    if m is None:
        return []
    if job.first_stage_layers or job.last_stage_layers:
        return [f"the plan puts {job.first_stage_layers or 'the default'} layers on the first "
                f"stage and {job.last_stage_layers or 'the default'} on the last: set "
                "module_fqns_per_model_part by hand"]
    n = math.ceil((m.layers + 2) / stages)
    if math.ceil((m.layers + 2) / n) != stages:
        return [f"{m.layers} layers (+ embedding and output) do not make {stages} stages of "
                "equal size in torchtitan: set module_fqns_per_model_part by hand"]
    par["pipeline_parallel_layers_per_stage"] = n
    if m.layers % stages == 0 and (m.layers + 2) % stages:
        return [f"torchtitan counts the embedding and the output as layers: its split of "
                f"{m.layers} layers over {stages} stages differs by one layer from the plan's "
                f"{m.layers // stages} per stage"]
    return []
