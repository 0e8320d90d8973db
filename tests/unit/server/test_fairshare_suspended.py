"""Fair share charges a job while it runs, not while it is suspended (its CPUs may be its
preemptor's, who is charged for them): live, and when a restarted server rebuilds the
usage from its accounting history."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.priority import Account, PriorityPolicy, UserAccount
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.server.priority import PriorityService
from hal.state import agents, commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import JobReport

NOW = 1_000_000.0
POLICY = PriorityPolicy(
    enabled=True,
    decay_half_life_s=0.0,  # plain CPU-seconds
    accounts=(Account("a"),),
    users=(UserAccount("ann", "a", default=True),),
)
ADMIN = Caller("root", admin=True)


async def _running_job(
    tmp_path: Path, clock: VirtualClock
) -> tuple[str, Cluster, PriorityService, int]:
    """A cluster on a SQLite file, its fair share, and ann's job running on all 4 CPUs
    of n1."""
    db = f"sqlite:///{tmp_path / 'hal.db'}"
    cluster = Cluster(SqlStateStore(db), HalConfig(), clock)
    await cluster.load()
    cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
    service = PriorityService(cluster, POLICY)
    (job,) = await cluster.submit([JobSpec(user="ann", script="#!/bin/sh\ntrue\n")])
    four = Allocation(("n1",), (ResourceVector(4, 0),))
    await cluster.apply_plan(Plan(cluster.revision, (Placement(job.job_id, four),)))
    return db, cluster, service, job.job_id


async def _usage_after_restart(db: str, clock: VirtualClock) -> float:
    """ann's usage as a restarted server rebuilds it from the accounting history."""
    restarted = Cluster(SqlStateStore(db), HalConfig(), clock)
    await restarted.load()
    again = PriorityService(restarted, POLICY)
    await again.start()
    rebuilt = again.usage(clock.now())[("a", "ann")]
    await restarted.close()
    return rebuilt


def test_suspended_time_is_not_charged_live_or_after_a_restart(tmp_path: Path) -> None:
    async def scenario() -> tuple[float, float, float]:
        clock = VirtualClock(NOW)
        db, cluster, service, job_id = await _running_job(tmp_path, clock)
        clock.advance(10)
        await commands.suspend(cluster, str(job_id), ADMIN)
        clock.advance(990)
        while_suspended = service.usage(clock.now())[("a", "ann")]
        await commands.suspend(cluster, str(job_id), ADMIN, resume=True)
        clock.advance(10)
        ended = JobReport(seq=1, job_id=job_id, attempt=0, kind="finished", time=clock.now())
        await agents.apply_reports(cluster, "n1", [ended])
        live = service.usage(clock.now())[("a", "ann")]
        await cluster.close()
        return while_suspended, live, await _usage_after_restart(db, clock)

    while_suspended, live, rebuilt = asyncio.run(scenario())
    assert while_suspended == 40.0  # 4 CPUs for 10 s, nothing while suspended
    assert live == 80.0 and rebuilt == 80.0  # 4 CPUs for 20 s of running


def test_a_job_cancelled_while_suspended_is_charged_its_run_only_after_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[float, float]:
        clock = VirtualClock(NOW)
        db, cluster, service, job_id = await _running_job(tmp_path, clock)
        clock.advance(10)
        await commands.suspend(cluster, str(job_id), ADMIN)
        clock.advance(990)
        await commands.cancel(cluster, str(job_id), ADMIN)
        ended = JobReport(
            seq=1, job_id=job_id, attempt=0, kind="finished", time=clock.now(),
            state="CANCELLED",
        )  # fmt: skip
        await agents.apply_reports(cluster, "n1", [ended])
        live = service.usage(clock.now())[("a", "ann")]
        await cluster.close()
        return live, await _usage_after_restart(db, clock)

    live, rebuilt = asyncio.run(scenario())
    assert live == 40.0  # 4 CPUs for the 10 s it ran; its suspension to the cancel is not
    assert rebuilt == live  # was 4,000: the history charged its last suspension
