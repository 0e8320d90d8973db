"""The user and system parts of what jobs and steps used (sacct's UserCPU, SystemCPU),
kept on real SQLite and PostgreSQL (migration 25: ``jobs`` and ``job_steps``'
``user_cpu_seconds``, ``system_cpu_seconds``): a job's and a step's round-trip, NULL
(not known) where an older agent said only their sum; a database from before upgrades
with its jobs and steps kept, their parts not known; a step that ends across a server
restart keeps its first node's parts."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from test_step_usage_store import ANN, two_node_job

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.slurm.steps import StepRequest
from hal.state.cluster import Cluster
from hal.state.codec import SYSTEM_CPU, USER_CPU
from hal.state.migrations import STEPS
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore, StepRow
from hal.testing import make_job
from hal.wire.agent import StepEnd
from hal.wire.steps import TaskTotals

MiB = 1 << 20
PARTS = ("user_cpu_seconds", "system_cpu_seconds")


def test_a_jobs_cpu_parts_round_trip_and_an_older_agents_are_not_known(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    jobs = [make_job(i).running_on("n1", start=10.0).build() for i in (1, 2)]
    with store.transaction() as tx:
        tx.insert_scripts([(1, jobs[0].spec.script)])
        tx.insert_jobs(jobs, [1, 1])
    with store.transaction() as tx:
        tx.record_usage([(1, 4 * MiB, 1.75, 1.5, 0.25), (2, 4 * MiB, 2.0, None, None)])
    loaded = {j.id: j.extra for j in store.load_jobs(active_or_ended_after=0.0)}
    store.close()
    assert (loaded[1]["cpu_seconds"], loaded[1][USER_CPU], loaded[1][SYSTEM_CPU]) == (
        "1.75",
        "1.5",
        "0.25",
    )
    assert loaded[2]["cpu_seconds"] == "2.0"
    assert USER_CPU not in loaded[2] and SYSTEM_CPU not in loaded[2]


def test_a_steps_cpu_parts_round_trip(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    split = StepRow(
        7,
        0,
        "a.out",
        "n1",
        2,
        "COMPLETED",
        0,
        1.0,
        9.0,
        total_cpu_seconds=3.5,
        user_cpu_seconds=3.0,
        system_cpu_seconds=0.5,
    )
    summed = StepRow(7, 1, "b.out", "n1", 1, "COMPLETED", 0, 1.0, 9.0, total_cpu_seconds=2.0)
    store.record_step(split)
    store.record_step(summed)
    assert store.steps_of([7]) == [split, summed]
    store.close()


def test_a_version_24_database_keeps_its_jobs_and_steps_with_parts_not_known(
    db_url: str,
) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    job = make_job(1).running_on("n1", start=10.0).build()
    with store.transaction() as tx:
        tx.insert_scripts([(1, job.spec.script)])
        tx.insert_jobs([job], [1])
    with store.transaction() as tx:
        tx.record_usage([(1, 4 * MiB, 1.75, 1.5, 0.25)])
    store.record_step(
        StepRow(
            1,
            0,
            "a.out",
            "n1",
            1,
            "COMPLETED",
            0,
            1.0,
            2.0,
            total_cpu_seconds=0.5,
            user_cpu_seconds=0.5,
            system_cpu_seconds=0.0,
        )
    )
    with store.engine.begin() as conn:
        for table in ("jobs", "job_steps"):
            for column in PARTS:
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        conn.execute(text("UPDATE hal_meta SET value = 24 WHERE key = 'schema_version'"))
    store.close()
    again = SqlStateStore(db_url)
    assert again.migrate() == len(STEPS) >= 25
    (old,) = again.load_jobs(active_or_ended_after=0.0)
    (step,) = again.steps_of([1])
    # and the new columns take what comes now
    with again.transaction() as tx:
        tx.record_usage([(1, 4 * MiB, 1.75, 1.5, 0.25)])
    (now,) = again.load_jobs(active_or_ended_after=0.0)
    again.close()
    assert old.extra["cpu_seconds"] == "1.75" and USER_CPU not in old.extra
    assert (step.total_cpu_seconds, step.user_cpu_seconds, step.system_cpu_seconds) == (
        0.5,
        None,
        None,
    )
    assert (now.extra[USER_CPU], now.extra[SYSTEM_CPU]) == ("1.5", "0.25")


def ended(job_id: int, *tasks: tuple[int, float, float | None, float | None]) -> StepEnd:
    return StepEnd(
        job_id=job_id,
        step_id=0,
        exit_code=0,
        tasks=[
            TaskTotals(rank=r, cpu_seconds=c, user_cpu_seconds=u, system_cpu_seconds=s)
            for r, c, u, s in tasks
        ],
    )


def step_parts(db_url: str, second: StepEnd) -> tuple[float, float | None, float | None]:
    """Step 0 of a job on n1 and n2 (ranks 0-1, 2-3): n1 ends with its tasks' parts, the
    server restarts, n2 ends with ``second``; (TotalCPU, UserCPU, SystemCPU) recorded."""

    async def main() -> tuple[float, float | None, float | None]:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            await table.create(job_id, ANN, StepRequest(), ["a.out"], {})
            first = ended(job_id, (0, 1.0, 0.75, 0.25), (1, 2.0, 1.5, 0.5))
            await table.received("n1", [], [first])
            restarted = StepTable(cluster)
            assert await restarted.restore() == 1
            await restarted.received("n2", [], [second.model_copy(update={"job_id": job_id})])
            (row,) = await cluster.db(cluster.store.steps_of, [job_id])
            return row.total_cpu_seconds, row.user_cpu_seconds, row.system_cpu_seconds
        finally:
            await cluster.close()

    return asyncio.run(main())


def test_a_step_sums_its_tasks_parts_across_a_server_restart(db_url: str) -> None:
    second = ended(0, (2, 0.5, 0.125, 0.375), (3, 0.0, None, None))  # rank 3: no CPU
    assert step_parts(db_url, second) == (3.5, 2.375, 1.125)


def test_a_step_with_a_task_of_an_older_agent_has_its_parts_not_known(db_url: str) -> None:
    second = ended(0, (2, 0.5, None, None), (3, 0.25, 0.25, 0.0))
    assert step_parts(db_url, second) == (3.75, None, None)
