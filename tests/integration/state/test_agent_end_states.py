"""How an agent's reports end a job, and what an agent is told again when it registers:
a job whose launch fails ends FAILED, unless its user cancelled it while it launched
(CANCELLED, as asked); an administrator's requeue puts the job back with no "requeued
after" state; a job being requeued when its agent registers again is ended as a requeue
(PENDING), not as a cancel."""

from __future__ import annotations

import asyncio

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents, commands
from hal.state.cluster import Caller, Cluster
from hal.state.preempt import REQUEUED_AFTER
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentRegister, Cancel, JobReport


async def _running(db_url: str, clock: VirtualClock) -> tuple[Cluster, int]:
    cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
    await cluster.load()
    cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
    (job,) = await cluster.submit([JobSpec(user="ann", script="#!/bin/sh\ntrue\n")])
    one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
    await cluster.apply_plan(Plan(0, (Placement(job.job_id, one_cpu),)))
    return cluster, job.job_id


@pytest.mark.parametrize(("cancel", "ends"), [(True, "CANCELLED"), (False, "FAILED")])
def test_a_failed_launch_ends_the_job_as_its_user_asked(
    db_url: str, cancel: bool, ends: str
) -> None:
    async def scenario() -> str:
        clock = VirtualClock(1000.0)
        cluster, job_id = await _running(db_url, clock)
        if cancel:
            await commands.cancel(cluster, str(job_id), Caller("ann"))
        failed = JobReport(seq=1, job_id=job_id, attempt=0, kind="launch_failed", time=1000.0)
        await agents.apply_reports(cluster, "n1", [failed])
        state = cluster.jobs[job_id].state.value
        await cluster.close()
        return state

    assert asyncio.run(scenario()) == ends


def test_a_requeue_ends_the_run_and_is_told_again_to_a_registering_agent(db_url: str) -> None:
    async def scenario() -> None:
        clock = VirtualClock(1000.0)
        cluster, job_id = await _running(db_url, clock)
        await commands.requeue(cluster, str(job_id), Caller("root", admin=True))
        register = AgentRegister(node="n1", cpus=2, memory_bytes=GiB)
        await agents.register(cluster, register)  # the agent restarted meanwhile
        wait = cluster.config.kill_wait_seconds
        told = Cancel(job_id=job_id, state="PENDING", kill_wait_seconds=wait, attempt=0)
        assert cluster.agent_sessions["n1"].outbox == [told]
        ended = JobReport(
            seq=1, job_id=job_id, attempt=0, kind="finished", time=1001.0, state="PENDING"
        )
        await agents.apply_reports(cluster, "n1", [ended])
        job = cluster.jobs[job_id]
        assert job.state.value == "PENDING" and job.restarts == 1
        assert REQUEUED_AFTER not in job.extra  # it did not complete: it was requeued
        await cluster.close()

    asyncio.run(scenario())


def test_a_plan_placing_a_job_already_forgotten_starts_the_rest(db_url: str) -> None:
    """With MinJobAge 0 a job cancelled after the pass read the cluster may be pruned
    before its plan is applied: the plan's other placements still start (the pass used to
    fail on it)."""

    async def scenario() -> list[int]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(min_job_age_seconds=0), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        spec = JobSpec(user="ann", script="#!/bin/sh\ntrue\n")
        gone, kept = await cluster.submit([spec, spec])
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        plan = Plan(0, (Placement(gone.job_id, one_cpu), Placement(kept.job_id, one_cpu)))
        await commands.cancel(cluster, str(gone.job_id), Caller("ann"))
        clock.advance(1)
        cluster.prune()
        started = await cluster.apply_plan(plan)
        await cluster.close()
        return started

    assert asyncio.run(scenario()) == [2]
