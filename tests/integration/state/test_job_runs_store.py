"""A requeued job's earlier runs kept for ``sacct -D`` (``job_runs``, migration 24) on
real SQLite and PostgreSQL: an administrator's requeue of a running job ends its run
REQUEUED with the exit, nodes and usage its agent reported; a preempted one's run says
PREEMPTED; a finished job requeued keeps how it ended; the runs go with the job when
it is purged."""

from __future__ import annotations

import asyncio

from test_agent_end_states import _running

from hal.core.clock import VirtualClock
from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents, commands
from hal.state.cluster import Caller
from hal.state.codec import allocation_from_json
from hal.state.preempt import PREEMPTED_BY
from hal.state.retention import purge_jobs
from hal.testing.mirror import commit
from hal.wire.agent import JobReport

ROOT = Caller("root", admin=True)


def finished(job_id: int, attempt: int, time: float, state: str) -> JobReport:
    return JobReport(
        seq=attempt + 1,
        job_id=job_id,
        attempt=attempt,
        kind="finished",
        time=time,
        state=state,
        exit_signal=15,
        exit_code=0,
        max_rss_bytes=3 << 20,
        cpu_seconds=1.5,
    )


def test_each_requeue_keeps_the_run_it_ended(db_url: str) -> None:
    async def scenario() -> None:
        clock = VirtualClock(1000.0)
        cluster, job_id = await _running(db_url, clock)
        await commands.requeue(cluster, str(job_id), ROOT)
        await agents.apply_reports(cluster, "n1", [finished(job_id, 0, 1010.0, "PENDING")])
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        await cluster.apply_plan(Plan(cluster.revision, (Placement(job_id, one_cpu),)))
        job = cluster.jobs[job_id]  # a preemptor chose it, and its agent ended it
        await commit(cluster, [job.evolve(extra={**job.extra, PREEMPTED_BY: "9"})], [])
        await commands.requeue(cluster, str(job_id), ROOT)
        await agents.apply_reports(cluster, "n1", [finished(job_id, 1, 1020.0, "PENDING")])
        runs = await cluster.db(cluster.store.runs_of, [job_id])
        got = [(r.attempt, r.state, r.exit_code, r.exit_signal, r.end_time) for r in runs]
        assert got == [(0, "REQUEUED", 0, 15, 1010.0), (1, "PREEMPTED", 0, 15, 1020.0)]
        first = runs[0]
        assert (first.start_time, first.max_rss, first.cpu_seconds) == (1000.0, 3 << 20, 1.5)
        alloc = allocation_from_json(first.allocation)
        assert alloc is not None and alloc.nodes == ("n1",)
        assert cluster.jobs[job_id].restarts == 2
        await commands.cancel(cluster, str(job_id), ROOT)  # pending: it ends now
        await commands.requeue(cluster, str(job_id), ROOT)  # a finished job requeued
        (*_, ended) = await cluster.db(cluster.store.runs_of, [job_id])
        assert (ended.attempt, ended.state, ended.start_time) == (2, "CANCELLED", None)
        await commands.cancel(cluster, str(job_id), ROOT)
        assert purge_jobs(cluster.store, before=10**12) == (1, None)
        assert await cluster.db(cluster.store.runs_of, [job_id]) == []  # gone with it
        await cluster.close()

    asyncio.run(scenario())
