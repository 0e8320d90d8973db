"""What moving a job's ``--data`` inputs to a group's nodes costs the burst decision
(``hal.server.cloud._data_cost``): the data plane's per-edge costs from the nearest copy
to the group's cache, plus the group's egress price per GB."""

from __future__ import annotations

import pytest

from hal.core.data import GB, CacheTree, DataView, Link
from hal.core.node_groups import NodeGroup
from hal.core.resources import GiB, ResourceVector
from hal.server.cloud import _data_cost

# root ← eu (cost 0.02 a GB over its uplink), root ← us (0.05); the origin behind the
# root costs 0.09 a GB
TREE = CacheTree(
    parent={"root": None, "eu": "root", "us": "root"},
    uplink={"eu": Link(cost=0.02), "us": Link(cost=0.05)},
)
VIEW = DataView(
    TREE,
    holders={"ds:a": {"eu": 10 * GB}, "ds:b": {"root": 2 * GB}},
    node_cache={},
    origin=Link(cost=0.09),
)


def group(cache: str = "", egress: float = 0.0) -> NodeGroup:
    return NodeGroup(
        name="g",
        provider="local",
        nodes=("g1",),
        resources=ResourceVector(4, 8 * GiB, 0),
        data_cache=cache,
        egress_per_gb=egress,
    )


def test_inputs_already_in_the_groups_cache_cost_nothing() -> None:
    assert _data_cost(group("eu", egress=1.0), ["ds:a"], VIEW) == 0.0


def test_inputs_elsewhere_cost_their_path_and_the_egress() -> None:
    # ds:b from the root down to us: 2 GB × 0.05; ds:a from the origin (us cannot reach
    # eu's copy without peer sourcing): 10 GB × (0.05 + 0.09); egress 0.01 on all 12 GB
    cost = _data_cost(group("us", egress=0.01), ["ds:a", "ds:b"], VIEW)
    assert cost == pytest.approx(2 * 0.05 + 10 * 0.14 + 12 * 0.01)


def test_a_group_without_a_cache_reads_from_the_origin() -> None:
    assert _data_cost(group(), ["ds:b"], VIEW) == pytest.approx(2 * 0.09)
    assert _data_cost(group(), [], VIEW) == 0.0
    assert _data_cost(group("eu"), ["ds:a"], None) == 0.0  # no data plane
