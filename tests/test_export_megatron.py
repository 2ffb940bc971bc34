"""Megatron arguments parsed by an argparse spec that mirrors Megatron-LM's flag names.

The spec below is written from megatron/training/arguments.py and the config dataclasses it
turns into flags (TransformerConfig, ModelParallelConfig, TrainingConfig, TokenizerConfig:
field `x_y` becomes `--x-y`), Megatron-LM main as of 2026-08. Flags, types and choices only:
an unknown flag, a wrong type or an invalid choice fails the parse, as it would in Megatron.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from gpuplan.export import export, record_from

FIXTURES = Path(__file__).parent / "fixtures"

INT_FLAGS = (
    "num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size", "num-query-groups",
    "kv-channels", "vocab-size", "max-position-embeddings", "tensor-model-parallel-size",
    "pipeline-model-parallel-size", "num-virtual-stages-per-pipeline-rank",
    "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
    "context-parallel-size", "expert-model-parallel-size", "micro-batch-size",
    "global-batch-size", "seq-length", "train-samples", "recompute-num-layers", "num-experts",
    "moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
    "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim",
    # ModelParallelConfig.cpu_offloading_num_layers: int
    "cpu-offloading-num-layers",
)
SWITCHES = (
    "group-query-attention", "swiglu", "disable-bias-linear",
    "untie-embeddings-and-output-weights", "sequence-parallel", "use-distributed-optimizer",
    "overlap-grad-reduce", "overlap-param-gather", "use-megatron-fsdp", "optimizer-cpu-offload",
    "bf16", "fp16", "multi-latent-attention", "account-for-embedding-in-pipeline-split",
    "account-for-loss-in-pipeline-split",
    # arguments.py _add_experimental_args; ModelParallelConfig bools
    "use-precision-aware-optimizer", "overlap-moe-expert-parallel-comm", "delay-wgrad-compute",
)
CHOICES = {
    "normalization": ("LayerNorm", "RMSNorm"),
    "position-embedding-type": ("learned_absolute", "rope", "mrope", "yarn", "none"),
    "data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads",
                                        "optim_grads_params"),
    "recompute-granularity": ("full", "selective"),
    "recompute-method": ("uniform", "block"),
    "fp8-format": ("e4m3", "hybrid"),
    "fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    # arguments.py _add_experimental_args: choices
    "exp-avg-dtype": ("fp32", "fp16", "bf16", "fp8"),
    "exp-avg-sq-dtype": ("fp32", "fp16", "bf16", "fp8"),
    # TransformerConfig Literal fields
    "moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "moe-flex-dispatcher-backend": ("deepep", "hybridep", "ncclep"),
}
# TransformerConfig.recompute_modules: Optional[List[str]] (nargs '+'), its documented choices
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


class StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def megatron_spec() -> argparse.ArgumentParser:
    p = StrictParser(prog="pretrain_gpt.py", allow_abbrev=False)
    for name in INT_FLAGS:
        p.add_argument(f"--{name}", type=int)
    for name in SWITCHES:
        p.add_argument(f"--{name}", action="store_true")
    for name, choices in CHOICES.items():
        p.add_argument(f"--{name}", choices=choices)
    p.add_argument("--recompute-modules", nargs="+", choices=RECOMPUTE_MODULES)
    p.add_argument("--moe-layer-freq", type=str)
    return p


def megatron_argv(text: str) -> list[str]:
    body = re.search(r"MEGATRON_ARGS=\(\n(.*?)\n\)", text, re.S)
    assert body, "no MEGATRON_ARGS array"
    return shlex.split(body.group(1), comments=True)  # '# flag: source' lines are comments


def plan_record(rank: int) -> dict:
    doc = json.loads((FIXTURES / "plan_result.json").read_text())
    return record_from(doc, rank)[0]


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("target", ["megatron", "torchrun", "slurm"])
def test_megatron_args_parse_and_match_the_plan(rank, target):
    rec = plan_record(rank)
    ns = megatron_spec().parse_args(megatron_argv(export(rec, target)))
    assert ns.tensor_model_parallel_size == rec["tp"]
    assert ns.pipeline_model_parallel_size == rec["pp"]
    assert ns.micro_batch_size == rec["micro_batch"]
    assert ns.global_batch_size == rec["global_batch"]
    assert ns.seq_length == rec["seq_len"]
    assert ns.sequence_parallel == (rec["tp"] > 1)
    assert ns.use_distributed_optimizer == (rec["zero"] in (1, 2))
    assert ns.use_megatron_fsdp == (rec["zero"] == 3)
    assert ns.recompute_granularity == (None if rec["recompute"] == "none" else rec["recompute"])
    assert ns.bf16 == (rec["precision"] in ("bf16", "fp8"))
    assert ns.fp16 == (rec["precision"] == "fp16")
    assert (ns.fp8_format is not None) == (rec["precision"] == "fp8")
    # llama3-70b shape from the catalog preset
    assert (ns.num_layers, ns.hidden_size, ns.num_attention_heads, ns.num_query_groups) == (
        80, 8192, 64, 8)
    assert ns.train_samples * rec["seq_len"] >= rec["tokens"]


def test_fp8_recipe_follows_architecture():
    rec = plan_record(1)  # b300: Blackwell
    assert megatron_spec().parse_args(megatron_argv(export(rec, "megatron"))).fp8_recipe == "mxfp8"
    hopper = {**rec, "gpu": "h100-sxm"}
    assert megatron_spec().parse_args(
        megatron_argv(export(hopper, "megatron"))).fp8_recipe == "delayed"


def test_uneven_pipeline_and_moe_model():
    """Issue 11: 126 + 2 layers split over 16 stages as Megatron-LM's account-for-embedding/loss
    flags do (7, 8 x 14, 7); DeepSeek-V3's 61 + 2 do not divide by 16, so the plan's split
    (3, 4 x 14, 2) is written as explicit first/last stage sizes."""
    rec = {**plan_record(2), "model": "llama3-405b", "pp": 16, "dp": 16}
    ns = megatron_spec().parse_args(megatron_argv(export(rec, "megatron")))
    assert ns.num_layers == 126 and ns.decoder_first_pipeline_num_layers is None
    assert ns.account_for_embedding_in_pipeline_split and ns.account_for_loss_in_pipeline_split
    moe = {**plan_record(2), "model": "deepseek-v3", "ep": 8, "pp": 16, "dp": 16}
    ns = megatron_spec().parse_args(megatron_argv(export(moe, "megatron")))
    assert ns.num_experts == 256 and ns.moe_router_topk == 8
    assert ns.expert_model_parallel_size == 8 and ns.multi_latent_attention
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (3, 2)
    given = {**rec, "first_stage_layers": 6, "last_stage_layers": 8}
    ns = megatron_spec().parse_args(megatron_argv(export(given, "megatron")))
    assert (ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers) == (6, 8)


def test_custom_model_says_what_to_add():
    text = export({**plan_record(1), "model": "my-own-model"}, "megatron")
    assert "is not a catalog preset" in text
    megatron_spec().parse_args(megatron_argv(text))


def deepseek_record(**options) -> dict:
    """A DeepSeek-V3 layout (EP 8, PP 16) with the estimate's run options (layout echo keys)."""
    return {**plan_record(2), "model": "deepseek-v3", "ep": 8, "pp": 16, "dp": 16, **options}


