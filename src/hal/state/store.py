"""``SqlStateStore``: the durable record (SQLite with WAL by default, PostgreSQL by URL).

The store is deliberately thin: it opens transactions and reads/writes rows. What a state
change *means* lives in ``hal.state.cluster``; every change it makes goes through one
``Transaction`` that also appends the matching event rows, so the event log (the outbox
for the event stream and metrics) can never disagree with the tables.

All methods are synchronous; the server calls them from one dedicated thread, which also
serialises writers the way SQLite wants.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    Select,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from hal.core.errors import Unavailable
from hal.core.job import Allocation, Job, JobSpec
from hal.core.node import Node
from hal.core.reservation import Reservation, flag_words, stored_flags
from hal.core.resources import ResourceVector
from hal.core.states import NodeState
from hal.db import is_sqlite, make_engine, normalise_url, unavailable_reason
from hal.state import schema
from hal.state.codec import allocation_from_json, allocation_to_json, job_from_row, job_to_row
from hal.state.migrations import migrate

ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
# values per IN list: PostgreSQL takes at most 65,535 parameters a statement
IN_LIST = 1000
# a DOWN node that keeps Slurm's DRAIN flag (``Node.drain``), as its state column holds it
DOWN_DRAIN = "DOWN+DRAIN"


def stored_node_state(node: Node) -> str:
    """The ``state`` column of ``node``: its state, ``DOWN+DRAIN`` with the drain flag (a
    server older than this one reads no such value: it is written only for a drained
    node an operator set DOWN)."""
    return DOWN_DRAIN if node.drain and node.state is NodeState.DOWN else node.state.value


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


@dataclass(frozen=True, slots=True)
class EventRow:
    time: float
    kind: str
    job_id: int | None = None
    node: str | None = None
    state: str | None = None
    data: dict[str, Any] | None = None


# what a finished job's batch script used: (job id, max RSS, CPU seconds, and their user
# and system parts, None where its agent did not say them)
JobUse = tuple[int, int, float, float | None, float | None]


@dataclass(frozen=True, slots=True)
class StepRow:
    """An ended job step, as accounting keeps it (``schema.job_steps``)."""

    job_id: int
    step_id: int
    name: str
    nodelist: str
    ntasks: int
    state: str
    exit_code: int
    start_time: float
    end_time: float
    exit_signal: int = 0  # the signal that ended its worst task (0: it exited)
    # what its tasks used (``hal.state.step_usage``; 0 and "": not measured)
    max_rss_bytes: int = 0  # the most of one task
    max_rss_node: str = ""  # ... its node
    max_rss_task: int = 0  # ... its rank
    ave_rss_bytes: int = 0  # the tasks' mean of their most
    total_cpu_seconds: float = 0.0  # user and system, all its tasks
    # its tasks' GPU use (``step_usage.gpu_summary``; None: not read for GPUs): the most
    # of one task and the tasks' mean, of memory and of utilisation
    gpu_max_mem_bytes: int | None = None
    gpu_ave_mem_bytes: int | None = None
    gpu_max_util: int | None = None
    gpu_ave_util: float | None = None
    cpus: int = 0  # the job's CPUs it was given (0: not recorded)
    memory_bytes: int = 0  # ... and memory
    cancelled_by: str | None = None  # who scancel'd it alone (sacct's "CANCELLED by UID")
    with_job: bool = False  # its job's end ended it (not in the job's DerivedExitCode)
    # total_cpu_seconds' user and system parts (``step_usage.cpu_times``; None: not
    # known, a task's end without them, or a step from before)
    user_cpu_seconds: float | None = None
    system_cpu_seconds: float | None = None
    attempt: int = 0  # the job's run it started in (its restarts then; 0: the first)


@dataclass(frozen=True, slots=True)
class RunRow:
    """An earlier run of a requeued job (``schema.job_runs``), as sacct -D shows it."""

    job_id: int
    attempt: int
    state: str
    exit_code: int
    exit_signal: int
    partition: str
    submit_time: float
    eligible_time: float | None
    start_time: float | None
    end_time: float
    allocation: str | None  # JSON (``codec.allocation_to_json``)
    max_rss: int
    cpu_seconds: float


@dataclass(frozen=True, slots=True)
class RunningStepRow:
    """A running job step, kept for a server restart (``schema.running_steps``)."""

    job_id: int
    step_id: int
    attempt: int
    name: str
    nodes: str  # comma-separated
    tasks: str  # comma-separated counts, or each node's ranks (``step_restore``)
    start_time: float
    # JSON: {node: [exit code, signal, oom, {rank: [rss, cpu]}, {rank: [GPU memory, most
    # util, mean util]}]} (``step_restore``)
    ended: str = "{}"
    local: bool = False  # srun runs it on the batch node (``StepTable.open_local``)
    gpu_ids: str = "{}"  # JSON: {node: [GPU ids]} it holds (``step_restore``)
    cpus: str = "{}"  # JSON: {node: [the job's CPUs it holds there]} (``step_restore``)
    srun: str = ""  # a local step's srun process, "PID:START" (``StepCreate.srun``)
    memory: str = "{}"  # JSON: {node: bytes of the job's memory it holds} (``step_restore``)
    cancelled_at: float | None = None  # scancel ended it then (``StepTable.cancel``)
    cancelled_by: str | None = None  # ... at the request of (a user name)
    relay: str = ""  # JSON: {node: [ranks reading srun's stdin]}; "": none (``step_restore``)


@dataclass(frozen=True, slots=True)
class PartitionOverride:
    """What ``scontrol update PartitionName=P`` set (``schema.partition_overrides``):
    None where hal.toml's value holds (``hal.state.partitions``)."""

    name: str
    updated_by: str
    updated_at: float
    state: str | None = None
    max_time_s: int | None = None
    default_time_s: int | None = None
    max_nodes: int | None = None
    priority_job_factor: int | None = None
    priority_tier: int | None = None
    is_default: bool | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    time: float
    kind: str
    job_id: int | None
    node: str | None
    state: str | None
    data: dict[str, Any]


