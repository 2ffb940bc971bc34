"""Peak FLOP/s of a GPU held below its TDP (`estimate --power-limit-watts`, a published run's
`power_limit_watts`).

    factor = min(1, (limit / TDP)^k)        k: a property of the accelerator family

The tensor cores (and the SFUs, same clock) slow by `factor`; HBM and link bandwidths do not.
k comes from published perf-vs-power figures under the rule of docs/calibration.md ("Power
limit", #12), in this order: (1) measured sustained throughput of the family under a cap below
its TDP (LLM training steps or large GEMMs): the least-squares slope of ln(throughput ratio) on
ln(cap / TDP) through the origin; (2) the vendor's dense BF16 peak of a same-die, same-SM-count
part rated at a lower power; (3) neither: 1/3 (dynamic power ~ C V^2 f with V ~ f), an
assumption. No published run of `published_runs.csv` enters k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..spec import Accelerator


@dataclass(frozen=True, kw_only=True)
class PowerPoint:
    """One published figure: throughput at `cap_watts` / throughput at `tdp_watts`."""

    cap_watts: float
    tdp_watts: float
    ratio: float


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """k of one family and where it comes from: basis 'measured', 'vendor-peak' or
    'assumption'; `source` a short locator (the full one is in docs/calibration.md)."""

    exponent: float
    basis: str
    source: str


@dataclass(frozen=True, kw_only=True)
class PowerScaling:
    """What a power limit did to one estimate (results carry it; report/ words it)."""

    limit_watts: float
    tdp_watts: float
    factor: float  # peak FLOP/s multiplier, <= 1
    exponent: float
    basis: str
    source: str


def fit_exponent(points: tuple[PowerPoint, ...]) -> float:
    """Least-squares k of ln(ratio) = k ln(cap / TDP) through the origin (rule (1) and (2))."""
    xs = [math.log(p.cap_watts / p.tdp_watts) for p in points]
    ys = [math.log(p.ratio) for p in points]
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)


# Hopper, rule (2) (no measured H100 power-cap throughput could be read; docs/calibration.md):
# NVIDIA H100 datasheet, dense BF16 = half the sparsity headline: H100 NVL (132 SMs, 350-400 W,
# top of range) 835.5 TFLOP/s against H100 SXM (132 SMs, 700 W) 989; as of 2026-12-01.
HOPPER_VENDOR = (PowerPoint(cap_watts=400.0, tdp_watts=700.0, ratio=835.5 / 989.0),)


def _zeus(times: tuple[float, ...]) -> tuple[PowerPoint, ...]:
    """Iteration times at 300 (the TDP), 275, 250, 225, 200, 175 W -> throughput ratios."""
    caps = (275.0, 250.0, 225.0, 200.0, 175.0)
    return tuple(PowerPoint(cap_watts=c, tdp_watts=300.0, ratio=times[0] / t)
                 for c, t in zip(caps, times[1:], strict=True))


# Ampere, rule (1): Perseus (Chung et al., SOSP 2024) artifact, github.com/ml-energy/zeus at
# 38cb3f90, sosp24_data/zeus/csv/A100/zeus_global.csv, column `time` (s per iteration) on
# 4x A100-80G PCIe (300 W TDP, per the artifact README), 4-stage pipeline training (Merak), every
# GPU at the same limit; the two LLM workloads; as of 2026-12-01.
A100_MEASURED = (
    _zeus((60.095173279444374, 62.02395955721537, 65.02246014277141,  # GPT-3 XL
           73.32878303527832, 87.91865595181783, 106.298974831899))
    + _zeus((61.54543566703797, 63.34208496411642, 66.17314132054646,  # BLOOM 3B
             72.49035779635112, 85.0212329228719, 104.31683444976807)))

_HOPPER = PowerLaw(exponent=fit_exponent(HOPPER_VENDOR), basis="vendor-peak",
                   source="NVIDIA H100 datasheet: H100 NVL 400 W vs H100 SXM 700 W")
POWER_LAWS: dict[str, PowerLaw] = {
    "h100": _HOPPER, "h100-pcie": _HOPPER, "h200": _HOPPER,
    "a100": PowerLaw(exponent=fit_exponent(A100_MEASURED), basis="measured",
                     source="Perseus (SOSP 2024) artifact: A100 PCIe training, 175-300 W"),
}
ASSUMED = PowerLaw(exponent=1.0 / 3.0, basis="assumption", source="power ~ f^3")


def power_law(family: str) -> PowerLaw:
    """The family's k (rule (1) or (2)), or the stated 1/3 assumption (rule (3))."""
    return POWER_LAWS.get(family, ASSUMED)


def check_limit(limit_watts: Any) -> float:
    """A power limit as a float, or a ConfigError: a finite number above 0 (`plan` and
    `estimate` share this check)."""
    try:
        value = float(limit_watts) if not isinstance(limit_watts, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        shown = f"{limit_watts:g}" if isinstance(limit_watts, float) else repr(limit_watts)
        raise ConfigError(f"--power-limit-watts must be a number above 0, got {shown}")
    return value


def power_factor(tdp_watts: float, limit_watts: float, exponent: float) -> float:
    """Clock (and peak FLOP/s) factor of a GPU held to `limit_watts`, capped at 1."""
    return min(1.0, (check_limit(limit_watts) / tdp_watts) ** exponent)


def drawn_watts(tdp_watts: float, limit_watts: float | None) -> float:
    """What a GPU draws at full load: its TDP, or the power limit below it (energy and the
    owned electricity are counted at this; `estimate` and `plan` alike)."""
    return tdp_watts if limit_watts is None else min(tdp_watts, limit_watts)


def power_scaling(gpu: Accelerator, limit_watts: float) -> PowerScaling:
    """The factor of `gpu` at `limit_watts`, with the law it came from."""
    law, limit = power_law(gpu.family), check_limit(limit_watts)
    return PowerScaling(limit_watts=limit, tdp_watts=float(gpu.tdp_watts),
                        factor=power_factor(gpu.tdp_watts, limit, law.exponent),
                        exponent=law.exponent, basis=law.basis, source=law.source)


def power_limited(hw: Any, gpu: Accelerator, limit_watts: float) -> Any:
    """Hardware with peak FLOP/s scaled by the family's factor and the limit as its power."""
    f = power_scaling(gpu, limit_watts).factor
    return replace(hw, peak_flops=hw.peak_flops * f,
                   peak_flops_by_precision=hw.peak_flops_by_precision * f,
                   exp_per_s=hw.exp_per_s * f,  # the SFUs run at the same clock
                   tdp_watts=np.minimum(hw.tdp_watts, limit_watts))
