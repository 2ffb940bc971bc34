"""estimators/cost.py against hand computations, a published failure rate, Daly's exact renewal
formula, and hypothesis properties (issue #5). No catalog numbers: every input is written here.

Exact arithmetic is compared with a relative tolerance of 1e-12 (float rounding only).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuplan.errors import ConfigError
from gpuplan.estimators import cost as c

EXACT = 1e-12
H_YEAR = 365.25 * 24  # 8,766 hours


# --- cloud ----------------------------------------------------------------------------------
def test_on_demand_is_hours_times_instances_times_rate():
    # 100 h on 4 instances at $55.04/h (a p5.48xlarge-like rate) = $22,016
    assert c.on_demand_cost_usd(100, 4, 55.04) == pytest.approx(100 * 4 * 55.04, rel=EXACT)


def test_per_gpu_hour_divides_by_gpus_in_the_instance():
    assert c.per_gpu_hour(55.04, 8) == pytest.approx(6.88, rel=EXACT)


def test_capacity_block_bills_whole_days():
    # 25 h -> two 24-h blocks; 2 instances at $31.46/h
    assert c.capacity_block_cost_usd(25, 2, 31.46) == pytest.approx(48 * 2 * 31.46, rel=EXACT)
    assert c.capacity_block_cost_usd(24, 1, 10.0) == pytest.approx(240.0, rel=EXACT)


def test_commitment_hand_computation():
    # 30-day job (720 h) on 4 instances committed for 1 year at $35/h; half the rest is reused.
    r = c.commitment_cost(720, 4, 35.0, H_YEAR, 0.5)
    committed = 1 * H_YEAR * 4 * 35.0  # one whole term, paid in full
    share = 720 * 4 * 35.0
    stranded = committed - share
    job = share + 0.5 * stranded
    assert r.terms == 1
    assert r.committed_usd == pytest.approx(committed, rel=EXACT)
    assert r.job_share_usd == pytest.approx(share, rel=EXACT)
    assert r.stranded_usd == pytest.approx(stranded, rel=EXACT)
    assert r.reused_usd == pytest.approx(0.5 * stranded, rel=EXACT)
    assert r.job_cost_usd == pytest.approx(job, rel=EXACT)
    assert r.effective_usd_per_hour == pytest.approx(job / (720 * 4), rel=EXACT)
    # parts sum to the whole
    assert r.job_share_usd + r.stranded_usd == pytest.approx(r.committed_usd, rel=EXACT)


def test_commitment_longer_than_term_buys_whole_terms():
    # 1.5 years of work on a 1-year commitment -> 2 terms, 0.5 year stranded
    r = c.commitment_cost(1.5 * H_YEAR, 1, 10.0, H_YEAR, 0.0)
    assert r.terms == 2
    assert r.stranded_usd == pytest.approx(0.5 * H_YEAR * 10.0, rel=EXACT)
    assert r.job_cost_usd == pytest.approx(2 * H_YEAR * 10.0, rel=EXACT)


def test_committed_rate_per_used_hour():
    # $20/h reserved, used 80% of the time, idle hours not reused -> $25 per used hour
    assert c.committed_usd_per_used_hour(20.0, 0.8) == pytest.approx(25.0, rel=EXACT)
    # half the idle 20% reused by others: (0.8 + 0.2 x 0.5) x 20 / 0.8 = $22.50
    assert c.committed_usd_per_used_hour(20.0, 0.8, 0.5) == pytest.approx(22.5, rel=EXACT)
    assert c.committed_usd_per_used_hour(20.0, 0.3, 1.0) == pytest.approx(20.0, rel=EXACT)
    assert np.isinf(c.committed_usd_per_used_hour(20.0, 0.0))


def test_job_cost_dispatches_every_mode():
    hours, inst, rate, reuse = 720.0, 2, 12.0, 0.25
    modes = np.arange(len(c.MODES))
    got = c.job_cost_usd(modes, hours, inst, rate, reuse)
    pay = hours * inst * rate
    expect = {
        c.ON_DEMAND: pay, c.SPOT: pay, c.OWN: pay,
        c.CAPACITY_BLOCK: 30 * 24 * inst * rate,  # 720 h is exactly 30 blocks
    }
    for code, years in c.TERM_YEARS.items():
        committed = years * H_YEAR * inst * rate
        expect[code] = pay + (1 - reuse) * (committed - pay)
    for code, value in expect.items():
        assert got[code] == pytest.approx(value, rel=EXACT), c.MODES[code]


def test_run_cost_applies_goodput_then_prices_and_meters_energy():
    # 90 useful hours at goodput 0.9 -> 100 wall hours; 2 instances on-demand at $10/h = $2,000;
    # 20 kW IT x 100 h x PUE 1.25 = 2,500 kWh; at 0.3 kg/kWh = 750 kg
    r = c.run_cost(mode=c.ON_DEMAND, useful_hours=90, instances=2, usd_per_instance_hour=10,
                   goodput_fraction=0.9, reuse_utilization=0.5, it_watts=20_000, pue=1.25,
                   grid_kg_co2e_per_kwh=0.3)
    assert r.wall_hours == pytest.approx(100, rel=EXACT)
    assert r.cost_usd == pytest.approx(2000, rel=EXACT)
    assert r.energy_kwh == pytest.approx(2500, rel=EXACT)
    assert r.co2e_kg == pytest.approx(750, rel=EXACT)



def test_run_cost_of_a_run_that_never_ends_is_inf_without_warnings():
    """Goodput 0 (or no progress): wall time, cost, energy are inf for the caller to mask; no
    numpy RuntimeWarning escapes (the suite turns warnings into errors here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = c.run_cost(mode=np.array([c.ON_DEMAND, c.RESERVED_3Y, c.CAPACITY_BLOCK]),
                       useful_hours=np.array([10.0, np.inf, 10.0]), instances=1,
                       usd_per_instance_hour=0.0, goodput_fraction=np.array([0.0, 0.9, 0.5]),
                       reuse_utilization=0.5, it_watts=1000, pue=1.2, grid_kg_co2e_per_kwh=0.3)
    assert np.isinf(r.wall_hours[:2]).all() and np.isinf(r.cost_usd[:2]).all()
    assert np.isinf(r.energy_kwh[:2]).all() and np.isinf(r.co2e_kg[:2]).all()
    assert r.cost_usd[2] == 0.0 and r.energy_kwh[2] == pytest.approx(24.0, rel=EXACT)


def test_it_power_by_hand():
    # 16 GPUs x (700 W x 0.8 + 300 W host per GPU x 0.5) = 16 x 710 = 11,360 W
    assert c.it_power_watts(16, 700, 300, 0.8, 0.5) == pytest.approx(11_360, rel=EXACT)

# --- reliability ----------------------------------------------------------------------------
def test_llama3_failure_rate_reproduced():
    """Llama 3 (arXiv 2407.21783, sec. 3.3.4): 419 unexpected interruptions in 54 days on
    16,384 H100s. A per-GPU MTBF of 16,384 x 54 x 24 / 419 h must give back 419 +- 1%."""
    mtbf = 16_384 * 54 * 24 / 419
    rate = c.cluster_failures_per_hour(16_384, mtbf)
    assert rate * 54 * 24 == pytest.approx(419, rel=0.01)
    # twice the GPUs, twice the failures
    assert c.cluster_failures_per_hour(32_768, mtbf) == pytest.approx(2 * rate, rel=EXACT)


def test_spot_cluster_rate_and_checkpoint_time():
    assert c.spot_interruptions_per_hour(0.05, 8) == pytest.approx(0.4, rel=EXACT)
    # 7e9 params x 14 B = 98 GB, written by 4 nodes at 2.5 GB/s each -> 9.8 s
    nbytes = c.checkpoint_bytes(7e9)
    assert nbytes == pytest.approx(98e9, rel=EXACT)
    assert c.checkpoint_write_s(nbytes, 2.5e9, 4) == pytest.approx(9.8, rel=EXACT)


def test_young_daly_interval_hand_computation():
    # delta = 60 s, one interruption per hour (MTBI 3,600 s): tau = sqrt(2 x 60 x 3600) s
    assert c.young_daly_interval_s(60, 1.0) == pytest.approx(math.sqrt(2 * 60 * 3600), rel=EXACT)
    assert np.isinf(c.young_daly_interval_s(60, 0.0))


def test_goodput_hand_computation():
    # delta 60 s, restart 600 s, 1 interruption/h, Young-Daly tau
    g = c.goodput(60, 600, 1.0)
    tau = math.sqrt(2 * 60 * 3600)
    lam = 1 / 3600
    expect = (1 - lam * 600 - lam * tau / 2) / (1 + 60 / tau)
    assert g.goodput == pytest.approx(expect, rel=EXACT)
    assert g.checkpoint == pytest.approx(expect * 60 / tau, rel=EXACT)
    assert g.restart == pytest.approx(600 / 3600, rel=EXACT)
    assert g.lost_work == pytest.approx(lam * tau / 2, rel=EXACT)
    total = g.goodput + g.checkpoint + g.restart + g.lost_work
    assert total == pytest.approx(1.0, rel=EXACT)


def test_goodput_with_given_interval_and_hopeless_case():
    g = c.goodput(30, 0, 0.5, interval_s=1800)  # checkpoint every 30 min
    lam = 0.5 / 3600
    assert g.goodput == pytest.approx((1 - lam * 900) / (1 + 30 / 1800), rel=EXACT)
    # restarts take longer than the time between interruptions: nothing gets done
    assert c.goodput(60, 7200, 1.0).goodput == 0.0
    assert np.isinf(c.wall_hours(10, 0.0))


@settings(max_examples=200, deadline=None)
@given(delta=st.floats(1, 600), restart=st.floats(0, 1800), rate=st.floats(1e-4, 0.5))
def test_goodput_matches_daly_exact_renewal_formula(delta, restart, rate):
    """Second, independent check: Daly 2006 (FGCS 22(3), eq. 17) gives the exact expected wall
    time per segment under exponential interruptions, M e^{R/M} (e^{(tau+delta)/M} - 1).
    The first-order model drops terms of order x^2, x = (tau + delta + R)/M; where x < 0.2 the
    two agree within x^2 (the observed worst case is x^2/2)."""
    g = c.goodput(delta, restart, rate)
    mtbi = 3600 / rate
    tau = float(g.interval_s)
    x = (tau + delta + restart) / mtbi
    assume(x < 0.2)
    exact = tau / (mtbi * math.exp(restart / mtbi) * (math.exp((tau + delta) / mtbi) - 1))
    assert abs(float(g.goodput) / exact - 1) <= x**2


# --- on-premises ----------------------------------------------------------------------------
OWN = dict(nodes=2, gpus_per_node=4, system_price_usd=100_000, system_max_power_watts=3000,
           gpu_tdp_watts=500, years=2, utilization=0.5, usd_per_kwh=0.10, pue=1.5,
           colocation_usd_per_kw_month=100, maintenance_fraction_per_year=0.05,
           network_usd_per_gpu=1000, storage_usd_per_gpu=500, install_fraction=0.10,
           staff_usd_per_gpu_year=2000, residual_value_fraction=0.20, gpu_load_factor=0.8,
           host_load_factor=0.5)


def test_own_tco_every_line_by_hand():
    o = c.own_tco(**OWN)
    servers, network, storage = 2 * 100_000, 8 * 1000, 8 * 500
    install = 0.10 * (servers + network + storage)
    capex = servers + network + storage + install
    it_w = 8 * 500 * 0.8 + 2 * (3000 - 4 * 500) * 0.5  # GPUs at 80%, host 1 kW/node at 50%
    power = it_w / 1000 * H_YEAR * 1.5 * 0.10
    colo = 2 * 3.0 * 100 * 12  # provisioned 3 kW per node
    maint = 0.05 * capex
    staff = 8 * 2000
    opex = power + colo + maint + staff
    residual = 0.20 * servers
    total = capex + 2 * opex - residual
    used = 8 * 2 * H_YEAR * 0.5
    lines = {"servers": servers, "network": network, "storage": storage, "install": install}
    for k, v in lines.items():
        assert o.capex_usd[k] == pytest.approx(v, rel=EXACT), k
    lines = {"power": power, "colocation": colo, "maintenance": maint, "staff": staff}
    for k, v in lines.items():
        assert o.opex_usd_per_year[k] == pytest.approx(v, rel=EXACT), k
    assert o.it_watts == pytest.approx(4200, rel=EXACT)
    assert o.capex_total_usd == pytest.approx(capex, rel=EXACT)
    assert o.residual_usd == pytest.approx(residual, rel=EXACT)
    assert o.total_usd == pytest.approx(total, rel=EXACT)
    assert o.used_gpu_hours == pytest.approx(used, rel=EXACT)
    assert o.usd_per_gpu_hour == pytest.approx(total / used, rel=EXACT)
    assert o.usd_per_gpu_hour_at_full_use == pytest.approx(total / (used / 0.5), rel=EXACT)
    assert o.depreciation_usd_per_year == pytest.approx((capex - residual) / 2, rel=EXACT)
    # the yearly view adds up to the total: depreciation + opex, over the years
    assert (o.depreciation_usd_per_year + o.opex_total_usd_per_year) * 2 == pytest.approx(
        o.total_usd, rel=EXACT)


def test_own_tco_host_load_defaults_to_gpu_load():
    o = c.own_tco(**{**OWN, "host_load_factor": None})
    assert o.it_watts == pytest.approx(8 * 500 * 0.8 + 2 * 1000 * 0.8, rel=EXACT)


def test_own_tco_broadcasts_over_utilization():
    u = np.array([0.25, 0.5, 1.0])
    o = c.own_tco(**{**OWN, "utilization": u})
    assert o.usd_per_gpu_hour.shape == (3,)
    assert o.usd_per_gpu_hour == pytest.approx(o.usd_per_gpu_hour_at_full_use / u, rel=EXACT)


def test_energy_and_emissions():
    # 10 kW IT for 100 h at PUE 1.2 = 1,200 kWh; at 0.4 kg/kWh = 480 kg
    kwh = c.energy_kwh(10_000, 100, 1.2)
    assert kwh == pytest.approx(1200, rel=EXACT)
    assert c.co2e_kg(kwh, 0.4) == pytest.approx(480, rel=EXACT)


def test_break_even_hand_computation():
    # owning costs $1.20 per calendar GPU-hour; renting $4 per GPU-hour -> 30% utilization
    assert c.break_even_utilization(1.2, 4.0) == pytest.approx(0.3, rel=EXACT)
    assert np.isnan(c.break_even_utilization(1.2, 1.0))  # would need 120%: never
    # $1M capex, $10k/month opex, 64 GPUs at 50% renting at $4: saving/month =
    # 4 x 64 x 0.5 x 730.5 - 10,000 = 83,504 -> 11.98 months
    m = c.break_even_months(1e6, 1e4, 64, 0.5, 4.0)
    assert m == pytest.approx(1e6 / (4 * 64 * 0.5 * H_YEAR / 12 - 1e4), rel=EXACT)
    assert np.isnan(c.break_even_months(1e6, 1e5, 8, 0.5, 4.0))
    # against a commitment at $2/h with half the idle hours reused: cloud per used hour is
    # 2 (0.5 + 0.5/u); own 1.2/u  =>  u* = (1.2 - 1) / 1 = 0.2
    assert c.break_even_utilization(1.2, 2.0, 0.5) == pytest.approx(0.2, rel=1e-12)
    assert c.break_even_utilization(0.9, 2.0, 0.5) == 0.0  # owning wins at any utilization
    assert np.isnan(c.break_even_utilization(1.2, 1.0, 0.0))  # both fixed, owning dearer
    # months vs the commitment at u = 0.5: rent/month = 2 x 64 x (0.25 + 0.5) x 730.5
    m = c.break_even_months(1e6, 1e4, 64, 0.5, 2.0, 0.5)
    assert m == pytest.approx(1e6 / (2 * 64 * 0.75 * H_YEAR / 12 - 1e4), rel=EXACT)


@pytest.mark.parametrize("reuse", [1.0, 0.5, 0.2])
def test_at_break_even_owning_costs_the_cloud_rate(reuse):
    """Independent check: at u*, own_tco's cost per used GPU-hour equals the cloud's cost per
    used GPU-hour at that utilization (1e-12 relative: float rounding)."""
    full = c.own_tco(**{**OWN, "utilization": 1.0}).usd_per_gpu_hour
    cloud = 1.05 * full
    u = float(c.break_even_utilization(full, cloud, reuse))
    assert 0 < u < 1
    at_u = c.own_tco(**{**OWN, "utilization": u}).usd_per_gpu_hour
    assert at_u == pytest.approx(c.committed_usd_per_used_hour(cloud, u, reuse), rel=1e-12)


# --- properties -----------------------------------------------------------------------------
pos = st.floats(0.0, 1e6, allow_nan=False)
frac = st.floats(0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(h1=st.floats(0, 5e4), dh=st.floats(0, 5e4), inst=st.integers(1, 512),
       rate=st.floats(0, 500), reuse=frac, g=st.floats(0.01, 1.0))
def test_every_mode_nonnegative_and_rises_with_hours(h1, dh, inst, rate, reuse, g):
    """For every pricing mode, cost >= 0 and cost(h1 + dh) >= cost(h1) (relative slack 1e-12
    for rounding); the same for spot after goodput."""
    modes = np.arange(len(c.MODES))
    a = c.job_cost_usd(modes, h1, inst, rate, reuse)
    b = c.job_cost_usd(modes, h1 + dh, inst, rate, reuse)
    assert np.all(a >= 0)
    assert np.all(b >= a * (1 - EXACT))
    s1, s2 = c.spot_cost_usd(h1, inst, rate, g), c.spot_cost_usd(h1 + dh, inst, rate, g)
    assert 0 <= s1 <= s2 * (1 + EXACT)


@settings(max_examples=200, deadline=None)
@given(hours=st.floats(1e-3, 1e5), inst=st.integers(1, 512), rate=st.floats(0.01, 500),
       reuse=frac, util=st.floats(1e-3, 1.0))
def test_three_year_commitment_never_cheaper_than_its_rate(hours, inst, rate, reuse, util):
    """Whatever the job length and reuse, the job's effective hourly cost on a 3-yr commitment
    is >= the committed hourly rate, and so is the steady-state cost per used hour."""
    r = c.commitment_cost(hours, inst, rate, c.term_hours(c.RESERVED_3Y), reuse)
    assert r.effective_usd_per_hour >= rate * (1 - EXACT)
    assert r.job_cost_usd >= hours * inst * rate * (1 - EXACT)
    assert c.committed_usd_per_used_hour(rate, util, reuse) >= rate * (1 - EXACT)


@settings(max_examples=100, deadline=None)
@given(hours=st.floats(0, 1e5), inst=st.integers(1, 512), rate=st.floats(0, 500),
       delta=st.floats(0, 3600), restart=st.floats(0, 3600))
def test_spot_without_interruptions_costs_the_spot_rate(hours, inst, rate, delta, restart):
    """Zero interruptions: goodput is exactly 1 and spot costs hours x instances x rate."""
    g = c.goodput(delta, restart, c.spot_interruptions_per_hour(0.0, inst))
    assert g.goodput == 1.0
    assert c.spot_cost_usd(hours, inst, rate, g.goodput) == pytest.approx(
        hours * inst * rate, rel=EXACT)


@settings(max_examples=200, deadline=None)
@given(delta=st.floats(0, 3600), restart=st.floats(0, 3600), r1=st.floats(0, 2), dr=st.floats(0, 2))
def test_goodput_parts_sum_to_one_and_fall_with_rate(delta, restart, r1, dr):
    """goodput + checkpoint + restart + lost work = 1 (1e-9), and more interruptions never
    raise goodput."""
    a, b = c.goodput(delta, restart, r1), c.goodput(delta, restart, r1 + dr)
    for g in (a, b):
        assert g.goodput + g.checkpoint + g.restart + g.lost_work == pytest.approx(1.0, abs=1e-9)
    assert b.goodput <= a.goodput + 1e-12


@settings(max_examples=200, deadline=None)
@given(capex=st.floats(1e3, 1e8), opex=st.floats(0, 1e6), gpus=st.integers(1, 4096),
       u1=st.floats(0.01, 1.0), du=st.floats(0, 1.0), price=st.floats(0.1, 20), reuse=frac)
def test_break_even_months_fall_as_utilization_rises(capex, opex, gpus, u1, du, price, reuse):
    """Higher owner utilization never lengthens the break-even: where owning pays back at u1 it
    also pays back at u2 > u1, in no more months (relative slack 1e-12), for pay-per-use
    (reuse 1) and committed (any reuse) renting alike."""
    u2 = min(1.0, u1 + du)
    m1 = c.break_even_months(capex, opex, gpus, u1, price, reuse)
    m2 = c.break_even_months(capex, opex, gpus, u2, price, reuse)
    if not np.isnan(m1):
        assert not np.isnan(m2) and m2 <= m1 * (1 + EXACT)


@settings(max_examples=200, deadline=None)
@given(full=st.floats(0.01, 10), p1=st.floats(0.01, 50), dp=st.floats(0, 50), reuse=frac)
def test_break_even_utilization_falls_as_cloud_price_rises(full, p1, dp, reuse):
    """A dearer cloud mode never needs a higher utilization for owning to win; u* is in [0, 1]
    or nan (owning never wins), and once finite it stays finite for dearer prices."""
    a = c.break_even_utilization(full, p1, reuse)
    b = c.break_even_utilization(full, p1 + dp, reuse)
    for u in (a, b):
        assert np.isnan(u) or 0 <= u <= 1
    if not np.isnan(a):
        assert b <= a * (1 + EXACT)


# --- bad input ------------------------------------------------------------------------------
def test_bad_input_is_one_clear_line():
    with pytest.raises(ConfigError, match="price must be a number >= 0, got -1"):
        c.on_demand_cost_usd(10, 1, -1.0)
    with pytest.raises(ConfigError, match="utilization must be a fraction between 0 and 1"):
        c.own_tco(**{**OWN, "utilization": 1.5})
    with pytest.raises(ConfigError, match="unknown pricing mode 'reserved-5y'; did you mean"):
        c.mode_code("reserved-5y")
    with pytest.raises(ConfigError, match="PUE must be at least 1"):
        c.energy_kwh(1000, 1, 0.9)
    with pytest.raises(ConfigError, match="hours must be a number >= 0, got nan"):
        c.on_demand_cost_usd(float("nan"), 1, 1.0)
    assert c.mode_code("savings-plan") == c.SAVINGS_1Y
    assert c.mode_code("Reserved-3y") == c.RESERVED_3Y
