"""The SQL state store against real SQLite and the real PostgreSQL server: what only SQL
has (migrations, query plans, statement limits) and the mirror over it. What every
``StateStore`` promises is the conformance suite's (test_store_conformance.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import InvalidRequest, NotFound, PermissionDenied
from hal.core.job import Job, JobSpec
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.migrations import STEPS
from hal.state.store import IN_LIST, SqlStateStore
from hal.testing.examples import FULL


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"user": "alice", "script": "#!/bin/sh\ntrue\n"}
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_migrate_is_idempotent_and_versioned(db_url: str) -> None:
    """A server restart runs migrations again; they must be a no-op the second time."""
    store = SqlStateStore(db_url)
    assert store.migrate() == len(STEPS)
    assert store.migrate() == len(STEPS)
    assert store.revision() == 0
    store.close()


def test_a_version_1_database_gains_priority_fixed(db_url: str) -> None:
    """A database from before multifactor priority (schema v1, no jobs.priority_fixed)
    is upgraded in place at start-up, and an administrator's priority is then kept."""
    from sqlalchemy import text

    store = SqlStateStore(db_url)
    store.migrate()
    with store.engine.begin() as conn:  # back to what release v1 created
        conn.execute(text("ALTER TABLE jobs DROP COLUMN priority_fixed"))
        conn.execute(text("UPDATE hal_meta SET value = 1 WHERE key = 'schema_version'"))
    assert store.migrate() == len(STEPS)
    cluster = Cluster(store, HalConfig(), VirtualClock(1000.0))

    async def scenario() -> None:
        await cluster.load()
        done = await cluster.submit([spec()])
        await commands.update(cluster, str(done[0].job_id), Caller("root", admin=True), priority=7)
        (job,) = store.history()
        assert job.priority == 7 and job.priority_fixed
        await cluster.close()

    asyncio.run(scenario())


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_submit_persists_jobs_with_events_and_survives_reload(db_url: str) -> None:
    """Jobs acknowledged by submit are in the database, with one event each, and a new
    server process (a fresh Cluster on the same database) sees them."""
    clock = VirtualClock(1000.0)

    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        from hal.slurm.syntax import parse_array

        done = await cluster.submit([spec(name="a"), spec(name="arr", array=parse_array("0-4%2"))])
        assert done[0].job_id == 1
        assert done[1].job_id == 2 and done[1].task_ids == (2, 3, 4, 5, 6)
        assert cluster.revision == 6
        await cluster.close()

        again = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await again.load()
        assert sorted(again.jobs) == [1, 2, 3, 4, 5, 6]
        elements = again.resolve("2_[1-3]")
        assert [j.array_task_id for j in elements] == [1, 2, 3]
        assert all(j.array_max_running == 2 for j in elements)
        # the elements share one spec object again (the pass decides them once per spec)
        assert len({id(j.spec) for j in elements}) == 1
        assert again.jobs[1].spec is not elements[0].spec
        assert again.jobs[1].spec.script == "#!/bin/sh\ntrue\n"
        assert again.revision == 6
        events = again.store.events_after(0)
        assert [e.kind for e in events] == ["job.submitted"] * 6
        await again.close()

    run(scenario())


def test_unknown_partition_and_dependency_are_rejected(db_url: str) -> None:
    """Bad input gets a clear error naming the field, and nothing is stored."""

    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(5.0))
        await cluster.load()
        with pytest.raises(InvalidRequest, match="Invalid partition name") as err:
            await cluster.submit([spec(partitions=("nope",))])
        assert err.value.field == "partition"
        from hal.slurm.syntax import parse_dependency

        with pytest.raises(InvalidRequest, match="dependency problem"):
            await cluster.submit([spec(dependency=parse_dependency("afterok:99"))])
        assert cluster.store.count_jobs() == 0
        await cluster.close()

    run(scenario())


def test_cancel_checks_ownership_and_history_keeps_the_job(db_url: str) -> None:
    """Users cannot cancel other users' jobs; admins can; sacct sees cancelled jobs."""

    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(5.0))
        await cluster.load()
        [done] = await cluster.submit([spec()])
        with pytest.raises(PermissionDenied):
            await commands.cancel(cluster, str(done.job_id), Caller("mallory"))
        assert await commands.cancel(cluster, str(done.job_id), Caller("root", admin=True)) == [1]
        assert cluster.jobs[1].state is JobState.CANCELLED
        assert cluster.jobs[1].cancelled_by == "root"
        with pytest.raises(NotFound):
            cluster.resolve("77")
        history = cluster.store.history(users=["alice"])
        assert [(j.id, j.state) for j in history] == [(1, JobState.CANCELLED)]
        await cluster.close()

    run(scenario())


