"""A job moved to another partition (``scontrol update Partition=``) while a scheduling
pass runs: the pass placed it on its old partition's nodes, and that plan must not start
it there."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.job import JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.plugins import build_scheduler
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore

SCRIPT = "#!/bin/sh\ntrue\n"


def test_a_job_moved_while_the_pass_runs_does_not_start_on_its_old_partition(
    db_url: str,
) -> None:
    async def scenario() -> tuple[JobState, JobState, str]:
        config = HalConfig(
            partitions=(
                PartitionConfig(name="a", default=True, nodes=("n1",)),
                PartitionConfig(name="b", nodes=("n2",)),
            )
        )
        cluster = Cluster(SqlStateStore(db_url), config, VirtualClock(1000.0))
        await cluster.load()
        for name in ("n1", "n2"):
            cluster.nodes[name] = Node(name, ResourceVector(cpus=4, memory_bytes=4 * GiB))
        (moved,) = await cluster.submit([JobSpec(user="ann", script=SCRIPT)])
        (stays,) = await cluster.submit([JobSpec(user="ann", script=SCRIPT)])
        plan = build_scheduler().schedule(cluster.snapshot())
        assert {p.job_id: p.allocation.nodes for p in plan.placements} == {
            moved.job_id: ("n1",),
            stays.job_id: ("n1",),
        }
        await commands.update(cluster, str(moved.job_id), Caller("ann"), partition="b")
        await cluster.apply_plan(plan)
        out = cluster.jobs[moved.job_id].state, cluster.jobs[stays.job_id].state
        partition = cluster.jobs[moved.job_id].partition
        await cluster.close()
        return *out, partition

    moved, stays, partition = asyncio.run(scenario())
    assert (moved, partition) == (JobState.PENDING, "b")  # the next pass places it on n2
    assert stays is JobState.RUNNING
