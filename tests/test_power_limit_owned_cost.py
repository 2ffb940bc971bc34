"""An owned GPU held to a power limit pays its electricity at that draw (#12): `estimate
--pricing own --power-limit-watts W` and `plan --power-limit-watts W` price owned servers with
the GPU's draw capped at W; the host's share and the colocation (billed on the system's
provisioned power) do not change."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.search.evaluate import site_from_catalog


def _own(limit: float | None):
    return gpuplan.estimate(model="llama3-8b", gpu="h100", gpus=8, pricing="own", tokens="1T",
                            power_limit_watts=limit)


def test_owned_rate_drops_by_the_electricity_of_the_watts_not_drawn(cat):
    site = site_from_catalog(cat)
    full, capped = _own(None), _own(500.0)
    # independent formula: (700 - 500) W x GPU load factor x PUE x USD/kWh per GPU-hour of the
    # period, spread over the used GPU-hours (utilization); rel 1e-9: float rounding only
    per_hour = (700.0 - 500.0) / 1000.0 * site.gpu_load_factor * site.pue \
        * site.electricity_usd_per_kwh / site.utilization
    assert full.usd_per_gpu_hour - capped.usd_per_gpu_hour == pytest.approx(per_hour, rel=1e-9)


def test_a_limit_above_the_tdp_leaves_the_owned_rate_alone():
    assert _own(1000.0).usd_per_gpu_hour == _own(None).usd_per_gpu_hour


def test_plan_prices_owned_servers_at_the_limit():
    def own_rate(limit: float | None) -> float:
        r = gpuplan.plan(model="llama3-8b", tokens="1T", gpu="h100", pricing=("own",),
                         power_limit_watts=limit)
        rows = [p for p in r.plans if p.pricing == "own"]
        assert rows
        return rows[0].usd_per_gpu_hour

    assert own_rate(500.0) < own_rate(None)