def test_max_submit_jobs_per_user_refuses_what_would_go_over(db_url: str) -> None:
    """QoS ``normal`` allows 3 pending or running jobs per user: array elements count
    one each, other users and other QoS are not counted, and a refused batch stores
    nothing."""
    from hal.core.priority import SUBMIT_LIMIT_MESSAGE, PriorityPolicy, Qos
    from hal.slurm.syntax import parse_array

    config = HalConfig(
        priority=PriorityPolicy(qos=(Qos("normal", max_submit_jobs_per_user=3), Qos("high")))
    )

    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), config, VirtualClock(5.0))
        await cluster.load()
        await cluster.submit([spec(array=parse_array("0-1"))])  # 2 of alice's 3
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(), spec()])
        assert str(err.value) == SUBMIT_LIMIT_MESSAGE
        assert err.value.field == "jobs[1].qos"
        assert cluster.store.count_jobs() == 2
        await cluster.submit([spec(user="bob"), spec(qos="high"), spec()])  # alice's 3rd
        with pytest.raises(InvalidRequest, match="job submit limit"):
            await cluster.submit([spec()])
        assert cluster.store.count_jobs() == 5
        await cluster.close()

    run(scenario())


def test_account_submit_limits_refuse_what_would_go_over(db_url: str) -> None:
    """Account ``physics`` allows each user 3 pending or running jobs
    (``max_submit_jobs``, MaxSubmitJobs) and all its users 4 (``grp_submit_jobs``,
    GrpSubmitJobs); jobs charged to ``lattice`` below it count against it too (alice's
    default account), jobs of ``chemistry`` do not, and a cancelled job frees its place."""
    from hal.core.priority import SUBMIT_LIMIT_MESSAGE, Account, PriorityPolicy, UserAccount
    from hal.slurm.syntax import parse_array

    policy = PriorityPolicy(
        accounts=(
            Account("physics", max_submit_jobs=3, grp_submit_jobs=4),
            Account("lattice", "physics"),
            Account("chemistry"),
        ),
        users=(
            UserAccount("alice", "lattice", default=True),
            UserAccount("alice", "chemistry"),
            UserAccount("alice", "physics"),
            UserAccount("bob", "physics", default=True),
        ),
    )

    async def scenario() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(priority=policy), VirtualClock(5.0))
        await cluster.load()
        await cluster.submit([spec(array=parse_array("0-1"))])  # 2 of alice's 3, in lattice
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(account="chemistry"), spec(), spec()])
        assert str(err.value) == SUBMIT_LIMIT_MESSAGE
        assert err.value.field == "jobs[2].account"  # MaxSubmitJobs: alice's 4th
        assert cluster.store.count_jobs() == 2
        await cluster.submit([spec(account="chemistry"), spec(account="physics")])  # 3 of 3
        with pytest.raises(InvalidRequest) as err:
            await cluster.submit([spec(user="bob"), spec(user="bob")])
        assert err.value.field == "jobs[1].account"  # GrpSubmitJobs: physics' 5th job
        await cluster.submit([spec(user="bob")])  # physics' 4th
        with pytest.raises(InvalidRequest, match="job submit limit"):
            await cluster.submit([spec()])  # alice's 4th
        assert await commands.cancel(cluster, "1_0", Caller("alice")) == [1]  # 2 of alice's left
        await cluster.submit([spec()])  # alice's 3rd again, physics' 4th
        with pytest.raises(InvalidRequest, match="job submit limit"):
            await cluster.submit([spec(user="bob")])  # physics' 5th
        assert cluster.store.count_jobs() == 6
        await cluster.close()

    run(scenario())


