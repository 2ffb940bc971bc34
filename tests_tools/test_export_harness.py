"""Exports checked by the real tools' own validators, where they install without a GPU or torch.

Not part of the main test command (this folder needs SkyPilot). Run with

    pip install --target /tmp/skyharness 'skypilot==0.14.1'
    PYTHONPATH=src:/tmp/skyharness python -m pytest tests_tools

(SkyPilot brings PyYAML and jsonschema; nothing else is needed.) DeepSpeed's config class and
torchtitan's config manager import torch, so they are not used here: the DeepSpeed JSON and the
torchtitan TOML are checked in test_export.py against field lists written from their sources.
Building a `sky.Resources` also downloads SkyPilot's price catalog, so only the schemas run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sky.utils.common_utils as sky_common  # noqa: E402
import sky.utils.schemas as sky_schemas  # noqa: E402
import yaml  # noqa: E402

from gpuplan.export import export, record_from

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


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
