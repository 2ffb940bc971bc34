"""Exporters: golden files on a fixed plan, and every output parses back in its own format."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from conftest import golden

from gpuplan.errors import ConfigError, UnknownIdError
from gpuplan.export import TARGETS, export, record_from
from gpuplan.export._emit import yaml_lines
from gpuplan.export._job import job_of
from gpuplan.export.deepspeed import JSON_MARK

FIXTURES = Path(__file__).parent / "fixtures"
SOURCE = {"from": "plan rank 1 of plan_result.json"}


def plan_doc() -> dict:
    return json.loads((FIXTURES / "plan_result.json").read_text())


def plan_record(rank: int = 1) -> dict:
    return record_from(plan_doc(), rank)[0]


def estimate_record() -> dict:
    return record_from(json.loads((FIXTURES / "estimate_result.json").read_text()))[0]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_golden(target):
    golden(f"export_{target}.txt", export(plan_record(), target, source=SOURCE))


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_every_output_names_version_and_prediction(target, rank):
    from gpuplan import __version__

    text = export(plan_record(rank), target, source=SOURCE)
    assert f"gpuplan {__version__}" in text
    assert "model llama3-70b" in text and "predicted: step" in text
    assert "reproduce: gpuplan estimate --model llama3-70b" in text


def toml_of(text: str) -> dict:
    return tomllib.loads(text)


def ds_json(text: str) -> dict:
    body = re.search(rf"<<'{JSON_MARK}'\n(.*?)\n{JSON_MARK}\n", text, re.S)
    assert body, "no JSON heredoc"
    return json.loads(body.group(1))


# torchtitan v0.2.2 JobConfig fields (torchtitan/config/job_config.py) that the export may use
TITAN_FIELDS = {
    "job": {"dump_folder", "description"},
    "model": {"name", "flavor", "hf_assets_path", "converters"},
    "optimizer": {"name", "lr", "eps"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "steps",
                 "mixed_precision_param", "mixed_precision_reduce", "enable_cpu_offload",
                 "dataset"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "tensor_parallel_degree",
                    "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_layers_per_stage", "context_parallel_degree",
                    "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
}
FLOAT8_FIELDS = {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                 "recipe_name", "filter_fqns"}


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_torchtitan_toml_parses_with_known_fields_and_degrees(rank):
    rec = plan_record(rank)
    cfg = toml_of(export(rec, "torchtitan"))
    float8 = cfg.pop("quantize", {}).get("linear", {}).get("float8", {})
    assert set(float8) <= FLOAT8_FIELDS
    assert bool(float8) == (rec["precision"] == "fp8")
    for section, values in cfg.items():
        assert set(values) <= TITAN_FIELDS[section], section
    par = cfg["parallelism"]
    world = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
             * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
             * par["context_parallel_degree"])
    assert world == rec["gpus"]  # torchtitan's ParallelDims check
    train = cfg["training"]
    assert train["global_batch_size"] == rec["global_batch"]
    assert train["seq_len"] == rec["seq_len"]
    accum = train["global_batch_size"] // (train["local_batch_size"] * rec["dp"])
    assert accum * train["local_batch_size"] * rec["dp"] == rec["global_batch"]
    assert cfg["activation_checkpoint"]["mode"] == rec["recompute"]


def test_torchtitan_zero_mapping_and_unsupported_notes():
    assert "fsdp_reshard_after_forward = \"never\"" in export(plan_record(2), "torchtitan")
    text = export(plan_record(3), "torchtitan")  # ZeRO 0, fp16
    par = toml_of(text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (4, 1)
    assert "not fp16" in text


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_deepspeed_json_batch_identity(rank):
    rec = plan_record(rank)
    text = export(rec, "deepspeed")
    cfg = ds_json(text)
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * rec["dp"])
    assert cfg["zero_optimization"]["stage"] == rec["zero"]
    assert ("fp16" in cfg) == (rec["precision"] == "fp16")
    assert ("activation_checkpointing" in cfg) == (rec["recompute"] != "none")
    nodes = rec["nodes"]
    assert f"deepspeed --num_nodes {nodes} --num_gpus {rec['gpus'] // nodes}" in text


def test_deepspeed_says_what_it_cannot_express():
    assert "FP8 is not a DeepSpeed config option" in export(plan_record(1), "deepspeed")
    assert "PipelineModule with num_stages=2" in export(plan_record(2), "deepspeed")


def test_skypilot_yaml_fields():
    text = export(plan_record(1), "skypilot")
    assert "accelerators: B300:8" in text and "use_spot: true" in text
    assert "num_nodes: 128" in text and "region: us-west-2" in text


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_skypilot_yaml_parses_back(rank):
    import yaml  # the test extra
    rec = plan_record(rank)
    task = yaml.safe_load(export(rec, "skypilot"))
    res = task["resources"]
    assert task["num_nodes"] == rec["nodes"]
    assert int(res["accelerators"].split(":")[1]) * task["num_nodes"] == rec["gpus"]
    assert res["use_spot"] is (rec["pricing"] == "spot")
    assert isinstance(res["disk_size"], int) and res["disk_size"] >= 256
    assert task["run"].startswith("MASTER_ADDR=")


def test_yaml_emitter_quotes_what_yaml_would_misread():
    lines = yaml_lines({"a": "yes", "b": "1.5", "c": "x: y", "d": "plain-text_1"})
    assert lines == ['a: "yes"', 'b: "1.5"', 'c: "x: y"', "d: plain-text_1"]


def test_skypilot_owned_plan_has_no_cloud_and_says_so():
    text = export(plan_record(3), "skypilot")
    assert "cloud:" not in text and "not a cloud offer" in text


def test_slurm_and_torchrun_node_counts():
    rec = plan_record(3)
    slurm = export(rec, "slurm")
    assert "#SBATCH --nodes=8" in slurm and "#SBATCH --gpus-per-node=8" in slurm
    assert "srun torchrun --nnodes 8 --nproc-per-node 8" in slurm
    assert "torchrun --nnodes 8 --nproc-per-node 8" in export(rec, "torchrun")


def test_estimate_record_exports():
    rec = estimate_record()
    job = job_of(rec)
    assert (job.tp, job.pp, job.dp, job.gpus_per_node, job.nodes) == (8, 2, 4, 8, 8)
    assert job.offer is not None and job.offer.instance_type == "p4de.24xlarge"
    for target in TARGETS:
        assert "from an estimate" in export(rec, target, source={"from": "an estimate"})


def test_unknown_target_suggests():
    with pytest.raises(UnknownIdError, match="did you mean 'megatron'"):
        export(plan_record(), "megatrn")


def test_record_from_rejects_bad_documents():
    with pytest.raises(ConfigError, match="out of range"):
        record_from(plan_doc(), 4)
    with pytest.raises(ConfigError, match="no plans"):
        record_from({**plan_doc(), "plans": []})
    with pytest.raises(ConfigError, match="neither a plan"):
        record_from({"hello": 1})
    with pytest.raises(ConfigError, match="has no 'tp'"):
        export({k: v for k, v in plan_record().items() if k != "tp"}, "megatron")