def _plans_of(store: SqlStateStore, reads: Callable[[], None]) -> list[list[str]]:
    """The SQLite query plan (EXPLAIN QUERY PLAN) of each job read ``reads`` made."""
    from sqlalchemy import event

    ran: list[tuple[str, object]] = []

    def seen(_c: object, _cur: object, sql: str, params: object, *_: object) -> None:
        if sql.lstrip().upper().startswith("SELECT") and "FROM jobs" in sql:
            ran.append((sql, params))

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        reads()
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    with store.engine.connect() as conn:
        return [
            [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
            for sql, params in ran
        ]


def _two_jobs(tmp_path: Path) -> SqlStateStore:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(3)
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        done = JobState.COMPLETED
        jobs = [
            Job(id=1, spec=spec(), partition="p"),
            Job(id=2, spec=spec(), partition="p", state=done, start_time=1.0, end_time=9.0),
            Job(id=3, spec=spec(), partition="p", state=done, start_time=1.0, end_time=9.0),
        ]
        tx.insert_jobs(jobs, [1, 1, 1])
    return store


def test_history_and_start_up_reads_use_the_indexes_on_sqlite(tmp_path: Path) -> None:
    """``sacct`` (a user's jobs since midnight) and the server's start-up read name the
    end-time and state indexes; ordered by the primary key, SQLite walked the whole table
    in key order instead (1 s over a million jobs, on the thread every write waits for)."""
    store = _two_jobs(tmp_path)

    def reads() -> None:
        assert [j.id for j in store.history(users=["alice"], start_after=5.0)] == [1, 2, 3]
        assert [j.id for j in store.history(start_after=10.0)] == [1]
        assert [j.id for j in store.load_jobs(active_or_ended_after=5.0)] == [1, 2, 3]

    plans = _plans_of(store, reads)
    store.close()
    assert len(plans) == 3
    for plan in plans:
        assert not any(step.startswith("SCAN jobs") for step in plan), plan
        assert any("ix_jobs_end" in step for step in plan), plan


def test_the_predictors_history_pages_walk_the_end_time_index_on_sqlite(
    tmp_path: Path,
) -> None:
    """At start the prediction service replays the last 50,000 runs, 5,000 a page, each
    page after the last one's (end time, id). SQLite read every job that ended before it
    and sorted them all (4 s a page over a million jobs, 40 s of start-up on the thread
    every write waits for); bounded by the end time, it walks the index from there."""
    store = _two_jobs(tmp_path)

    def reads() -> None:
        assert [j.id for j in store.finished_runs(1)] == [3]
        assert [j.id for j in store.finished_runs(1, (9.0, 3))] == [2]

    plans = _plans_of(store, reads)
    store.close()
    assert len(plans) == 2
    for plan in plans:
        assert any("ix_jobs_end" in step for step in plan), plan
        assert not any("MULTI-INDEX OR" in step for step in plan), plan
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan


def test_when_a_dependency_was_met_is_kept_over_a_restart(db_url: str) -> None:
    """A job whose dependency is met while every node is busy waits on, eligible since
    that moment (its age, backfill protection and switch wait count from it, as Slurm's
    EligibleTime). A server restarted meanwhile forgot it: the time lived in memory only
    and the job counted as eligible since it was submitted, 1000 s earlier."""
    from hal.core.node import Node
    from hal.core.resources import GiB
    from hal.scheduler.plugins import build_scheduler
    from hal.server.profile import server_profile
    from hal.slurm.syntax import parse_dependency

    config = HalConfig()
    clock = VirtualClock(1000.0)
    scheduler = build_scheduler(server_profile(config))

    async def started() -> Cluster:
        cluster = Cluster(SqlStateStore(db_url), config, clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=1, memory_bytes=GiB))
        return cluster

    async def run_pass(cluster: Cluster) -> None:
        snap = await cluster.fill_related(cluster.snapshot())
        await cluster.apply_plan(scheduler.schedule(snap))

    async def scenario() -> None:
        cluster = await started()
        await cluster.submit([spec()])  # holds the only CPU from the first pass on
        (first,) = await cluster.submit([spec(hold=True)])
        dependency = parse_dependency(f"afterany:{first.job_id}")
        (waiting,) = await cluster.submit([spec(dependency=dependency)])
        await run_pass(cluster)
        clock.advance(1000.0)
        await commands.cancel(cluster, str(first.job_id), Caller("alice"))
        await run_pass(cluster)
        job = cluster.jobs[waiting.job_id]
        assert job.state is JobState.PENDING and job.eligible_since(clock.now()) == 2000.0
        await cluster.close()
        clock.advance(10.0)
        again = await started()
        job = again.jobs[waiting.job_id]
        assert job.state is JobState.PENDING
        assert job.eligible_since(clock.now()) == 2000.0
        await again.close()

    asyncio.run(scenario())


