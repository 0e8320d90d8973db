"""The mirror's nodes keep their sorted order and each partition's candidates only while
nothing changed them (``hal.state.node_table``): a node that joins, leaves or comes back
with other resources is seen by the next snapshot and the next submission; a scheduler
cycle with nothing pending takes no snapshot."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.scheduler.service import SchedulerService
from hal.state.cluster import Cluster
from hal.state.node_table import NodeTable
from hal.testing.builders import make_node


def spec(cpus: int) -> JobSpec:
    return JobSpec(user="alice", script="#!/bin/sh\ntrue\n", cpus_per_task=cpus)


def test_every_mutator_moves_the_version() -> None:
    table = NodeTable()
    node = make_node("a").build()
    seen = [table.version]
    table["a"] = node
    seen.append(table.version)
    table.update(b=make_node("b").build())
    seen.append(table.version)
    table.setdefault("c", make_node("c").build())
    seen.append(table.version)
    table.pop("c")
    seen.append(table.version)
    del table["b"]
    seen.append(table.version)
    table |= {"d": make_node("d").build()}
    seen.append(table.version)
    table.popitem()
    seen.append(table.version)
    table.clear()
    seen.append(table.version)
    assert len(set(seen)) == len(seen), seen
    assert table == {}


def test_a_snapshot_sees_nodes_that_join_leave_or_change(cluster: Cluster) -> None:
    first = cluster.snapshot().nodes
    assert cluster.snapshot().nodes is first  # nothing changed: kept
    cluster.nodes["m9"] = make_node("m9").cpus(4).build()
    cluster.nodes["a1"] = make_node("a1").cpus(8).build()
    assert [n.name for n in cluster.snapshot().nodes] == ["a1", "m9", "n1"]
    cluster.nodes["m9"] = make_node("m9").cpus(32).build()
    assert {n.name: n.resources.cpus for n in cluster.snapshot().nodes}["m9"] == 32
    cluster.nodes.pop("a1")
    assert [n.name for n in cluster.snapshot().nodes] == ["m9", "n1"]


def test_a_submission_sees_a_node_come_back_bigger(cluster: Cluster) -> None:
    """``n1`` has 2 CPUs: a 4-CPU job is refused, then taken once ``n1`` has 8."""
    with pytest.raises(InvalidRequest, match="each node would need 4 CPUs"):
        asyncio.run(cluster.submit([spec(4)]))
    asyncio.run(cluster.submit([spec(2)]))  # the candidates kept: still right
    cluster.nodes["n1"] = make_node("n1").cpus(8).mem_gib(4).build()
    (taken,) = asyncio.run(cluster.submit([spec(4)]))
    assert cluster.jobs[taken.job_id].spec.cpus_per_task == 4
    cluster.nodes.pop("n1")
    cluster.nodes["n2"] = make_node("n2").cpus(1).mem_gib(4).build()
    with pytest.raises(InvalidRequest, match="the largest node has 1 CPUs"):
        asyncio.run(cluster.submit([spec(2)]))


def test_nodes_given_whole_are_seen_by_the_next_snapshot_and_submission(cluster: Cluster) -> None:
    assert [n.name for n in cluster.snapshot().nodes] == ["n1"]
    with pytest.raises(InvalidRequest, match="each node would need 4 CPUs"):
        asyncio.run(cluster.submit([spec(4)]))
    cluster.nodes = {"big": make_node("big").cpus(8).mem_gib(4).build()}
    assert isinstance(cluster.nodes, NodeTable)
    assert [n.name for n in cluster.snapshot().nodes] == ["big"]
    (taken,) = asyncio.run(cluster.submit([spec(4)]))
    assert cluster.jobs[taken.job_id].spec.cpus_per_task == 4


def test_a_cycle_with_nothing_pending_takes_no_snapshot(cluster: Cluster) -> None:
    """Nodes registering wake the scheduler at every commit: with no job pending (none,
    or only held ones) a cycle sorts no node; once a job waits, it does."""
    snapshots: list[int] = []
    taken = cluster.snapshot

    def counting(*, made: bool = False) -> ClusterSnapshot:
        snapshots.append(1)
        return taken(made=made)

    cluster.snapshot = counting  # type: ignore[method-assign]
    passes: list[ClusterSnapshot] = []

    def decide(snap: ClusterSnapshot) -> Plan:
        passes.append(snap)
        return Plan(snap.revision)

    service = SchedulerService(cluster, decide)
    cluster.nodes["n2"] = make_node("n2").build()  # (a node came up: a new version)
    assert not cluster.has_pending()
    assert asyncio.run(service.cycle()) is False
    assert snapshots == [] and passes == []
    asyncio.run(cluster.submit([spec(1).with_changes(hold=True)]))
    assert not cluster.has_pending() and not taken().pending
    assert asyncio.run(service.cycle()) is False
    assert snapshots == [] and passes == []
    asyncio.run(cluster.submit([spec(1)]))
    assert cluster.has_pending() and taken().pending
    asyncio.run(service.cycle())
    assert snapshots == [1] and [len(p.pending) for p in passes] == [1]
