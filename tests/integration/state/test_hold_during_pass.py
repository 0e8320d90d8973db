"""A job held (``scontrol hold``) while a scheduling pass runs: the pass read it before
the hold, but the plan it made must not start it, end it (``--kill-on-invalid-dep``) or
overwrite its held reason, since a held job takes part in no later pass until it is
released."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, PendingReason
from hal.scheduler.plugins import build_scheduler
from hal.slurm.syntax import parse_dependency
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.store import SqlStateStore

SCRIPT = "#!/bin/sh\ntrue\n"
HELD = (JobState.PENDING, PendingReason.JOB_HELD_USER)


def test_a_job_held_while_the_pass_runs_is_neither_started_nor_ended_and_keeps_its_reason(
    db_url: str,
) -> None:
    async def scenario() -> tuple[JobState, list[tuple[JobState, PendingReason]]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
        ann = Caller("ann")

        async def submit(spec: JobSpec) -> int:
            (done,) = await cluster.submit([spec])
            return done.job_id

        first = await submit(JobSpec(user="ann", script=SCRIPT))
        free = await submit(JobSpec(user="ann", script=SCRIPT))
        after_first = parse_dependency(f"afterok:{first}")
        dependent = await submit(JobSpec(user="ann", script=SCRIPT, dependency=after_first))
        gone = await submit(JobSpec(user="ann", script=SCRIPT, hold=True))
        await commands.cancel(cluster, str(gone), ann)  # an afterok on it can never be met
        after_gone = parse_dependency(f"afterok:{gone}")
        doomed = await submit(
            JobSpec(user="ann", script=SCRIPT, dependency=after_gone, kill_on_invalid_dep=True)
        )
        # the pass reads the queue; the user holds three jobs before its plan is applied
        plan = build_scheduler().schedule(await cluster.fill_related(cluster.snapshot()))
        assert {p.job_id for p in plan.placements} == {first, free}
        assert [t.job_id for t in plan.terminations] == [doomed]
        for job_id in (free, dependent, doomed):
            await commands.set_hold(cluster, str(job_id), ann, True)
        await cluster.apply_plan(plan)
        held = [(cluster.jobs[j].state, cluster.jobs[j].reason) for j in (free, dependent, doomed)]
        started = cluster.jobs[first].state
        await cluster.close()
        return started, held

    started, held = asyncio.run(scenario())
    assert started is JobState.RUNNING  # the jobs nobody held start as planned
    assert held == [HELD, HELD, HELD]
