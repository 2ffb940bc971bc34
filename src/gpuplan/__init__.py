"""gpuplan: which GPUs to train a large model on, how, for how long and at what cost.

    import gpuplan
    gpuplan.estimate(model="llama3-8b", gpu="h100-sxm", gpus=8, tokens="1T")
    gpuplan.plan(model="llama3-70b", tokens="15T", deadline_days=90)
    gpuplan.tco(system="dgx-h100", nodes=4, years=4, utilization=0.7, compare_cloud=True)

`estimate`, `plan` and `tco` are loaded on first use (numpy is not imported by `import gpuplan`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "estimate", "plan", "tco"]


def __getattr__(name: str) -> Any:
    if name in ("estimate", "plan", "tco"):
        from . import api

        value = globals()[name] = getattr(api, name)  # bound: later uses skip this hook
        return value
    raise AttributeError(f"module 'gpuplan' has no attribute '{name}'")
