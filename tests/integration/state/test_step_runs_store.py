"""Steps numbered per run of a requeued job (migration 26) on real SQLite and PostgreSQL:
Slurm 22.05.8 numbers a requeued job's next run's steps from 0 again (docs/slurm-checks.md,
"sacct -D: a requeued job's runs"), so accounting keys a step by its run as well, and the
steps recorded before the migration belong to the run sacct -D showed them under."""

from __future__ import annotations

import asyncio

from sqlalchemy import MetaData, Table, insert, text, update
from test_job_runs_store import finished
from test_step_ids_store import ANN, running_job

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import StepRequest
from hal.state import agents, commands, schema
from hal.state.cluster import Caller, Cluster
from hal.state.migrations import STEPS
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore, StepRow

ROOT = Caller("root", admin=True)


async def requeued(cluster: Cluster, job_id: int, attempt: int, at: float) -> None:
    """``scontrol requeue`` of the running job, its agent's end, and its next start."""
    await commands.requeue(cluster, str(job_id), ROOT)
    await agents.apply_reports(cluster, "n1", [finished(job_id, attempt, at, "PENDING")])
    cpu = ResourceVector(1, 0)
    alloc = Allocation(("n1", "n2"), (cpu, cpu))
    await cluster.apply_plan(Plan(cluster.revision, (Placement(job_id, alloc),)))


def test_a_requeued_jobs_next_run_numbers_its_steps_from_0(db_url: str) -> None:
    """`srun` twice, `scontrol requeue`, `srun` again: the new run's step is 0 (Slurm's
    SLURM_STEP_ID), both runs' steps are kept, and srun's and scancel's ``J.0`` is the
    latest run's."""

    async def scenario() -> None:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        try:
            job_id = await running_job(cluster)
            table = StepTable(cluster)
            for _ in range(2):
                step = await table.open_local(job_id, ANN, "n1", 1, "hostname")
                await table.end_local(step, 0, 0, oom=False, cancelled=False)
            clock.advance(10.0)
            await requeued(cluster, job_id, 0, clock.now())
            clock.advance(1.0)
            again = await table.open_local(job_id, ANN, "n1", 1, "hostname")
            beside = StepRequest(overlap=True)  # (not waiting for the local step's CPUs)
            remote = await table.create(job_id, ANN, beside, ["hostname"], {})
            assert (again.step_id, again.attempt, remote.step_id) == (0, 1, 1)
            assert table.get(job_id, 0, ANN) is again
            assert [s.step_id for s in table.of_job(job_id, ANN)] == [0, 1]
            await table.end_local(again, 0, 0, oom=False, cancelled=False)
            kept = await cluster.db(cluster.store.steps_of, [job_id])
            assert [(r.attempt, r.step_id) for r in kept] == [(0, 0), (0, 1), (1, 0)]
            assert await cluster.db(cluster.store.last_step_id, job_id, 0) == 1
            assert await cluster.db(cluster.store.last_step_id, job_id, 1) == 0
            running = await cluster.db(cluster.store.running_steps)
            assert [(r.attempt, r.step_id) for r in running] == [(1, 1)]
        finally:
            await cluster.close()

    asyncio.run(scenario())


def _v25(table: Table) -> Table:
    """``table`` as migration 25 left it: keyed by job and step id, no run in job_steps."""
    columns = []
    for column in table.columns:
        if column.name == "attempt" and table is schema.job_steps:
            continue
        copy = column._copy()
        copy.primary_key = column.name in ("job_id", "step_id")
        columns.append(copy)
    return Table(table.name, MetaData(), *columns)


def test_steps_recorded_before_migration_26_keep_the_run_sacct_showed(db_url: str) -> None:
    """A job requeued twice (runs ended at 1010 and 1020) with steps 0, 1, 2 recorded
    under the old numbering: each gets the run it started in; a running step keeps its
    run; afterwards a run's step 0 is kept beside another run's."""

    async def made() -> int:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        job_id = await running_job(cluster)
        await requeued(cluster, job_id, 0, 1010.0)
        await requeued(cluster, job_id, 1, 1020.0)
        await cluster.close()
        return job_id

    job_id = asyncio.run(made())
    store = SqlStateStore(db_url)
    old_steps, old_running = _v25(schema.job_steps), _v25(schema.running_steps)
    with store.engine.begin() as conn:  # the database as migration 25 left it
        for table in (schema.job_steps, schema.running_steps):
            conn.execute(text(f"DROP TABLE {table.name}"))
        old_steps.create(conn)
        old_running.create(conn)
        key = schema.meta.c.key == "schema_version"
        conn.execute(update(schema.meta).where(key).values(value=25))
        for step_id, start in ((0, 1001.0), (1, 1012.0), (2, 1025.0)):
            row = StepRow(job_id, step_id, "a.out", "n1", 1, "COMPLETED", 0, start, start + 1)
            values = {f: getattr(row, f) for f in StepRow.__slots__ if f != "attempt"}
            conn.execute(insert(old_steps).values(values))
        conn.execute(
            insert(old_running).values(
                job_id=job_id,
                step_id=3,
                attempt=2,
                name="b",
                nodes="n1",
                tasks="1",
                start_time=1030.0,
            )
        )
    assert store.migrate() == len(STEPS)
    steps = store.steps_of([job_id])
    assert [(r.step_id, r.attempt) for r in steps] == [(0, 0), (1, 1), (2, 2)]
    assert [(r.step_id, r.attempt) for r in store.running_steps()] == [(3, 2)]
    again = StepRow(job_id, 0, "b.out", "n1", 1, "FAILED", 1, 1031.0, 1032.0, attempt=2)
    store.record_step(again)  # a second step 0 of the job, in its latest run
    assert [(r.attempt, r.step_id) for r in store.steps_of([job_id])] == [
        (0, 0),
        (1, 1),
        (2, 0),
        (2, 2),
    ]
    assert store.last_step_id(job_id, 2) == 2
    store.close()
