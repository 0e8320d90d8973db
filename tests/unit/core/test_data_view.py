"""hal.core.data: the cache tree's path metrics, where a leaf gets a key, and --data keys."""

from __future__ import annotations

import pytest

from hal.core.data import (
    DEFAULT_ORIGIN,
    MAX_DATA_KEYS,
    CacheTree,
    DataView,
    Link,
    expand_datasets,
    parse_data_keys,
)
from hal.core.errors import InvalidRequest

GB = 1_000_000_000
# root ─ rack1 ─ leaf1, leaf2 ; root ─ rack2 ─ leaf3
TREE = CacheTree(
    parent={
        "root": None,
        "rack1": "root",
        "rack2": "root",
        "leaf1": "rack1",
        "leaf2": "rack1",
        "leaf3": "rack2",
    },
    uplink={
        "rack1": Link(1.0, 10_000.0, 2.0),
        "rack2": Link(1.0, 10_000.0, 2.0),
        "leaf1": Link(0.5, 25_000.0, 0.5),
        "leaf2": Link(0.5, 25_000.0, 0.5),
        "leaf3": Link(0.5, 1_000.0, 0.5),
    },
)
NODES = {"n1": "leaf1", "n2": "leaf2", "n3": "leaf3"}


def view(holders: dict[str, dict[str, int]], *, peers: bool = False) -> DataView:
    return DataView(TREE, holders, NODES, peer_sourcing=peers)


def test_path_metrics_add_latency_and_cost_and_take_the_narrowest_bandwidth() -> None:
    path = TREE.path("leaf1", "leaf3")
    assert path == Link(0.5 + 1.0 + 1.0 + 0.5, 1_000.0, 0.5 + 2.0 + 2.0 + 0.5)
    assert TREE.path("leaf1", "leaf1") == Link(0.0, float("inf"), 0.0)
    assert TREE.path("leaf1", "nowhere") is None


def test_a_local_copy_moves_nothing() -> None:
    t = view({"k": {"leaf1": GB}}).transfer(["k"], "n1")
    assert (t.local_bytes, t.moved_bytes, t.seconds, t.cost) == (GB, 0, 0.0, 0.0)


def test_a_miss_pulls_from_the_nearest_ancestor_holder() -> None:
    v = view({"k": {"rack1": GB, "root": GB}})
    holder, path = v.source("k", "leaf2")
    assert holder == "rack1" and path == Link(0.5, 25_000.0, 0.5)
    t = v.transfer(["k"], "n2")
    assert t.moved_bytes == GB
    assert t.seconds == pytest.approx(0.0005 + 8 * GB / 25_000e6)
    assert t.cost == pytest.approx(0.5)


def test_a_sibling_copy_is_reachable_only_with_peer_sourcing() -> None:
    holders = {"k": {"leaf1": GB}}
    holder, path = view(holders).source("k", "leaf2")
    assert holder is None  # no ancestor holds it: from the origin, through the root
    assert path == TREE.path("leaf2", "root").then(DEFAULT_ORIGIN)  # type: ignore[union-attr]
    holder, path = view(holders, peers=True).source("k", "leaf2")
    assert holder == "leaf1" and path == TREE.path("leaf2", "leaf1")


def test_nodes_closer_to_the_data_cost_less_and_worst_is_everything_from_the_origin() -> None:
    v = view({"a": {"leaf1": 2 * GB}, "b": {"rack1": GB}})
    costs = {n: v.transfer(["a", "b"], n).seconds for n in ("n1", "n2", "n3")}
    assert costs["n1"] < costs["n2"] < costs["n3"]
    worst = v.worst_at(["a", "b"], "leaf1")
    assert worst.moved_bytes == 3 * GB and worst.seconds > v.transfer(["a", "b"], "n1").seconds
    assert v.transfer(["a"], "no-cache-node").seconds == pytest.approx(
        DEFAULT_ORIGIN.seconds(2 * GB)
    )


def test_keys_in_no_cache_have_no_size_and_cost_nothing_to_compare() -> None:
    v = view({})
    assert v.size("k") is None
    assert v.transfer(["k"], "n1").moved_bytes == 0


def test_a_parent_cycle_does_not_loop_forever() -> None:
    tree = CacheTree(parent={"a": "b", "b": "a"})
    assert tree.chain("a") == ("a", "b")


def test_data_keys_parse_dedupe_and_refuse_bad_input_with_a_hint() -> None:
    assert parse_data_keys("ds:a, ds:b,ds:a") == ("ds:a", "ds:b")
    assert parse_data_keys(["x", "y"]) == ("x", "y")
    for bad, words in (
        ("a,,b", "empty key"),
        (["a b"], "whitespace"),
        ("k" * 600, "longer than"),
        (",".join(f"k{i}" for i in range(MAX_DATA_KEYS + 1)), "at most"),
    ):
        with pytest.raises(InvalidRequest, match=words) as err:
            parse_data_keys(bad)
        assert err.value.field == "data"


def test_named_datasets_expand_in_place_and_unknown_names_say_where_to_define_them() -> None:
    sets = {"imagenet": ("in:0", "in:1"), "labels": ("lab",)}
    assert expand_datasets(parse_data_keys("x,@imagenet,in:1,@labels"), sets) == (
        "x",
        "in:0",
        "in:1",
        "lab",
    )
    with pytest.raises(InvalidRequest, match=r"\[data.datasets\]"):
        expand_datasets(("@nope",), sets)
    with pytest.raises(InvalidRequest, match="without a dataset name"):
        parse_data_keys("@")
