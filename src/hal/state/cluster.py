"""``Cluster``: the server's live view of jobs and nodes, and every job state transition.

The SQL store is the truth; this mirror holds the active jobs (plus those that ended within
MinJobAge) and the nodes in memory so that the scheduler and ``squeue`` never scan the
database. Every mutation follows one path, under one lock:

    compute new Job/Node values  →  one store transaction (rows + event rows)  →  commit
    →  update the mirror  →  wake the scheduler, event streams and agents

so a change is visible (and acknowledged to a client) only once it is durable.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import itertools
import logging
import signal
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from signal import SIGKILL
from typing import TYPE_CHECKING, TypeVar

from hal.config.model import HalConfig
from hal.core.clock import Clock, SystemClock
from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.core.job import NOT_ELIGIBLE, WAITING_ON_OTHERS, HetSpec, Job, JobSpec
from hal.core.node import Node, Partition, gpu_type_matches, gpu_type_name
from hal.core.partition_list import in_partition
from hal.core.preemption import (
    PREEMPTED_BY,
    PREEMPTING,
    holds_no_cpus,
    suspended_by_preemption,
)
from hal.core.priority import DEFAULT_QOS, SUBMIT_LIMIT_MESSAGE
from hal.core.reservation import Reservation
from hal.core.states import JobState, NodeState, PendingReason
from hal.core.topology_labels import label_path
from hal.scheduler.framework.snapshot import ClusterSnapshot, Plan
from hal.state import crontabs, pending_update, preempt, resync
from hal.state import reservations as advance_reservations
from hal.state.applier import NodeUsage, check_placement, hold, release
from hal.state.associations import Associations
from hal.state.job_changes import (
    LIMIT_BEFORE_TIME_MIN,
    basic_priority,
    check_priority_update,
    check_time_limit_update,
    check_time_min,
    held_by,
    held_on_requeue,
    lowered_limit,
    requeued,
    within_deadline,
)
from hal.state.job_runs import ended_runs
from hal.state.partitions import take_overrides
from hal.state.store import (
    CommitOutcomeUnknown,
    DatabaseUnavailable,
    EventRow,
    PartitionOverride,
    StoredEvent,
    SubmitKey,
    SubmitKeyTaken,
)
from hal.state.store_protocol import StateStore, StateTransaction
from hal.state.submit_limits import AccountSubmitLimits
from hal.state.suspension import suspension
from hal.state.topology_levels import check_topology_level

if TYPE_CHECKING:
    from hal.state.agents import AgentSession

T = TypeVar("T")
log = logging.getLogger("hal.state")
RECENT_EVENTS = 100_000
NOT_MADE = "cloud: not made yet"  # the reason of a [cloud] node that does not exist yet

FINISH_REASONS = {
    JobState.COMPLETED: PendingReason.NONE,
    JobState.FAILED: PendingReason.NON_ZERO_EXIT_CODE,
    JobState.TIMEOUT: PendingReason.TIME_LIMIT,
    JobState.OUT_OF_MEMORY: PendingReason.OUT_OF_MEMORY,
    JobState.NODE_FAIL: PendingReason.NODE_FAIL,
    JobState.CANCELLED: PendingReason.NONE,
    JobState.PREEMPTED: PendingReason.NONE,
}
# jobs scontrol hold/release act on: a running job's hold keeps it held once requeued
_HOLDABLE = (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the authenticated user, or a node agent (``agent``: its token is
    accepted by /v1/agent only, for ``agent_nodes``, None for any node)."""

    name: str
    admin: bool = False
    agent: bool = False
    agent_nodes: frozenset[str] | None = None

    def may_modify(self, job: Job) -> bool:
        return self.admin or job.spec.user == self.name


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: int
    task_ids: tuple[int, ...]


