"""The conformance suite of ``hal.state.store_protocol.StateStore``: every implementation
passes every case in ``CASES``, so a test of the state logic over the memory store means
what it would over SQLite or PostgreSQL.

A case is a function of a ``StoreOpener``: each call of it opens the same database anew
(empty at the first call), as a server started again does. A test runs each case
against its store::

    @pytest.mark.parametrize("case", CASES, ids=case_name)
    def test_memory_store(case: Case) -> None:
        store = MemoryStateStore()
        case(lambda: store)  # (the same object: what it holds stays)

Cases raise ``AssertionError`` on a difference; they open the store through ``opened``,
which migrates it and closes it again. For tests of ``hal.state`` (import it explicitly:
it is not part of ``hal.testing``'s core-only surface).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from hal.core.feedback import FeedbackSeries
from hal.core.job import Allocation, ArraySpec, Job, JobSpec, SignalSpec
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, NodeState, PendingReason
from hal.state.rows import (
    EventRow,
    PartitionOverride,
    RunningStepRow,
    RunRow,
    StepRow,
    StoredUser,
    SubmitKey,
    TrafficEdgeRow,
)
from hal.state.store_protocol import StateStore, StateTransaction, SubmitKeyTaken
from hal.testing.builders import make_job, make_node, parse_dependency

StoreOpener = Callable[[], StateStore]
Case = Callable[[StoreOpener], None]
CASES: list[Case] = []
SCRIPT = "#!/bin/sh\ntrue\n"


def case(fn: Case) -> Case:
    """Add ``fn`` to ``CASES``."""
    CASES.append(fn)
    return fn


def case_name(fn: Case) -> str:
    """A case's test id: its function's name."""
    return fn.__name__


@contextmanager
def opened(open_store: StoreOpener) -> Iterator[StateStore]:
    """The store ``open_store`` opens, migrated; closed at the end of the block."""
    store = open_store()
    try:
        store.migrate()
        yield store
    finally:
        store.close()


class raises:  # (as pytest.raises reads: pytest is a dev dependency, not for src)
    """The block must raise ``kind`` (which goes no further)."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        if kind is None:
            raise AssertionError(f"{self.kind.__name__} was not raised")
        return issubclass(kind, self.kind)


class Boom(Exception):
    """What a case raises inside a transaction to roll it back."""


def put_jobs(store: StateStore, *jobs: Job, script_id: int | None = None) -> None:
    """Store ``jobs`` in one transaction, each with a script of its own (or all with
    ``script_id``'s, as an array's elements share their first id's)."""
    with store.transaction() as tx:
        if script_id is None:
            tx.insert_scripts([(j.id, j.spec.script) for j in jobs])
        else:
            tx.insert_scripts([(script_id, jobs[0].spec.script)])
        tx.insert_jobs(jobs, [j.id if script_id is None else script_id for j in jobs])


def ended(job_id: int, end: float, state: JobState = JobState.COMPLETED) -> Job:
    """A job that ran from 1.0 and ended at ``end``."""
    job = make_job(job_id).running_on("n1", start=1.0).build()
    return job.evolve(state=state, end_time=end)


def ids(jobs: Sequence[Job]) -> list[int]:
    return [j.id for j in jobs]


def with_columns(job: Job, script_id: int, extra: dict[str, str] | None = None) -> Job:
    """``job`` as the store reads it back: ``extra`` has its script id and usage too."""
    base = {"script_id": str(script_id), "max_rss": "0", "cpu_seconds": "0.0"}
    return job.evolve(extra={**job.extra, **base, **(extra or {})})


def same_jobs(found: Sequence[Job], expected: Sequence[Job]) -> None:
    """Equal jobs, and equal ``extra`` (which ``Job``'s equality leaves out)."""
    assert list(found) == list(expected), (found, expected)
    assert [j.extra for j in found] == [j.extra for j in expected]


# -- the store as a whole ---------------------------------------------------------------------
@case
def a_new_store_is_empty_and_migrates_again(open_store: StoreOpener) -> None:
    """A server's first start: nothing stored yet. Each start migrates again: a no-op
    giving the same version."""
    with opened(open_store) as store:
        store.ping()
        assert store.migrate() == store.migrate() > 0
        assert store.revision() == 0
        assert store.events_after(0) == []
        assert store.count_jobs() == 0
        assert store.load_jobs(active_or_ended_after=0.0) == []
        assert store.history() == store.jobs_by_id([1]) == []
        assert store.finished_runs(10) == [] and store.finished_usage(10) == []
        assert store.runs_of([1]) == [] and store.steps_of([1]) == []
        assert store.running_steps() == []
        assert store.last_step_id(1, 0) == -1
        assert store.load_nodes() == [] and store.load_reservations() == []
        assert store.partition_overrides() == [] and store.users() == []
        assert store.user_by_token_hash("0" * 64) is None
        assert store.find_submit_key("ann", "k") is None
        assert store.forget_submit_keys(1e12) == 0


