"""``Cluster``: the server's live view of jobs and nodes (``Mirror``, its base class) and
the one path by which it changes.

The store (a ``StateStore``: SQL, or in memory for tests) is the truth; the mirror holds
the active jobs (plus those that ended within MinJobAge) and the nodes in memory so that
the scheduler and ``squeue`` never scan the database. Every change follows one path,
under one lock, through one handle (``Cluster.change``):

    compute new Job/Node values  →  one store transaction (rows + event rows)  →  commit
    →  update the mirror  →  wake the scheduler, event streams and agents

so a change is visible (and acknowledged to a client) only once it is durable. Who writes
through it: submission (``submit``, checked by ``hal.state.admission``), the agents'
reports (``hal.state.agents``), users' commands (``hal.state.commands``), the scheduler's
plans (``hal.state.plan_applier``), preemption, reservations, crontabs, users and the
housekeeping around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from hal.config.model import HalConfig
from hal.core.clock import Clock
from hal.core.errors import InvalidRequest
from hal.core.job import HetSpec, Job, JobSpec
from hal.core.laps import Laps
from hal.core.profiles import LATENCY_SENSITIVE
from hal.core.states import JobState, PendingReason
from hal.host.clock import SystemClock
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.state import crontabs, plan_applier, preempt, resync
from hal.state.admission import Admission
from hal.state.job_changes import held_on_requeue, requeued
from hal.state.job_runs import ended_runs
from hal.state.mirror import Mirror
from hal.state.partitions import take_overrides
from hal.state.store import (
    CommitOutcomeUnknown,
    DatabaseUnavailable,
    EventRow,
    StoredEvent,
    SubmitKey,
    SubmitKeyTaken,
)
from hal.state.store_protocol import StateStore, StateTransaction

if TYPE_CHECKING:
    from hal.state.agents import AgentSession, Registration, Reporting

T = TypeVar("T")
log = logging.getLogger("hal.state")

FINISH_REASONS = {
    JobState.COMPLETED: PendingReason.NONE,
    JobState.FAILED: PendingReason.NON_ZERO_EXIT_CODE,
    JobState.TIMEOUT: PendingReason.TIME_LIMIT,
    JobState.OUT_OF_MEMORY: PendingReason.OUT_OF_MEMORY,
    JobState.NODE_FAIL: PendingReason.NODE_FAIL,
    JobState.CANCELLED: PendingReason.NONE,
    JobState.PREEMPTED: PendingReason.NONE,
}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the authenticated user, or a node agent (``agent``: its token is
    accepted by /v1/agent only, for ``agent_nodes``, None for any node). ``cert_nodes``:
    where agents must present a certificate (mutual TLS), the names the agent's proves."""

    name: str
    admin: bool = False
    agent: bool = False
    agent_nodes: frozenset[str] | None = None
    cert_nodes: frozenset[str] | None = None

    def may_modify(self, job: Job) -> bool:
        return self.admin or job.spec.user == self.name


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: int
    task_ids: tuple[int, ...]


