"""torchrun launch of Megatron-LM's pretrain_gpt.py for a plan, one command per node (L5).

Run the script on every node with NODE_RANK set (0 on the node named by MASTER_ADDR); the
rendezvous is torchrun's c10d backend. A torchtitan run swaps the last line for
`-m torchtitan.train --job.config_file CONFIG.toml` (`gpuplan export --target torchtitan`).
"""

from __future__ import annotations

from typing import Any

from ._job import Job, commented, header, job_of
from .megatron import arguments, bash_array, env_lines

PORT = 29500


def torchrun_line(job: Job, endpoint: str, extra: str = "") -> str:
    return (f"torchrun --nnodes {job.nodes} --nproc-per-node {job.gpus_per_node} "
            f"{extra}--rdzv-backend c10d --rdzv-endpoint {endpoint} "
            'pretrain_gpt.py "${MEGATRON_ARGS[@]}" "$@"')


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    args, notes = arguments(job)
    top = ["torchrun launch (Megatron-LM pretrain_gpt.py); run on each node with "
           "MASTER_ADDR and NODE_RANK set"] + header(job, source)
    top += [f"note: {n}" for n in notes]
    top.append("torchtitan instead: replace pretrain_gpt.py and its arguments with "
               "-m torchtitan.train --job.config_file CONFIG.toml")
    body = [
        "#!/usr/bin/env bash",
        commented(top),
        "set -euo pipefail",
        ': "${MASTER_ADDR:?set MASTER_ADDR to the first node}"',
        bash_array("MEGATRON_ARGS", args),
        *env_lines(job),
        torchrun_line(job, f"$MASTER_ADDR:{PORT}", "--node-rank ${NODE_RANK:-0} "),
    ]
    return "\n".join(body) + "\n"
