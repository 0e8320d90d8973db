"""What ended steps used, kept in accounting on real SQLite and PostgreSQL
(``job_steps`` usage columns, migration 14): a step's record round-trips its MaxRSS,
where it was, AveRSS and TotalCPU; a database from before keeps its steps, read as not
measured; a step ends with the usage its nodes reported, across a server restart between
two nodes' ends, and a local step with srun's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy import text

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import StepRequest
from hal.state.agents import AgentSession
from hal.state.cluster import Caller, Cluster
from hal.state.migrations import STEPS
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore, StepRow
from hal.wire.agent import StepEnd
from hal.wire.steps import TaskTotals

ANN = Caller("ann")
MiB = 1 << 20
USAGE = ("max_rss_bytes", "max_rss_node", "max_rss_task", "ave_rss_bytes", "total_cpu_seconds")


def test_a_step_record_keeps_what_its_tasks_used(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    row = StepRow(
        7, 0, "a.out", "n[1-2]", 4, "COMPLETED", 0, 1.0, 9.0, 0, 70 * MiB, "n2", 3, 40 * MiB, 12.5
    )
    store.record_step(row)
    assert store.steps_of([7]) == [row]
    store.close()


def test_a_version_13_database_keeps_its_steps_as_not_measured(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    step_row_at_version(store, 13, USAGE)
    assert store.migrate() == len(STEPS)
    (old,) = store.steps_of([7])
    assert (old.name, old.state, old.end_time) == ("a.out", "COMPLETED", 2.0)
    assert [getattr(old, c) for c in USAGE] == [0, "", 0, 0, 0.0]
    store.close()


def step_row_at_version(store: SqlStateStore, version: int, columns: tuple[str, ...]) -> None:
    """Make ``store`` a database of schema ``version``, before ``job_steps``' ``columns``,
    holding one ended step 7.0 (``a.out`` on n1, ended at 2.0)."""
    with store.engine.begin() as conn:
        for column in columns:
            conn.execute(text(f"ALTER TABLE job_steps DROP COLUMN {column}"))
        conn.execute(
            text(
                "INSERT INTO job_steps (job_id, step_id, name, nodelist, ntasks, state, "
                "exit_code, start_time, end_time, exit_signal) "
                "VALUES (7, 0, 'a.out', 'n1', 1, 'COMPLETED', 0, 1.0, 2.0, 0)"
            )
        )
        conn.execute(
            text("UPDATE hal_meta SET value = :v WHERE key = 'schema_version'"), {"v": version}
        )


@contextlib.asynccontextmanager
async def loaded(db_url: str) -> AsyncIterator[Cluster]:
    """A cluster on ``db_url``'s store, loaded, and closed after."""
    cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
    await cluster.load()
    try:
        yield cluster
    finally:
        await cluster.close()


async def two_node_job(cluster: Cluster) -> int:
    for name in ("n1", "n2"):
        cluster.nodes[name] = Node(name, ResourceVector(cpus=4, memory_bytes=4 * GiB))
        cluster.agent_sessions[name] = AgentSession(name)
    spec = JobSpec(user="ann", script="#!/bin/sh\nsleep 60\n").with_changes(nodes_min=2, ntasks=4)
    (job,) = await cluster.submit([spec])
    two = ResourceVector(2, 0)
    alloc = Allocation(("n1", "n2"), (two, two))
    await cluster.apply_plan(Plan(cluster.revision, (Placement(job.job_id, alloc),)))
    return job.job_id


def ended(job_id: int, *tasks: tuple[int, int, float]) -> StepEnd:
    return StepEnd(
        job_id=job_id,
        step_id=0,
        exit_code=0,
        tasks=[TaskTotals(rank=r, max_rss_bytes=m, cpu_seconds=c) for r, m, c in tasks],
    )


def test_a_step_ends_with_its_nodes_usage_across_a_server_restart(db_url: str) -> None:
    """Ranks 0-1 on n1, 2-3 on n2: n1 ends, the server restarts, n2 ends. The record has
    the most of one task (rank 2 on n2), the mean, and all four tasks' CPU; a rank the
    node does not run is not taken from it."""

    async def main() -> None:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        try:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            step = await table.create(job_id, ANN, StepRequest(), ["a.out"], {})
            assert step.layout.tasks == (2, 2)
            await table.received(
                "n1", [], [ended(job_id, (0, 10 * MiB, 1.0), (1, 20 * MiB, 2.0), (3, MiB, 9.0))]
            )
            restarted = StepTable(cluster)
            assert await restarted.restore() == 1
            await restarted.received("n2", [], [ended(job_id, (2, 50 * MiB, 0.5), (3, 0, 0.25))])
            (row,) = await cluster.db(cluster.store.steps_of, [job_id])
            assert row.state == "COMPLETED"
            assert [getattr(row, c) for c in USAGE] == [50 * MiB, "n2", 2, 80 * MiB // 3, 3.75]
        finally:
            await cluster.close()

    asyncio.run(main())


def test_a_local_step_ends_with_what_srun_measured(db_url: str) -> None:
    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            step = await table.open_local(job_id, ANN, "n1", 2, "python")
            tasks = [TaskTotals(rank=0, max_rss_bytes=64 * MiB, cpu_seconds=1.25)]
            await table.end_local(step, 0, 0, oom=False, cancelled=False, tasks=tasks)
            (row,) = await cluster.db(cluster.store.steps_of, [job_id])
            assert [getattr(row, c) for c in USAGE] == [64 * MiB, "n1", 0, 64 * MiB, 1.25]
        finally:
            await cluster.close()

    asyncio.run(main())