@case
def what_was_committed_is_read_back_by_the_store_opened_again(open_store: StoreOpener) -> None:
    """A server restart: jobs, events, nodes, users, reservations, overrides, keys, runs
    and steps are back, and job ids go on from where they were."""
    job = make_job(1).build()
    with opened(open_store) as store:
        with store.transaction() as tx:
            assert tx.reserve_job_ids(1) == 1
            tx.insert_scripts([(1, SCRIPT)])
            tx.insert_jobs([job], [1])
            tx.add_events([EventRow(5.0, "job.submitted", job_id=1)])
            tx.upsert_node(make_node("n1").build())
            tx.add_user("ann", "a" * 64, False, 0.0)
            tx.put_reservation(Reservation("maint", 0.0, 10.0, ("n1",)))
            tx.put_partition_override(PartitionOverride("batch", "root", 1.0, state="DOWN"))
            tx.add_submit_key(SubmitKey("ann", "k", "d"), 5.0, [(1, 0)])
            tx.add_runs([_run(1, 0)])
        store.record_step(_step(1, 0, 0))
        store.keep_running_step(_running(1, 0, 1))
    with opened(open_store) as again:
        same_jobs(again.load_jobs(active_or_ended_after=0.0), [with_columns(job, 1)])
        assert [e.kind for e in again.events_after(0)] == ["job.submitted"]
        assert again.revision() == 1
        assert [n.name for n in again.load_nodes()] == ["n1"]
        assert again.users() == [StoredUser("ann", admin=False)]
        assert [r.name for r in again.load_reservations()] == ["maint"]
        assert [o.name for o in again.partition_overrides()] == ["batch"]
        assert again.find_submit_key("ann", "k") == ("d", [(1, 0)])
        assert again.runs_of([1]) == [_run(1, 0)]
        assert again.steps_of([1]) == [_step(1, 0, 0)]
        assert again.running_steps() == [_running(1, 0, 1)]
        with again.transaction() as tx:
            assert tx.reserve_job_ids(2) == 2


# -- transactions --------------------------------------------------------------------------
@case
def job_ids_are_reserved_in_consecutive_blocks(open_store: StoreOpener) -> None:
    """Arrays need consecutive ids; two reservations never overlap."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            a = tx.reserve_job_ids(10)
            b = tx.reserve_job_ids(1)
        with store.transaction() as tx:
            c = tx.reserve_job_ids(5)
        assert (a, b, c) == (1, 11, 12)


@case
def a_failed_transaction_writes_nothing(open_store: StoreOpener) -> None:
    """A change and its event rows commit together or not at all: a transaction that
    raises leaves every table as it was, and its reserved ids are given again."""
    before = make_job(1).build()
    override = PartitionOverride("batch", "root", 1.0, max_nodes=2)
    with opened(open_store) as store:
        put_jobs(store, before)
        with store.transaction() as tx:
            tx.upsert_node(make_node("n1").cpus(2).build())
            tx.add_user("ann", "a" * 64, False, 0.0)
            tx.put_reservation(Reservation("maint", 0.0, 10.0, ("n1",)))
            tx.put_partition_override(override)
        with raises(Boom), store.transaction() as tx:
            assert tx.reserve_job_ids(3) == 1
            tx.insert_scripts([(2, SCRIPT)])
            tx.insert_jobs([make_job(2).build()], [2])
            tx.update_jobs([before.evolve(state=JobState.CANCELLED, end_time=9.0)])
            tx.record_usage([(1, 5, 1.0, None, None)])
            tx.add_runs([_run(1, 0)])
            tx.add_events([EventRow(1.0, "job.submitted", job_id=2)])
            tx.upsert_node(make_node("n1").cpus(8).build())
            tx.upsert_node(make_node("n2").build())
            tx.delete_user("ann")
            tx.add_user("bob", "b" * 64, True, 0.0)
            tx.delete_reservation("maint")
            tx.clear_partition_overrides()
            tx.add_submit_key(SubmitKey("ann", "k", "d"), 1.0, [(2, 0)])
            raise Boom
        assert tx.stored_events  # it was given ids, never committed
        same_jobs(store.load_jobs(active_or_ended_after=0.0), [with_columns(before, 1)])
        assert store.count_jobs() == 1 and store.runs_of([1]) == []
        assert store.revision() == 0 and store.events_after(0) == []
        assert [n.resources.cpus for n in store.load_nodes()] == [2]
        assert store.users() == [StoredUser("ann", admin=False)]
        assert [r.name for r in store.load_reservations()] == ["maint"]
        assert store.partition_overrides() == [override]
        assert store.find_submit_key("ann", "k") is None
        with store.transaction() as tx:
            assert tx.reserve_job_ids(1) == 1


@case
def a_row_whose_key_is_taken_is_refused_with_its_transaction(open_store: StoreOpener) -> None:
    """A job id or a script given twice, a user name or token taken: a bug of the caller,
    which raises (SQL's IntegrityError, the memory store's ValueError) and leaves the
    store as it was."""
    job = make_job(1).build()
    with opened(open_store) as store:
        put_jobs(store, job)
        with store.transaction() as tx:
            tx.add_user("ann", "a" * 64, False, 0.0)
        refused: list[Callable[[StateTransaction], None]] = [
            lambda tx: tx.insert_jobs([job.evolve(priority=5)], [1]),
            lambda tx: tx.insert_scripts([(1, "#!/bin/sh\nfalse\n")]),
            lambda tx: tx.add_user("ann", "b" * 64, True, 0.0),
            lambda tx: tx.add_user("bob", "a" * 64, True, 0.0),
        ]
        for write in refused:
            with raises(Exception), store.transaction() as tx:
                tx.add_events([EventRow(1.0, "job.submitted", job_id=2)])
                write(tx)
        same_jobs(store.history(), [with_columns(job, 1)])
        assert store.users() == [StoredUser("ann", admin=False)]
        assert store.revision() == 0


@case
def a_transaction_reads_its_own_writes(open_store: StoreOpener) -> None:
    """Within one transaction a user just added has a token to replace and a
    reservation just put can be deleted, as on one SQL connection."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.add_user("ann", "a" * 64, False, 0.0)
            assert tx.set_user_token("ann", "b" * 64, admin=True)
            tx.put_reservation(Reservation("maint", 0.0, 10.0, ("n1",)))
            assert tx.delete_reservation("maint") == 1
            assert tx.delete_reservation("maint") == 0
        assert store.users() == [StoredUser("ann", admin=True)]
        assert store.load_reservations() == []


