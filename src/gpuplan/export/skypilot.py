"""SkyPilot task YAML that launches a plan's cloud offer (L5).

Fields follow SkyPilot's task schema (sky/utils/schemas.py): `resources` with `accelerators`
(`NAME:COUNT`, SkyPilot's accelerator names), `cloud`, `region`, `instance_type`, `use_spot`,
`disk_size` (GB); `num_nodes`; `setup` and `run` scripts. The `run` script starts torchrun with
SkyPilot's node variables; put the Megatron arguments from `--target megatron` in train.sh.
"""

from __future__ import annotations

import math
from typing import Any

from ..prices import SKYPILOT_NAMES
from ._emit import yaml_lines
from ._job import Job, commented, header, job_of
from .torchrun import PORT

MIN_DISK_GB = 256  # SkyPilot's default disk_size


def disk_gb(job: Job) -> int:
    """Room for two checkpoints of this node's share of the state (16 bytes a parameter:
    bf16 weights, fp32 master copy and two Adam moments) plus 200 GB for images and data
    cache, rounded up to 64 GB; at least SkyPilot's default."""
    if not job.params:
        return MIN_DISK_GB
    per_node = 2 * 16 * job.params / job.nodes / 1e9 + 200
    return max(MIN_DISK_GB, 64 * math.ceil(per_node / 64))


def _resources(job: Job, notes: list[str]) -> dict[str, Any]:
    name = SKYPILOT_NAMES.get(job.gpu)
    if name is None:
        name = job.gpu.upper()
        notes.append(f"no known SkyPilot name for '{job.gpu}': check `sky show-gpus`")
    res: dict[str, Any] = {"accelerators": f"{name}:{job.gpus_per_node}"}
    if job.offer:
        res["cloud"] = job.offer.cloud
        res["region"] = job.offer.region
        res["instance_type"] = job.offer.instance_type
    else:
        notes.append("the plan is not a cloud offer (owned or unpriced): SkyPilot picks "
                     "the cloud; add `infra:` for your cluster")
    res["use_spot"] = job.pricing == "spot"
    if job.pricing and job.pricing not in ("spot", "on-demand"):
        notes.append(f"pricing {job.pricing} is a billing commitment, not a launch option: "
                     "buy it with the provider; SkyPilot launches on-demand")
    res["disk_size"] = disk_gb(job)
    return res


RUN = f"""MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
torchrun --nnodes $SKYPILOT_NUM_NODES --nproc-per-node $SKYPILOT_NUM_GPUS_PER_NODE \\
  --node-rank $SKYPILOT_NODE_RANK --master-addr $MASTER_ADDR --master-port {PORT} \\
  pretrain_gpt.py $(cat megatron_args.txt)
"""


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    notes: list[str] = []
    task = {
        "name": f"gpuplan-{job.model_id or 'train'}",
        "resources": _resources(job, notes),
        "num_nodes": job.nodes,
        "setup": "pip install -r requirements.txt\n",
        "run": RUN,
    }
    if job.allocator == "expandable":  # megatron.env_lines: the allocator the memory assumes
        task["envs"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    top = ["SkyPilot task: sky launch THIS.yaml"] + header(job, source)
    top += [f"note: {n}" for n in notes]
    top.append("megatron_args.txt: the flags of `gpuplan export --target megatron`, "
               "one or more a line")
    return commented(top) + "\n" + "\n".join(yaml_lines(task)) + "\n"
