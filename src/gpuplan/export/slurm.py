"""An sbatch script for a plan: one task per node, each running torchrun (L5).

The node count and GPUs per node come from the plan; the wall-clock limit is left to the site
(a run of weeks is chained across jobs by restarting from its checkpoints), and the predicted
duration is in the header.
"""

from __future__ import annotations

from typing import Any

from ._job import commented, header, job_of
from .megatron import arguments, bash_array, env_lines
from .torchrun import PORT, torchrun_line


def render(record: dict[str, Any], *, source: dict[str, Any]) -> str:
    job = job_of(record, source)
    args, notes = arguments(job)
    name = f"gpuplan-{job.model_id or 'train'}"
    top = ["Slurm batch script: sbatch THIS.sh"] + header(job, source)
    top += [f"note: {n}" for n in notes]
    top.append("set --time, --partition and --account for your site; add --requeue to chain "
               "jobs from checkpoints")
    body = [
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={job.gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --output={name}-%j.out",
        commented(top),
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        bash_array("MEGATRON_ARGS", args),
        *env_lines(job),
        "srun " + torchrun_line(job, f"$head_node:{PORT}", "--rdzv-id $SLURM_JOB_ID "),
    ]
    return "\n".join(body) + "\n"