# The statements of the hot paths (submit, start, finish), built once: building an
# expression and its cache key costs SQLAlchemy more than executing it on SQLite.


@functools.cache
def _reserve_ids() -> Executable:
    m = schema.meta
    return (
        update(m)
        .where(m.c.key == "next_job_id")
        .values(value=m.c.value + bindparam("b_count"))
        .returning(m.c.value)
    )


@functools.cache
def _insert_scripts() -> Executable:
    return insert(schema.job_scripts)


@functools.cache
def _insert_jobs() -> Executable:
    return insert(schema.jobs)


@functools.cache
def _update_jobs() -> Executable:
    t = schema.jobs
    return (
        update(t)
        .where(t.c.id == bindparam("b_id"))
        .values(
            state=bindparam("b_state"),
            reason=bindparam("b_reason"),
            partition=bindparam("b_partition"),
            priority=bindparam("b_priority"),
            eligible_time=bindparam("b_eligible"),
            start_time=bindparam("b_start"),
            end_time=bindparam("b_end"),
            time_limit=bindparam("b_limit"),
            exit_code=bindparam("b_exit"),
            exit_signal=bindparam("b_signal"),
            restarts=bindparam("b_restarts"),
            array_max_running=bindparam("b_array_max_running"),  # ArrayTaskThrottle
            held_by_admin=bindparam("b_admin_hold"),
            priority_fixed=bindparam("b_priority_fixed"),
            cancelled_by=bindparam("b_cancelled_by"),
            allocation=bindparam("b_alloc"),
            name=bindparam("b_name"),
            spec=bindparam("b_spec"),
            launched=bindparam("b_launched"),
            marks=bindparam("b_marks"),
        )
    )


