"""An array element held back by its array's ``%N`` throttle is not eligible yet, as in
Slurm 22.05.8 (docs/slurm-checks.md, "sacct of arrays"): ``EligibleTime=Unknown`` while
throttled, then the moment the throttle let it go, kept across a restart and at its
start. Its priority age counts from then, and ``sacct`` without ``-j`` leaves it out
until then. HAL used to show its submit time."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from hal.config.model import config_from_dict
from hal.core.clock import VirtualClock
from hal.core.job import ArraySpec, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.scheduler.plugins import build_scheduler
from hal.server.profile import server_profile
from hal.state import agents, commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import JobReport

SCRIPT = "#!/bin/sh\ntrue\n"
T0 = 1000.0


def _eligible_times(db_url: str) -> list[tuple[PendingReason, float | None]]:
    """The second element's reason and shown EligibleTime: throttled, after the first
    ended 500 s later and a pass found no node for it, after a restart, and once it
    runs."""

    async def scenario() -> list[tuple[PendingReason, float | None]]:
        config = config_from_dict({})
        clock = VirtualClock(T0)
        scheduler = build_scheduler(server_profile(config))

        async def loaded() -> Cluster:
            cluster = Cluster(SqlStateStore(db_url), config, clock)
            await cluster.load()
            cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
            return cluster

        async def run_pass(cluster: Cluster) -> None:
            snap = await cluster.fill_related(cluster.snapshot())
            await cluster.apply_plan(scheduler.schedule(snap))

        cluster = await loaded()
        spec = JobSpec(user="ann", script=SCRIPT, array=ArraySpec((0, 1), 1, "0-1%1"))
        (done,) = await cluster.submit([spec])
        first, second = done.task_ids
        await run_pass(cluster)
        assert cluster.jobs[first].state is JobState.RUNNING
        seen = []

        def look() -> None:
            job = cluster.jobs[second]
            seen.append((job.reason, job.shown_eligible_time(clock.now())))

        look()
        clock.advance(500.0)
        ended = JobReport(
            seq=1, job_id=first, attempt=0, kind="finished", time=clock.now(), state="COMPLETED"
        )
        await agents.apply_reports(cluster, "n1", [ended])
        node = cluster.nodes["n1"]  # drained, so the second element waits once let go
        cluster.nodes["n1"] = replace(node, state=NodeState.DRAIN, reason="maintenance")
        await run_pass(cluster)
        look()
        await cluster.close()
        clock.advance(100.0)
        cluster = await loaded()  # the node is back
        look()
        await run_pass(cluster)
        assert cluster.jobs[second].state is JobState.RUNNING
        seen.append((cluster.jobs[second].reason, cluster.jobs[second].eligible_time))
        await cluster.close()
        return seen

    return asyncio.run(scenario())


def test_a_throttled_element_is_eligible_from_when_the_throttle_lets_it_go(db_url: str) -> None:
    released = T0 + 500.0
    assert _eligible_times(db_url) == [
        (PendingReason.JOB_ARRAY_TASK_LIMIT, None),
        (PendingReason.RESOURCES, released),
        (PendingReason.RESOURCES, released),
        (PendingReason.NONE, released),
    ]


def test_a_job_cancelled_while_pending_keeps_when_it_became_eligible(db_url: str) -> None:
    """Slurm's accounting keeps a cancelled pending job's EligibleTime (its submission
    for a plain job) and lists it in sacct's windows; a held one was never eligible. The
    value is stored, so it holds after a restart."""

    async def scenario() -> list[float | None]:
        clock = VirtualClock(T0)
        cluster = Cluster(SqlStateStore(db_url), config_from_dict({}), clock)
        await cluster.load()
        plain = JobSpec(user="ann", script=SCRIPT)
        held = JobSpec(user="ann", script=SCRIPT, hold=True)
        done = await cluster.submit([plain, held])
        clock.advance(60.0)
        for submitted in done:
            await commands.cancel(cluster, str(submitted.job_id), Caller("ann"))
        await cluster.close()
        cluster = Cluster(SqlStateStore(db_url), config_from_dict({}), clock)
        await cluster.load()
        found = [cluster.jobs[s.job_id] for s in done]
        await cluster.close()
        assert [j.state for j in found] == [JobState.CANCELLED, JobState.CANCELLED]
        return [j.shown_eligible_time(clock.now()) for j in found]

    assert asyncio.run(scenario()) == [T0, None]