def test_a_gather_job_may_wait_on_more_jobs_than_one_statement_takes(db_url: str) -> None:
    """A workflow's gather step waits on every job of its scatter step (afterok on
    33,000 ids) that ended long ago, so they are no longer in memory: its submission and
    each pass read them from the store. One IN list of them was past PostgreSQL's 65,535
    parameters a statement: the submission failed, and after a restart every pass did.
    Now no statement reads all the ids at once: CI names 33,000 of them (past that
    limit), a developer's run 2,500 (three IN lists of ``IN_LIST``), the same reads,
    a thirteenth of the rows to write and load."""
    from sqlalchemy import event

    from hal.core.job import Dependency, DependencyKind, DependencyTerm

    count = 33_000 if FULL else 2_500  # CI: twice as many parameters (ids, array ids)
    assert count > 2 * IN_LIST
    store = SqlStateStore(db_url)
    store.migrate()
    with store.transaction() as tx:
        tx.reserve_job_ids(count)
        tx.insert_scripts([(1, "#!/bin/sh\n")])
        done = JobState.COMPLETED
        scatter = [Job(id=i, spec=spec(), partition="p", state=done, end_time=1.0)
                   for i in range(1, count + 1)]  # fmt: skip
        tx.insert_jobs(scatter, [1] * count)
    store.close()
    afterok = DependencyTerm(DependencyKind.AFTEROK, tuple(range(1, count + 1)))
    widest = 0  # the most parameters one SELECT had

    def counted(*args: Any) -> None:
        nonlocal widest
        statement, parameters, executemany = args[2], args[3], args[5]
        if not executemany and statement.lstrip().upper().startswith("SELECT"):
            widest = max(widest, len(parameters))

    async def scenario() -> None:
        read = SqlStateStore(db_url)
        event.listen(read.engine, "before_cursor_execute", counted)
        cluster = Cluster(read, HalConfig(), VirtualClock(100_000.0))
        await cluster.load()
        (gather,) = await cluster.submit([spec(dependency=Dependency((afterok,)))])
        snap = await cluster.fill_related(cluster.snapshot())
        assert [j.id for j in snap.pending] == [gather.job_id]
        assert sorted(snap.related) == list(range(1, count + 1))
        await cluster.close()

    asyncio.run(scenario())
    assert IN_LIST <= widest < count  # the ids were read, in lists shorter than all of them


def test_a_job_ended_while_pending_before_v18_is_taken_as_eligible_from_its_submission(
    db_url: str,
) -> None:
    """sacct's windows go by EligibleTime (docs/slurm-checks.md); a job cancelled while
    pending before HAL kept it had none, and migration 18 gives it its submission, so it
    stays listed. A job that ran keeps its own; a pending one keeps none."""
    from sqlalchemy import text

    store = SqlStateStore(db_url)
    store.migrate()
    cluster = Cluster(store, HalConfig(), VirtualClock(1000.0))

    async def scenario() -> list[int]:
        await cluster.load()
        done = await cluster.submit([spec(), spec(), spec()])
        await commands.cancel(cluster, str(done[0].job_id), Caller("root", admin=True))
        await cluster.close()
        return [d.job_id for d in done]

    cancelled, ran, waiting = asyncio.run(scenario())
    with store.engine.begin() as conn:  # as a server before v18 left them
        conn.execute(text("UPDATE jobs SET eligible_time = NULL"))
        conn.execute(
            text("UPDATE jobs SET state = 'COMPLETED', start_time = 1010, eligible_time = 1005 "
                 f"WHERE id = {ran}")
        )  # fmt: skip
        conn.execute(text("UPDATE hal_meta SET value = 17 WHERE key = 'schema_version'"))
    assert store.migrate() == len(STEPS)
    by_id = {j.id: j for j in store.history()}
    assert by_id[cancelled].eligible_time == by_id[cancelled].submit_time
    assert by_id[ran].eligible_time == 1005
    assert by_id[waiting].eligible_time is None
    store.close()
