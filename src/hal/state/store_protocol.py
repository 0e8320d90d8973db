"""``StateStore``: what the cluster mirror and the state logic ask of the durable record,
and the errors it may raise.

Two implementations pass one conformance suite (``hal.testing.store_conformance``):

- ``hal.state.store.SqlStateStore``: SQLite (WAL) by default, PostgreSQL by URL. What the
  server runs on.
- ``hal.state.memory_store.MemoryStateStore``: dicts in memory, with the same
  transactions and query semantics, so the state logic can be tested without a database
  (``hal.testing.mirror.new_cluster``).

The store is thin: it keeps rows and reads them back. What a change *means* lives in
``hal.state.cluster`` and the modules beside it; every change goes through one
transaction that also appends the matching event rows, so the event log (the outbox of
the event stream and the metrics) never disagrees with the tables.

Not covered, and SQL-only: modules that keep tables of their own and reach the SQL engine
directly (``artifacts``, ``crontabs``, ``retention``, ``server_lock``, ``migrations``)
take a ``SqlStateStore``, or narrow the cluster's store to one with
``hal.state.store.sql_store`` (a clear error over the memory store).

Errors::

    Exception
     ├── SubmitKeyTaken            an Idempotency-Key stored already; the transaction rolls back
     └── HalError
          └── Unavailable (503)
               ├── DatabaseUnavailable   the database cannot serve now; nothing was applied
               └── CommitOutcomeUnknown  lost at the COMMIT: applied or not, unknown

The SQL store raises SQLAlchemy's own errors while the database cannot serve;
``DatabaseUnavailable.of`` recognises them and ``Cluster.db`` raises them as
``DatabaseUnavailable``. The memory store never is unavailable.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from hal.core.errors import Unavailable
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job
from hal.core.node import Node
from hal.core.reservation import Reservation
from hal.db import unavailable_reason
from hal.state.rows import (
    EventRow,
    FinishedRun,
    JobUse,
    PartitionOverride,
    RunningStepRow,
    RunRow,
    StepRow,
    StoredEvent,
    StoredUser,
    SubmitKey,
    TrafficEdgeRow,
)


class DatabaseUnavailable(Unavailable):
    """The database cannot serve now (``hal.db.unavailable_reason``): down, restarting,
    locked, read-only. Nothing of the failed transaction was applied (it rolled back), so
    the request may simply be retried; a 503 to clients."""

    code = "database_unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the database is unavailable: {reason}; retry in a few seconds")
        self.reason = reason

    @staticmethod
    def of(err: BaseException) -> DatabaseUnavailable | None:
        """``err`` as a ``DatabaseUnavailable`` when it means the database cannot serve."""
        reason = unavailable_reason(err)
        return None if reason is None else DatabaseUnavailable(reason)


class CommitOutcomeUnknown(Unavailable):
    """PostgreSQL went away during the COMMIT of a change: it may or may not have been
    applied. A 503 that clients send again only for a submission with an
    ``Idempotency-Key``; the server reconciles what the change wrote (``hal.state.resync``)."""

    code = "commit_outcome_unknown"

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the database went away while this change was being committed ({reason}): it "
            "may or may not have been applied; check (hal squeue, hal sacct) before sending "
            "it again"
        )
        self.reason = reason


class SubmitKeyTaken(Exception):
    """The submission's ``Idempotency-Key`` was stored meanwhile by the same key sent
    again at once (the key is the table's primary key): this transaction rolls back."""


class StateTransaction(Protocol):
    """One unit of work, from ``StateStore.transaction()``.

    Atomic: everything written through it is applied when the ``with`` block ends, or,
    when the block raises, none of it (the exception goes on). Its reads of what it wrote
    (``set_user_token`` of a user it added, a job id it reserved) see its own writes;
    other readers see none of them before the commit. The server writes from one thread,
    so its transactions never overlap; SQLite and the memory store make a second writer
    wait for the first (PostgreSQL lets them run side by side).

    A write of a row whose key is taken (a job id, a user name or token) is a bug of the
    caller: it raises (SQLAlchemy's ``IntegrityError``, the memory store's ``ValueError``)
    and the transaction rolls back.
    """

    @property
    def stored_events(self) -> list[StoredEvent]:
        """The events ``add_events`` appended so far, with the ids they were given, in
        order: the server serves the event stream from them after the commit."""
        ...

    def reserve_job_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive job ids and return the first. Ids are never given
        twice by committed transactions; a rolled-back reservation gives its ids again."""
        ...

    def insert_scripts(self, scripts: Sequence[tuple[int, str]]) -> None:
        """Store batch scripts as (script id, text): a job reads its script by its
        ``script_id`` (an array's elements share their first id's)."""
        ...

    def insert_jobs(self, jobs: Sequence[Job], script_ids: Sequence[int]) -> None:
        """Store new jobs, each with the id of its script. Usage (``record_usage``) starts
        at none. A job whose script is missing is stored but never read back whole
        (``load_jobs``, ``history`` and ``jobs_by_id`` leave it out)."""
        ...

    def update_jobs(self, jobs: Sequence[Job], same_spec: Collection[int] = ()) -> None:
        """Write what may change of stored jobs: state, reason, partition, priority, times,
        limit, exit, restarts, throttle, holds, who cancelled, allocation, name, spec,
        launched and marks (``job.extra`` less the usage). Never the user, array ids,
        submit time, script or usage. An id not stored is passed over. ``same_spec``:
        ids of jobs whose spec is the one stored (the caller knows: its mirror's job has
        the same spec object); their name and spec are not written again."""
        ...

    def add_runs(self, runs: Sequence[RunRow]) -> None:
        """Keep the runs requeued jobs have just ended; a run kept again (same job and
        attempt) replaces the first."""
        ...

    def record_usage(self, usage: Sequence[JobUse]) -> None:
        """Store what finished jobs used (``JobUse``): it reads back in ``job.extra``
        (``max_rss``, ``cpu_seconds``, and ``user_cpu_seconds``/``system_cpu_seconds``
        where both are said)."""
        ...

    def add_events(self, rows: Sequence[EventRow]) -> None:
        """Append event rows. Their ids increase in the order given and across commits, so
        ``events_after`` resumes a stream without a gap or a repeat; an id is never given
        twice, though a rolled-back transaction may leave a gap."""
        ...

    def upsert_node(self, node: Node) -> None:
        """Insert ``node``, or replace the stored node of its name."""
        ...

    def upsert_nodes(self, nodes: Sequence[Node]) -> None:
        """``upsert_node`` of each of ``nodes`` in their order (a name given twice: the
        last wins), in as few statements as the store can (a batch of registrations)."""
        ...

    def delete_node(self, name: str) -> None:
        """Forget node ``name`` (none such: nothing happens)."""
        ...

    def add_user(
        self,
        name: str,
        token_sha256: str,
        admin: bool,
        created: float,
        *,
        agent: bool = False,
        agent_nodes: str = "",
    ) -> None:
        """Add a user (or an agent: ``agent_nodes`` is the host list it may serve, "" for
        any) with the SHA-256 of their token. Name and token are unique."""
        ...

    def set_agent_nodes(self, name: str, agent_nodes: str) -> None:
        """The nodes agent ``name``'s token may serve (a host list; "" any)."""
        ...

    def set_user_token(self, name: str, token_sha256: str, admin: bool | None = None) -> bool:
        """Replace ``name``'s token hash (and its admin flag, unless ``admin`` is None);
        False when there is no such user."""
        ...

    def delete_user(self, name: str) -> int:
        """Forget user ``name``; the number of users forgotten (0 or 1)."""
        ...

    def put_reservation(self, r: Reservation) -> None:
        """Insert or replace the reservation named ``r.name``."""
        ...

    def delete_reservation(self, name: str) -> int:
        """Forget reservation ``name``; the number forgotten (0 or 1)."""
        ...

    def put_partition_override(self, row: PartitionOverride) -> None:
        """Insert or replace the override of partition ``row.name``."""
        ...

    def clear_partition_overrides(self) -> None:
        """``scontrol reconfigure``: every partition is hal.toml's again."""
        ...

    def add_submit_key(
        self, key: SubmitKey, created: float, result: Sequence[tuple[int, int]]
    ) -> None:
        """Remember what the submission sent with ``key`` gave: (job id, array tasks).
        Raises ``SubmitKeyTaken`` when the user's key is stored already; the caller lets
        it leave the ``with`` block (on PostgreSQL the transaction cannot go on)."""
        ...


class StateStore(Protocol):
    """The durable record of jobs, runs, steps, events, nodes, users, reservations,
    partition overrides, submission keys and the traffic graph's workload edges.

    Every method is synchronous and may block; the server calls them on one thread
    (``Cluster.db``). Reads see what committed transactions wrote, never a transaction
    still open. Lists come back in a stated order, never the order of insertion.
    """

    def ping(self) -> None:
        """One round trip: raises while the database cannot serve."""
        ...

    def migrate(self) -> int:
        """Bring the schema to this release's version and return it. Idempotent: the
        server runs it at every start."""
        ...

    def close(self) -> None:
        """Let go of connections. What was committed stays: a store opened again on the
        same database (the memory store: this very object) reads it back."""
        ...

    def transaction(self) -> AbstractContextManager[StateTransaction]:
        """One transaction, committed when the ``with`` block ends (``StateTransaction``).
        The SQL store on PostgreSQL lost at the COMMIT itself raises
        ``CommitOutcomeUnknown``: the change may or may not have landed, and clients
        must not simply send it again (SQLite's commit is all or nothing)."""
        ...

    # -- events -----------------------------------------------------------------------
    def revision(self) -> int:
        """The id of the latest event (0: none yet). The mirror's revision at start."""
        ...

    def events_after(self, after: int, limit: int = 1000) -> list[StoredEvent]:
        """The events whose id is above ``after``, in id order, at most ``limit``."""
        ...

    # -- jobs ---------------------------------------------------------------------------
    def load_jobs(self, *, active_or_ended_after: float) -> list[Job]:
        """Every active job (pending, running, suspended, completing) plus the jobs that
        ended at or after the given time, in id order: the mirror at start. The elements
        of an array share one ``JobSpec`` object, as the submitted ones did."""
        ...

    def history(
        self,
        *,
        ids: Sequence[int] = (),
        array_ids: Sequence[int] = (),
        users: Sequence[str] = (),
        names: Sequence[str] = (),
        states: Sequence[str] = (),
        partitions: Sequence[str] = (),
        start_after: float | None = None,
        end_before: float | None = None,
        limit: int | None = 100_000,
    ) -> list[Job]:
        """Accounting query (``sacct``): every job ever stored, in id order, at most
        ``limit`` of them (the lowest ids; None: all). Each filter given narrows: ``ids``
        and ``array_ids`` together pick a job by its id or by its array's id (any number
        of them); ``users``, ``names``, ``states`` and ``partitions`` by their column;
        ``start_after`` keeps the jobs not ended before it (Slurm's --starttime);
        ``end_before`` the jobs submitted by then."""
        ...

    def finished_runs(self, limit: int, before: tuple[float, int] | None = None) -> list[Job]:
        """Jobs that ran and have ended, the latest end first (ties: higher id first), at
        most ``limit``, all strictly before ``before`` = (end time, id) in that order (the
        last row of the previous page). What the prediction service replays at start-up.
        Scripts are left out (``spec.script`` is empty)."""
        ...

    def finished_usage(
        self, limit: int, before: tuple[float, int] | None = None
    ) -> list[FinishedRun]:
        """``finished_runs``' pages with only what fair share charges of each run."""
        ...

    def jobs_by_id(self, ids: Sequence[int]) -> list[Job]:
        """The stored jobs of these ids (those that exist), in id order."""
        ...

    def count_jobs(self) -> int:
        """How many jobs are stored."""
        ...

    def priced_since(self, since: float) -> tuple[list[Job], list[RunRow]]:
        """What cloud capacity cost from ``since`` on: the jobs that ended at or after
        it carrying a cloud rate (``hal.core.cloud_costs.RATE``), in id order, and the
        runs requeues ended at or after it with a cost, by job and attempt."""
        ...

    # -- runs and steps -------------------------------------------------------------------
    def runs_of(self, job_ids: Sequence[int]) -> list[RunRow]:
        """The earlier runs of ``job_ids`` (``add_runs``), by job and attempt."""
        ...

    def record_step(self, row: StepRow) -> None:
        """Keep an ended step for sacct (again: the same row once), in a transaction of
        its own; it is no longer a running step (``running_steps``)."""
        ...

    def steps_of(self, job_ids: Sequence[int]) -> list[StepRow]:
        """The recorded steps of ``job_ids``, by job, run and step id."""
        ...

    def last_step_id(self, job_id: int, attempt: int) -> int:
        """The highest step id recorded for run ``attempt`` of ``job_id``, -1 when none
        (each run numbers its steps from 0, as Slurm's)."""
        ...

    def keep_running_step(self, row: RunningStepRow) -> None:
        """Keep a running step (again: its nodes' ends so far) for a server restart, in a
        transaction of its own."""
        ...

    def running_steps(self) -> list[RunningStepRow]:
        """The steps kept running (``keep_running_step``), by job, run and step id."""
        ...

    # -- nodes, reservations, partitions ---------------------------------------------------
    def load_nodes(self) -> list[Node]:
        """Every stored node, by name."""
        ...

    def load_reservations(self) -> list[Reservation]:
        """Every stored reservation, by name."""
        ...

    def partition_overrides(self) -> list[PartitionOverride]:
        """Every partition's ``scontrol update`` override, by partition name."""
        ...

    # -- the traffic graph -------------------------------------------------------------------
    def keep_traffic_edges(
        self, rows: Sequence[TrafficEdgeRow], dropped: Sequence[tuple[str, str]]
    ) -> None:
        """Keep the traffic graph's changed edges (``rows``, each replacing the stored
        edge of its pair) and forget the ``dropped`` pairs (none stored: nothing
        happens), in a transaction of its own."""
        ...

    def traffic_edges(self) -> list[TrafficEdgeRow]:
        """Every kept traffic-graph edge, by (a, b)."""
        ...

    # -- application feedback ------------------------------------------------------------
    def keep_job_feedback(self, series: Sequence[FeedbackSeries]) -> None:
        """Keep these series (each replacing the stored one of its job and metric), in a
        transaction of its own."""
        ...

    def job_feedback(self, job_ids: Sequence[int]) -> list[FeedbackSeries]:
        """The kept feedback series of ``job_ids`` (unknown ids: none), by job and metric."""
        ...

    # -- users ------------------------------------------------------------------------------
    def users(self) -> list[StoredUser]:
        """Every user and agent, by name."""
        ...

    def user_by_token_hash(self, token_sha256: str) -> StoredUser | None:
        """The user whose token has this SHA-256, if any."""
        ...

    # -- submission keys ----------------------------------------------------------------------
    def find_submit_key(self, user: str, key: str) -> tuple[str, list[tuple[int, int]]] | None:
        """The digest and result of ``user``'s submission sent with ``key``, if any (keys
        of different users never meet)."""
        ...

    def forget_submit_keys(self, before: float) -> int:
        """Forget the keys of submissions made before ``before``; how many."""
        ...