@case
def readers_see_a_transaction_only_once_it_is_committed(open_store: StoreOpener) -> None:
    """``squeue`` and the event stream read while a change is being written: they see
    the state before it until its commit, never half of it."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.insert_scripts([(1, SCRIPT)])
            tx.insert_jobs([make_job(1).build()], [1])
            tx.add_events([EventRow(1.0, "job.submitted", job_id=1)])
            assert store.count_jobs() == 0
            assert store.events_after(0) == [] and store.revision() == 0
        assert store.count_jobs() == 1 and store.revision() == 1


# -- events -----------------------------------------------------------------------------------
@case
def event_ids_increase_across_commits_and_resume_a_stream(open_store: StoreOpener) -> None:
    """A client resuming the event stream with Last-Event-ID gets every later event once,
    in order; ``stored_events`` are what the server serves from memory after a commit."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.add_events(
                [
                    EventRow(1.0, "job.submitted", job_id=1, state="PENDING", data={"a": [1]}),
                    EventRow(2.0, "node.up", node="n1"),
                ]
            )
            tx.add_events([])
            first = list(tx.stored_events)
        with store.transaction() as tx:
            tx.add_events([EventRow(3.0, "job.started", job_id=1, state="RUNNING")])
            second = list(tx.stored_events)
        ids_given = [e.id for e in first + second]
        assert ids_given == sorted(set(ids_given)) and len(ids_given) == 3
        assert store.revision() == ids_given[-1]
        assert store.events_after(0) == first + second
        assert first[0].data == {"a": [1]} and first[1].data == {}
        assert store.events_after(ids_given[0]) == [first[1], *second]
        assert store.events_after(0, limit=2) == first
        assert store.events_after(ids_given[-1]) == []


# -- jobs -------------------------------------------------------------------------------------
@case
def jobs_are_read_back_as_they_were_written(open_store: StoreOpener) -> None:
    """Every stored field of a job comes back: the mirror at a restart is what it was."""
    spec = JobSpec(
        user="ann",
        script="#!/bin/bash\necho hi\n",
        name="train",
        account="physics",
        cpus_per_task=4,
        environment=(("A", "1"),),
        dependency=parse_dependency("afterok:7"),
        signal=SignalSpec(10, 60, batch_only=True),
        partitions=("gpu", "batch"),
        constraint=("a100",),
    )
    allocation = Allocation(("g1", "g2"), (ResourceVector(4, GiB, 2),) * 2, ((0, 1), (2, 3)))
    rich = Job(
        id=9,
        spec=spec,
        state=JobState.RUNNING,
        reason=PendingReason.NONE,
        partition="gpu",
        priority=1234,
        submit_time=10.0,
        eligible_time=11.0,
        start_time=12.5,
        time_limit_s=3600,
        allocation=allocation,
        restarts=2,
        held_by_admin=True,
        priority_fixed=True,
        cancelled_by="root",
        launched=True,
        extra={"preempted_by": "3", "suspended_s": "7.5"},
    )
    plain = make_job(10).build()
    with opened(open_store) as store:
        put_jobs(store, rich, plain)
        found = store.load_jobs(active_or_ended_after=0.0)
        same_jobs(found, [with_columns(rich, 9), with_columns(plain, 10)])
        assert found[0].spec.script == spec.script
        same_jobs(store.jobs_by_id([10, 9, 11]), found)
        assert store.count_jobs() == 2


@case
def an_arrays_elements_read_back_share_one_spec(open_store: StoreOpener) -> None:
    """The scheduler decides the elements of an array once per spec object: read back,
    they share one again (and one script), apart from other jobs."""
    spec = JobSpec(user="ann", script=SCRIPT, array=ArraySpec((0, 1, 2), 2, "0-2%2"))
    elements = [
        Job(id=1 + i, spec=spec, array_job_id=1, array_task_id=i, array_max_running=2)
        for i in range(3)
    ]
    with opened(open_store) as store:
        put_jobs(store, *elements, script_id=1)
        put_jobs(store, make_job(4).build())
        for read in (
            store.load_jobs(active_or_ended_after=0.0),
            store.history(),
            store.jobs_by_id([1, 2, 3, 4]),
        ):
            assert [(j.array_job_id, j.array_task_id) for j in read[:3]] == [(1, 0), (1, 1), (1, 2)]
            assert len({id(j.spec) for j in read[:3]}) == 1
            assert read[3].spec is not read[0].spec
            assert read[0].spec == spec and read[2].extra["script_id"] == "1"


