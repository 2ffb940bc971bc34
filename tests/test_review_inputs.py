"""Inputs of this session's new terms that reached a wrong answer instead of one clear line, and
the run options a reproduced or exported result dropped (review of 4bfd4e5..main, #12)."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog import load_catalog, validate_file
from gpuplan.errors import CatalogError

MOE_FLEX = dict(model="deepseek-v3", gpu="h100-sxm", gpus=256, tp=1, pp=8, ep=32,
                precision="bf16", moe_dispatcher="flex")


def _overlay(tmp_path, text: str) -> str:
    p = tmp_path / "overlay.toml"
    p.write_text(text)
    return str(p)


def test_a_zero_dispatch_share_is_one_line_not_a_missing_link(tmp_path):
    """A share of 0 made the flex dispatch bound infinite, reported as 'traffic must cross a link
    this platform lacks'; the share is a rate ratio, so it must be > 0 (like every rate)."""
    path = _overlay(tmp_path, '[[fabric]]\nid = "ib-ndr"\nmoe_dispatch_logical_share = 0.0\n')
    with pytest.raises(CatalogError) as err:
        validate_file(path)
    assert str(err.value).endswith(
        "fabric 'ib-ndr': moe_dispatch_logical_share must be a finite number in (0, 4], got 0.0")
    ok = _overlay(tmp_path, '[[fabric]]\nid = "ib-ndr"\nmoe_dispatch_logical_share = 0.5\n')
    e = gpuplan.estimate(catalog=load_catalog((ok,)), **MOE_FLEX)
    assert e.feasible and e.step_time_s > 0


def test_the_allocator_setting_is_in_the_reproduce_lines(tmp_path):
    """`--allocator expandable` set the memory margin but neither the plan rows' `reproduce`
    line nor an exported estimate's header said so: with an expandable margin other than the
    caching one (an overlay), the reproduced estimate disagreed with the row."""
    import json
    import shlex

    from gpuplan.export import export, record_from
    from gpuplan.report.estimate import to_json
    from gpuplan.report.plan import reproduce

    path = _overlay(tmp_path, "[site.allocator_fragmentation_expandable]\nvalue = 0.02\n")
    cat = load_catalog((path,))
    r = gpuplan.plan(model="llama3-8b", tokens="100B", gpu="h100-sxm", allocator="expandable",
                     catalog=cat)
    row = r.plans[0]
    line = reproduce(r, row)
    assert "--allocator expandable" in line
    words = shlex.split(line)
    args = dict(zip(words[2::2], words[3::2], strict=False))
    e = gpuplan.estimate(model="llama3-8b", gpu=row.gpu, gpus=row.gpus, tp=row.tp, pp=row.pp,
                         zero=row.zero, micro_batch=row.micro_batch,
                         global_batch=row.global_batch, seq_len=row.seq_len,
                         precision=row.precision, recompute=row.recompute,
                         allocator=args["--allocator"], catalog=cat)
    assert e.memory_gib.total == pytest.approx(row.memory_gib_per_gpu, rel=1e-9)
    doc = json.loads(json.dumps(to_json(gpuplan.estimate(
        model="llama3-8b", gpu="h100-sxm", gpus=8, tp=2, zero=1, recompute="full",
        allocator="expandable"))))
    rec, _ = record_from(doc)
    assert "--allocator expandable" in export(rec, "megatron")


def _exported(target: str, **kw) -> str:
    import json

    from gpuplan.export import export, record_from
    from gpuplan.report.estimate import to_json

    doc = json.loads(json.dumps(to_json(gpuplan.estimate(**kw))))
    return export(record_from(doc)[0], target)


B200_TENSOR = dict(model="llama3-8b", gpu="b200", gpus=8, tp=1, zero=1, recompute="full",
                   precision="fp8", fp8_recipe="tensor")


def test_the_fp8_tensor_recipe_is_exported_as_tensorwise():
    """`--fp8-recipe tensor` on Blackwell (no FP8 transpose: per-tensor current scaling, the
    recipe of NVIDIA's GB200 FP8-CS runs) was exported as `--fp8-recipe mxfp8`, whose
    column-wise copy the estimate had removed. Megatron-LM's name for it is 'tensorwise'."""
    import shlex

    text = _exported("megatron", **B200_TENSOR)
    words = shlex.split(" ".join(ln for ln in text.splitlines()
                                 if not ln.lstrip().startswith("#")))
    assert words[words.index("--fp8-recipe") + 1] == "tensorwise"
    assert "# --fp8-recipe: megatron/core/transformer/transformer_config.py" in text
    auto = _exported("megatron", **{**B200_TENSOR, "fp8_recipe": "auto"})
    assert "--fp8-recipe mxfp8" in auto and "tensorwise" not in auto


@pytest.mark.parametrize("target", ["torchrun", "slurm"])
def test_the_expandable_allocator_is_an_environment_line(target):
    """`--allocator expandable` sets the memory margin the estimate fits with; the launch
    scripts now set the allocator it assumes (PyTorch reads PYTORCH_CUDA_ALLOC_CONF)."""
    line = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    kw = dict(model="llama3-8b", gpu="h100-sxm", gpus=16, tp=2, zero=1, recompute="full")
    text = _exported(target, allocator="expandable", **kw)
    assert line in text.splitlines()
    assert text.index(line) < text.index("torchrun --nnodes")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _exported(target, **kw)


def test_a_plan_row_exports_the_plan_allocator():
    from gpuplan.export import export, record_from
    from gpuplan.report.plan import to_json

    r = gpuplan.plan(model="llama3-8b", tokens="100B", gpu="h100-sxm", allocator="expandable")
    import json
    doc = json.loads(json.dumps(to_json(r)))
    assert "expandable_segments:True" in export(record_from(doc, 1)[0], "torchrun")


def test_the_web_api_does_not_take_the_cli_process_count():
    """`gpuplan plan --workers N` (processes to fork, #11) was a field of POST /api/plan that the
    server accepted and ignored (its workers are its own, `gpuplan serve --workers`); it is now
    an unknown field there, like the other CLI-only switches, and not in the OpenAPI schema."""
    from starlette.testclient import TestClient

    from gpuplan.web.app import create_app
    from gpuplan.web.openapi import schema

    client = TestClient(create_app(workers=1), raise_server_exceptions=False)
    r = client.post("/api/plan", json={"model": "llama3-8b", "tokens": "100B",
                                       "gpu": "h100-sxm", "workers": 4})
    assert r.status_code == 422 and "workers" in r.json()["error"]
    body = schema()["paths"]["/api/plan"]["post"]["requestBody"]["content"]
    assert "workers" not in body["application/json"]["schema"]["properties"]


def test_the_skypilot_task_sets_the_expandable_allocator():
    kw = dict(model="llama3-8b", gpu="h100-sxm", gpus=16, tp=2, zero=1, recompute="full")
    text = _exported("skypilot", allocator="expandable", **kw)
    assert "envs:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True" in text
    assert "PYTORCH_CUDA_ALLOC_CONF" not in _exported("skypilot", **kw)
