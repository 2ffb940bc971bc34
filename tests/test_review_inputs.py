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
