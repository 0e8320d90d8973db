"""``[accounting]`` purges on real SQLite and PostgreSQL: events and finished jobs past
their retention are deleted in batches, recent ones stay, and nothing the server or
``sacct`` still needs goes (active jobs, jobs in memory, dependency targets, part of an
array or het job, the newest event whose id is the store's revision)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sqlalchemy import func, inspect, select, text

from hal.config.accounting import DAY_S, AccountingConfig, Retention
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, ArraySpec, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.syntax import parse_dependency
from hal.state import commands, schema
from hal.state.cluster import Caller, Cluster
from hal.state.migrations import STEPS
from hal.state.retention import RecordPurge, purge_jobs
from hal.state.store import SqlStateStore

ANN = Caller("ann")
SCRIPT = "#!/bin/sh\ntrue\n"
START = 1_000_000.0


def spec(**kw: object) -> JobSpec:
    return JobSpec(user="ann", script=SCRIPT).with_changes(**kw)


def run(db_url: str, scenario: Callable[[Cluster, VirtualClock], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = VirtualClock(START)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        try:
            await scenario(cluster, clock)
        finally:
            await cluster.close()

    asyncio.run(main())


def purger(cluster: Cluster, events: float | None = None, jobs: float | None = None) -> RecordPurge:
    """A purge with retentions in seconds, two rows a batch (so batching is exercised)."""
    config = AccountingConfig(
        purge_events_after=None if events is None else Retention(seconds=events),
        purge_jobs_after=None if jobs is None else Retention(seconds=jobs),
    )
    return RecordPurge(cluster, config, batch=2)


def count(cluster: Cluster, table: str) -> int:
    with cluster.store.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def sacct(cluster: Cluster) -> list[int]:
    return [j.id for j in cluster.store.history()]


async def ended(cluster: Cluster, *specs: JobSpec) -> list[int]:
    """Submit and cancel at once: jobs that ended now."""
    done = await cluster.submit(list(specs))
    for s in done:
        await commands.cancel(cluster, str(s.job_id), ANN)
    return [s.job_id for s in done]


def test_old_events_go_and_recent_ones_stay(db_url: str) -> None:
    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        await ended(cluster, spec(), spec(), spec())  # 6 events now
        clock.advance(10 * DAY_S)
        await cluster.submit([spec()])
        revision = cluster.revision
        done = await purger(cluster, events=5 * DAY_S).purge()
        assert (done.events, done.jobs) == (6, 0)
        assert [e.kind for e in cluster.store.events_after(0)] == ["job.submitted"]
        assert cluster.store.revision() == revision
        # the event stream (memory first, else the store) no longer serves them either
        found = cluster.events_since(0, 100)
        stream = cluster.store.events_after(0) if found is None else found
        assert [e.id for e in stream] == [revision]
        assert len(sacct(cluster)) == 4  # jobs are another retention

    run(db_url, scenario)


def test_the_newest_event_stays_however_old_so_ids_are_never_given_again(db_url: str) -> None:
    """Its id is the store's revision, and SQLite gives an emptied table's ids out again:
    an event-stream client resuming after id 3 would miss the new events 1 to 3."""

    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        await ended(cluster, spec(), spec())
        newest = cluster.revision
        clock.advance(30 * DAY_S)
        assert (await purger(cluster, events=DAY_S).purge()).events == newest - 1
        assert [e.id for e in cluster.store.events_after(0)] == [newest]
        await cluster.submit([spec()])
        assert [e.id for e in cluster.store.events_after(0)] == [newest, newest + 1]

    run(db_url, scenario)


def test_finished_jobs_past_retention_go_with_their_scripts(db_url: str) -> None:
    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
        old = await ended(cluster, spec(), spec(), spec())
        (running,) = await cluster.submit([spec()])
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        await cluster.apply_plan(Plan(cluster.revision, (Placement(running.job_id, one_cpu),)))
        (pending,) = await cluster.submit([spec()])
        clock.advance(10 * DAY_S)
        recent = await ended(cluster, spec())
        clock.advance(600)  # past MinJobAge: only the store has them
        cluster.prune()
        done = await purger(cluster, jobs=5 * DAY_S).purge()
        assert done.jobs == 3
        assert sacct(cluster) == [running.job_id, pending.job_id, *recent]
        assert count(cluster, "job_scripts") == 3
        assert cluster.store.history(ids=old) == []

    run(db_url, scenario)


def test_jobs_in_memory_or_named_in_a_dependency_stay(db_url: str) -> None:
    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        target, other = await ended(cluster, spec(), spec())
        clock.advance(10 * DAY_S)
        cluster.prune()
        # waits in the queue (no nodes) for a job that ended long ago
        await cluster.submit([spec(dependency=parse_dependency(f"afterany:{target}"))])
        just_ended = await ended(cluster, spec())
        clock.advance(10)
        # a retention shorter than MinJobAge still leaves the jobs in memory alone
        done = await purger(cluster, jobs=1.0).purge()
        assert done.jobs == 1
        assert other not in sacct(cluster)
        assert {target, *just_ended} <= set(sacct(cluster))

    run(db_url, scenario)


def test_a_submission_naming_an_old_job_and_a_purge_at_once_keep_the_target(
    db_url: str,
) -> None:
    """The submission checked that its target exists, then the purge deleted it before
    the submission was stored: the job waited forever (DependencyNeverSatisfied)."""

    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        (target,) = await ended(cluster, spec())
        clock.advance(10 * DAY_S)
        cluster.prune()  # the submission reads the target from the store
        waiter = spec(dependency=parse_dependency(f"afterany:{target}"))
        submitted, purged = await asyncio.gather(
            cluster.submit([waiter]), purger(cluster, jobs=5 * DAY_S).purge()
        )
        assert purged.jobs == 0
        assert sacct(cluster) == [target, submitted[0].job_id]

    run(db_url, scenario)


def test_an_array_goes_only_when_every_element_ended_before_the_cutoff(db_url: str) -> None:
    """sacct of an array whose first elements were purged would show half of it."""

    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        (array,) = await cluster.submit([spec(array=ArraySpec((0, 1, 2)))])
        await commands.cancel(cluster, f"{array.job_id}_0", ANN)
        await commands.cancel(cluster, f"{array.job_id}_1", ANN)
        lone = await ended(cluster, spec())
        clock.advance(10 * DAY_S)
        await commands.cancel(cluster, f"{array.job_id}_2", ANN)
        clock.advance(600)
        cluster.prune()
        assert (await purger(cluster, jobs=5 * DAY_S).purge()).jobs == 1
        assert sacct(cluster) == list(array.task_ids)
        clock.advance(10 * DAY_S)
        assert (await purger(cluster, jobs=5 * DAY_S).purge()).jobs == 3
        assert sacct(cluster) == [] and count(cluster, "job_scripts") == 0
        assert cluster.store.history(ids=lone) == []

    run(db_url, scenario)


def test_a_het_job_goes_whole(db_url: str) -> None:
    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        het = await cluster.submit([spec(), spec()], het=True)
        leader, component = (s.job_id for s in het)
        await commands.cancel(cluster, str(leader), ANN)
        clock.advance(10 * DAY_S)
        # a component that ended later than its leader (its row as a late report wrote it)
        with cluster.store.transaction() as tx:
            (row,) = cluster.store.history(ids=[component])
            tx.update_jobs([row.evolve(end_time=clock.now())])
        clock.advance(600)
        cluster.prune()
        assert (await purger(cluster, jobs=5 * DAY_S).purge()).jobs == 0
        assert sacct(cluster) == [leader, component]
        clock.advance(10 * DAY_S)
        assert (await purger(cluster, jobs=5 * DAY_S).purge()).jobs == 2
        assert sacct(cluster) == []

    run(db_url, scenario)


def test_batches_step_past_jobs_that_must_stay(db_url: str) -> None:
    """A batch that deletes nothing (all kept) must not be read again and again."""

    async def scenario(cluster: Cluster, clock: VirtualClock) -> None:
        ids = await ended(cluster, *[spec() for _ in range(5)])
        (array,) = await cluster.submit([spec(array=ArraySpec((0, 1, 2)))])
        await commands.cancel(cluster, str(array.job_id), ANN)
        clock.advance(DAY_S)
        store, before = cluster.store, clock.now()
        keep = {*ids[1:], array.job_id}
        deleted, cursor, reads = 0, None, 0
        while True:
            done, cursor = await cluster.db(purge_jobs, store, before, keep, cursor, 2)
            deleted, reads = deleted + done, reads + 1
            if cursor is None:
                break
        assert (deleted, reads) == (1, 5)  # 8 rows read 2 at a time, then none
        assert sacct(cluster) == [*ids[1:], *array.task_ids]
        assert all(j.state is JobState.CANCELLED for j in cluster.store.history())

    run(db_url, scenario)


def test_a_version_6_database_gains_the_event_time_index(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    with store.engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_events_time"))
        conn.execute(text("UPDATE hal_meta SET value = 6 WHERE key = 'schema_version'"))
    assert store.migrate() == len(STEPS)
    with store.engine.connect() as conn:
        names = {ix["name"] for ix in inspect(conn).get_indexes("events")}
        assert "ix_events_time" in names
        assert conn.execute(select(func.count()).select_from(schema.events)).scalar_one() == 0
    store.close()