class Cluster:
    def __init__(
        self,
        store: StateStore,
        config: HalConfig,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.jobs: dict[int, Job] = {}
        # the pending and running subset of ``jobs``: what a scheduling pass looks at, so
        # its cost does not grow with the finished jobs kept for MinJobAge
        self.unfinished: dict[int, Job] = {}
        # ids of the jobs suspended by preemption (``hal.state.preempt.resume_freed``
        # runs after every batch of finished jobs: it must not scan the whole queue)
        self.preempt_suspended: set[int] = set()
        self.nodes: dict[str, Node] = {}
        self.usage: dict[str, NodeUsage] = {}
        self.arrays: dict[int, list[int]] = {}  # array job id → element ids (in the mirror)
        # the stored rows ``fill_related`` read for dependency targets that have left the
        # mirror, by target id (an array's: all its elements). Kept while pending jobs name
        # the target; an array's are dropped when more of its elements are pruned.
        self.stored_related: dict[int, list[Job]] = {}
        self.agent_sessions: dict[str, AgentSession] = {}  # node → its agent's session
        self.reservations: dict[str, Reservation] = {}  # see hal.state.reservations
        # the latest committed events, for event streams (older ones are read from the store)
        self.recent_events: deque[StoredEvent] = deque(maxlen=RECENT_EVENTS)
        self.revision = 0
        self.started_at = 0.0
        # (name, user) of the running and suspended jobs, for what a singleton dependency
        # shows (``busy_names``); None: counted again at the next ask (any job changed)
        self._busy_names: Counter[tuple[str, str]] | None = None
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
        self.configure(config)

    def configure(self, config: HalConfig) -> None:
        """Take ``config``: at start, and again at ``scontrol reconfigure``
        (``hal.server.reconfigure``), which has checked that no pending or running job is in
        a partition ``config`` drops. Everything else reads ``self.config`` when it
        needs it, so the next submit and the next pass see the new values."""
        self.config = config
        self.partitions: dict[str, Partition] = {p.name: p for p in config.partition_objects()}
        # scontrol update's changes over them (``hal.state.partitions``): the file's
        # partitions again here, and in the store (``take_config``)
        self.partition_overrides: dict[str, PartitionOverride] = {}
        # the nodes [cloud] groups may create, as each will be once joined: a job that
        # fits one of them is taken at submit while it fits no joined node
        self.cloud_templates: dict[str, Node] = {
            name: group.template(name).evolve(state=NodeState.DOWN, reason=NOT_MADE)
            for group in config.cloud.groups
            for name in group.nodes
        }
        # the QoS and accounts jobs may name (``hal.state.associations``)
        self._associations = Associations(config.priority)

    # -- plumbing ---------------------------------------------------------------------
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
        await self.db(self.store.migrate)
        jobs = await self.db(
            lambda: self.store.load_jobs(
                active_or_ended_after=now - self.config.min_job_age_seconds
            )
        )
        nodes = await self.db(self.store.load_nodes)
        self.reservations = {r.name: r for r in await self.db(self.store.load_reservations)}
        take_overrides(self, await self.db(self.store.partition_overrides))
        self.revision = await self.db(self.store.revision)
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
            self._put(job)

    async def close(self) -> None:
        self._db.shutdown(wait=True)
        self.store.close()

    def busy_names(self) -> Counter[tuple[str, str]]:
        """(name, user) of the jobs running or suspended: what a ``singleton`` dependency
        waits on. Counted once until a job changes, so a listing of many singleton jobs
        does not scan the queue for each."""
        if self._busy_names is None:
            self._busy_names = Counter(
                (j.spec.name, j.spec.user)
                for j in self.unfinished.values()
                if j.state in (JobState.RUNNING, JobState.SUSPENDED)
            )
        return self._busy_names

    def _put(self, job: Job) -> None:
        self._busy_names = None
        old = self.jobs.get(job.id)
        was = old is not None and old.state.is_active
        # a job suspended or resumed for preemption gives back or takes again its CPUs
        moved = (
            old is not None
            and was
            and job.state.is_active
            and holds_no_cpus(old) != holds_no_cpus(job)
        )
        if old is not None and was and (moved or not job.state.is_active):
            release(self.usage, old)
        if job.state.is_active and (not was or moved):
            hold(self.usage, job)
        self.jobs[job.id] = job
        if suspended_by_preemption(job):
            self.preempt_suspended.add(job.id)
        else:
            self.preempt_suspended.discard(job.id)
        if job.state is JobState.PENDING or job.state.is_active:
            self.unfinished[job.id] = job
        else:
            self.unfinished.pop(job.id, None)
        if job.array_job_id is not None and old is None:
            self.arrays.setdefault(job.array_job_id, []).append(job.id)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[ClusterChange]:
        """A change made by a module beside this class (``hal.state.command_exit``,
        ``config_change``): it holds the cluster's lock (what is in doubt reconciled
        first), reads the mirror, checks (``authorise``), and commits through the
        handle, whose commit persists jobs and events in one store transaction and then
        mirrors them. No other change runs meanwhile; nothing else may write the mirror."""
        async with self._lock:
            yield ClusterChange(self)

    async def _commit(
        self,
        jobs: Sequence[Job],
        events: Sequence[EventRow],
        extra: Callable[[StateTransaction], None] | None = None,
    ) -> None:
        """Persist changed ``jobs`` and ``events`` in one transaction, then mirror them.
        Callers hold ``self._lock``."""
        jobs = [self._eligible_kept(j) for j in jobs]
        runs = ended_runs(self.jobs, jobs)  # requeued: the runs they ended (sacct -D)

        def work() -> list[StoredEvent]:
            with self.store.transaction() as tx:
                tx.update_jobs(jobs)
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
            self._put(job)
        await self._published(added, jobs)

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

    async def _published(self, events: Sequence[StoredEvent], jobs: Sequence[Job]) -> None:
        if events:
            self.revision = max(self.revision, events[-1].id)
            self.recent_events.extend(events)
        self.changed.set()
        for listener in self._listeners:
            listener(jobs)
        async with self.events_changed:
            self.events_changed.notify_all()

    async def record_events(self, events: Sequence[EventRow]) -> None:
        """Commit event rows that change no job (reports such as ``job.overrunning``), in
        order with every other change."""
        async with self._lock:
            await self._commit([], events)

    def events_since(self, after: int, limit: int) -> list[StoredEvent] | None:
        """Committed events after id ``after`` from memory, or ``None`` when they are older
        than what memory holds (the caller then reads the store)."""
        recent = self.recent_events
        if not recent or after < recent[0].id - 1:
            return None if self.revision > after else []
        start = bisect.bisect_right(recent, after, key=lambda e: e.id)
        return list(itertools.islice(recent, start, start + limit))

    # -- lookups ----------------------------------------------------------------------
    def element_id(self, array: int, index: int) -> int:
        """The job id of element ``index`` of array ``array`` (a dependency on ``123_4``);
        ``InvalidRequest`` when there is none, as Slurm's "Job dependency problem"."""
        for job_id in self.arrays.get(array, ()):
            job = self.jobs.get(job_id)
            if job is not None and job.array_task_id == index:
                return job_id
        raise InvalidRequest(
            f"Job dependency problem: array job {array} has no element {index} "
            f"(squeue -r -j {array} lists its elements)",
            field="dependency",
        )

    def resolve(self, ident: str | int) -> list[Job]:
        """``123`` (a job or a whole array), ``100_7`` or ``100_[1-3]`` → jobs in the mirror."""
        text = str(ident).strip()
        try:
            if "_" in text:
                base_text, idx_text = text.split("_", 1)
                base = int(base_text)
                wanted = array_indices(idx_text)
                found = [
                    job
                    for job in (self.jobs[i] for i in self.arrays.get(base, ()))
                    if job.array_task_id is not None and any(job.array_task_id in r for r in wanted)
                ]
            elif "+" in text:
                base_text, offset_text = text.split("+", 1)
                base, offset = int(base_text), int(offset_text)
                found = [
                    j
                    for j in self.het_components(base)
                    if j.spec.het is not None and j.spec.het.offset == offset
                ]
            else:
                jid = int(text)
                job = self.jobs.get(jid)
                if job is not None and job.spec.het is not None and job.spec.het.offset == 0:
                    found = self.het_components(jid)  # ``123``: the whole het job
                elif jid in self.arrays:
                    found = [self.jobs[i] for i in self.arrays[jid]]
                elif jid in self.jobs:
                    found = [self.jobs[jid]]
                else:
                    found = []
        except ValueError as err:
            raise InvalidRequest(
                f"invalid job id {text!r}; use 123, 123_4, 123_[1-3] or 123+1", field="job_id"
            ) from err
        if not found:
            raise NotFound(f"Invalid job id specified: {text}")
        return sorted(found, key=lambda j: j.id)

    def het_components(self, het_job_id: int) -> list[Job]:
        """The components of het job ``het_job_id`` still in the mirror, by offset."""
        first = self.jobs.get(het_job_id)
        if first is None or first.spec.het is None:
            return []
        size = first.spec.het.size
        found = []
        for jid in range(het_job_id, het_job_id + size):
            job = self.jobs.get(jid)
            if job is not None and job.spec.het is not None and job.spec.het.job_id == het_job_id:
                found.append(job)
        return found

    def with_het_components(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` plus every other component of the het jobs among them, by id."""
        het_ids = {j.spec.het.job_id for j in jobs if j.spec.het is not None}
        if not het_ids:
            return jobs
        found = {j.id: j for j in jobs}
        for het_id in het_ids:
            found.update((j.id, j) for j in self.het_components(het_id))
        return sorted(found.values(), key=lambda j: j.id)

    def topology_path(self, node: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's placement path: its switch path from the config's ``[topology]``
        when that has switches or blocks (configuration, applied, not stored), else the
        path its topology labels make (``core.topology_labels``; ``()`` without)."""
        topo = self.config.topology
        if topo is not None and topo.has_tree:
            return topo.path_of(node)
        return label_path(node, labels)

    def node_labels(self, node: str, agent: Mapping[str, str]) -> dict[str, str]:
        """The node's topology labels: the agent's, overridden by ``[[topology.labels]]``."""
        topo = self.config.topology
        return {**agent, **(topo.labels_of(node) if topo is not None else {})}

    def default_partition(self) -> str:
        """hal.toml's default, or the one ``scontrol update Default=YES`` made so."""
        for p in self.partitions.values():
            if p.default:
                return p.name
        return self.config.default_partition

    def node_display_state(self, node: Node) -> str:
        used = self.usage.get(node.name)
        busy = bool(used and used.jobs)
        if node.state is NodeState.DOWN:
            return "down"
        if node.state is NodeState.DRAIN:
            return "drng" if busy else "drain"
        if not busy or used is None:
            return "idle"
        full = used.exclusive or not (used.allocated.cpus < node.resources.cpus)
        return "alloc" if full else "mix"

    def snapshot(self, *, made: bool = False) -> ClusterSnapshot:
        """The scheduler's view. ``made``: [cloud] nodes not made yet as if they were
        (idle), for ``--test-only``, as Slurm's answers count powered-down cloud nodes."""
        pending: list[Job] = []
        running: list[Job] = []
        for job in self.unfinished.values():
            if job.state is JobState.PENDING:
                # A held job can neither start nor hold anything back, and its reason was
                # set when it was held: leave it out of scheduling passes until released
                # (a queue of 20,000 held jobs then costs the scheduler nothing).
                if not job.held:
                    pending.append(job)
            elif job.state.is_active:
                running.append(job)
        related: dict[int, Job] = {}
        for job in pending:
            dep = job.spec.dependency
            if dep is None:
                continue
            for term in dep.terms:
                for jid in term.job_ids:
                    target = self.jobs.get(jid)
                    elements = self.arrays.get(jid, ())
                    array = target.spec.array if target is not None else None
                    if array is not None and len(elements) < len(array.indices):
                        continue  # elements have left the mirror: ``fill_related`` reads all
                    if target is not None:
                        related[jid] = target
                    for element in elements:
                        related[element] = self.jobs[element]
        now = self.clock.now()
        # [cloud] nodes not made yet, as nodes that are down: a job only they could hold
        # waits for Resources (the autoscaler makes them), not BadConstraints
        unmade = [t for name, t in self.cloud_templates.items() if name not in self.nodes]
        if made:
            unmade = [t.evolve(state=NodeState.UP, reason="") for t in unmade]
        return ClusterSnapshot(
            revision=self.revision,
            now=now,
            nodes=tuple(sorted([*self.nodes.values(), *unmade], key=lambda n: n.name)),
            partitions=tuple(self.partitions.values()),
            pending=tuple(pending),
            running=tuple(running),
            related=related,
            reservations=tuple(r for r in self.reservations.values() if not r.ended(now)),
        )

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

    # -- submit -----------------------------------------------------------------------
    @property
    def doubtful(self) -> bool:
        """Whether a change whose outcome is unknown left memory to be reconciled."""
        return bool(self.in_doubt) or self.others_in_doubt

    async def reconcile(self) -> None:
        """Take the stored rows of what is in doubt, if any (``hal.state.resync``)."""
        if self.doubtful:
            async with self._lock:
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
        specs = [self._associations.with_defaults(s) for s in specs]
        prepared = [self.admit(spec, i if len(specs) > 1 else None) for i, spec in enumerate(specs)]
        built: list[Job] = []  # the jobs ``work`` wrote, in doubt if its COMMIT is lost
        other = crontabs.Changes()

        def work() -> tuple[list[Job], list[Submitted], list[StoredEvent]]:
            with self.store.transaction() as tx:
                other.write_to(tx)
                count = sum(len(s.array.indices) if s.array else 1 for s in specs)
                next_id = tx.reserve_job_ids(count)
                if het:  # the het job id is component 0's id
                    het_specs = [
                        s.with_changes(het=HetSpec(next_id, i, len(specs)))
                        for i, s in enumerate(specs)
                    ]
                else:
                    het_specs = list(specs)
                jobs: list[Job] = []
                results: list[Submitted] = []
                scripts: list[tuple[int, str]] = []
                script_ids: list[int] = []
                for spec, (partition, limit, priority) in zip(het_specs, prepared, strict=True):
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
                            PendingReason.JOB_HELD_USER
                            if spec.hold
                            else PendingReason.WAITING_FOR_SCHEDULING
                        ),
                    }
                    if spec.array is None:
                        jobs.append(Job(id=first, **common))  # type: ignore[arg-type]
                        script_ids.append(first)
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
                        script_ids.append(first)
                        ids.append(next_id)
                        next_id += 1
                    results.append(Submitted(first, tuple(ids)))
                built.extend(jobs)
                if key is not None:
                    result = [(r.job_id, len(r.task_ids)) for r in results]
                    tx.add_submit_key(key, now, result)
                tx.insert_scripts(scripts)
                tx.insert_jobs(jobs, script_ids)
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

        async with self._lock:
            # under the lock: a purge of old jobs ([accounting], hal.state.retention) cannot
            # delete a dependency target between this check and the commit
            known_ids = await self.known_ids(specs)
            for i, spec in enumerate(specs):
                self.check_dependency_targets(spec, known_ids, i if len(specs) > 1 else None)
            self.check_submit_limits(specs)
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
                self._put(job)
            await self._published(added, jobs)
        return results

    def admit(self, spec: JobSpec, index: int | None) -> tuple[str, int, int]:
        """Resolve the partition, time limit and priority; reject what can never run."""
        where = f"jobs[{index}]." if index is not None else ""
        names = spec.partitions or (self.default_partition(),)
        for name in names:
            if name not in self.partitions:
                raise InvalidRequest(
                    f"Invalid partition name specified: {name!r} (known: "
                    f"{', '.join(sorted(self.partitions))})",
                    field=where + "partition",
                )
        if not any(self.partitions[name].state.takes_jobs for name in names):
            # DRAIN or INACTIVE (Slurm 22.05.8's words; with -p a,b, when none takes it)
            states = ", ".join(f"{n} is {self.partitions[n].state}" for n in names)
            raise Conflict(
                f"Required partition not available (inactive or drain): {states}; submit "
                "to another partition (-p), or ask an administrator to set it UP",
                field=where + "partition",
            )
        # queued in the first of its partitions (``hal.core.partition_list``)
        partition = self.partitions[names[0]]
        if spec.time_limit_s is None:
            limit = self._associations.time_limit(spec, partition.default_limit_s)
        else:
            limit = spec.time_limit_s
        if spec.array is not None and len(spec.array.indices) > self.config.max_array_size:
            raise InvalidRequest(
                f"array has {len(spec.array.indices)} tasks; MaxArraySize is "
                f"{self.config.max_array_size}",
                field=where + "array",
            )
        self.check_request(spec, names, where)
        check_time_min(spec.time_min_s, limit, where)
        advance_reservations.check_job(self, spec, limit, where)
        if spec.topology is not None:
            check_topology_level(self, spec.topology, where)
        self._check_licenses(spec, where)
        if spec.priority is not None:  # --priority, an administrator's (the API drops a user's)
            return partition.name, limit, spec.priority
        return partition.name, limit, basic_priority(partition, spec.nice)

    def check_request(self, spec: JobSpec, partitions: Sequence[str], where: str = "") -> None:
        """The submit checks of what ``scontrol update`` may change in a pending job
        (``hal.state.pending_update``): its QoS and account, its node lists and features
        against ``partitions``."""
        self._associations.check(spec, where)
        both = [n for n in spec.nodelist if n in spec.exclude]
        if both:  # Slurm: "Job's required and excluded node lists overlap"
            raise InvalidRequest(
                f"Invalid node name specified: {', '.join(both[:5])} both required "
                "(--nodelist) and excluded (--exclude)",
                field=where + "nodelist",
            )
        self._check_fits_a_partition(spec, partitions, where)

    def _check_licenses(self, spec: JobSpec, where: str) -> None:
        """``-L``: licenses the cluster has (``[licenses]``), no more than it has; Slurm
        refuses the others at submit ("Invalid license specification")."""
        have = self.config.licenses
        for name, count in spec.licenses:
            if count > have.get(name, 0):
                known = ", ".join(f"{n}:{c}" for n, c in sorted(have.items())) or "none"
                what = (
                    f"the cluster has {have[name]}"
                    if name in have
                    else "no such license is configured"
                )
                raise InvalidRequest(
                    f"Invalid license specification: {name}:{count} ({what}; the "
                    f"cluster's licenses: {known}; see scontrol show licenses)",
                    field=where + "licenses",
                )

    def check_submit_limits(
        self, specs: Sequence[JobSpec], moved: frozenset[int] = frozenset()
    ) -> None:
        """A QoS's ``max_submit_jobs_per_user`` (Slurm's MaxSubmitJobsPerUser): the
        user's pending and running jobs in the QoS, with this batch (each array element
        counts), may not exceed it; the whole batch is refused with Slurm's message.
        Then the accounts' ``max_submit_jobs`` and ``grp_submit_jobs`` (MaxSubmitJobs,
        GrpSubmitJobs; ``hal.state.submit_limits``), likewise. ``moved``: the ids of
        jobs whose QoS or account ``specs`` change (``scontrol update``), not counted
        as they are."""
        self._check_qos_submit_limits(specs, moved)
        if any(a.has_submit_limits for a in self.config.priority.accounts):
            others = (j for j in self.unfinished.values() if j.id not in moved)
            i = AccountSubmitLimits(self.config.priority).first_over(others, specs)
            if i is not None:
                where = f"jobs[{i}]." if len(specs) > 1 else ""
                raise InvalidRequest(SUBMIT_LIMIT_MESSAGE, field=where + "account")

    def _check_qos_submit_limits(self, specs: Sequence[JobSpec], moved: frozenset[int]) -> None:
        caps = {
            q.name: q.max_submit_jobs_per_user
            for q in self.config.priority.qos
            if q.max_submit_jobs_per_user is not None
        }
        if not caps:
            return
        counts: Counter[tuple[str, str]] = Counter(
            (j.spec.qos or DEFAULT_QOS, j.spec.user)
            for j in self.jobs.values()
            if not j.state.is_terminal and j.id not in moved
        )
        for i, spec in enumerate(specs):
            key = (spec.qos or DEFAULT_QOS, spec.user)
            cap = caps.get(key[0])
            if cap is None:
                continue
            counts[key] += len(spec.array.indices) if spec.array else 1
            if counts[key] > cap:
                where = f"jobs[{i}]." if len(specs) > 1 else ""
                raise InvalidRequest(SUBMIT_LIMIT_MESSAGE, field=where + "qos")

    def _check_fits_a_partition(self, spec: JobSpec, names: Sequence[str], where: str) -> None:
        """The job's nodes, GPU type and size against each of its partitions' nodes
        known now, not at all while one of them has none (nodes may join later). A job
        naming several partitions (``-p a,b``) is refused only when none could hold it,
        with its first partition's reason."""
        refused: InvalidRequest | None = None
        for name in names:
            partition = self.partitions[name]
            candidates = [n for n in self.nodes.values() if partition.contains(n.name)]
            candidates += [
                t
                for name, t in self.cloud_templates.items()
                if name not in self.nodes and partition.contains(name)
            ]
            if not candidates:
                return
            try:
                self._check_nodelist(spec, where)
                self._check_gpu_type(spec, candidates, where)
                self._check_fits_somewhere(spec, candidates, where)
                self._check_required_nodes(spec, partition, where)
            except InvalidRequest as err:
                refused = refused or err
                continue
            return
        if refused is not None:
            raise refused

    def _check_nodelist(self, spec: JobSpec, where: str) -> None:
        """``--nodelist`` and ``--exclude`` may name only nodes the cluster knows
        (registered, or named by a partition of the config and yet to join), as Slurm's
        nodes must be in its config: an unknown name, or a host list sent unexpanded over
        REST (``n[1-4]``), would otherwise leave the job pending on BadConstraints for ever
        (``--nodelist``) or exclude nothing the user meant (``--exclude``). Checked, like
        the counts, only once the partition has nodes."""
        if not spec.nodelist and not spec.exclude:
            return
        configured = {n for p in self.partitions.values() for n in p.nodes}
        configured.update(self.cloud_templates)
        for field, names in (("nodelist", spec.nodelist), ("exclude", spec.exclude)):
            unknown = [n for n in names if n not in self.nodes and n not in configured]
            if unknown:
                raise InvalidRequest(
                    f"Invalid node name specified: {', '.join(unknown[:5])} "
                    f"(`hal sinfo -N` lists the nodes; a REST client sends names, not host "
                    f"lists like n[1-4])",
                    field=where + field,
                )

    def _check_required_nodes(self, spec: JobSpec, partition: Partition, where: str) -> None:
        """Each registered ``--nodelist`` node must be one the job can run on in
        ``partition``, as the scheduler's noderesources PreFilter requires (else it keeps
        the job pending on BadConstraints for ever): in the partition, with the
        ``--constraint`` features and GPU type, and big enough when the job spreads over
        as many nodes as it may have."""
        count = max(spec.nodes_max, spec.nodes_min, len(spec.nodelist))
        for name in spec.nodelist:
            node = self.nodes.get(name)
            if node is None:
                continue  # configured, yet to join
            problem = ""
            want = spec.request_per_node(count, node.resources.memory_bytes)
            missing = [f for f in spec.constraint if f not in node.features]
            if not (partition.contains(name) or partition.name in node.partitions):
                problem = f"node {name} is not in partition {partition.name}"
            elif missing:
                problem = f"node {name} lacks features {','.join(missing)}"
            elif spec.typed_gpus and not gpu_type_matches(spec.typed_gpus, node.gpu_model):
                problem = f"node {name} has no GPUs of type {spec.typed_gpus!r}"
            elif not want.fits_in(node.resources):
                have = node.resources
                problem = (
                    f"node {name} has {have.cpus} CPUs, {have.memory_bytes // (1024 * 1024)} "
                    f"MiB and {have.gpus} GPUs; each node would need {want.cpus} CPUs, "
                    f"{want.memory_bytes // (1024 * 1024)} MiB and {want.gpus} GPUs"
                )
            if problem:
                raise InvalidRequest(
                    f"Requested node configuration is not available: {problem} (--nodelist)",
                    field=where + "nodelist",
                )

    def _check_gpu_type(self, spec: JobSpec, nodes: list[Node], where: str) -> None:
        """A job asking GPUs of a type (``--gres=gpu:TYPE:N``, ``--gpus=TYPE:N``) needs a
        node of the partition whose GPU model is of that type, as the scheduler's filter
        matches it (``hal.core.node.gpu_type_matches``). Like the counts in
        ``_check_fits_somewhere`` it is checked against the partition's nodes known now,
        and not at all while the partition has none (nodes may join later)."""
        wanted = spec.typed_gpus
        if wanted is None:
            return
        if any(gpu_type_matches(wanted, n.gpu_model) for n in nodes):
            return
        here = sorted(
            {gpu_type_name(n.gpu_model) for n in nodes if n.gpu_model and n.resources.gpus}
        )
        known = [*self.nodes.values(), *self.cloud_templates.values()]
        gpu_nodes = [n for n in known if n.gpu_model and n.resources.gpus]
        anywhere = sorted({gpu_type_name(n.gpu_model) for n in gpu_nodes})
        if any(gpu_type_matches(wanted, n.gpu_model) for n in gpu_nodes):
            # on nodes, but not this partition's
            raise InvalidRequest(
                f"Requested node configuration is not available: no node of the partition "
                f"has GPU type {wanted!r} (its types: {', '.join(here) or 'none'})",
                field=where + "gpu_type",
            )
        raise InvalidRequest(
            f"Invalid generic resource (gres) specification: no node has GPU type {wanted!r} "
            f"(the cluster's types: {', '.join(anywhere) or 'none'})",
            field=where + "gpu_type",
        )

    @staticmethod
    def _check_fits_somewhere(spec: JobSpec, nodes: list[Node], where: str) -> None:
        typed = ""
        if spec.typed_gpus is not None:
            # only the nodes with GPUs of the type can hold it (``_check_gpu_type``: some do)
            nodes = [n for n in nodes if gpu_type_matches(spec.typed_gpus, n.gpu_model)]
            typed = f" with GPU type {spec.typed_gpus!r}"
        if spec.nodes_min > len(nodes):
            raise InvalidRequest(
                f"Requested node configuration is not available: {spec.nodes_min} nodes "
                f"asked for, the partition has {len(nodes)}{typed}",
                field=where + "nodes",
            )
        unknown = sorted(set(spec.constraint) - {f for n in nodes for f in n.features})
        if unknown:  # (Slurm's words; a size message would hide the reason)
            known = sorted({f for n in nodes for f in n.features})
            raise InvalidRequest(
                f"Invalid feature specification: no node of the partition has "
                f"{', '.join(unknown)} (its nodes' features: {', '.join(known) or 'none'})",
                field=where + "constraint",
            )

        def fitting(count: int) -> int:
            return sum(
                1
                for n in nodes
                if spec.request_per_node(count, n.resources.memory_bytes).fits_in(n.resources)
                and set(spec.constraint) <= set(n.features)
            )

        # a range (-N 1-2, or no -N: up to a node per task) fits if one count in it does
        counts = range(spec.nodes_min, min(max(spec.nodes_max, spec.nodes_min), len(nodes)) + 1)
        if not any(fitting(count) >= count for count in counts):
            biggest = max(nodes, key=lambda n: (n.resources.cpus, n.resources.memory_bytes))
            most = max(counts, default=spec.nodes_min)  # (spread the widest it may be)
            want = spec.request_per_node(most, biggest.resources.memory_bytes)
            raise InvalidRequest(
                "Requested node configuration is not available: each node would need "
                f"{want.cpus} CPUs, {want.memory_bytes // (1024 * 1024)} MiB and {want.gpus} "
                f"GPUs; the largest node{typed} has {biggest.resources.cpus} CPUs, "
                f"{biggest.resources.memory_bytes // (1024 * 1024)} MiB and "
                f"{biggest.resources.gpus} GPUs",
                field=where + "resources",
            )

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

    @staticmethod
    def check_dependency_targets(spec: JobSpec, known: set[int], index: int | None) -> None:
        if spec.dependency is None:
            return
        for term in spec.dependency.terms:
            for jid in term.job_ids:
                if jid not in known:
                    where = f"jobs[{index}]." if index is not None else ""
                    raise InvalidRequest(
                        f"Job dependency problem: job {jid} does not exist",
                        field=where + "dependency",
                    )

    # -- user actions -----------------------------------------------------------------
    async def cancel(
        self, ident: str, caller: Caller, signal: int | None = None, *, batch_only: bool = False
    ) -> list[int]:
        from hal.state import agents

        async with self._lock:
            jobs = self.resolve(ident)
            self.authorise(jobs, caller)
            now = self.clock.now()
            signalled: list[int] = []
            if signal is not None:
                live = [j for j in jobs if j.state.is_active]
                for job in live:
                    agents.send_signal(self, job, signal, batch_only=batch_only)
                signalled = [j.id for j in live]
                if signal != SIGKILL:
                    return signalled
                # Slurm's job_signal: a SIGKILL cancels a pending job (``scancel -b``
                # without -s sends one)
                jobs = [j for j in jobs if j.state is JobState.PENDING]
            changed: list[Job] = []
            events: list[EventRow] = []
            for job in jobs:
                # a pending job, or a het component past the first, which runs no process
                # of its own: cancelled at once (the component gives its nodes back)
                if job.state is JobState.PENDING or (
                    job.spec.het is not None
                    and job.spec.het.offset > 0
                    and job.state in (JobState.RUNNING, JobState.SUSPENDED)
                ):
                    changed.append(
                        job.evolve(
                            state=JobState.CANCELLED,
                            reason=PendingReason.NONE,
                            end_time=now,
                            cancelled_by=caller.name,
                        )
                    )
                    events.append(
                        EventRow(
                            now,
                            "job.finished",
                            job_id=job.id,
                            state="CANCELLED",
                            data={"by": caller.name},
                        )
                    )
                elif job.state in (JobState.RUNNING, JobState.SUSPENDED):
                    changed.append(job.evolve(state=JobState.COMPLETING, cancelled_by=caller.name))
                    events.append(
                        EventRow(
                            now,
                            "job.cancelling",
                            job_id=job.id,
                            state="COMPLETING",
                            data={"by": caller.name},
                        )
                    )
            # a cron job's entry is commented out in its user's crontab, as Slurm's
            await self._commit(changed, events, crontabs.disabling(changed))
            for job in changed:
                if job.state is JobState.COMPLETING:
                    agents.send_cancel(self, job, JobState.CANCELLED)
            return signalled + [j.id for j in changed]

    async def set_hold(
        self, ident: str, caller: Caller, held: bool, *, user_hold: bool = False
    ) -> list[int]:
        """Hold (``scontrol hold``) or release jobs that have not ended. An
        administrator's hold, of any job, is an admin hold (only an administrator
        releases it), unless ``user_hold`` (``scontrol uhold``: a hold its owner may
        release). A running job's hold shows (priority 0, its reason) and keeps it from
        running again once requeued, as in Slurm 22.05.8 (HAL dropped it); jobs that
        have all ended are refused with Slurm's words."""
        async with self._lock:
            found = self.resolve(ident)
            self.authorise(found, caller)  # whatever their state, as Slurm refuses
            # a running job's hold waits for its requeue, as Slurm 22.05.8 keeps it
            jobs = [j for j in found if j.state in _HOLDABLE]
            if found and not jobs:
                raise Conflict(f"Job has already finished for job {found[0].display_id}")
            now = self.clock.now()
            changed: list[Job] = []
            for job in jobs:
                pending = job.state is JobState.PENDING
                if held:
                    new = held_by(job, caller, user_hold=user_hold)
                else:
                    if job.held_by_admin and not caller.admin:
                        raise PermissionDenied(
                            f"job {job.display_id} was held by an administrator; ask one to "
                            "release it"
                        )
                    new = job.evolve(
                        held_by_admin=False,
                        spec=job.spec.with_changes(hold=False),
                        reason=PendingReason.WAITING_FOR_SCHEDULING
                        if pending
                        else PendingReason.NONE,
                        # eligible from now on (its --switches wait starts now)
                        eligible_time=now if job.held and pending else job.eligible_time,
                    )
                changed.append(new)
            events = [
                EventRow(now, "job.held" if held else "job.released", job_id=j.id, state="PENDING")
                for j in changed
            ]
            await self._commit(changed, events)
            return [j.id for j in changed]

    async def requeue(self, ident: str, caller: Caller, *, hold: bool = False) -> list[int]:
        """``scontrol requeue``: running jobs end their run and go back to the queue,
        finished ones go back at once. ``hold`` (``scontrol requeuehold``): they come
        back held, as their owner's hold (``REQUEUED_HELD``), so none starts again
        before someone releases it."""
        from hal.state import agents

        async with self._lock:
            # a het job goes back to the queue whole: its components start together
            jobs = self.with_het_components(self.resolve(ident))
            self.authorise(jobs, caller)
            for job in jobs:  # --no-requeue (Requeue=0): never run again, as Slurm's
                if not job.spec.requeue:
                    raise Conflict(
                        f"Requested operation is presently disabled for job "
                        f"{job.display_id}: it may not run again (--no-requeue, Requeue=0)"
                    )
            now = self.clock.now()
            changed: list[Job] = []
            events: list[EventRow] = []
            for job in jobs:
                if job.state in (JobState.RUNNING, JobState.SUSPENDED):
                    # ends on the agent first; the finish report puts it back in the queue
                    # (components 1.. of a het job: with component 0's report)
                    flags = {preempt.REQUEUE: "1", **({preempt.REQUEUE_HOLD: "1"} if hold else {})}
                    changed.append(
                        job.evolve(state=JobState.COMPLETING, extra={**job.extra, **flags})
                    )
                    events.append(
                        EventRow(now, "job.requeueing", job_id=job.id, state="COMPLETING")
                    )
                elif job.state.is_terminal:  # its run keeps how it ended
                    again = requeued(
                        job, now, run=(job.state.value, job.exit_code, job.exit_signal)
                    )
                    changed.append(held_on_requeue(again) if hold else again)
                    events.append(EventRow(now, "job.requeued", job_id=job.id, state="PENDING"))
            if not changed:
                raise Conflict("only running or finished jobs can be requeued")
            await self._commit(changed, events)
            for job in changed:
                if job.state is JobState.COMPLETING:
                    agents.send_cancel(self, job, JobState.PENDING)
            return [j.id for j in changed]

    async def suspend(self, ident: str, caller: Caller, *, resume: bool = False) -> list[int]:
        """``scontrol suspend|resume``: stop a running job's processes (SIGSTOP) or let
        them go on (SIGCONT). Administrators only, as in Slurm. A suspended job keeps its
        allocation; its agent does not count the suspended time toward its limit."""
        from hal.state import agents

        if not caller.admin:
            raise PermissionDenied("only an administrator may suspend or resume jobs")
        before = JobState.SUSPENDED if resume else JobState.RUNNING
        after = JobState.RUNNING if resume else JobState.SUSPENDED
        async with self._lock:
            jobs = [j for j in self.resolve(ident) if j.state is before]
            if not jobs:
                verb = "resumed" if resume else "suspended"
                state = before.value.lower()
                raise Conflict(f"Job is not {state}: only {state} jobs can be {verb}")
            for job in jobs:
                if resume and suspended_by_preemption(job):
                    # its CPUs are its preemptor's now: resumed, it would share them
                    raise Conflict(
                        f"job {job.display_id} was suspended for job "
                        f"{job.extra.get(PREEMPTED_BY)}, whose CPUs it held; it resumes by "
                        "itself once they are free (cancel or requeue it to end it sooner)"
                    )
            now = self.clock.now()
            changed = [j.evolve(state=after, extra=suspension(j.extra, now)) for j in jobs]
            kind = "job.resumed" if resume else "job.suspended"
            events = [EventRow(now, kind, job_id=j.id, state=after.value) for j in changed]
            await self._commit(changed, events)
            signum = signal.SIGCONT if resume else signal.SIGSTOP
            for job in changed:
                agents.send_signal(self, job, signum)
            return [j.id for j in changed]

    async def update(self, ident: str, caller: Caller, **fields: object) -> list[Job]:
        from hal.state import agents

        async with self._lock:
            found = self.resolve(ident)
            self.authorise(found, caller)
            # nothing of an ended job changes, whatever the key (Slurm 22.05.8 refuses
            # each with "Job has already finished"); an array's ended tasks are left
            jobs = [j for j in found if not j.state.is_terminal]
            if not jobs:
                raise Conflict(f"Job has already finished for job {found[0].display_id}")
            now = self.clock.now()
            changed: list[Job] = []
            held: set[int] = set()  # by ``Priority=0``
            # StartTime, Dependency, QOS, ...: a pending job's request (read and checked
            # before anything changes)
            request = await pending_update.request_changes(self, jobs, fields)
            for job in jobs:
                new = job
                if fields.get("time_limit_seconds") is not None:
                    if job.state.is_terminal or job.state is JobState.COMPLETING:
                        # Slurm's ESLURM_JOB_FINISHED: the limit of a run that is over
                        # would only rewrite its accounting
                        raise Conflict(
                            f"Job/step already completing or completed: job "
                            f"{job.display_id} is {job.state.value}; its time limit stays"
                        )
                    limit = int(fields["time_limit_seconds"])  # type: ignore[call-overload]
                    check_time_limit_update(job, limit, caller, self.partitions.get(job.partition))
                    extra = {k: v for k, v in job.extra.items() if k != LIMIT_BEFORE_TIME_MIN}
                    new = new.evolve(time_limit_s=limit, extra=extra)  # its own from now on
                if fields.get("time_min_seconds") is not None:
                    if job.state is not JobState.PENDING:
                        raise Conflict(
                            f"job {job.display_id} is {job.state.value}: TimeMin counts only "
                            "until a job starts; its time limit was settled then"
                        )
                    time_min = int(fields["time_min_seconds"])  # type: ignore[call-overload]
                    new = new.evolve(spec=new.spec.with_changes(time_min_s=time_min or None))
                if new.state is JobState.PENDING:
                    check_time_min(new.spec.time_min_s, new.time_limit_s)
                if fields.get("priority") == 0:
                    # Slurm's `scontrol hold` is this very update: priority 0 holds the
                    # job, the owner's way or an administrator's, as ``set_hold`` does
                    # (of an array, the tasks still pending)
                    if all(j.state is not JobState.PENDING for j in jobs):
                        raise Conflict(
                            f"Job is no longer pending execution: job {job.display_id} is "
                            f"{job.state.value}; only a pending job can be held"
                        )
                    if job.state is JobState.PENDING:
                        new = held_by(new, caller, user_hold=False)
                        held.add(job.id)
                elif fields.get("priority") is not None:
                    priority = int(fields["priority"])  # type: ignore[call-overload]
                    check_priority_update(job, priority, caller)
                    if caller.admin:  # (an owner's own value again changes nothing)
                        new = new.evolve(
                            priority=priority,
                            priority_fixed=True,  # kept, not recalculated (Slurm)
                            # "clears any previously set nice value" (scontrol.1)
                            spec=new.spec.with_changes(nice=0),
                        )
                spec_changes: dict[str, object] = {}
                for key in ("name", "comment", "nice", "requeue"):
                    if fields.get(key) is not None:
                        spec_changes[key] = fields[key]
                if "nice" in spec_changes:
                    nice = int(spec_changes["nice"])  # type: ignore[call-overload]
                    if nice < 0 and not caller.admin:  # Slurm: no negative one but root's
                        raise PermissionDenied(
                            "only an administrator may give a negative nice (it raises the "
                            "job's priority over other users' jobs); use 0 or more"
                        )
                    delta = nice - job.spec.nice
                    new = new.evolve(priority=max(0, new.priority - delta))
                if spec_changes:
                    new = new.evolve(spec=new.spec.with_changes(**spec_changes))
                if fields.get("partition") is not None:
                    # one partition or a list (``Partition=a,b``): the job's whole list
                    names = tuple(
                        dict.fromkeys(p.strip() for p in str(fields["partition"]).split(","))
                    )
                    if job.state is not JobState.PENDING:
                        raise Conflict("the partition of a started job cannot change")
                    for name in names:
                        if name not in self.partitions:
                            raise InvalidRequest(
                                f"Invalid partition name specified: {name!r}", field="partition"
                            )
                    self._check_fits_a_partition(job.spec, names, "")  # as at submit
                    name = names[0]
                    new = new.evolve(partition=name, spec=new.spec.with_changes(partitions=names))
                    if not new.priority_fixed:  # its new partition's tier, as at submit
                        new = new.evolve(
                            priority=basic_priority(self.partitions[name], new.spec.nice)
                        )
                if fields.get("reservation") is not None:
                    name = str(fields["reservation"])
                    new = pending_update.moved_to_reservation(self, new, name)
                if request and new.state is JobState.PENDING:
                    new = pending_update.with_request(self, new, request)
                changed.append(new)
            if "qos" in request or "account" in request:
                moved = [j for j in changed if j.state is JobState.PENDING]
                self.check_submit_limits(
                    [j.spec.with_changes(array=None) for j in moved],  # one job each
                    frozenset(j.id for j in moved),
                )
            if fields.get("array_max_running") is not None:
                limit = int(fields["array_max_running"])  # type: ignore[call-overload]
                changed = pending_update.throttled(self, jobs, changed, limit)
            events = [
                EventRow(now, "job.updated", job_id=j.id, state=j.state.value) for j in changed
            ] + [EventRow(now, "job.held", job_id=j, state="PENDING") for j in sorted(held)]
            await self._commit(changed, events)
            before = {j.id: j for j in jobs}
            for new in changed:
                old = before.get(new.id)
                if old and new.state.is_active and new.time_limit_s != old.time_limit_s:
                    agents.send_limit(self, new)  # the agent enforces the limit
            return changed

    @staticmethod
    def authorise(jobs: Iterable[Job], caller: Caller) -> None:
        """Refuse (``PermissionDenied``) unless ``caller`` may change every one of ``jobs``."""
        for job in jobs:
            if not caller.may_modify(job):
                raise PermissionDenied(
                    f"job {job.display_id} belongs to {job.spec.user}; only its owner or an "
                    "administrator may change it"
                )

    # -- the scheduler's results ----------------------------------------------------------
    async def apply_plan(self, plan: Plan) -> list[int]:
        """Commit the parts of ``plan`` that still hold; return the ids started."""
        from hal.state import agents

        async with self._lock:
            now = self.clock.now()
            if any(p.job_id not in self.jobs for p in plan.placements):
                # a job cancelled since the pass read the cluster, and already forgotten
                known = tuple(p for p in plan.placements if p.job_id in self.jobs)
                plan = dataclasses.replace(plan, placements=known)
            started: list[Job] = []
            events: list[EventRow] = []
            # re-check placements against a scratch copy of usage, accumulating as we go
            scratch = {
                name: NodeUsage(u.allocated, set(u.gpu_ids), set(u.jobs), u.exclusive)
                for name, u in self.usage.items()
            }
            refused_het = _refused_het_jobs(self, plan, scratch)
            for placement in plan.placements:
                het = self.jobs[placement.job_id].spec.het
                if het is not None and het.job_id in refused_het:
                    continue  # all components start together or none does
                if check_placement(placement, self.jobs, self.nodes, scratch, self.partitions):
                    continue
                job = self.jobs[placement.job_id]
                lowered = placement.time_limit_s  # backfill's, within --time-min
                if self.reservations and advance_reservations.placement_conflict(
                    self,
                    job if lowered is None else job.evolve(time_limit_s=lowered),
                    placement.allocation.nodes,
                    now,
                ):
                    continue  # a reservation created or changed since the pass read
                if placement.partition and placement.partition != job.partition:
                    job = in_partition(job, self.partitions, placement.partition)  # -p a,b
                if lowered is not None:
                    job = lowered_limit(job, lowered)
                job = within_deadline(job, now)
                if PREEMPTING in job.extra:  # it no longer goes first in the queue
                    job = job.evolve(extra=preempt.cleared(job.extra))
                job = job.evolve(
                    state=JobState.RUNNING,
                    reason=PendingReason.NONE,
                    start_time=now,
                    allocation=placement.allocation,
                    # kept as it was while pending (its submission, begin, release or
                    # dependency met), not its start: Slurm 22.05.8 keeps it too
                    eligible_time=job.eligible_since(now),
                    launched=False,
                    expected_start=None,
                )
                hold(scratch, job)
                started.append(job)
                events.append(
                    EventRow(
                        now,
                        "job.started",
                        job_id=job.id,
                        state="RUNNING",
                        data={"nodes": list(placement.allocation.nodes)},
                    )
                )
            partial = _partly_started_het_jobs(self, started)
            if partial:  # e.g. a reservation now claims one component's node
                started = [
                    j for j in started if j.spec.het is None or j.spec.het.job_id not in partial
                ]
                kept = {j.id for j in started}
                events = [e for e in events if e.job_id in kept]
            ended: list[Job] = []
            for term in plan.terminations:
                target = self.jobs.get(term.job_id)
                if target is None or target.state is not JobState.PENDING or target.held:
                    continue
                ended.append(target.evolve(state=term.state, reason=term.reason, end_time=now))
                events.append(
                    EventRow(
                        now,
                        "job.finished",
                        job_id=target.id,
                        state=term.state.value,
                        data={"reason": term.reason.value},
                    )
                )
            # reasons and estimates are advisory: kept in memory, not written per cycle
            # (a job held since the pass read it keeps its hold's reason: no pass sees it
            # again until it is released); when a dependency was met (or an array's
            # throttle let an element go) is written, once per job, so a restart does
            # not count the job eligible since its submission
            met: list[Job] = []
            for update in plan.updates:
                current = self.jobs.get(update.job_id)
                if current is not None and current.state is JobState.PENDING and not current.held:
                    now_met = (
                        current.reason in WAITING_ON_OTHERS and update.reason not in NOT_ELIGIBLE
                    )  # what it waited on was met in this pass: eligible from now on
                    current = current.evolve(
                        reason=update.reason,
                        expected_start=update.expected_start,
                        eligible_time=now if now_met else current.eligible_time,
                    )
                    self.jobs[current.id] = self.unfinished[current.id] = current
                    if now_met:
                        met.append(current)
            marked, marks = preempt.mark(self, plan.preemptions, now)
            events.extend(marks)
            if started or ended or marked or met:
                written = {j.id for j in started + ended + marked}
                met = [j for j in met if j.id not in written]
                await self._commit(started + ended + marked + met, events)
            for job in started:
                # (components 1.. of a het job hold their nodes; nothing is launched)
                agents.send_launch(self, job)
            preempt.notify(self, marked)
            return [j.id for j in started]

    async def end_preempted(self, jobs: Sequence[Job]) -> None:
        """The grace time of these preempted jobs is over: end them now."""
        from hal.state import agents

        async with self._lock:
            now = self.clock.now()
            due = [
                j.evolve(state=JobState.COMPLETING)
                for j in (self.jobs.get(job.id) for job in jobs)
                if j is not None and j.state is JobState.RUNNING
            ]
            events = [
                EventRow(now, "job.preempt_grace_over", job_id=j.id, state="COMPLETING")
                for j in due
            ]
            await self._commit(due, events)
            for job in due:
                agents.send_cancel(self, job, preempt.final_state(job))

    def finish(
        self, job: Job, state: JobState, now: float, *, exit_code: int = 0, exit_signal: int = 0
    ) -> tuple[Job, EventRow]:
        """The ended version of ``job`` (or, for NODE_FAIL with requeue, the requeued one:
        a batch job only, as Slurm's; salloc's allocation, ``Requeue=1`` too, ends)."""
        state = preempt.ended_as(job, state)
        if job.extra.get(preempt.REQUEUE) == "1" or (
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

    def prune(self) -> int:
        """Forget jobs that ended more than MinJobAge ago (they stay in the store)."""
        horizon = self.clock.now() - self.config.min_job_age_seconds
        old = [
            j.id
            for j in self.jobs.values()
            if j.state.is_terminal and j.end_time is not None and j.end_time < horizon
        ]
        for jid in old:
            job = self.jobs.pop(jid)
            if job.array_job_id is not None:
                self.stored_related.pop(job.array_job_id, None)  # its rows are stale now
                ids = self.arrays.get(job.array_job_id)
                if ids is not None:
                    ids.remove(jid)
                    if not ids:
                        del self.arrays[job.array_job_id]
        return len(old)


def _partly_started_het_jobs(cluster: Cluster, started: list[Job]) -> set[int]:
    """Het job ids of which ``started`` holds some components but not all."""
    counts: Counter[int] = Counter(j.spec.het.job_id for j in started if j.spec.het is not None)
    return {hid for hid, n in counts.items() if n != len(cluster.het_components(hid))}


def _refused_het_jobs(cluster: Cluster, plan: Plan, scratch: dict[str, NodeUsage]) -> set[int]:
    """Het job ids some of whose components the plan does not start, or starts on
    nodes no longer free: none of their components may start (all-or-nothing). The
    check runs on a copy of ``scratch``, components in plan order."""
    placed: dict[int, list[int]] = {}
    for placement in plan.placements:
        het = cluster.jobs[placement.job_id].spec.het
        if het is not None:
            placed.setdefault(het.job_id, []).append(het.offset)
    if not placed:
        return set()
    trial = {
        name: NodeUsage(u.allocated, set(u.gpu_ids), set(u.jobs), u.exclusive)
        for name, u in scratch.items()
    }
    refused = {
        hid
        for hid, offsets in placed.items()
        if len(set(offsets)) != len(cluster.het_components(hid))
    }
    for placement in plan.placements:  # every placement, as the commit loop sees them
        job = cluster.jobs[placement.job_id]
        het = job.spec.het
        if het is not None and het.job_id in refused:
            continue
        if check_placement(placement, cluster.jobs, cluster.nodes, trial, cluster.partitions):
            if het is not None:
                refused.add(het.job_id)
            continue
        hold(trial, job.evolve(allocation=placement.allocation))
    return refused


def array_indices(text: str) -> list[range]:
    """The array indices ``7``, ``[1-3]``, ``[0-15:4,20]`` name, as ranges: a range is
    tested for an index without listing it, so ``1_[0-999999999999]`` costs no more
    than ``1_[0-3]`` (expanded, it held the server's event loop and filled its memory)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]
    out: list[range] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            step = 1
            if ":" in hi:
                hi, step_text = hi.split(":", 1)
                step = int(step_text)
            out.append(range(int(lo), int(hi) + 1, step))
        elif part:
            out.append(range(int(part), int(part) + 1))
    return out


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """The handle ``Cluster.transaction`` yields: valid while its block holds the lock."""

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
