"""Which --topology levels a cluster has: a level it lacks is refused at submit
(BadConstraints) naming the levels it does have."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import BadConstraints
from hal.core.job import JobSpec, TopologyConstraint
from hal.core.topology import Block, LabelRule, Switch, Topology
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.state.topology_levels import known_levels

TREE = Topology(
    (Switch("l0", nodes=("n1",)), Switch("s0", switches=("l0",))),
    level_names=("leaf", "spine"),
)
BLOCKS = Topology(blocks=(Block("b0", ("n1", "n2")), Block("b1", ("n3", "n4"))))
LABELS = Topology(label_rules=(LabelRule(("n1",), (("rack", "r1"), ("site", "s1"))),))


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Cluster] = []

    def build(topology: Topology | None) -> Cluster:
        c = Cluster(MemoryStateStore(), HalConfig(topology=topology), VirtualClock(1000.0))
        asyncio.run(c.load())
        made.append(c)
        return c

    yield build
    for c in made:
        asyncio.run(c.close())


@pytest.mark.parametrize(
    ("topology", "levels"),
    [
        (None, ("nvlink",)),
        (TREE, ("leaf", "spine", "switch", "level1", "nvlink")),
        # level2: the root of all blocks, as the plugin counts it
        (BLOCKS, ("block", "level1", "level2", "nvlink")),
        (LABELS, ("rack", "site", "nvlink")),
    ],
)
def test_known_levels(make: Any, topology: Topology | None, levels: tuple[str, ...]) -> None:
    assert known_levels(make(topology)) == levels


def test_submit_refuses_a_missing_level_and_names_the_known_ones(make: Any) -> None:
    cluster = make(LABELS)
    spec = JobSpec(user="a", script="#!/bin/sh\n", topology=TopologyConstraint("zone", True))
    with pytest.raises(BadConstraints, match="no 'zone' level; its levels are rack, site, nvlink"):
        asyncio.run(cluster.submit([spec]))
    ok = JobSpec(user="a", script="#!/bin/sh\n", topology=TopologyConstraint("rack", True))
    assert len(asyncio.run(cluster.submit([ok]))) == 1
