"""The benchmark scripts measure what they say (#11, #13): bench_web's plan requests vary, so
a cache of request-independent work cannot turn the load test into identical cached answers;
bench_plan's probes leave the search as they found it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_web_plan_requests_vary():
    web = _load("bench_web")
    bodies = web.plan_bodies(200, 0)
    assert bodies == web.plan_bodies(200, 0)  # seeded: the same sequence for both servers
    assert len({json.dumps(b, sort_keys=True) for b in bodies}) > 150  # few repeats
    shapes = {json.dumps({k: v for k, v in b.items() if k in ("model", "acquisition",
                                                              "vendor")}, sort_keys=True)
              for b in bodies}
    assert len(shapes) == len(web.SHAPES)
    assert {b["tokens"] for b in bodies} == set(web.TOKENS)


def test_bench_plan_probe_restores_the_search():
    bench = _load("bench_plan")
    from gpuplan.search import plan as planmod
    from gpuplan.search import timed

    before = (planmod.evaluate_groups, planmod.layout_table, planmod.outlook,
              planmod.model_axes, planmod._priced, timed.time_per_step)
    with bench._Probe():
        assert planmod.evaluate_groups is not before[0]
    assert (planmod.evaluate_groups, planmod.layout_table, planmod.outlook,
            planmod.model_axes, planmod._priced, timed.time_per_step) == before
