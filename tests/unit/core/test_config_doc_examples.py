"""The ``hal.toml`` a user copies from the docs is one the server starts with, and every
key the loader accepts is shown somewhere a user reads (README points at these)."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

import hal.config.model as model
from hal.config.model import HalConfig, config_from_dict
from hal.scheduler.plugins import build_scheduler, default_registry
from hal.server.profile import server_profile

ROOT = Path(__file__).parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    pytest.param(
        m.group(1), id=f"{doc.relative_to(ROOT)}:{doc.read_text()[: m.start()].count(chr(10)) + 1}"
    )
    for doc in DOCS
    for m in re.finditer(r"```toml\n(.*?)```", doc.read_text(), re.S)
]


def start(raw: dict[str, Any], base_dir: Path) -> HalConfig:
    """What `hal up` does with the file: load it, then build the scheduler from it."""
    config = config_from_dict(raw, source="hal.toml", base_dir=base_dir)
    build_scheduler(
        server_profile(config),
        default_registry(
            policy=config.priority,
            preemption_policy=config.preemption,
            partitions=config.partition_objects(),
            licenses=config.licenses,
        ),
    )
    return config


def model_example() -> str:
    doc = model.__doc__ or ""
    return textwrap.dedent(doc.split("Example::", 1)[1])


@pytest.mark.parametrize("block", BLOCKS)
def test_every_toml_example_in_the_docs_starts_a_server(block: str, tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=node[1-2]\n")
    start(tomllib.loads(block), tmp_path)


def test_the_config_modules_example_starts_a_server_and_shows_every_key(
    tmp_path: Path,
) -> None:
    """README sends users to hal.config.model for partitions and timeouts: heartbeat,
    array and batch sizes and five partition keys were accepted but shown nowhere."""
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=node[1-2]\n")
    raw = tomllib.loads(model_example())
    config = start(raw, tmp_path)
    assert config.partitions[0].default_time_s == 3600
    # the tables left out have their own modules' examples (priority, preemption)
    assert model._TOP_KEYS - set(raw) == {"priority", "accounts", "users", "qos", "preemption"}
    assert set(raw["partitions"][0]) == model._PARTITION_KEYS