@case
def a_job_whose_script_is_missing_is_not_read_back(open_store: StoreOpener) -> None:
    """A job row is read with its script: one without is counted, never read whole."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.insert_jobs([make_job(1).build()], [77])
        assert store.count_jobs() == 1
        assert store.load_jobs(active_or_ended_after=0.0) == []
        assert store.history() == store.jobs_by_id([1]) == []


@case
def the_mirror_loads_the_active_jobs_and_the_recently_ended(open_store: StoreOpener) -> None:
    """At start the server loads every job not ended and those ended within MinJobAge
    (at or after the given time); older ones stay in the store for sacct."""
    jobs = [
        make_job(1).build(),
        make_job(2).running_on("n1").build(),
        make_job(3).running_on("n1", state=JobState.SUSPENDED).build(),
        make_job(4).running_on("n1", state=JobState.COMPLETING).build(),
        ended(5, 99.0),
        ended(6, 100.0),
        ended(7, 150.0, JobState.FAILED),
        make_job(8).build().evolve(state=JobState.CANCELLED),  # ended with no end time
    ]
    with opened(open_store) as store:
        put_jobs(store, *reversed(jobs))
        assert ids(store.load_jobs(active_or_ended_after=100.0)) == [1, 2, 3, 4, 6, 7]
        assert ids(store.load_jobs(active_or_ended_after=0.0)) == [1, 2, 3, 4, 5, 6, 7]


@case
def update_jobs_writes_what_may_change_and_nothing_else(open_store: StoreOpener) -> None:
    """A start, an end, a rename, marks: all written; the submit time, array ids and
    usage stay as stored; a job not stored is passed over."""
    job = make_job(1).user("ann").name("a").submitted(5.0).array(1, 0).build()
    with opened(open_store) as store:
        put_jobs(store, job)
        with store.transaction() as tx:
            tx.record_usage([(1, 1 << 20, 2.0, None, None)])
        allocation = Allocation(("n1",), (ResourceVector(2, GiB),))
        changed = job.evolve(
            spec=job.spec.with_changes(name="b"),
            state=JobState.COMPLETED,
            reason=PendingReason.NONE,
            partition="gpu",
            priority=7,
            eligible_time=6.0,
            start_time=7.0,
            end_time=8.0,
            time_limit_s=60,
            exit_code=3,
            exit_signal=9,
            restarts=1,
            array_max_running=4,
            held_by_admin=True,
            priority_fixed=True,
            cancelled_by="root",
            allocation=allocation,
            launched=True,
            submit_time=99.0,
            array_job_id=None,
            extra={"requeue": "1", "max_rss": "5"},
        )
        with store.transaction() as tx:
            tx.update_jobs([changed, make_job(2).build()])
            tx.update_jobs([])
        (found,) = store.history()
        expected = changed.evolve(submit_time=5.0, array_job_id=1)
        usage = {"max_rss": str(1 << 20), "cpu_seconds": "2.0"}
        same_jobs([found], [with_columns(expected, 1, usage)])
        assert found.extra["requeue"] == "1"
        assert ids(store.history(names=["b"])) == [1]
        assert store.jobs_by_id([2]) == []


@case
def update_jobs_with_their_stored_specs_leaves_the_rows_a_full_write_does(
    open_store: StoreOpener,
) -> None:
    """Jobs named in ``same_spec`` (their spec the one stored) read back as the same jobs
    written in full would, in one batch with a job whose spec changed; their name and
    spec are the stored ones (not written again)."""
    jobs = [make_job(i).user("ann").name(f"j{i}").build() for i in (1, 2, 3)]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        allocation = Allocation(("n1",), (ResourceVector(1, GiB),))
        started = [
            j.evolve(state=JobState.RUNNING, start_time=7.0, allocation=allocation, launched=True)
            for j in jobs[:2]
        ]
        renamed = jobs[2].evolve(spec=jobs[2].spec.with_changes(name="other"), priority=9)
        with store.transaction() as tx:
            tx.update_jobs([*started, renamed], same_spec={1, 2})
        same_jobs(store.history(), [with_columns(j, j.id) for j in (*started, renamed)])
        # the promise is the caller's: a spec named kept is not written
        with store.transaction() as tx:
            tx.update_jobs([started[0].evolve(spec=jobs[0].spec.with_changes(name="x"))], [1])
        assert [j.spec.name for j in store.history()] == ["j1", "j2", "other"]


@case
def update_jobs_of_many_jobs_at_once_writes_each_its_own_row(open_store: StoreOpener) -> None:
    """A plan's starts and reasons in one call (PostgreSQL writes them in one statement):
    each job's row as its own values say, times whole and fractional and unset side by
    side, the ``same_spec`` jobs and the others; a job given twice as its last says."""
    jobs = [make_job(i).user(f"u{i % 3}").name(f"j{i}").build() for i in range(1, 301)]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        changed = []
        for job in jobs:
            i = job.id
            if i % 3 == 0:  # started: a whole-second start, an allocation
                alloc = Allocation((f"n{i}",), (ResourceVector(1 + i % 4, GiB),))
                job = job.evolve(state=JobState.RUNNING, start_time=float(i), allocation=alloc)
            elif i % 3 == 1:  # its reason and estimate: a fractional time
                job = job.evolve(reason=PendingReason.PRIORITY, eligible_time=i + 0.25)
            else:  # renamed (quotes, escapes, other scripts), held by an admin, marks
                spec = job.spec.with_changes(name=f'r{i} "q" \\ \n é 日本 😀')
                extra = {"note": 'a "b" \\ c\n ü'}
                job = job.evolve(spec=spec, held_by_admin=True, priority=i * 1000, extra=extra)
            changed.append(job)
        twice = changed[0].evolve(reason=PendingReason.RESOURCES)
        kept = {j.id for j in changed if j.id % 3 != 2}
        with store.transaction() as tx:
            tx.update_jobs([*changed, twice], same_spec=kept)
        expected = [twice, *changed[1:]]
        same_jobs(store.history(), [with_columns(j, j.id) for j in expected])
        assert store.history()[1].spec.name == 'r2 "q" \\ \n é 日本 😀'
        nan = changed[3].evolve(eligible_time=float("inf"))  # no JSON for it: written too
        with store.transaction() as tx:
            tx.update_jobs([nan, changed[4]], same_spec=kept)
        assert store.jobs_by_id([4])[0].eligible_time == float("inf")


@case
def usage_of_many_jobs_is_stored_per_job(open_store: StoreOpener) -> None:
    """An agent's sync reports what many finished jobs used at once: each job's memory
    peak and CPU time (and its user and system parts, where said) land on its own row."""
    jobs = [ended(i, 3.0) for i in (1, 2, 3)]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        with store.transaction() as tx:
            tx.record_usage([(1, 1 << 20, 0.5, 0.375, 0.125), (3, 3 << 20, 1.25, None, None)])
            tx.record_usage([])  # a sync without finished jobs
        extra = {j.id: j.extra for j in store.load_jobs(active_or_ended_after=0.0)}
    assert (extra[1]["max_rss"], extra[1]["cpu_seconds"]) == (str(1 << 20), "0.5")
    assert (extra[1]["user_cpu_seconds"], extra[1]["system_cpu_seconds"]) == ("0.375", "0.125")
    assert (extra[2]["max_rss"], extra[2]["cpu_seconds"]) == ("0", "0.0")
    assert (extra[3]["max_rss"], extra[3]["cpu_seconds"]) == (str(3 << 20), "1.25")
    assert "user_cpu_seconds" not in extra[2] and "user_cpu_seconds" not in extra[3]


@case
def history_filters_narrow_and_the_limit_keeps_the_lowest_ids(open_store: StoreOpener) -> None:
    """sacct's filters: each narrows, together they all must hold, and a limit keeps the
    first jobs by id."""
    jobs = [
        make_job(1).user("ann").name("a").partition("batch").submitted(10.0).build(),
        ended(2, 50.0).evolve(submit_time=20.0),
        ended(3, 150.0, JobState.FAILED).evolve(spec=JobSpec(user="bob", script=SCRIPT)),
        make_job(4).array(4, 0).submitted(40.0).build(),
        make_job(5).array(4, 1).partition("gpu").submitted(50.0).build(),
    ]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        assert ids(store.history()) == [1, 2, 3, 4, 5]
        assert ids(store.history(limit=2)) == [1, 2]
        assert ids(store.history(limit=None)) == [1, 2, 3, 4, 5]
        assert ids(store.history(ids=[3, 1])) == [1, 3]
        assert ids(store.history(array_ids=[4])) == [4, 5]
        assert ids(store.history(ids=[1], array_ids=[4])) == [1, 4, 5]
        assert ids(store.history(ids=[1, 2, 3], limit=2)) == [1, 2]
        assert ids(store.history(users=["bob"])) == [3]
        assert ids(store.history(names=["a"])) == [1]
        assert ids(store.history(states=["COMPLETED", "FAILED"])) == [2, 3]
        assert ids(store.history(partitions=["gpu"])) == [5]
        assert ids(store.history(start_after=100.0)) == [1, 3, 4, 5]  # not ended before
        assert ids(store.history(start_after=50.0)) == [1, 2, 3, 4, 5]
        assert ids(store.history(end_before=20.0)) == [1, 2, 3]  # submitted by then
        assert ids(store.history(array_ids=[4], partitions=["gpu"])) == [5]
        assert ids(store.history(users=["alice"], start_after=100.0, end_before=45.0)) == [4]
        assert store.history(ids=[99]) == []


@case
def history_finds_any_number_of_ids(open_store: StoreOpener) -> None:
    """A gather job may wait on thousands of jobs that left the mirror: asked by id and
    by array id together, past the SQL store's 1,000 values an IN list, all are found."""
    count = 2500
    with opened(open_store) as store:
        put_jobs(store, *[make_job(i).build() for i in range(1, count + 1)])
        wanted = list(range(count, 0, -1))
        assert ids(store.history(ids=wanted, array_ids=wanted, limit=None)) == sorted(wanted)
        assert ids(store.history(ids=wanted[:-1], limit=3)) == [2, 3, 4]
        assert len(store.jobs_by_id(wanted)) == count


