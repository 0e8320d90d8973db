"""A submission sent with an ``Idempotency-Key`` may be sent again: the same user with the
same key gets the jobs of the first request, not new ones (also after a server restart),
for a day. PostgreSQL lost at a COMMIT leaves what that change wrote in doubt: whoever
takes the cluster's lock next reconciles it first, so a submission that landed is
scheduled at once and a resend with its key finds it, a start that landed is not made
again elsewhere, and a suspend, resume, requeue or reservation change that landed reaches
the agent and the scheduler."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import Any

import psycopg
import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict
from hal.core.job import Allocation, ArraySpec, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import commands, reservations
from hal.state.agents import AgentSession
from hal.state.cluster import Caller, Cluster
from hal.state.reservations import ReservationRequest
from hal.state.store import CommitOutcomeUnknown, SqlStateStore, SubmitKey
from hal.wire.agent import Cancel, Signal

ANN = Caller("ann")
ROOT = Caller("root", admin=True)


def spec(**kw: Any) -> JobSpec:
    return JobSpec(user="ann", script="#!/bin/sh\ntrue\n").with_changes(**kw)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def loaded(db_url: str, clock: VirtualClock | None = None) -> Cluster:
    cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock or VirtualClock(5.0))
    await cluster.load()
    return cluster


def test_a_submission_sent_again_with_its_key_gives_the_first_jobs(db_url: str) -> None:
    key = SubmitKey("ann", "k-1", "digest-a")
    batch = [spec(), spec(array=ArraySpec((0, 1, 2)))]

    async def scenario() -> None:
        cluster = await loaded(db_url)
        first = await cluster.submit(batch, key=key)
        assert [len(s.task_ids) for s in first] == [0, 3]
        assert await cluster.submit(batch, key=key) == first
        assert cluster.store.count_jobs() == 4
        await cluster.close()

        restarted = await loaded(db_url)  # the key is stored, not only remembered
        assert await restarted.submit(batch, key=key) == first
        # another body under the same key is refused; another user's key is their own
        with pytest.raises(Conflict, match="was used for a different submission"):
            await restarted.submit([spec()], key=SubmitKey("ann", "k-1", "digest-b"))
        other = await restarted.submit([spec(user="bob")], key=SubmitKey("bob", "k-1", "x"))
        assert other[0].job_id not in {s.job_id for s in first}
        assert restarted.store.count_jobs() == 5
        await restarted.close()

    run(scenario())


def test_keys_are_forgotten_after_a_day(db_url: str) -> None:
    key = SubmitKey("ann", "k-2", "d")

    async def scenario() -> None:
        clock = VirtualClock(5.0)
        cluster = await loaded(db_url, clock)
        first = await cluster.submit([spec()], key=key)
        clock.advance(3_600.0)
        assert await cluster.forget_old_submit_keys() == 0
        clock.advance(86_400.0)
        assert await cluster.forget_old_submit_keys() == 1
        again = await cluster.submit([spec()], key=key)
        assert again[0].job_id != first[0].job_id
        await cluster.close()

    run(scenario())


def _lose_commit_reply(store: SqlStateStore, monkeypatch: pytest.MonkeyPatch, lands: bool) -> None:
    """The next COMMITs reach PostgreSQL (or not: ``lands``) and their answer is lost."""
    real = store.engine.dialect.do_commit

    def do_commit(dbapi_connection: Any) -> None:
        if lands:
            real(dbapi_connection)
        else:
            dbapi_connection.rollback()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(store.engine.dialect, "do_commit", do_commit)


# PostgreSQL only: SQLite's commit is all or nothing, its outcome is never unknown
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("lands", [True, False], ids=["landed", "lost"])
def test_a_submission_with_an_unknown_outcome_is_found_again(
    db_url: str, monkeypatch: pytest.MonkeyPatch, lands: bool
) -> None:
    key = SubmitKey("ann", "k-3", "d")

    async def scenario() -> None:
        cluster = await loaded(db_url)
        before = cluster.revision
        with monkeypatch.context() as patch:
            _lose_commit_reply(cluster.store, patch, lands)
            with pytest.raises(CommitOutcomeUnknown):
                await cluster.submit([spec()], key=key)
        assert cluster.jobs == {} and cluster.in_doubt  # the mirror is left as it was

        await cluster.reconcile()  # what housekeeping does at its next tick
        assert not cluster.in_doubt
        assert len(cluster.unfinished) == (1 if lands else 0)  # landed: it will be scheduled
        assert cluster.revision == (before + 1 if lands else before)
        # the event stream reads the landed job.submitted from the store, not skips it
        assert cluster.events_since(before, 10) in (None, [])
        landed = await cluster.db(cluster.store.events_after, before, 10)
        assert [e.kind for e in landed] == (["job.submitted"] if lands else [])

        again = await cluster.submit([spec()], key=key)  # the client's resend
        assert cluster.store.count_jobs() == 1
        assert list(cluster.unfinished) == [again[0].job_id]
        await cluster.close()

    run(scenario())


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_cancel_that_landed_unseen_reaches_the_mirror(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:

    async def scenario() -> None:
        cluster = await loaded(db_url)
        done = await cluster.submit([spec(), spec()])
        with monkeypatch.context() as patch:
            _lose_commit_reply(cluster.store, patch, lands=True)
            with pytest.raises(CommitOutcomeUnknown):
                await commands.cancel(cluster, str(done[0].job_id), ANN)
        assert cluster.jobs[done[0].job_id].state is JobState.PENDING  # not known yet
        await commands.cancel(cluster, str(done[1].job_id), ANN)  # the next change reconciles first
        assert cluster.jobs[done[0].job_id].state is JobState.CANCELLED
        assert list(cluster.unfinished) == []
        await cluster.close()

    run(scenario())


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("lands", [True, False], ids=["landed", "lost"])
def test_a_reservation_changed_unseen_reaches_the_mirror(
    db_url: str, monkeypatch: pytest.MonkeyPatch, lands: bool
) -> None:
    async def scenario() -> None:
        store = SqlStateStore(db_url)
        store.migrate()
        with store.transaction() as tx:
            tx.upsert_node(Node("node1", ResourceVector(4, 8 * GiB)))
            tx.add_user("ann", "0" * 64, False, 0.0)
        cluster = await loaded(db_url)
        maint = ReservationRequest(
            name="maint", start=3_600.0, duration=600.0, nodes=("node1",), users=("ann",)
        )
        with monkeypatch.context() as patch:
            _lose_commit_reply(cluster.store, patch, lands)
            with pytest.raises(CommitOutcomeUnknown):
                await reservations.create(cluster, ROOT, maint)
        assert cluster.reservations == {} and cluster.doubtful

        await cluster.reconcile()
        assert not cluster.doubtful
        # landed: the scheduler honours it (and a second create says it exists); lost:
        # the admin's resend creates it
        assert list(cluster.reservations) == (["maint"] if lands else [])
        if lands:
            with pytest.raises(Conflict, match="reservation maint exists"):
                await reservations.create(cluster, ROOT, maint)
        else:
            await reservations.create(cluster, ROOT, maint)
        assert [r.name for r in store.load_reservations()] == ["maint"]
        await cluster.close()

    run(scenario())


def _with_nodes(db_url: str, *names: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    with store.transaction() as tx:
        for name in names:
            tx.upsert_node(Node(name, ResourceVector(4, 8 * GiB)))


async def _running_on_node1(db_url: str) -> tuple[Cluster, AgentSession, int]:
    """A cluster with one job started on node1, whose agent's outbox is empty."""
    _with_nodes(db_url, "node1")
    cluster = await loaded(db_url)
    session = cluster.agent_sessions["node1"] = AgentSession("node1")
    (a,) = await cluster.submit([spec()])
    alloc = Allocation(("node1",), (ResourceVector(1, 0),))
    assert await cluster.apply_plan(Plan(cluster.revision, (Placement(a.job_id, alloc),)))
    session.outbox.clear()
    return cluster, session, a.job_id


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_start_that_landed_unseen_is_not_started_again_elsewhere(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        _with_nodes(db_url, "node1", "node2")
        cluster = await loaded(db_url)
        for name in ("node1", "node2"):
            cluster.agent_sessions[name] = AgentSession(name)
        (a,) = await cluster.submit([spec()])
        one_cpu = (ResourceVector(1, 0),)

        def plan(node: str) -> Plan:
            return Plan(cluster.revision, (Placement(a.job_id, Allocation((node,), one_cpu)),))

        with monkeypatch.context() as patch:
            _lose_commit_reply(cluster.store, patch, lands=True)
            with pytest.raises(CommitOutcomeUnknown):
                await cluster.apply_plan(plan("node1"))
        # the next pass, on the memory of before, places it on node2: refused, since the
        # lock reconciles before the plan is checked
        assert await cluster.apply_plan(plan("node2")) == []
        job = cluster.jobs[a.job_id]
        assert job.state is JobState.RUNNING and job.allocation is not None
        assert job.allocation.nodes == ("node1",)
        assert a.job_id in cluster.usage["node1"].jobs and "node2" not in cluster.usage
        launched = {n: [i.job_id for i in s.outbox] for n, s in cluster.agent_sessions.items()}
        assert launched == {"node1": [a.job_id], "node2": []}
        await cluster.close()

    run(scenario())


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_suspend_and_a_resume_that_landed_unseen_reach_the_agent(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        cluster, session, job_id = await _running_on_node1(db_url)
        for resume, signum in ((False, signal.SIGSTOP), (True, signal.SIGCONT)):
            with monkeypatch.context() as patch:
                _lose_commit_reply(cluster.store, patch, lands=True)
                with pytest.raises(CommitOutcomeUnknown):
                    await commands.suspend(cluster, str(job_id), ROOT, resume=resume)
            assert session.outbox == []  # not known to have landed
            await cluster.reconcile()
            assert session.outbox == [Signal(job_id=job_id, signal=signum)]
            session.outbox.clear()
        assert cluster.jobs[job_id].state is JobState.RUNNING
        await cluster.close()

    run(scenario())


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_requeue_that_landed_unseen_ends_the_job_on_its_agent(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        cluster, session, job_id = await _running_on_node1(db_url)
        with monkeypatch.context() as patch:
            _lose_commit_reply(cluster.store, patch, lands=True)
            with pytest.raises(CommitOutcomeUnknown):
                await commands.requeue(cluster, str(job_id), ROOT)
        await cluster.reconcile()
        # ended as the requeue would have: its finish report puts it back in the queue
        wait = cluster.config.kill_wait_seconds
        ended = Cancel(job_id=job_id, state="PENDING", kill_wait_seconds=wait, attempt=0)
        assert session.outbox == [ended]
        assert cluster.jobs[job_id].state is JobState.COMPLETING
        await cluster.close()

    run(scenario())


def test_the_same_key_sent_three_times_at_once_stores_one_submission(db_url: str) -> None:
    key = SubmitKey("ann", "k-4", "d")

    async def scenario() -> None:
        cluster = await loaded(db_url)
        answers = await asyncio.gather(*(cluster.submit([spec()], key=key) for _ in range(3)))
        assert answers[0] == answers[1] == answers[2]
        assert cluster.store.count_jobs() == 1 and len(cluster.unfinished) == 1
        await cluster.close()

    run(scenario())
