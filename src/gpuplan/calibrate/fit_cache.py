"""What the efficiency fit computes more than once, kept (validation.calibrate_all).

The coordinate descent predicts each fit run under many sets of constants, and
leave-one-source-out cross-validation refits the same runs once per publication: every refit
starts from the same constants and most reach the same points again. A run's prediction
depends only on the run and the constants, so `FitCache` keeps it per (run, constants) and
hands the stored array back -- the same numbers, computed once. It keeps too what predicting a
run takes besides the constants (validation.run_inputs: its hardware, its stacks' buffers, the
published value), which is the same under every constant.

One cache serves one set of runs (a run is named by its id; a row's `fit` role may change
between refits, as cross-validation changes it: it does not enter a prediction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ConstantsKey = tuple[tuple[str, str, str, tuple[int, ...], bytes], ...]


def constants_key(values: dict[str, Any]) -> ConstantsKey:
    """Numeric constants (scalars or grids) as a hashable key: per name its type, dtype, shape
    and bytes, so two sets share a key only where every value is bit for bit the same."""
    out = []
    for name in sorted(values):
        a = np.asarray(values[name])
        out.append((name, type(values[name]).__name__, a.dtype.str, a.shape, a.tobytes()))
    return tuple(out)


@dataclass
class FitCache:
    """Per run id: its constant-independent inputs (`inputs`) and its prediction under each
    set of constants met so far (`predictions`, by `constants_key`)."""

    inputs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    predictions: dict[tuple[str, ConstantsKey], Any] = field(default_factory=dict)