@case
def finished_runs_page_through_the_jobs_that_ran_latest_end_first(
    open_store: StoreOpener,
) -> None:
    """What the prediction service replays: jobs that ran and ended, newest end first,
    a page at a time; pending, running and never-started jobs are left out."""
    ends = {1: 50.0, 2: 10.0, 3: 30.0, 4: 30.0, 5: 20.0}
    jobs = [ended(i, end) for i, end in ends.items()] + [
        make_job(6).running_on("n1").build(),
        make_job(7).build().evolve(state=JobState.CANCELLED, end_time=5.0),
        make_job(8).build(),
    ]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        first = store.finished_runs(3)
        assert ids(first) == [1, 4, 3]
        rest = store.finished_runs(3, (30.0, 3))
        assert ids(rest) == [5, 2]
        assert rest[0].spec.user == "alice" and rest[0].spec.script == ""
        assert store.finished_runs(0) == []


@case
def finished_usage_pages_as_finished_runs_with_what_fair_share_charges(
    open_store: StoreOpener,
) -> None:
    """Fair share's start-up read: the pages of ``finished_runs``, each run with its user,
    requested account, times, allocation and suspension marks only."""
    two = Allocation(("n1", "n2"), (ResourceVector(4, 0, 1), ResourceVector(2, 0)))
    charged = ended(1, 50.0).evolve(
        spec=JobSpec(user="alice", script=SCRIPT, account="physics"),
        allocation=two,
        extra={"suspended_s": "7.5", "max_rss": "5"},  # (its usage is no mark)
    )
    jobs = [
        charged,
        ended(2, 10.0, JobState.FAILED).evolve(start_time=2.0, allocation=None),
        make_job(3).running_on("n1").build(),
    ]
    with opened(open_store) as store:
        put_jobs(store, *jobs)
        first, second = store.finished_usage(5)
        assert ids(store.finished_runs(5)) == [r.id for r in store.finished_usage(5)]
        assert (first.id, first.user, first.account, first.start, first.end) == (
            1, "alice", "physics", 1.0, 50.0,
        )  # fmt: skip
        assert first.allocation == two and first.marks == {"suspended_s": "7.5"}
        assert (second.account, second.allocation, second.marks) == (None, None, {})
        assert [r.id for r in store.finished_usage(5, (50.0, 1))] == [2]


