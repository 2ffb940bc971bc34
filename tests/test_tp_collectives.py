"""Blocking tensor-parallel collectives (#12; docs/calibration.md, "Blocking tensor-parallel
collectives"): a stack whose TP collectives block the compute (PyTorch DTensor TP without async
TP) hides none of them; a run's column `tp_collectives` records what it ran."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.calibrate.time_fields import run_stack_row, stack_settings
from gpuplan.errors import CatalogError
from gpuplan.search.hardware import efficiency_for
from gpuplan.validation import load_runs, validate_runs

OVERLAPPED = ("megatron", "nemo", "deepspeed")
BLOCKING = ("fsdp", "torchtitan", "torchtune")  # torchtitan and torchtune inherit fsdp's


def test_each_stack_resolves_its_tp_overlap(cat):
    """Under an overlapped stack the family's catalog tp_overlap; under a blocking one 0."""
    table = cat.table("efficiency")
    for stack in OVERLAPPED + BLOCKING:
        got = list(efficiency_for(cat, ["h100", "a100"], stack).tp_overlap)
        want = ([table["h100"]["tp_overlap"], table["a100"]["tp_overlap"]]
                if stack in OVERLAPPED else [0.0, 0.0])
        assert got == want, stack
    assert table["h100"]["tp_overlap"] > 0  # so the blocking case differs


def _row(run_id: str) -> dict[str, str]:
    return next(r for r in load_runs() if r["id"] == run_id)


def test_the_run_column_overrides_the_stack(cat):
    """KempnerForge (plain DTensor TP: blank, the fsdp stack's 'blocking') predicted with its
    collectives overlapped instead comes out faster; a Grand Teton row that ran async TP records
    'overlapped', and predicted as blocking comes out slower. TP 1 rows do not move."""
    kf = _row("kforge-13b-32xh200-tp4-bf16")
    assert kf["tp_collectives"] == "" and kf["stack"] == "fsdp"
    blocking, overlapped = (r.predicted for r in validate_runs(
        cat, [kf, {**kf, "tp_collectives": "overlapped"}], newest={}))
    assert overlapped > blocking
    gt = _row("ttgrandteton-llama3-8b-64-bf16-2506")
    assert gt["tp_collectives"] == "overlapped" and int(gt["tp"]) == 8
    recorded, plain = (r.predicted for r in validate_runs(
        cat, [gt, {**gt, "tp_collectives": "blocking"}], newest={}))
    assert plain < recorded
    tp1 = _row("ttgrandteton-llama3-8b-8-bf16-2412")
    assert int(tp1["tp"]) == 1
    a, b = (r.predicted for r in validate_runs(
        cat, [tp1, {**tp1, "tp_collectives": "overlapped"}], newest={}))
    assert a == b
    assert run_stack_row(cat, "torchtitan", gt)["tp_collectives"] == "overlapped"
    assert run_stack_row(cat, "torchtitan", tp1)["tp_collectives"] == "blocking"


def test_recorded_values_are_known_and_async_rows_say_so():
    """Every recorded value is one of the two; the rows whose notes state async TP record
    'overlapped', and no row on a Megatron-family stack records anything."""
    for r in load_runs():
        stack_settings(r)  # raises on an unknown value
        if r["tp_collectives"]:
            assert r["stack"] in BLOCKING, r["id"]
        if r["stack"] in BLOCKING and int(r["tp"] or 1) > 1 and (
                "async TP and" in r["notes"] or "AsyncTP" in r["notes"]):
            assert r["tp_collectives"] == "overlapped", r["id"]


def test_a_bad_value_is_one_line_naming_the_run():
    with pytest.raises(CatalogError) as e:
        stack_settings({"id": "x1", "tp_collectives": "async"})
    msg = str(e.value)
    assert "\n" not in msg and "x1" in msg and "overlapped, blocking" in msg


def test_estimate_exposes_all_tp_time_under_a_blocking_stack():
    """Llama 3 70B, TP 8 inside one H100 node: the TP collectives' total does not depend on the
    stack (16-bit activations either way), so what fsdp exposes is at least what megatron
    exposes, and strictly more where megatron hides some."""
    kw = dict(model="llama3-70b", gpu="h100", gpus=64, tp=8, pp=1, zero=3, micro_batch=1,
              global_batch=64, seq_len=4096, precision="bf16", recompute="full")
    mega = dict(gpuplan.estimate(stack="megatron", **kw).time_breakdown_s)["tp_comm_s"]
    fsdp = dict(gpuplan.estimate(stack="fsdp", **kw).time_breakdown_s)["tp_comm_s"]
    assert fsdp > mega > 0


ARGS = ("estimate", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "64", "--tp", "8",
        "--zero", "3", "--seq-len", "4096", "--global-batch", "64", "--stack", "torchtitan")


def test_the_flag_overrides_the_stack(run_json):
    """`estimate --tp-collectives` sets what the stack would: torchtitan blocks by default;
    overlapped hides up to the family's tp_overlap of the compute, so less TP is exposed and
    the step is no slower (here the same: DP and TP share one overlap budget, the GEMM time,
    which the exposed ZeRO-3 traffic fills either way, `comm.shared_overlap`); blocking under
    megatron exposes what torchtitan does."""
    plain = run_json(*ARGS)
    over = run_json(*ARGS, "--tp-collectives", "overlapped")
    assert plain["layout"]["tp_collectives"] == "blocking"
    assert over["layout"]["tp_collectives"] == "overlapped"
    tp = lambda e: dict(e["time_breakdown_s"])["tp_comm_s"]  # noqa: E731
    assert tp(over) < tp(plain) and over["step_time_s"] <= plain["step_time_s"]
    mega = [a if a != "torchtitan" else "megatron" for a in ARGS]
    assert run_json(*mega)["layout"]["tp_collectives"] == "overlapped"
    assert tp(run_json(*mega, "--tp-collectives", "blocking")) == pytest.approx(tp(plain),
                                                                                 rel=1e-12)


def test_tp_only_layout_is_slower_when_blocking():
    """One 8-GPU node, TP 8 and nothing else to hide (dp 1): the step under blocking
    collectives is the overlapped step plus exactly the TP time the overlap hid."""
    kw = dict(model="llama3-8b", gpu="h100", gpus=8, tp=8, seq_len=8192, global_batch=16,
              stack="megatron")
    over = gpuplan.estimate(**kw)
    block = gpuplan.estimate(**kw, tp_collectives="blocking")
    hidden = dict(block.time_breakdown_s)["tp_comm_s"] - dict(over.time_breakdown_s)["tp_comm_s"]
    assert hidden > 0
    assert block.step_time_s - over.step_time_s == pytest.approx(hidden, rel=1e-9)


def test_a_bad_setting_is_one_line(run_cli):
    code, out, err = run_cli(*ARGS, "--tp-collectives", "async")
    assert code != 0 and "Traceback" not in err and "--tp-collectives" in err
    with pytest.raises(gpuplan.errors.ConfigError) as e:
        gpuplan.estimate(model="llama3-8b", gpu="h100", gpus=8, tp_collectives="async")
    assert "\n" not in str(e.value) and "overlapped or blocking" in str(e.value)
