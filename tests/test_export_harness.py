"""Exports checked by the real tools' own validators, where they install without a GPU or torch.

Not part of the main test command: these skip unless the tool is importable. Run with

    pip install --target /tmp/skyharness 'skypilot==0.14.1'
    PYTHONPATH=src:/tmp/skyharness python -m pytest tests/test_export_harness.py

(SkyPilot brings PyYAML and jsonschema; nothing else is needed.) DeepSpeed's config class and
torchtitan's config manager import torch, so they are not used here: the DeepSpeed JSON and the
torchtitan TOML are checked in test_export.py against field lists written from their sources.
Building a `sky.Resources` also downloads SkyPilot's price catalog, so only the schemas run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.export import export, record_from

sky_schemas = pytest.importorskip("sky.utils.schemas", reason="SkyPilot is not installed")
sky_common = pytest.importorskip("sky.utils.common_utils")
yaml = pytest.importorskip("yaml")

FIXTURES = Path(__file__).parent / "fixtures"


def task(rank: int) -> dict:
    doc = json.loads((FIXTURES / "plan_result.json").read_text())
    return yaml.safe_load(export(record_from(doc, rank)[0], "skypilot"))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_skypilot_task_and_resources_schemas_accept_the_export(rank):
    cfg = task(rank)
    sky_common.validate_schema(cfg, sky_schemas.get_task_schema(), "Invalid task YAML: ")
    sky_common.validate_schema(cfg["resources"], sky_schemas.get_resources_schema(),
                               "Invalid resources YAML: ")


def test_the_schemas_do_reject_a_misspelt_field():
    """The check above can fail: a wrong key in resources is refused."""
    cfg = task(1)
    with pytest.raises(ValueError):
        sky_common.validate_schema({**cfg["resources"], "use_spott": True},
                                   sky_schemas.get_resources_schema(), "Invalid resources: ")