def test_run_options_map_to_megatron_flags_with_their_source():
    """#11/#14: BF16 moments, MLA up-projection recompute, the flex dispatcher; each flag
    after a comment line naming where Megatron-LM defines it."""
    rec = deepseek_record(moments_dtype="bf16", moe_dispatcher="flex", recompute="modules",
                          recompute_modules=["mla_up_proj", "layernorm", "moe_act"])
    text = export(rec, "megatron")
    ns = megatron_spec().parse_args(megatron_argv(text))
    assert ns.use_precision_aware_optimizer
    assert (ns.exp_avg_dtype, ns.exp_avg_sq_dtype) == ("bf16", "bf16")
    assert ns.recompute_modules == ["mla_up_proj", "layernorm", "moe_act"]
    assert (ns.moe_token_dispatcher_type, ns.moe_flex_dispatcher_backend) == ("flex", "deepep")
    lines = text.splitlines()
    for flag in ("--use-precision-aware-optimizer", "--exp-avg-dtype", "--exp-avg-sq-dtype",
                 "--recompute-modules", "--moe-token-dispatcher-type",
                 "--moe-flex-dispatcher-backend"):
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(flag))
        assert lines[at - 1].strip().startswith(f"# {flag}: megatron/"), flag


def test_options_without_a_megatron_flag_are_notes():
    rec = deepseek_record(schedule="dualpipe", activation_cache="fp8", ema="host")
    text = export(rec, "megatron")
    notes = [ln for ln in text.splitlines() if ln.startswith("# note:")]
    assert any("DualPipe" in n and "no flag" in n for n in notes)
    assert any("FP8 activation cache" in n for n in notes)
    assert any("EMA" in n for n in notes)
    assert "dualpipe" not in " ".join(megatron_argv(text)).lower()


