"""The MoE token dispatcher as a layout option (issue #12): `--moe-dispatcher
auto|flex|alltoall` in the CLI and `estimate(moe_dispatcher=...)`, echoed (auto resolved) in
the JSON layout; the published runs' recorded dispatcher and schedule reach their layouts."""

from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.errors import ConfigError
from gpuplan.spec import D_ALLTOALL, D_AUTO, D_FLEX, S_1F1B, S_1F1B_A2A

ARGS = ("estimate", "--model", "deepseek-v3", "--gpu", "h100", "--gpus", "16", "--ep", "16",
        "--global-batch", "64", "--seq-len", "4096")


def test_json_echoes_the_dispatcher_and_alltoall_is_slower_across_nodes(run_json):
    """Auto under megatron is flex; alltoall (one copy per routed expert over two nodes)
    exposes more all-to-all time, so the step is slower."""
    auto = run_json(*ARGS)
    flat = run_json(*ARGS, "--moe-dispatcher", "alltoall")
    titan = run_json(*ARGS, "--stack", "torchtitan")
    assert auto["layout"]["moe_dispatcher"] == "flex"
    assert flat["layout"]["moe_dispatcher"] == "alltoall"
    assert titan["layout"]["moe_dispatcher"] == "alltoall"
    assert flat["step_time_s"] > auto["step_time_s"]


def test_bad_dispatcher_is_one_line(run_cli, cat):
    code, out, err = run_cli(*ARGS, "--moe-dispatcher", "deepep")
    assert code != 0 and "unknown MoE dispatcher 'deepep'" in err
    assert "choose one of: auto, flex, alltoall" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="unknown MoE dispatcher") as e:
        api.estimate(gpu="h100", model="deepseek-v3", catalog=cat, moe_dispatcher="x")
    assert "\n" not in str(e.value)


def test_published_runs_carry_their_recorded_dispatcher_and_schedule(cat):
    """data/published_runs.csv `moe_dispatcher` / `schedule` (from each Megatron-Bridge
    recipe): empty = auto / 1f1b; both values of each occur on MoE rows."""
    from gpuplan.validation import load_runs, run_spec
    seen = set()
    for row in load_runs():
        lay = run_spec(cat, row).layout
        disp, sched = int(lay.moe_dispatcher), int(lay.schedule)
        assert disp == {"": D_AUTO, "flex": D_FLEX, "alltoall": D_ALLTOALL}[row["moe_dispatcher"]]
        assert sched == {"": S_1F1B, "1f1b-a2a": S_1F1B_A2A}[row["schedule"]]
        if row["moe_dispatcher"]:
            assert "EP A2A overlap" in row["notes"]  # the recipe's locator
        seen.add((disp, sched))
    assert {(D_FLEX, S_1F1B), (D_FLEX, S_1F1B_A2A), (D_ALLTOALL, S_1F1B),
            (D_ALLTOALL, S_1F1B_A2A)} <= seen
