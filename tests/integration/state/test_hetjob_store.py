"""A heterogeneous job's components survive a server restart on SQLite and PostgreSQL:
consecutive ids, the het job id and offsets, and ``123`` / ``123+1`` lookups."""

from __future__ import annotations

import asyncio

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import InvalidRequest
from hal.core.job import Allocation, HetSpec, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import JobReport

SMALL = JobSpec(user="alice", script="#!/bin/sh\ntrue\n", name="mixed")
WIDE = SMALL.with_changes(nodes_min=2, nodes_max=2, ntasks=2)


def test_het_components_are_stored_and_reloaded(db_url: str) -> None:
    async def scenario() -> tuple[list[int], list[JobSpec], list[int], list[int]]:
        first = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await first.load()
        await first.submit([SMALL])  # an ordinary job first: the het ids come after it
        done = await first.submit([SMALL, WIDE], het=True)
        await first.close()
        again = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await again.load()
        ids = [d.job_id for d in done]
        specs = [again.jobs[i].spec for i in ids]
        whole = [j.id for j in again.resolve(str(ids[0]))]
        second = [j.id for j in again.resolve(f"{ids[0]}+1")]
        await again.close()
        return ids, specs, whole, second

    ids, specs, whole, second = asyncio.run(scenario())
    assert ids[1] == ids[0] + 1
    assert [s.het for s in specs] == [HetSpec(ids[0], 0, 2), HetSpec(ids[0], 1, 2)]
    assert specs[1].nodes_min == 2
    assert whole == ids and second == [ids[1]]


def test_a_het_job_needs_two_components(db_url: str) -> None:
    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            await cluster.submit([SMALL], het=True)
        finally:
            await cluster.close()

    with pytest.raises(InvalidRequest, match="at least 2 components"):
        asyncio.run(scenario())


def _one_cpu(node: str) -> Allocation:
    return Allocation((node,), (ResourceVector(cpus=1),))


def test_plan_starting_part_of_a_het_job_starts_nothing(db_url: str) -> None:
    """The plan applier re-checks a het job as a unit: a plan that starts only component
    0 (or puts component 1 on a node that is gone) starts no component."""

    async def scenario() -> tuple[list[str], list[str]]:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        ids = [d.job_id for d in await cluster.submit([SMALL, SMALL], het=True)]
        partial = Plan(revision=0, placements=(Placement(ids[0], _one_cpu("n1")),))
        started = await cluster.apply_plan(partial)
        gone = Plan(
            revision=0,
            placements=(
                Placement(ids[0], _one_cpu("n1")),
                Placement(ids[1], _one_cpu("n9")),
            ),
        )
        started += await cluster.apply_plan(gone)
        after_refusals = [cluster.jobs[i].state.value for i in ids]
        whole = Plan(
            revision=0,
            placements=(Placement(ids[0], _one_cpu("n1")), Placement(ids[1], _one_cpu("n1"))),
        )
        await cluster.apply_plan(whole)
        assert not started
        states = [cluster.jobs[i].state.value for i in ids]
        await cluster.close()
        return after_refusals, states

    refused, started = asyncio.run(scenario())
    assert refused == ["PENDING", "PENDING"]
    assert started == ["RUNNING", "RUNNING"]


def test_node_failure_under_component_1_ends_the_whole_het_job(db_url: str) -> None:
    """Component 1's node stops answering: component 1 is requeued (NODE_FAIL with
    --requeue), component 0's script is stopped, and its finish report puts the whole
    het job back in the queue."""

    async def scenario() -> tuple[list[str], list[str]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        cluster.nodes["n2"] = Node("n2", ResourceVector(cpus=2, memory_bytes=GiB))
        ids = [d.job_id for d in await cluster.submit([SMALL, SMALL], het=True)]
        plan = Plan(
            revision=0,
            placements=(Placement(ids[0], _one_cpu("n1")), Placement(ids[1], _one_cpu("n2"))),
        )
        await cluster.apply_plan(plan)
        clock.advance(100.0)
        cluster.nodes["n1"] = cluster.nodes["n1"].evolve(last_heartbeat=clock.now())
        assert await agents.check_nodes(cluster) == ["n2"]
        after_failure = [cluster.jobs[i].state.value for i in ids]
        report = JobReport(
            seq=1, job_id=ids[0], attempt=0, kind="finished", time=clock.now(), state="NODE_FAIL"
        )
        await agents.apply_reports(cluster, "n1", [report])
        after_report = [cluster.jobs[i].state.value for i in ids]
        await cluster.close()
        return after_failure, after_report

    after_failure, after_report = asyncio.run(scenario())
    assert after_failure == ["COMPLETING", "PENDING"]
    assert after_report == ["PENDING", "PENDING"]