@functools.cache
def _record_usage() -> Executable:
    t = schema.jobs
    return (
        update(t)
        .where(t.c.id == bindparam("b_id"))
        .values(
            max_rss=bindparam("b_rss"),
            cpu_seconds=bindparam("b_cpu"),
            user_cpu_seconds=bindparam("b_user"),
            system_cpu_seconds=bindparam("b_system"),
        )
    )


@functools.cache
def _insert_events() -> Executable:
    return insert(schema.events).returning(schema.events.c.id, sort_by_parameter_order=True)


@dataclass(frozen=True, slots=True)
class StoredUser:
    """A row of ``users``: an administrator, a user, or an agent (``agent``: its token is
    accepted by /v1/agent only, for the nodes of the host list ``agent_nodes``, "" for
    any node)."""

    name: str
    admin: bool
    agent: bool = False
    agent_nodes: str = ""


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What fair share charges of a run that ended (``finished_usage``)."""

    id: int
    user: str
    account: str | None  # as asked at submit (None: the user's default)
    start: float
    end: float
    allocation: Allocation | None
    marks: dict[str, str]  # ``job.extra``'s marks: its suspensions


class SubmitKeyTaken(Exception):
    """The submission's ``Idempotency-Key`` was stored meanwhile by the same key sent
    again at once (the key is the table's primary key): this transaction rolls back."""


@dataclass(frozen=True, slots=True)
class SubmitKey:
    """A submission's ``Idempotency-Key`` (a user's own: keys of different users never
    meet) and the sha256 of its request body, which a resend must repeat."""

    user: str
    key: str
    digest: str


class Transaction:
    """One unit of work. Obtained from ``SqlStateStore.transaction()``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.stored_events: list[StoredEvent] = []

    def reserve_job_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive job ids; return the first."""
        row = self.conn.execute(_reserve_ids(), {"b_count": count}).one()
        return int(row[0]) - count

    def insert_scripts(self, scripts: Sequence[tuple[int, str]]) -> None:
        if scripts:
            self.conn.execute(_insert_scripts(), [{"id": i, "script": s} for i, s in scripts])

    def insert_jobs(self, jobs: Sequence[Job], script_ids: Sequence[int]) -> None:
        if jobs:
            self.conn.execute(
                _insert_jobs(), [job_to_row(j, s) for j, s in zip(jobs, script_ids, strict=True)]
            )

    def update_jobs(self, jobs: Sequence[Job]) -> None:
        """Write the mutable columns of ``jobs`` (state, times, allocation, ...)."""
        if not jobs:
            return
        from hal.state.codec import marks_to_json, spec_to_json

        self.conn.execute(
            _update_jobs(),
            [
                {
                    "b_id": j.id,
                    "b_state": j.state.value,
                    "b_reason": j.reason.value,
                    "b_partition": j.partition,
                    "b_priority": j.priority,
                    "b_eligible": j.eligible_time,
                    "b_start": j.start_time,
                    "b_end": j.end_time,
                    "b_limit": j.time_limit_s,
                    "b_exit": j.exit_code,
                    "b_signal": j.exit_signal,
                    "b_restarts": j.restarts,
                    "b_array_max_running": j.array_max_running,
                    "b_admin_hold": j.held_by_admin,
                    "b_priority_fixed": j.priority_fixed,
                    "b_cancelled_by": j.cancelled_by,
                    "b_alloc": allocation_to_json(j.allocation),
                    "b_name": j.spec.name,
                    "b_spec": spec_to_json(j.spec),
                    "b_launched": j.launched,
                    "b_marks": marks_to_json(j.extra),
                }
                for j in jobs
            ],
        )

    def add_runs(self, runs: Sequence[RunRow]) -> None:
        """Keep the runs requeued jobs have just ended (again: the same row once)."""
        r = schema.job_runs
        for run in runs:
            self.conn.execute(delete(r).where(r.c.job_id == run.job_id, r.c.attempt == run.attempt))
            self.conn.execute(insert(r).values({f: getattr(run, f) for f in RunRow.__slots__}))

    def record_usage(self, usage: Sequence[JobUse]) -> None:
        """Store what finished jobs used (``JobUse``): one statement for the whole batch
        (an agent's sync reports many jobs at once)."""
        if not usage:
            return
        self.conn.execute(
            _record_usage(),
            [
                {"b_id": u[0], "b_rss": u[1], "b_cpu": u[2], "b_user": u[3], "b_system": u[4]}
                for u in usage
            ],
        )

    def add_events(self, rows: Sequence[EventRow]) -> None:
        """Append event rows; their ids (and contents) are kept in ``stored_events`` so the
        server can serve the stream from memory after the commit."""
        if not rows:
            return
        ids = (
            self.conn.execute(
                _insert_events(),
                [
                    {
                        "time": r.time,
                        "kind": r.kind,
                        "job_id": r.job_id,
                        "node": r.node,
                        "state": r.state,
                        "data": json.dumps(r.data, separators=(",", ":")) if r.data else None,
                    }
                    for r in rows
                ],
            )
            .scalars()
            .all()
        )
        self.stored_events.extend(
            StoredEvent(int(i), r.time, r.kind, r.job_id, r.node, r.state, dict(r.data or {}))
            for i, r in zip(ids, rows, strict=True)
        )

    def upsert_node(self, node: Node) -> None:
        t = schema.nodes
        values = {
            "cpus": node.resources.cpus,
            "memory_bytes": node.resources.memory_bytes,
            "gpus": node.resources.gpus,
            "gpu_model": node.gpu_model,
            "features": json.dumps(list(node.features)),
            "state": stored_node_state(node),
            "reason": node.reason,
            "reason_user": node.reason_user,
            "reason_time": node.reason_time,
            "address": node.address,
            "last_heartbeat": node.last_heartbeat,
            "topology_labels": json.dumps(node.labels, sort_keys=True),
            "nvlink_domain": node.nvlink_domain,
            "gpu_islands": json.dumps([list(i) for i in node.gpu_islands]),
        }
        done = self.conn.execute(update(t).where(t.c.name == node.name).values(**values))
        if done.rowcount == 0:
            self.conn.execute(insert(t).values(name=node.name, **values))

    def delete_node(self, name: str) -> None:
        self.conn.execute(delete(schema.nodes).where(schema.nodes.c.name == name))

    def touch_nodes(self, beats: Sequence[tuple[str, float]]) -> None:
        if beats:
            t = schema.nodes
            self.conn.execute(
                update(t)
                .where(t.c.name == bindparam("b_name"))
                .values(last_heartbeat=bindparam("b_time")),
                [{"b_name": n, "b_time": when} for n, when in beats],
            )

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
        self.conn.execute(
            insert(schema.users).values(
                name=name,
                token_sha256=token_sha256,
                admin=admin,
                created=created,
                agent=agent,
                agent_nodes=agent_nodes,
            )
        )

    def set_agent_nodes(self, name: str, agent_nodes: str) -> None:
        """The nodes agent ``name``'s token may serve (a host list; "" any)."""
        t = schema.users
        self.conn.execute(update(t).where(t.c.name == name).values(agent_nodes=agent_nodes))

    def set_user_token(self, name: str, token_sha256: str, admin: bool | None = None) -> bool:
        """Replace ``name``'s token hash (and its admin flag, unless ``admin`` is None);
        False when there is no such user."""
        t = schema.users
        values: dict[str, object] = {"token_sha256": token_sha256}
        if admin is not None:
            values["admin"] = admin
        done = self.conn.execute(update(t).where(t.c.name == name).values(**values))
        return int(done.rowcount) > 0

    def delete_user(self, name: str) -> int:
        return int(
            self.conn.execute(delete(schema.users).where(schema.users.c.name == name)).rowcount
        )

    def put_reservation(self, r: Reservation) -> None:
        """Insert or replace the reservation named ``r.name``."""
        t = schema.reservations
        self.conn.execute(delete(t).where(t.c.name == r.name))
        self.conn.execute(
            insert(t).values(
                name=r.name,
                start_time=r.start,
                end_time=r.end,
                nodes=json.dumps(list(r.nodes)),
                users=json.dumps(list(r.users)),
                accounts=json.dumps(list(r.accounts)),
                flags=json.dumps(flag_words(r)),
                partition=r.partition,
            )
        )

    def put_partition_override(self, row: PartitionOverride) -> None:
        """Insert or replace the override of partition ``row.name``."""
        t = schema.partition_overrides
        self.conn.execute(delete(t).where(t.c.name == row.name))
        self.conn.execute(
            insert(t).values({f: getattr(row, f) for f in PartitionOverride.__slots__})
        )

    def clear_partition_overrides(self) -> None:
        """``scontrol reconfigure``: every partition is hal.toml's again."""
        self.conn.execute(delete(schema.partition_overrides))

    def delete_reservation(self, name: str) -> int:
        t = schema.reservations
        return int(self.conn.execute(delete(t).where(t.c.name == name)).rowcount)

    def add_submit_key(
        self, key: SubmitKey, created: float, result: Sequence[tuple[int, int]]
    ) -> None:
        """Remember what the submission sent with ``key`` gave: (job id, array tasks)."""
        row = insert(schema.submit_keys).values(
            user_name=key.user,
            key=key.key,
            digest=key.digest,
            created=created,
            result=json.dumps(result),
        )
        try:
            self.conn.execute(row)
        except IntegrityError as err:
            raise SubmitKeyTaken(key.key) from err


class SqlStateStore:
    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self.is_sqlite = is_sqlite(self.url)
        self.engine: Engine = make_engine(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def migrate(self) -> int:
        with self.engine.begin() as conn:
            return migrate(conn)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One transaction, committed when the block ends. PostgreSQL lost at the COMMIT
        itself leaves it unknown whether the change landed: ``CommitOutcomeUnknown``, which
        clients must not simply send again (SQLite's commit is all or nothing)."""
        with self.engine.connect() as conn:
            trans = conn.begin()
            try:
                yield Transaction(conn)
            except BaseException:
                with suppress(DBAPIError):  # a dead connection: the error above is the news
                    trans.rollback()
                raise
            try:
                trans.commit()
            except DBAPIError as err:
                reason = None if self.is_sqlite else unavailable_reason(err)
                if reason is None:
                    raise
                raise CommitOutcomeUnknown(reason) from err

    # -- reads ----------------------------------------------------------------------------
    def ping(self) -> None:
        """One round trip: raises while the database cannot serve."""
        with self.engine.connect() as conn:
            conn.execute(select(1)).scalar_one()

    def record_step(self, row: StepRow) -> None:
        """Keep an ended step for sacct (again: the same row once)."""
        t = schema.job_steps
        r = schema.running_steps
        with self.engine.begin() as conn:
            conn.execute(delete(t).where(*_step_key(t, row.job_id, row.attempt, row.step_id)))
            conn.execute(insert(t).values({f: getattr(row, f) for f in StepRow.__slots__}))
            conn.execute(delete(r).where(*_step_key(r, row.job_id, row.attempt, row.step_id)))

    def keep_running_step(self, row: RunningStepRow) -> None:
        """Keep a running step (again: its nodes' ends so far) for a server restart."""
        r = schema.running_steps
        with self.engine.begin() as conn:
            conn.execute(delete(r).where(*_step_key(r, row.job_id, row.attempt, row.step_id)))
            conn.execute(insert(r).values({f: getattr(row, f) for f in RunningStepRow.__slots__}))

    def running_steps(self) -> list[RunningStepRow]:
        """The steps kept running (``keep_running_step``), by job, run and step id."""
        r = schema.running_steps
        with self.engine.connect() as conn:
            found = conn.execute(select(r).order_by(r.c.job_id, r.c.attempt, r.c.step_id))
            return [RunningStepRow(**row._mapping) for row in found]

    def last_step_id(self, job_id: int, attempt: int) -> int:
        """The highest step id recorded for run ``attempt`` of ``job_id``, -1 when none
        (each run numbers its steps from 0, as Slurm's)."""
        t = schema.job_steps
        with self.engine.connect() as conn:
            where = (t.c.job_id == job_id, t.c.attempt == attempt)
            found = conn.execute(select(func.max(t.c.step_id)).where(*where))
            value = found.scalar_one()
        return -1 if value is None else int(value)

    def runs_of(self, job_ids: Sequence[int]) -> list[RunRow]:
        """The earlier runs of ``job_ids`` (``add_runs``), by job and attempt."""
        rows = [RunRow(**m) for m in self._rows_of(schema.job_runs, job_ids)]
        return sorted(rows, key=lambda x: (x.job_id, x.attempt))

    def steps_of(self, job_ids: Sequence[int]) -> list[StepRow]:
        """The recorded steps of ``job_ids``, by job, run and step id."""
        rows = [StepRow(**m) for m in self._rows_of(schema.job_steps, job_ids)]
        return sorted(rows, key=lambda r: (r.job_id, r.attempt, r.step_id))

    def _rows_of(self, table: Table, job_ids: Sequence[int]) -> list[dict[str, Any]]:
        """The rows of ``table`` whose ``job_id`` is among ``job_ids`` (in chunks)."""
        found: list[dict[str, Any]] = []
        with self.engine.connect() as conn:
            for at in range(0, len(job_ids), IN_LIST):
                chunk = list(job_ids[at : at + IN_LIST])
                rows = conn.execute(select(table).where(table.c.job_id.in_(chunk)))
                found += [dict(row._mapping) for row in rows]
        return found

    def revision(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(select(func.coalesce(func.max(schema.events.c.id), 0))).scalar_one()
            )

    def load_jobs(self, *, active_or_ended_after: float) -> list[Job]:
        """Every active job plus the jobs that ended after the given time."""
        t = schema.jobs
        cond = or_(t.c.state.in_(ACTIVE_STATES), t.c.end_time >= active_or_ended_after)
        return self._select_jobs(cond)

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
        """Accounting query (``sacct``): every job ever run, filtered (at most ``limit``
        of them, the lowest ids; None: all)."""
        t = schema.jobs
        conds: list[Any] = []
        if users:
            conds.append(t.c.user_name.in_(list(users)))
        if names:
            conds.append(t.c.name.in_(list(names)))
        if states:
            conds.append(t.c.state.in_(list(states)))
        if partitions:
            conds.append(t.c.partition.in_(list(partitions)))
        if start_after is not None:
            # jobs that were still around after start_after (Slurm's --starttime)
            conds.append(or_(t.c.end_time.is_(None), t.c.end_time >= start_after))
        if end_before is not None:
            conds.append(t.c.submit_time <= end_before)
        if not ids and not array_ids:
            return self._select_jobs(and_(*conds) if conds else None, limit=limit)
        # the ids in bounded IN lists, a statement each (a gather job's dependency may name
        # tens of thousands), merged in id order
        ids, array_ids = list(ids), list(array_ids)
        found: dict[int, Job] = {}
        specs: dict[tuple[str, str], JobSpec] = {}
        for at in range(0, max(len(ids), len(array_ids)), IN_LIST):
            named = or_(
                t.c.id.in_(ids[at : at + IN_LIST]),
                t.c.array_job_id.in_(array_ids[at : at + IN_LIST]),
            )
            for job in self._select_jobs(and_(named, *conds), limit, specs):
                found.setdefault(job.id, job)
        ordered = [found[job_id] for job_id in sorted(found)]
        return ordered if limit is None else ordered[:limit]

    def finished_runs(self, limit: int, before: tuple[float, int] | None = None) -> list[Job]:
        """Jobs that ran and have ended, the latest end first (ties: higher id first), at
        most ``limit``, all strictly before ``before`` = (end time, id) in that order (the
        last row of the previous page). What the prediction service replays at start-up.
        Scripts are left out (``spec.script`` is empty)."""
        with self.engine.connect() as conn:
            rows = conn.execute(_finished_page(select(schema.jobs), limit, before))
            return [job_from_row(row, "") for row in rows]

    def finished_usage(
        self, limit: int, before: tuple[float, int] | None = None
    ) -> list[FinishedRun]:
        """``finished_runs``' pages with only what fair share charges of each run (at
        start-up it charges every run of its usage window: building each whole ``Job``
        took 85 % of that time)."""
        t = schema.jobs
        cols = select(
            t.c.id, t.c.user_name, t.c.spec, t.c.start_time, t.c.end_time, t.c.allocation,
            t.c.marks,
        )  # fmt: skip
        with self.engine.connect() as conn:
            return [
                FinishedRun(
                    id=int(row.id),
                    user=row.user_name,
                    account=json.loads(row.spec).get("account"),
                    start=float(row.start_time),
                    end=float(row.end_time),
                    allocation=allocation_from_json(row.allocation),
                    marks=json.loads(row.marks) if row.marks and row.marks != "{}" else {},
                )
                for row in conn.execute(_finished_page(cols, limit, before))
            ]

    def jobs_by_id(self, ids: Sequence[int]) -> list[Job]:
        """The stored rows of these job ids (those that exist), in id order."""
        t = schema.jobs
        found: list[Job] = []
        ordered = sorted(ids)
        for at in range(0, len(ordered), IN_LIST):
            found += self._select_jobs(t.c.id.in_(ordered[at : at + IN_LIST]))
        return found

    def find_submit_key(self, user: str, key: str) -> tuple[str, list[tuple[int, int]]] | None:
        """The digest and result of ``user``'s submission sent with ``key``, if any."""
        t = schema.submit_keys
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.c.digest, t.c.result).where(t.c.user_name == user, t.c.key == key)
            ).first()
        if row is None:
            return None
        return row.digest, [(int(j), int(n)) for j, n in json.loads(row.result)]

    def forget_submit_keys(self, before: float) -> int:
        """Delete the keys of submissions made before ``before``."""
        t = schema.submit_keys
        with self.engine.begin() as conn:
            return int(conn.execute(delete(t).where(t.c.created < before)).rowcount)

    def _select_jobs(
        self,
        cond: Any,
        limit: int | None = None,
        specs: dict[tuple[str, str], JobSpec] | None = None,
    ) -> list[Job]:
        """The jobs meeting ``cond``, in id order. ``specs``: shared by the calls of one
        read, so that an array's elements share one ``JobSpec`` (``job_from_row``)."""
        t, s = schema.jobs, schema.job_scripts
        stmt = select(t, s.c.script).join(s, s.c.id == t.c.script_id)
        if cond is None:
            stmt = stmt.order_by(t.c.id)
        else:
            # SQLite, asked for key order, walks the whole table in key order rather than
            # use the index the condition names (ix_jobs_end for sacct's "since midnight",
            # ix_jobs_state at start-up) and sort what it finds: ``id + 0`` is no key, so
            # it takes the index (30 ms instead of 1 s over a million jobs)
            order = t.c.id + 0 if self.is_sqlite else t.c.id
            stmt = stmt.where(cond).order_by(order)
        if limit is not None:
            stmt = stmt.limit(limit)
        specs = {} if specs is None else specs  # one object per distinct spec
        with self.engine.connect() as conn:
            return [job_from_row(row, row.script, specs) for row in conn.execute(stmt)]

    def load_nodes(self) -> list[Node]:
        t = schema.nodes
        with self.engine.connect() as conn:
            return [
                Node(
                    name=r.name,
                    resources=ResourceVector(r.cpus, r.memory_bytes, r.gpus),
                    state=NodeState(r.state.partition("+")[0]),
                    drain=r.state == DOWN_DRAIN,
                    reason=r.reason,
                    reason_user=r.reason_user,
                    reason_time=r.reason_time,
                    features=tuple(json.loads(r.features)),
                    gpu_model=r.gpu_model,
                    address=r.address,
                    last_heartbeat=r.last_heartbeat,
                    labels=dict(json.loads(r.topology_labels)),
                    nvlink_domain=r.nvlink_domain,
                    gpu_islands=tuple(tuple(i) for i in json.loads(r.gpu_islands)),
                )
                for r in conn.execute(select(t).order_by(t.c.name))
            ]

    def load_reservations(self) -> list[Reservation]:
        t = schema.reservations
        with self.engine.connect() as conn:
            return [
                Reservation(
                    name=r.name,
                    start=r.start_time,
                    end=r.end_time,
                    nodes=tuple(json.loads(r.nodes)),
                    users=tuple(json.loads(r.users)),
                    accounts=tuple(json.loads(r.accounts)),
                    flags=flags,
                    partition=r.partition,
                    purge_after=purge,
                )
                for r in conn.execute(select(t).order_by(t.c.name))
                for flags, purge in [stored_flags(json.loads(r.flags))]  # (PURGE_COMP=s)
            ]

    def partition_overrides(self) -> list[PartitionOverride]:
        t = schema.partition_overrides
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).order_by(t.c.name))
            return [PartitionOverride(**row._mapping) for row in rows]

    def events_after(self, after: int, limit: int = 1000) -> list[StoredEvent]:
        t = schema.events
        stmt = select(t).where(t.c.id > after).order_by(t.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [
                StoredEvent(
                    id=int(r.id),
                    time=r.time,
                    kind=r.kind,
                    job_id=r.job_id,
                    node=r.node,
                    state=r.state,
                    data=json.loads(r.data) if r.data else {},
                )
                for r in conn.execute(stmt)
            ]

    def user_by_token_hash(self, token_sha256: str) -> StoredUser | None:
        t = schema.users
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.c.name, t.c.admin, t.c.agent, t.c.agent_nodes).where(
                    t.c.token_sha256 == token_sha256
                )
            ).first()
        return (
            StoredUser(row.name, bool(row.admin), bool(row.agent), row.agent_nodes) if row else None
        )

    def users(self) -> list[StoredUser]:
        t = schema.users
        with self.engine.connect() as conn:
            return [
                StoredUser(r.name, bool(r.admin), bool(r.agent), r.agent_nodes)
                for r in conn.execute(
                    select(t.c.name, t.c.admin, t.c.agent, t.c.agent_nodes).order_by(t.c.name)
                )
            ]

    def count_jobs(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.jobs)).scalar_one())


def _finished_page(stmt: Select[Any], limit: int, before: tuple[float, int] | None) -> Select[Any]:
    """``stmt`` over the jobs that ran and have ended, latest end first (ties: higher id
    first), at most ``limit``, strictly before ``before`` = (end time, id)."""
    t = schema.jobs
    cond = and_(
        t.c.start_time.is_not(None),
        t.c.end_time.is_not(None),
        t.c.state.not_in(ACTIVE_STATES),
    )
    if before is not None:
        end, job_id = before
        after = or_(t.c.end_time < end, and_(t.c.end_time == end, t.c.id < job_id))
        # ``end_time <= end`` says the same once more, as a bound the end-time index can
        # take: with the OR alone SQLite read every job that ended before, then sorted
        cond = and_(cond, t.c.end_time <= end, after)
    return stmt.where(cond).order_by(t.c.end_time.desc(), t.c.id.desc()).limit(limit)


def _step_key(table: Table, job_id: int, attempt: int, step_id: int) -> tuple[Any, ...]:
    """The conditions that pick one step of one run of a job in ``table``."""
    c = table.c
    return (c.job_id == job_id, c.attempt == attempt, c.step_id == step_id)
