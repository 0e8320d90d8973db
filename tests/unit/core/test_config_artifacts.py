"""``[artifacts]`` of hal.toml (hal.config.artifacts): the nodes' cache bound and the
canary test's settings, and bad values refused saying what to write."""

from __future__ import annotations

import pytest

from hal.config.artifacts import ArtifactsConfig
from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest


def test_without_the_table_the_agents_keep_their_own_bound() -> None:
    assert config_from_dict({}).artifacts == ArtifactsConfig(None, 5, 0.01)


def test_the_table_is_read() -> None:
    raw = {"artifacts": {"node_cache": "50G", "canary_min_jobs": 10, "canary_alpha": 0.05}}
    got = config_from_dict(raw).artifacts
    assert got == ArtifactsConfig(50 * 1024**3, 10, 0.05)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"node_cache": "lots"}, 'node_cache.*"50G"'),
        ({"node_cache": 50}, 'node_cache.*"50G"'),
        ({"node_cache": "0"}, "at least 1M"),
        ({"canary_min_jobs": 0}, "canary_min_jobs.*>= 1"),
        ({"canary_alpha": 1.5}, "canary_alpha.*between 0 and 1"),
        ({"canary_alpha": True}, "canary_alpha"),
        ({"node_cahce": "5G"}, "node_cache"),
    ],
)
def test_bad_values_are_refused_saying_what_to_write(table: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        config_from_dict({"artifacts": table})