def test_a2a_overlap_schedule_alltoall_dispatcher_and_offloaded_layers():
    rec = deepseek_record(schedule="1f1b-a2a", moe_dispatcher="alltoall",
                          offload_parts=["activations"], offload_layers=2)
    ns = megatron_spec().parse_args(megatron_argv(export(rec, "megatron")))
    assert ns.overlap_moe_expert_parallel_comm and ns.delay_wgrad_compute
    assert ns.moe_token_dispatcher_type == "alltoall" and ns.moe_flex_dispatcher_backend is None
    assert ns.cpu_offloading_num_layers == 2
    every = {**rec, "offload_layers": 0}  # all layers: one rank's 4 of 61 (ceil(61 / 16))
    ns = megatron_spec().parse_args(megatron_argv(export(every, "megatron")))
    assert ns.cpu_offloading_num_layers == 4


def test_unset_options_leave_the_output_unchanged():
    """The defaults of the layout echo write what a record without those keys writes; a dense
    model gets no dispatcher flag."""
    rec = deepseek_record()
    defaults = dict(schedule="1f1b", moments_dtype="fp32", activation_cache="stack",
                    ema="none", offload_layers=0)
    for target in ("megatron", "deepspeed", "torchtitan"):
        assert export({**rec, **defaults}, target) == export(rec, target), target
    dense = {**plan_record(2), "moe_dispatcher": "flex"}
    assert export(dense, "megatron") == export(plan_record(2), "megatron")


def test_run_options_in_torchtitan_and_deepspeed():
    rec = deepseek_record(schedule="dualpipe", moe_dispatcher="flex", moments_dtype="bf16",
                          activation_cache="fp8", ema="host")
    titan = export(rec, "torchtitan")
    assert 'pipeline_parallel_schedule = "DualPipeV"' in titan
    assert 'expert_parallel_comm_backend = "deepep"' in titan
    assert "bf16 Adam moments have no torchtitan option" in titan
    ds = export(rec, "deepspeed")
    for said in ("Adam moments", "FP8 activation cache", "EMA", "schedule dualpipe"):
        assert said in ds, said


def test_reproduce_line_keeps_the_run_options():
    rec = {k: v for k, v in deepseek_record(schedule="dualpipe", moments_dtype="bf16",
                                            activation_cache="fp8", ema="host",
                                            moe_dispatcher="alltoall").items()
           if k != "reproduce"}  # an estimate record carries no reproduce line
    line = next(ln for ln in export(rec, "megatron").splitlines() if "reproduce:" in ln)
    for flag in ("--schedule dualpipe", "--moments-dtype bf16", "--activation-cache fp8",
                 "--ema host", "--moe-dispatcher alltoall"):
        assert flag in line, flag
    assert "--moe-dispatcher" not in next(
        ln for ln in export({**rec, "moe_dispatcher": "flex"}, "megatron").splitlines()
        if "reproduce:" in ln)  # flex is megatron's auto choice
