"""``[data]`` in hal.toml: the cache control plane the server reads, and how it uses it.
Every mistake is refused at start-up naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from hal.config.model import DataConfig, HalConfig, config_from_dict
from hal.core.errors import InvalidRequest


def test_no_data_table_means_no_data_plane() -> None:
    assert HalConfig().data is None
    assert config_from_dict({}).data is None


def test_cache_url_alone_turns_the_feature_on_with_the_documented_defaults() -> None:
    data = config_from_dict({"data": {"cache_url": "http://cache-cp:8480/"}}).data
    assert data == DataConfig(cache_url="http://cache-cp:8480")
    assert (data.refresh_seconds, data.prestage, data.weight, data.peer_sourcing) == (
        2.0,
        True,
        None,  # the datalocality plugin's own default weight
        False,
    )
    assert data.node_cache == {}


def test_every_setting_is_read() -> None:
    data = config_from_dict(
        {
            "data": {
                "cache_url": "https://cp.example:8480/v1",
                "node_cache": {"node001": "leaf-a", "node002": "leaf-a"},
                "refresh_seconds": 5,
                "prestage": False,
                "weight": 3,
                "peer_sourcing": True,
            }
        }
    ).data
    assert data == DataConfig(
        cache_url="https://cp.example:8480/v1",
        node_cache={"node001": "leaf-a", "node002": "leaf-a"},
        refresh_seconds=5.0,
        prestage=False,
        weight=3.0,
        peer_sourcing=True,
    )


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({}, "data.cache_url"),
        ({"cache_url": 8480}, "data.cache_url"),
        ({"cache_url": "cache-cp:8480"}, "data.cache_url"),
        ({"cache_url": "http://cp", "nodes": {}}, "data.nodes"),
        ({"cache_url": "http://cp", "node_cache": "leaf1"}, "data.node_cache"),
        ({"cache_url": "http://cp", "node_cache": {"n1": "leaf 1"}}, "data.node_cache.n1"),
        ({"cache_url": "http://cp", "node_cache": {"n1": 7}}, "data.node_cache.n1"),
        ({"cache_url": "http://cp", "refresh_seconds": 0}, "data.refresh_seconds"),
        ({"cache_url": "http://cp", "refresh_seconds": "2s"}, "data.refresh_seconds"),
        ({"cache_url": "http://cp", "prestage": "yes"}, "data.prestage"),
        ({"cache_url": "http://cp", "weight": -1}, "data.weight"),
        ({"cache_url": "http://cp", "weight": True}, "data.weight"),
        ({"cache_url": "http://cp", "peer_sourcing": 1}, "data.peer_sourcing"),
    ],
)
def test_mistakes_are_refused_naming_the_field(table: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"data": table})
    assert err.value.field == field
    assert "[data" in err.value.message


def test_data_must_be_a_table() -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"data": "http://cp"})
    assert err.value.field == "data"


def test_named_datasets_are_read_and_checked() -> None:
    config = config_from_dict(
        {"data": {"cache_url": "http://cp:8480", "datasets": {"imagenet": ["in:0", "in:1"]}}}
    )
    assert config.datasets == {"imagenet": ("in:0", "in:1")}
    assert HalConfig().datasets == {}
    for bad, name in (
        ({"bad name": ["k"]}, "bad name"),
        ({"x": []}, "x"),
        ({"x": ["@y"]}, "x"),
        ({"x": ["a b"]}, "x"),
    ):
        with pytest.raises(InvalidRequest) as err:
            config_from_dict({"data": {"cache_url": "http://cp:8480", "datasets": bad}})
        assert err.value.field is not None and err.value.field.startswith(f"data.datasets.{name}")


def test_locality_wait_is_read_and_checked() -> None:
    data = config_from_dict({"data": {"cache_url": "http://cp", "locality_wait_seconds": 0}}).data
    assert data is not None and data.locality_wait_seconds == 0.0
    assert config_from_dict({"data": {"cache_url": "http://cp"}}).data.locality_wait_seconds is None  # type: ignore[union-attr]
    with pytest.raises(InvalidRequest, match="locality_wait_seconds") as err:
        config_from_dict({"data": {"cache_url": "http://cp", "locality_wait_seconds": -1}})
    assert err.value.field == "data.locality_wait_seconds"
