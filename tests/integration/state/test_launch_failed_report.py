"""A job whose launch fails on its node ends FAILED, unless its user cancelled it while it
launched: then it ends CANCELLED, as asked (the launch failing is the agent stopping a
job that never started)."""

from __future__ import annotations

import asyncio

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import JobReport


@pytest.mark.parametrize(("cancel", "ends"), [(True, "CANCELLED"), (False, "FAILED")])
def test_a_failed_launch_ends_the_job_as_its_user_asked(
    db_url: str, cancel: bool, ends: str
) -> None:
    async def scenario() -> str:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        (job,) = await cluster.submit([JobSpec(user="ann", script="#!/bin/sh\ntrue\n")])
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        await cluster.apply_plan(Plan(0, (Placement(job.job_id, one_cpu),)))
        if cancel:
            await cluster.cancel(str(job.job_id), Caller("ann"))
        failed = JobReport(
            seq=1, job_id=job.job_id, attempt=0, kind="launch_failed", time=clock.now()
        )
        await agents.apply_reports(cluster, "n1", [failed])
        state = cluster.jobs[job.job_id].state.value
        await cluster.close()
        return state

    assert asyncio.run(scenario()) == ends