# -- runs and steps -----------------------------------------------------------------------------
def _run(job_id: int, attempt: int, state: str = "REQUEUED") -> RunRow:
    return RunRow(
        job_id, attempt, state, 0, 0, "batch", 1.0, 2.0, 3.0, 4.0, '{"nodes":["n1"]}', 10, 0.5
    )


def _step(job_id: int, attempt: int, step_id: int, state: str = "COMPLETED") -> StepRow:
    return StepRow(job_id, step_id, "srun", "n1", 1, state, 0, 1.0, 2.0, attempt=attempt)


def _running(job_id: int, attempt: int, step_id: int, ended: str = "{}") -> RunningStepRow:
    return RunningStepRow(job_id, step_id, attempt, "srun", "n1,n2", "1,1", 1.0, ended=ended)


@case
def a_requeued_jobs_runs_are_kept_once_each(open_store: StoreOpener) -> None:
    """sacct -D shows each earlier run once: kept again, a run replaces itself."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.add_runs([_run(2, 1), _run(1, 0), _run(2, 0), _run(3, 0)])
            tx.add_runs([])
        with store.transaction() as tx:
            tx.add_runs([_run(2, 1, "PREEMPTED")])
        assert store.runs_of([2, 1]) == [_run(1, 0), _run(2, 0), _run(2, 1, "PREEMPTED")]
        assert store.runs_of([]) == []


@case
def priced_runs_are_found_by_their_end(open_store: StoreOpener) -> None:
    """What cloud capacity cost since a time (budgets, hal cloud costs): the jobs that
    ended since on priced nodes (their rate mark), and the costly runs requeues ended."""
    rate = {"cloud_rate": "0.5"}
    priced, early, owned = ended(1, 100.0), ended(2, 10.0), ended(3, 100.0)
    running = make_job(4).running_on("n1", start=1.0).build().evolve(extra=rate)
    with opened(open_store) as store:
        put_jobs(store, priced.evolve(extra=rate), early.evolve(extra=rate), owned, running)
        with store.transaction() as tx:
            costly = dataclasses.replace(_run(4, 0), end_time=60.0, cost=1.5)
            tx.add_runs([costly, dataclasses.replace(_run(4, 1), end_time=70.0), _run(3, 0)])
        jobs, runs = store.priced_since(50.0)
        assert ids(jobs) == [1] and jobs[0].extra["cloud_rate"] == "0.5"
        assert runs == [costly]
        assert store.priced_since(200.0) == ([], [])


@case
def steps_are_kept_running_then_recorded_once_ended(open_store: StoreOpener) -> None:
    """A running step is kept for a restart (again, with its nodes' ends so far); once it
    ends it is recorded for sacct, once, and is no longer running. Each run of a job
    numbers its steps from 0."""
    with opened(open_store) as store:
        store.keep_running_step(_running(1, 0, 1))
        store.keep_running_step(_running(1, 0, 0))
        store.keep_running_step(_running(1, 1, 0))
        store.keep_running_step(_running(1, 0, 1, ended='{"n1":[0,0,false]}'))
        assert store.running_steps() == [
            _running(1, 0, 0),
            _running(1, 0, 1, ended='{"n1":[0,0,false]}'),
            _running(1, 1, 0),
        ]
        store.record_step(_step(1, 0, 1))
        store.record_step(_step(1, 0, 1, "FAILED"))
        store.record_step(_step(2, 0, 4))
        assert store.running_steps() == [_running(1, 0, 0), _running(1, 1, 0)]
        assert store.steps_of([1, 2]) == [_step(1, 0, 1, "FAILED"), _step(2, 0, 4)]
        assert store.steps_of([2]) == [_step(2, 0, 4)]
        assert (store.last_step_id(1, 0), store.last_step_id(1, 1)) == (1, -1)
        assert store.last_step_id(2, 0) == 4


# -- nodes, reservations, partitions ---------------------------------------------------------
@case
def nodes_are_inserted_replaced_and_deleted(open_store: StoreOpener) -> None:
    """An agent registers, its node changes (down and drained, new labels) and an
    operator deletes another: the stored nodes follow, by name, topology and all."""
    gpu = (
        make_node("g1")
        .cpus(8)
        .mem_gib(64)
        .gpus(4, "a100")
        .islands((0, 1), (2, 3))
        .features("fast", "ib")
        .nvlink_domain("nvl0")
        .build()
        .evolve(labels={"rack": "r7"})  # (not the builder's: it would make a switch path)
    )
    down = gpu.evolve(
        state=NodeState.DOWN,
        drain=True,
        reason="bad dimm",
        reason_user="root",
        reason_time=5.0,
        address="10.0.0.7:9000",
        last_heartbeat=4.0,
        labels={"rack": "r8", "zone": "z1"},
    )
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.upsert_node(gpu)
            tx.upsert_node(make_node("a1").build())
            tx.upsert_node(make_node("b1").drain().build())
        assert [n.name for n in store.load_nodes()] == ["a1", "b1", "g1"]
        with store.transaction() as tx:
            tx.upsert_node(down)
            tx.delete_node("a1")
            tx.delete_node("nope")
        b1, g1 = store.load_nodes()
        assert b1.state is NodeState.DRAIN and not b1.drain
        assert g1 == down and g1.labels == {"rack": "r8", "zone": "z1"}
        assert (g1.gpu_islands, g1.features) == (((0, 1), (2, 3)), ("fast", "ib"))


@case
def nodes_are_upserted_together(open_store: StoreOpener) -> None:
    """A batch of registrations writes its nodes at once: new ones inserted, known ones
    replaced whole, a name given twice stored as its last, as one upsert each would."""
    known = make_node("k1").cpus(4).features("old").build().evolve(labels={"rack": "r1"})
    again = make_node("k1").cpus(8).gpus(2, "h100").islands((0, 1)).build()
    drained = make_node("n2").drain().build().evolve(reason="gone", reason_time=3.0)
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.upsert_nodes([known, make_node("k2").build()])
        with store.transaction() as tx:
            tx.upsert_nodes([make_node("n2").build(), again, drained])
            tx.upsert_nodes([])
        k1, k2, n2 = store.load_nodes()
        assert (k1.name, k2.name, n2.name) == ("k1", "k2", "n2")
        assert k1 == again.evolve(last_heartbeat=k1.last_heartbeat)
        assert k1.labels == {} and k1.features == () and k1.gpu_islands == ((0, 1),)
        assert n2.state is NodeState.DRAIN and (n2.reason, n2.reason_time) == ("gone", 3.0)
        # a value JSON cannot carry (the PostgreSQL store's one statement reads JSON)
        far = make_node("k2").build().evolve(last_heartbeat=float("inf"))
        with store.transaction() as tx:
            tx.upsert_nodes([far, make_node("n3").build()])
        assert [n.last_heartbeat for n in store.load_nodes()][1] == float("inf")
        assert [n.name for n in store.load_nodes()] == ["k1", "k2", "n2", "n3"]


@case
def reservations_are_put_replaced_and_deleted(open_store: StoreOpener) -> None:
    """scontrol create, update and delete reservation, kept over a restart with their
    flags (PURGE_COMP's seconds too)."""
    purge = frozenset({ReservationFlag.MAINT, ReservationFlag.PURGE_COMP})
    maint = Reservation("maint", 0.0, 3600.0, ("n1", "n2"), flags=purge, purge_after=60.0)
    team = Reservation("team", 10.0, 20.0, ("n3",), ("ann",), ("physics",), partition="gpu")
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.put_reservation(team)
            tx.put_reservation(maint)
        assert store.load_reservations() == [maint, team]
        moved = Reservation("team", 30.0, 40.0, ("n4",))
        with store.transaction() as tx:
            tx.put_reservation(moved)
            assert tx.delete_reservation("maint") == 1
            assert tx.delete_reservation("nope") == 0
        assert store.load_reservations() == [moved]


@case
def partition_overrides_are_put_replaced_and_cleared(open_store: StoreOpener) -> None:
    """scontrol update PartitionName=... is kept over a restart; scontrol reconfigure
    goes back to hal.toml's partitions."""
    gpu = PartitionOverride("gpu", "root", 1.0, state="DRAIN", max_time_s=3600)
    batch = PartitionOverride("batch", "ops", 2.0, is_default=False, priority_tier=3)
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.put_partition_override(gpu)
            tx.put_partition_override(batch)
        assert store.partition_overrides() == [batch, gpu]
        again = PartitionOverride("gpu", "ops", 3.0, max_nodes=4, default_time_s=60)
        with store.transaction() as tx:
            tx.put_partition_override(again)
        assert store.partition_overrides() == [batch, again]
        with store.transaction() as tx:
            tx.clear_partition_overrides()
        assert store.partition_overrides() == []


# -- users ------------------------------------------------------------------------------------
@case
def users_and_agents_are_found_by_their_token(open_store: StoreOpener) -> None:
    """hal user add/token/delete: a token finds its user until it is replaced; an agent's
    token says which nodes it may serve."""
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.add_user("bob", "b" * 64, False, 0.0)
            tx.add_user("ann", "a" * 64, True, 0.0)
            tx.add_user("rack1", "r" * 64, False, 0.0, agent=True, agent_nodes="n[1-2]")
        assert store.users() == [
            StoredUser("ann", admin=True),
            StoredUser("bob", admin=False),
            StoredUser("rack1", False, True, "n[1-2]"),
        ]
        assert store.user_by_token_hash("r" * 64) == StoredUser("rack1", False, True, "n[1-2]")
        with store.transaction() as tx:
            assert tx.set_user_token("ann", "c" * 64)  # the admin flag stays
            assert tx.set_user_token("bob", "d" * 64, admin=True)
            assert not tx.set_user_token("nobody", "e" * 64)
            tx.set_agent_nodes("rack1", "")
        assert store.user_by_token_hash("a" * 64) is None
        assert store.user_by_token_hash("c" * 64) == StoredUser("ann", admin=True)
        assert store.user_by_token_hash("d" * 64) == StoredUser("bob", admin=True)
        assert store.user_by_token_hash("r" * 64) == StoredUser("rack1", False, True, "")
        with store.transaction() as tx:
            assert tx.delete_user("bob") == 1
            assert tx.delete_user("bob") == 0
        assert [u.name for u in store.users()] == ["ann", "rack1"]
        assert store.user_by_token_hash("d" * 64) is None


# -- submission keys --------------------------------------------------------------------------
@case
def a_submit_key_is_its_users_own_and_stored_once(open_store: StoreOpener) -> None:
    """A submission sent again with its Idempotency-Key finds what the first gave; the
    same key stored twice at once rolls the second transaction back whole."""
    key = SubmitKey("ann", "k-1", "digest")
    with opened(open_store) as store:
        with store.transaction() as tx:
            tx.add_submit_key(key, 100.0, [(1, 0), (2, 3)])
        assert store.find_submit_key("ann", "k-1") == ("digest", [(1, 0), (2, 3)])
        assert store.find_submit_key("bob", "k-1") is None
        with raises(SubmitKeyTaken), store.transaction() as tx:
            tx.insert_scripts([(7, SCRIPT)])
            tx.insert_jobs([make_job(7).build()], [7])
            tx.add_events([EventRow(1.0, "job.submitted", job_id=7)])
            tx.add_submit_key(SubmitKey("ann", "k-1", "other"), 101.0, [(7, 0)])
        assert store.count_jobs() == 0 and store.revision() == 0
        assert store.find_submit_key("ann", "k-1") == ("digest", [(1, 0), (2, 3)])
        with store.transaction() as tx:
            tx.add_submit_key(SubmitKey("bob", "k-1", "b"), 200.0, [(3, 0)])
        assert store.forget_submit_keys(200.0) == 1  # made before it
        assert store.find_submit_key("ann", "k-1") is None
        assert store.find_submit_key("bob", "k-1") == ("b", [(3, 0)])


# -- the traffic graph ------------------------------------------------------------------------
@case
def traffic_edges_are_replaced_forgotten_and_read_back_after_a_restart(
    open_store: StoreOpener,
) -> None:
    """The traffic graph's workload edges outlive a restart: a changed edge replaces the
    stored one of its pair, a dropped pair goes (dropping one never stored is no error),
    and they read back by pair, whatever the order they were kept in."""
    db = TrafficEdgeRow("ann/db", "bob/client", 5e9, 100.0, 10.0)
    solo = TrafficEdgeRow("ann/mpi", "ann/mpi", 7.0, 50.0, 40.0)  # one workload's jobs
    long_name = TrafficEdgeRow("ann/" + "x" * 700, "zed/y", 1.5, 60.0, 60.0)
    with opened(open_store) as store:
        assert store.traffic_edges() == []
        store.keep_traffic_edges([long_name, db, solo], [])
        store.keep_traffic_edges([TrafficEdgeRow("ann/db", "bob/client", 6e9, 160.0, 10.0)], [])
        store.keep_traffic_edges([], [("ann/mpi", "ann/mpi"), ("no/such", "pair")])
    with opened(open_store) as again:
        assert again.traffic_edges() == [
            TrafficEdgeRow("ann/db", "bob/client", 6e9, 160.0, 10.0),
            long_name,
        ]


# -- application feedback ---------------------------------------------------------------
@case
def job_feedback_is_replaced_and_read_back_by_job_after_a_restart(
    open_store: StoreOpener,
) -> None:
    """A job's feedback series outlive a restart (sacct shows an ended job's): a kept
    series replaces its job and metric's, points and all, and they read back by job and
    metric for the jobs asked, whatever the order they were kept in."""
    first = FeedbackSeries.first(7, "samples_per_s", 100.0, 1830.0)
    latency = FeedbackSeries.first(7, "latency_ms", 101.0, 12.5)
    other = FeedbackSeries.first(9, "loss", 102.0, 0.25)
    with opened(open_store) as store:
        assert store.job_feedback([7]) == []
        store.keep_job_feedback([first, other])
        store.keep_job_feedback([first.add_point(110.0, 1900.5), latency])
        store.keep_job_feedback([])
    with opened(open_store) as again:
        assert again.job_feedback([7, 8]) == [
            latency,
            FeedbackSeries(
                7, "samples_per_s", 2, 110.0, 1900.5, ((100.0, 1830.0), (110.0, 1900.5))
            ),
        ]
        assert again.job_feedback([9]) == [other]
        assert again.job_feedback([]) == []
