"""The calibration set: which published runs may be used to fit model constants.

The set (../shared/data/README.md, "Which runs may be used to fit model constants") holds the
runs of the public list (column `public_id` names the run there), plus two groups of
llm-foundry benchmark rows the list lacks: sequence length >= 4,096, and MPT-13B on 8 x H100 in
BF16. Only rows of this set may be marked `fit` (validation.calibrate_all fits on them).
"""

from __future__ import annotations

from .memory_fit import int_field as _int

LLMFOUNDRY_SOURCE = "llm-foundry, scripts/train/benchmarking/README.md"
LONG_CONTEXT_MIN_SEQ = 4096


def calibration_set_reason(row: dict[str, str]) -> str:
    """Why a run may be used to fit constants ('' if it may not): 'public list',
    'llm-foundry long context' or 'llm-foundry MPT-13B 8xH100 BF16'."""
    if row.get("public_id", "").strip():
        return "public list"
    if LLMFOUNDRY_SOURCE not in row.get("source", ""):
        return ""
    if _int(row, "seq_len") >= LONG_CONTEXT_MIN_SEQ:
        return "llm-foundry long context"
    mpt13b = (_int(row, "layers"), _int(row, "hidden")) == (40, 5120)  # MPT-13B's yaml
    if (mpt13b and row.get("gpu") == "h100-sxm" and _int(row, "gpus") == 8
            and row.get("precision") == "bf16"):
        return "llm-foundry MPT-13B 8xH100 BF16"
    return ""