class Cluster(Mirror):
    def __init__(
        self,
        store: StateStore,
        config: HalConfig,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.agent_sessions: dict[str, AgentSession] = {}  # node → its agent's session
        self.registering: list[Registration] = []  # waiting for their commit (``agents``)
        self.reporting: list[Reporting] = []  # agents' reports waiting for theirs, likewise
        self.started_at = 0.0
        self.load_timings: dict[str, float] = {}  # seconds of each step of the last ``load``
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hal-db")
        self._lock = resync.ReconcilingLock(self)  # reconciles what is in doubt first
        self.changed = asyncio.Event()  # the scheduler waits on this
        self.events_changed = asyncio.Condition()  # event streams wait on this
        self.closing = False  # the server is stopping (``release_waiters``)
        # a database outage (``db``): when the current one began (None: none now), and
        # when the last one ended (agents get a node timeout of grace from then on)
        self.db_down_since: float | None = None
        self.db_back_at = 0.0
        # ids of jobs a change with an unknown outcome wrote, and whether such a change
        # may have written reservations or nodes (``hal.state.resync``)
        self.in_doubt: set[int] = set()
        self.others_in_doubt = False
        self._listeners: list[Callable[[Sequence[Job]], None]] = []
        # new jobs, numbered, before they are stored: the artifact canaries' choice by
        # job id (``hal.state.rollout.Aliases.choose``); None: as they are
        self.on_new_jobs: Callable[[list[Job]], list[Job]] | None = None
        # application feedback (``hal.server.feedback``): the key each run's token is
        # made with, and the server's URL for the job's HAL_URL (set by the control plane)
        self.feedback_key: bytes | None = None
        self.url = ""
        super().__init__(config, clock or SystemClock())

    def configure(self, config: HalConfig) -> None:
        super().configure(config)
        self.admission = Admission(self)

    async def release_waiters(self) -> None:
        """The server is stopping: agents' held syncs answer now and followed event
        streams end, instead of holding the graceful shutdown until its timeout."""
        self.closing = True
        for session in self.agent_sessions.values():
            session.wake.set()
        async with self.events_changed:
            self.events_changed.notify_all()

    async def db(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn`` on the store's thread (serialises writers, keeps the loop free).

        An error that means the database cannot serve now (PostgreSQL down or restarting,
        a SQLite file locked or read-only) is raised as ``DatabaseUnavailable`` (a 503):
        its transaction rolled back, so callers change nothing in memory and the request
        can be retried; ``CommitOutcomeUnknown`` (lost at the COMMIT) likewise changes
        nothing in memory, but may not be retried blindly. The first such error of an
        outage, and its end, are logged."""
        try:
            found = await asyncio.get_running_loop().run_in_executor(self._db, fn, *args)
        except Exception as err:
            unknown = isinstance(err, CommitOutcomeUnknown)
            unavailable = err if unknown else DatabaseUnavailable.of(err)
            if not isinstance(unavailable, DatabaseUnavailable | CommitOutcomeUnknown):
                raise
            if self.db_down_since is None:
                self.db_down_since = self.clock.now()
                cause = err.__cause__ if unknown else err
                log.warning(
                    "the database is unavailable: %s (%s); requests that need it get 503 "
                    "and agents keep their reports until it is back",
                    unavailable.reason,
                    (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300],
                )
            if unknown:
                raise
            raise unavailable from err
        if self.db_down_since is not None:
            self._database_back()
        return found

    def _database_back(self) -> None:
        """The database answers again after an outage: agents' held syncs return so their
        kept reports come in now, and the scheduler runs."""
        assert self.db_down_since is not None
        now = self.clock.now()
        log.warning("the database is back after %.1f s", now - self.db_down_since)
        self.db_down_since = None
        self.db_back_at = now
        for session in self.agent_sessions.values():
            session.wake.set()
        self.changed.set()

    async def database_ok(self) -> bool:
        """Whether the database answers; during an outage, one cheap round trip
        (housekeeping calls this before work that must not run on stale heartbeats)."""
        if self.db_down_since is None:
            return True
        try:
            await self.db(self.store.ping)
        except DatabaseUnavailable:
            return False
        return True

    def on_jobs_changed(self, listener: Callable[[Sequence[Job]], None]) -> None:
        """Call ``listener`` with every committed batch of changed jobs (agents, metrics)."""
        self._listeners.append(listener)

    async def load(self) -> None:
        """Migrate the schema and rebuild the mirror from the store (server start)."""
        now = self.clock.now()
        self.started_at = now
        laps = Laps()
        self.load_timings = laps.took
        done = laps.lap

        await self.db(self.store.migrate)
        done("load_migrate")
        jobs = await self.db(
            lambda: self.store.load_jobs(
                active_or_ended_after=now - self.config.min_job_age_seconds
            )
        )
        done("load_jobs")
        nodes = await self.db(self.store.load_nodes)
        done("load_nodes")
        self.reservations = {r.name: r for r in await self.db(self.store.load_reservations)}
        take_overrides(self, await self.db(self.store.partition_overrides))
        self.revision = await self.db(self.store.revision)
        done("load_reservations_revision")
        for node in nodes:
            # Agents re-register after a server restart; until then give every node a full
            # timeout of grace instead of declaring it dead for the server's own downtime.
            # the stored labels are the agent's merged with the config's as they were;
            # the config's of this start win again (it may have changed since)
            labels = self.node_labels(node.name, node.labels)
            self.nodes[node.name] = node.evolve(
                last_heartbeat=now,
                labels=labels,
                topology=self.topology_path(node.name, labels),
            )
        for job in jobs:
            self.put(job)
        done("load_mirror")

    async def close(self) -> None:
        self._db.shutdown(wait=True)
        self.store.close()

    @contextlib.asynccontextmanager
    async def change(self) -> AsyncIterator[Change]:
        """The one way to change the cluster: the block holds the cluster's lock (what is
        in doubt reconciled first), reads the mirror, checks, and commits through the
        handle (``Change.commit``), which persists jobs and events in one store
        transaction and then mirrors them. No other change runs meanwhile, and nothing
        writes the mirror outside such a block."""
        async with self._lock:
            yield Change(self)

    async def _commit(
        self,
        jobs: Sequence[Job],
        events: Sequence[EventRow],
        extra: Callable[[StateTransaction], None] | None = None,
    ) -> None:
        """Persist changed ``jobs`` and ``events`` in one transaction, then mirror them.
        Only the handle (``Change.commit``) calls it, under the lock."""
        jobs = [self._eligible_kept(j) for j in jobs]
        runs = ended_runs(self.jobs, jobs)  # requeued: the runs they ended (sacct -D)
        # (the mirror holds what is stored: a job with its spec object has its spec's row)
        mirrored = self.jobs
        same_spec = {
            j.id
            for j in jobs
            if (before := mirrored.get(j.id)) is not None and before.spec is j.spec
        }
        # an agent's "started" reports change nothing a scheduling pass reads: no pass for
        # them (each job's launch would otherwise cost a pass over the whole queue)
        wake = extra is not None or not jobs or not all(_launched_only(mirrored, j) for j in jobs)

        def work() -> list[StoredEvent]:
            with self.store.transaction() as tx:
                tx.update_jobs(jobs, same_spec)
                tx.add_runs(runs)
                tx.add_events(events)
                if extra is not None:
                    extra(tx)
                return tx.stored_events

        try:
            added = await self.db(work)
        except CommitOutcomeUnknown:
            resync.doubt(self, (j.id for j in jobs), others=extra is not None)
            raise
        for job in jobs:
            self.put(job)
        await self._published(added, jobs, wake=wake)

    def _eligible_kept(self, job: Job) -> Job:
        """``job``, which ends while pending (cancelled, its dependency never met), with
        when it became eligible, as Slurm's accounting keeps it (sacct's Eligible, and
        its time windows: docs/slurm-checks.md); None where it never was (held, waiting
        on a dependency or its array's throttle)."""
        before = self.jobs.get(job.id)
        if (
            before is None
            or before.state is not JobState.PENDING
            or not job.state.is_terminal
            or job.eligible_time is not None
        ):
            return job
        return job.evolve(eligible_time=before.shown_eligible_time(self.clock.now()))

    async def _published(
        self, events: Sequence[StoredEvent], jobs: Sequence[Job], *, wake: bool = True
    ) -> None:
        if events:
            self.revision = max(self.revision, events[-1].id)
            self.recent_events.extend(events)
        if wake:
            self.changed.set()
        for listener in self._listeners:
            listener(jobs)
        async with self.events_changed:
            self.events_changed.notify_all()

    async def record_events(self, events: Sequence[EventRow]) -> None:
        """Commit event rows that change no job (reports such as ``job.overrunning``), in
        order with every other change."""
        async with self.change() as change:
            await change.commit([], events)

    async def fill_related(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """Add dependency targets that have left the mirror (ended long ago) from the store.
        Rows read once are kept (``stored_related``): a pass does not read them again."""
        missing: set[int] = set()
        for job in snap.pending:
            if job.spec.dependency is None:
                continue
            for term in job.spec.dependency.terms:
                missing.update(j for j in term.job_ids if j not in snap.related)
        kept = self.stored_related
        for target in [t for t in kept if t not in missing]:
            del kept[target]  # no pending job names it any more
        if not missing:
            return snap
        unread = sorted(missing - kept.keys())
        if unread:
            found = await self.db(lambda: self.store.history(ids=unread, array_ids=unread))
            fresh: dict[int, list[Job]] = {target: [] for target in unread}
            for job in found:  # a job named itself, or an element of an array named
                for named in {job.id, job.array_job_id}:
                    if named in fresh:
                        fresh[named].append(job)
            kept.update(fresh)
        related = dict(snap.related)
        for target in missing:
            for job in kept[target]:
                # an element still in memory may have changed since it was read
                related[job.id] = self.jobs.get(job.id, job)
        return dataclasses.replace(snap, related=related)

    @property
    def doubtful(self) -> bool:
        """Whether a change whose outcome is unknown left memory to be reconciled."""
        return bool(self.in_doubt) or self.others_in_doubt

    async def reconcile(self) -> None:
        """Take the stored rows of what is in doubt, if any (``hal.state.resync``)."""
        if self.doubtful:
            async with self.change():
                pass  # taking the lock reconciles

    async def forget_old_submit_keys(self) -> int:
        """Forget the Idempotency-Keys of submissions older than a day."""
        before = self.clock.now() - resync.KEEP_KEYS_S
        return await self.db(self.store.forget_submit_keys, before)

    async def submit(
        self,
        specs: Sequence[JobSpec],
        *,
        het: bool = False,
        key: SubmitKey | None = None,
        along: Callable[[], crontabs.Changes] | None = None,
    ) -> list[Submitted]:
        """Admit and store jobs (one transaction for the whole batch). ``het``: the specs
        are the components of one heterogeneous job, given consecutive ids; the first
        id is the het job id (docs/user/hetjobs.md). ``key``: the submission's
        ``Idempotency-Key``; sent again, it answers with the jobs it gave the first time
        (``hal.state.resync``). ``along``: other changes, worked out under the lock and
        committed in the same transaction (a new crontab's: ``hal.state.crontabs``)."""
        if key is not None:  # a resend is answered first: the checks may no longer pass
            found = await self.db(self.store.find_submit_key, key.user, key.key)
            if found is not None:
                return resync.replayed(key, found)
        now = self.clock.now()
        if het:
            if len(specs) < 2 or any(s.array is not None for s in specs):
                raise InvalidRequest(
                    "a heterogeneous job has at least 2 components and no --array", field="het"
                )
            size = len(specs)
            specs = [s.with_changes(het=HetSpec(0, i, size)) for i, s in enumerate(specs)]
        # the account and QoS a job naming none is charged to, stored with it (Slurm's)
        specs = [self.admission.with_defaults(s) for s in specs]
        prepared = [
            self.admission.admit(spec, i if len(specs) > 1 else None)
            for i, spec in enumerate(specs)
        ]
        built: list[Job] = []  # the jobs ``work`` wrote, in doubt if its COMMIT is lost
        other = crontabs.Changes()

        def work() -> tuple[list[Job], list[Submitted], list[StoredEvent]]:
            with self.store.transaction() as tx:
                other.write_to(tx)
                count = sum(len(s.array.indices) if s.array else 1 for s in specs)
                next_id = tx.reserve_job_ids(count)
                jobs, results, scripts = new_jobs(specs, prepared, next_id, now, het=het)
                if self.on_new_jobs is not None:
                    jobs = self.on_new_jobs(jobs)
                built.extend(jobs)
                if key is not None:
                    result = [(r.job_id, len(r.task_ids)) for r in results]
                    tx.add_submit_key(key, now, result)
                tx.insert_scripts(scripts)
                tx.insert_jobs(jobs, [j.array_job_id or j.id for j in jobs])
                tx.add_events(
                    [
                        EventRow(
                            now,
                            "job.submitted",
                            job_id=j.id,
                            state="PENDING",
                            data={"user": j.spec.user, "partition": j.partition},
                        )
                        for j in jobs
                    ]
                )
                return jobs, results, tx.stored_events

        async with self.change():
            # under the lock: a purge of old jobs ([accounting], hal.state.retention) cannot
            # delete a dependency target between this check and the commit
            known_ids = await self.known_ids(specs)
            for i, spec in enumerate(specs):
                self.admission.check_dependency_targets(
                    spec, known_ids, i if len(specs) > 1 else None
                )
            self.admission.check_submit_limits(specs)
            if along is not None:
                other = along()
            try:
                jobs, results, added = await self.db(work)
            except CommitOutcomeUnknown:
                resync.doubt(self, itertools.chain((j.id for j in built), other.ids()))
                raise
            except SubmitKeyTaken:
                # the same key sent twice at once: the first stored it, this transaction
                # rolled back whole; answer as the first did
                assert key is not None
                found = await self.db(self.store.find_submit_key, key.user, key.key)
                assert found is not None
                return resync.replayed(key, found)
            jobs = [*other.jobs, *jobs]
            for job in jobs:
                self.put(job)
            await self._published(added, jobs)
        return results

    async def known_ids(self, specs: Sequence[JobSpec]) -> set[int]:
        wanted = {
            jid for s in specs if s.dependency for t in s.dependency.terms for jid in t.job_ids
        }
        known = {j for j in wanted if j in self.jobs or j in self.arrays}
        missing = sorted(wanted - known)
        if missing:
            found = await self.db(lambda: self.store.history(ids=missing, array_ids=missing))
            known.update(j.id for j in found)
            known.update(j.array_job_id for j in found if j.array_job_id is not None)
        return known

    async def apply_plan(self, plan: Plan, started: list[int] | None = None) -> list[int]:
        """Commit the parts of ``plan`` that still hold (``hal.state.plan_applier``);
        the ids started, added to ``started`` when given. The scheduler service's one way
        back into the cluster."""
        return await plan_applier.apply_plan(self, plan, started)

    def finish(
        self, job: Job, state: JobState, now: float, *, exit_code: int = 0, exit_signal: int = 0
    ) -> tuple[Job, EventRow]:
        """The ended version of ``job`` (or, for NODE_FAIL with requeue, the requeued one:
        a batch job only, as Slurm's; salloc's allocation, ``Requeue=1`` too, ends)."""
        state = preempt.ended_as(job, state)
        cancelled = preempt.INTERRUPTED in job.extra and job.cancelled_by  # (in its grace)
        if (job.extra.get(preempt.REQUEUE) == "1" and not cancelled) or (
            state is JobState.NODE_FAIL and job.spec.requeue and not job.spec.interactive
        ):
            # PENDING: an administrator's requeue (scontrol requeue) ending its run
            after = None if state is JobState.PENDING else state.value
            run = (after or "REQUEUED", exit_code, exit_signal)
            new = requeued(job, now, after=after, run=run)
            if job.extra.get(preempt.REQUEUE_HOLD) == "1":
                new = held_on_requeue(new)
            return new, EventRow(
                now, "job.requeued", job_id=job.id, state="PENDING", data={"after": state.value}
            )
        if crontabs.runs_again(job, state):  # the run of a cron job: queued for the next
            return crontabs.queued_again(job, state, now, exit_code, exit_signal)
        reason = FINISH_REASONS.get(state, PendingReason.NONE)
        new = job.evolve(
            state=state, reason=reason, end_time=now, exit_code=exit_code, exit_signal=exit_signal
        )
        return new, EventRow(
            now,
            "job.finished",
            job_id=job.id,
            state=state.value,
            data={"exit_code": exit_code, "signal": exit_signal},
        )

    def het_followers_end(
        self, ended: Sequence[Job], now: float
    ) -> tuple[list[Job], list[EventRow]]:
        """Components 1.. of the het jobs whose component 0 is in ``ended`` (now
        terminal): they end with it, in the same state (Slurm's hetjob semantics)."""
        changed: list[Job] = []
        events: list[EventRow] = []
        for leader in ended:
            het = leader.spec.het
            if het is None or het.offset != 0:
                continue
            for job in self.het_components(het.job_id)[1:]:
                if not job.state.is_active:
                    continue
                if leader.state is JobState.PENDING:  # requeued: the components with it
                    new = requeued(job, now, after=leader.extra.get(preempt.REQUEUED_AFTER))
                    changed.append(new)
                    events.append(EventRow(now, "job.requeued", job_id=job.id, state="PENDING"))
                    continue
                if not leader.state.is_terminal:
                    continue
                new = job.evolve(
                    state=leader.state,
                    reason=leader.reason,
                    end_time=now,
                    exit_code=leader.exit_code,
                    exit_signal=leader.exit_signal,
                    cancelled_by=leader.cancelled_by,
                )
                changed.append(new)
                events.append(EventRow(now, "job.finished", job_id=job.id, state=new.state.value))
        return changed, events


def new_jobs(
    specs: Sequence[JobSpec],
    admitted: Sequence[tuple[str, int, int]],
    first_id: int,
    now: float,
    *,
    het: bool = False,
) -> tuple[list[Job], list[Submitted], list[tuple[int, str]]]:
    """The jobs a submission makes, numbered from ``first_id`` (an array: one per
    element, its first id the array's), with what ``Admission.admit`` gave each spec
    (partition, time limit, priority); what to answer; and the scripts to store, one per
    spec under its first id. ``het``: the specs are one het job's components, whose id
    is component 0's."""
    if het:
        specs = [s.with_changes(het=HetSpec(first_id, i, len(specs))) for i, s in enumerate(specs)]
    jobs: list[Job] = []
    results: list[Submitted] = []
    scripts: list[tuple[int, str]] = []
    next_id = first_id
    for spec, (partition, limit, priority) in zip(specs, admitted, strict=True):
        first = next_id
        scripts.append((first, spec.script))
        common = {
            "spec": spec,
            "partition": partition,
            "time_limit_s": limit,
            "priority": priority,
            # --priority: kept, not recalculated, as scontrol update's
            "priority_fixed": spec.priority is not None,
            "submit_time": now,
            "reason": (
                PendingReason.JOB_HELD_USER if spec.hold else PendingReason.WAITING_FOR_SCHEDULING
            ),
            "extra": {LATENCY_SENSITIVE: "1"} if spec.latency_sensitive else {},
        }
        if spec.array is None:
            jobs.append(Job(id=first, **common))  # type: ignore[arg-type]
            results.append(Submitted(first, ()))
            next_id += 1
            continue
        ids = []
        for index in spec.array.indices:
            jobs.append(
                Job(
                    id=next_id,
                    array_job_id=first,
                    array_task_id=index,
                    array_max_running=spec.array.max_running,
                    **common,  # type: ignore[arg-type]
                )
            )
            ids.append(next_id)
            next_id += 1
        results.append(Submitted(first, tuple(ids)))
    return jobs, results, scripts


def _launched_only(mirrored: Mapping[int, Job], job: Job) -> bool:
    """Whether ``job`` differs from the mirror's at most in its ``launched`` flag."""
    before = mirrored.get(job.id)
    return (
        before is not None
        and before.extra == job.extra
        and (before if before.launched == job.launched else before.evolve(launched=job.launched))
        == job
    )


@dataclass(frozen=True, slots=True)
class Change:
    """The handle ``Cluster.change`` yields: valid while its block holds the lock."""

    cluster: Cluster

    async def commit(
        self,
        jobs: Sequence[Job],
        events: Sequence[EventRow],
        extra: Callable[[StateTransaction], None] | None = None,
    ) -> None:
        """Persist ``jobs`` and ``events`` (and ``extra``'s writes) in one store
        transaction, then mirror them and tell the listeners."""
        await self.cluster._commit(jobs, events, extra)
