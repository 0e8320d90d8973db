"""``SqlStateStore``: the durable record (SQLite with WAL by default, PostgreSQL by URL), the
``StateStore`` the server runs on (``hal.state.store_protocol``: what each method
promises).

All methods are synchronous; the server calls them from one dedicated thread, which also
serialises writers the way SQLite wants. Beyond the protocol it offers its ``engine``, for
the modules that keep SQL tables of their own (artifacts, crontabs, retention, the server
lock): ``sql_store`` gives them the cluster's store as a ``SqlStateStore``.

The row types and the store's errors live in ``hal.state.rows`` and
``hal.state.store_protocol``; they are imported from here too, where they were first.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    Select,
    String,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError

from hal.core.cloud_costs import RATE
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job, JobSpec
from hal.core.node import Node
from hal.core.reservation import Reservation
from hal.db import is_sqlite, make_engine, normalise_url, unavailable_reason
from hal.state import schema
from hal.state.codec import JobRowMemo, job_from_row, job_to_row
from hal.state.migrations import migrate
from hal.state.rows import (
    ACTIVE_STATES,
    KEPT_SPEC_COLUMNS,
    UPDATED_COLUMNS,
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
    event_from_row,
    event_to_row,
    finished_run_from_row,
    node_from_row,
    node_to_row,
    reservation_from_row,
    reservation_to_row,
)
from hal.state.store_protocol import (
    CommitOutcomeUnknown,
    DatabaseUnavailable,
    StateStore,
    StateTransaction,
    SubmitKeyTaken,
)
from hal.state.usage_memo import UsageMemo

__all__ = [  # the names other modules import from here (see the docstring)
    "ACTIVE_STATES",
    "IN_LIST",
    "CommitOutcomeUnknown",
    "DatabaseUnavailable",
    "EventRow",
    "FinishedRun",
    "JobUse",
    "PartitionOverride",
    "RunRow",
    "RunningStepRow",
    "SqlStateStore",
    "StepRow",
    "StoredEvent",
    "StoredUser",
    "SubmitKey",
    "SubmitKeyTaken",
    "Transaction",
    "sql_store",
    "sql_transaction",
]

# values per IN list: PostgreSQL takes at most 65,535 parameters a statement
IN_LIST = 1000
T = TypeVar("T")  # what a ``UsageMemo`` keeps of a finished run


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
def _update_jobs(columns: tuple[str, ...]) -> Executable:
    t = schema.jobs
    return (
        update(t)
        .where(t.c.id == bindparam("b_id"))
        .values({c: bindparam(f"b_{c}") for c in columns})
    )


@functools.cache
def _update_jobs_from_json(columns: tuple[str, ...]) -> str:
    """``_update_jobs`` for PostgreSQL as one statement for any number of jobs: their
    rows as one JSON array (parameter ``rows``: objects with ``id`` and ``columns``),
    read by ``json_to_recordset`` with the columns' own types. psycopg's
    ``executemany`` sends a statement per job and adapts each value in Python: for a
    plan's few hundred starts it cost four times the JSON's making and sending."""
    t = schema.jobs
    every = ("id", *columns)
    # (the types' generic SQL names, which PostgreSQL reads as the columns' own)
    types = ", ".join(f'"{c}" {t.c[c].type.compile()}' for c in every)
    sets = ", ".join(f'"{c}" = v."{c}"' for c in columns)
    return (
        f"UPDATE {t.name} SET {sets} FROM json_to_recordset(%(rows)s::json) AS v({types}) "
        f"WHERE {t.name}.id = v.id"
    )


@functools.cache
def _insert_events_from_json() -> str:
    """``_insert_events`` for PostgreSQL as one statement for any number of events:
    their rows as one JSON array (parameter ``rows``), inserted in the array's order
    (``ORDER BY`` its ordinality draws their ids from the sequence in that order, as
    SQLAlchemy's own ordered insert relies on), returning the ids. SQLAlchemy's
    insert of many rows with their ids back cost 30 µs a row in Python, most of a
    plan's writing; this one, 5."""
    t = schema.events
    columns = [c.name for c in t.columns if c.name != "id"]
    names = ", ".join(f'"{c}"' for c in columns)
    types = ", ".join(f'"{c}" {t.c[c].type.compile()}' for c in columns)
    return (
        f"INSERT INTO {t.name} ({names}) SELECT {names} FROM ROWS FROM "
        f"(json_to_recordset(%(rows)s::json) AS ({types})) WITH ORDINALITY AS v({names}, n) "
        "ORDER BY v.n RETURNING id"
    )


# the columns ``record_usage`` writes, by the names of the ``JobUse`` parts after the id
_USAGE_COLUMNS = ("max_rss", "cpu_seconds", "user_cpu_seconds", "system_cpu_seconds")


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
def _upsert_nodes(dialect: str) -> Executable:
    """Insert the rows of ``nodes`` given, each replacing the stored row of its name."""
    t = schema.nodes
    upsert = (pg_insert if dialect == "postgresql" else sqlite_insert)(t)
    kept = {c.name: upsert.excluded[c.name] for c in t.columns if c.name != "name"}
    return upsert.on_conflict_do_update(index_elements=[t.c.name], set_=kept)


@functools.cache
def _upsert_nodes_from_json() -> str:
    """``_upsert_nodes`` for PostgreSQL as one statement for any number of nodes, their
    rows one JSON array (parameter ``rows``, as ``_insert_events_from_json``'s)."""
    t = schema.nodes
    columns = [c.name for c in t.columns]
    names = ", ".join(f'"{c}"' for c in columns)
    types = ", ".join(f'"{c}" {t.c[c].type.compile()}' for c in columns)
    kept = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in columns if c != "name")
    return (
        f"INSERT INTO {t.name} ({names}) SELECT {names} FROM "
        f"json_to_recordset(%(rows)s::json) AS v({types}) "
        f"ON CONFLICT (name) DO UPDATE SET {kept}"
    )


@functools.cache
def _insert_events() -> Executable:
    return insert(schema.events).returning(schema.events.c.id, sort_by_parameter_order=True)


class Transaction:
    """One unit of work on one connection (``StateTransaction``), from
    ``SqlStateStore.transaction()``. ``conn`` is for the SQL-only modules' own tables."""

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

    def update_jobs(self, jobs: Sequence[Job], same_spec: Collection[int] = ()) -> None:
        postgres = self.conn.dialect.name == "postgresql"
        for columns, group in (
            (UPDATED_COLUMNS, [j for j in jobs if j.id not in same_spec]),
            (KEPT_SPEC_COLUMNS, [j for j in jobs if j.id in same_spec] if same_spec else []),
        ):
            if not group:
                continue
            full = columns is UPDATED_COLUMNS
            rows = [job_to_row(j, 0, spec=full) for j in group]
            if postgres and self._update_from_json(columns, rows):
                continue
            self.conn.execute(
                _update_jobs(columns),
                [{"b_id": r["id"]} | {f"b_{c}": r[c] for c in columns} for r in rows],
            )

    def _update_from_json(self, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> bool:
        """``rows`` written in one statement (PostgreSQL); False, nothing written, for
        rows JSON cannot carry (a float that is not finite, a value of no JSON type:
        the caller writes them a statement each). A job given twice is
        written as its last row says, as one statement per row leaves it."""
        if len({r["id"] for r in rows}) < len(rows):
            rows = list({r["id"]: r for r in rows}.values())
        text = _json_rows(rows)  # (the rows' other columns go along: unread)
        if text is None:
            return False
        self.conn.exec_driver_sql(_update_jobs_from_json(columns), {"rows": text})
        return True

    def add_runs(self, runs: Sequence[RunRow]) -> None:
        """Keep the runs requeued jobs have just ended (again: the same row once): one
        delete and one insert for all of them (a run given twice: its last row)."""
        if not runs:
            return
        r = schema.job_runs
        last = {(run.job_id, run.attempt): run for run in runs}
        keys = list(last)
        for start in range(0, len(keys), IN_LIST):
            chunk = keys[start : start + IN_LIST]
            self.conn.execute(delete(r).where(tuple_(r.c.job_id, r.c.attempt).in_(chunk)))
        self.conn.execute(
            insert(r), [{f: getattr(run, f) for f in RunRow.__slots__} for run in last.values()]
        )

    def record_usage(self, usage: Sequence[JobUse]) -> None:
        """Store what finished jobs used (``JobUse``): one statement for the whole batch
        (an agent's sync reports many jobs at once)."""
        if not usage:
            return
        if self.conn.dialect.name == "postgresql":
            rows = [dict(zip(("id", *_USAGE_COLUMNS), u, strict=True)) for u in usage]
            if self._update_from_json(_USAGE_COLUMNS, rows):
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
        values = [event_to_row(r) for r in rows]
        text = _json_rows(values) if self.conn.dialect.name == "postgresql" else None
        if text is not None:  # (drawn in the rows' order: ascending, whatever comes back)
            found = self.conn.exec_driver_sql(_insert_events_from_json(), {"rows": text})
            ids = sorted(found.scalars().all())
        else:
            ids = list(self.conn.execute(_insert_events(), values).scalars())
        self.stored_events.extend(
            StoredEvent(int(i), r.time, r.kind, r.job_id, r.node, r.state, dict(r.data or {}))
            for i, r in zip(ids, rows, strict=True)
        )

    def upsert_node(self, node: Node) -> None:
        self.upsert_nodes((node,))

    def upsert_nodes(self, nodes: Sequence[Node]) -> None:
        """One statement for all of ``nodes``: an update then an insert a node, each
        statement built and keyed anew, cost a registration 0.2 ms of the server's CPU
        and two round trips under the writer's lock (256 of them a batch)."""
        if not nodes:
            return
        # (one statement cannot change a row twice: a name given twice, its last)
        values = list({n.name: node_to_row(n) for n in nodes}.values())
        postgres = self.conn.dialect.name == "postgresql"
        text = _json_rows(values) if postgres else None
        if text is not None:
            self.conn.exec_driver_sql(_upsert_nodes_from_json(), {"rows": text})
        else:
            self.conn.execute(_upsert_nodes(self.conn.dialect.name), values)

    def delete_node(self, name: str) -> None:
        self.conn.execute(delete(schema.nodes).where(schema.nodes.c.name == name))

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
        self.conn.execute(insert(t).values(reservation_to_row(r)))

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
    """The ``StateStore`` over SQLAlchemy Core, on the database at ``url``; its engine is
    made at once, a connection only at the first use. ``application_name``: what
    PostgreSQL's ``pg_stat_activity`` names its connections (the server's:
    ``hal-server:HOST:PID``, ``hal.state.leader``)."""

    def __init__(self, url: str, *, application_name: str | None = None) -> None:
        self.url = normalise_url(url)
        self.is_sqlite = is_sqlite(self.url)
        self.application_name = application_name
        self.engine: Engine = make_engine(self.url, application_name=application_name)
        # a standby's decoded jobs, for ``load_jobs`` at its takeover (``JobRowMemo``)
        self.job_memo: JobRowMemo | None = None

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

    def keep_traffic_edges(
        self, rows: Sequence[TrafficEdgeRow], dropped: Sequence[tuple[str, str]]
    ) -> None:
        """Keep the traffic graph's changed edges (an upsert: deleting a full graph's
        65,536 pairs one statement each, or by row-value IN lists, took PostgreSQL from
        8 to 200 s) and forget the dropped pairs."""
        t = schema.traffic_edges
        with self.engine.begin() as conn:
            if dropped:
                gone = delete(t).where(t.c.a == bindparam("ka"), t.c.b == bindparam("kb"))
                conn.execute(gone, [{"ka": a, "kb": b} for a, b in dropped])
            if rows:
                make = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
                upsert = make(t)
                upsert = upsert.on_conflict_do_update(
                    index_elements=[t.c.a, t.c.b],
                    set_={c: upsert.excluded[c] for c in ("decayed_bytes", "at", "since")},
                )
                fields = TrafficEdgeRow.__slots__
                conn.execute(upsert, [{f: getattr(r, f) for f in fields} for r in rows])

    def keep_job_feedback(self, series: Sequence[FeedbackSeries]) -> None:
        """Keep these feedback series, each replacing its job and metric's (an upsert)."""
        if not series:
            return
        t = schema.job_feedback
        with self.engine.begin() as conn:
            make = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
            upsert = make(t)
            upsert = upsert.on_conflict_do_update(
                index_elements=[t.c.job_id, t.c.metric],
                set_={
                    c: upsert.excluded[c] for c in ("count", "last_time", "last_value", "points")
                },
            )
            conn.execute(upsert, [_feedback_row(s) for s in series])

    def job_feedback(self, job_ids: Sequence[int]) -> list[FeedbackSeries]:
        """The kept feedback series of ``job_ids``, by job and metric."""
        t = schema.job_feedback
        found: list[FeedbackSeries] = []
        with self.engine.connect() as conn:
            for start in range(0, len(job_ids), 500):
                chunk = [int(j) for j in job_ids[start : start + 500]]
                rows = conn.execute(select(t).where(t.c.job_id.in_(chunk)))
                for row in rows:
                    r = row._mapping  # (``count`` is a tuple method on the row itself)
                    found.append(
                        FeedbackSeries(
                            int(r["job_id"]),
                            str(r["metric"]),
                            int(r["count"]),
                            float(r["last_time"]),
                            float(r["last_value"]),
                            tuple((float(a), float(b)) for a, b in json.loads(r["points"])),
                        )
                    )
        return sorted(found, key=lambda s: (s.job_id, s.metric))

    def traffic_edges(self) -> list[TrafficEdgeRow]:
        """Every kept traffic-graph edge, by (a, b)."""
        t = schema.traffic_edges
        with self.engine.connect() as conn:
            found = conn.execute(select(t).order_by(t.c.a, t.c.b))
            return [TrafficEdgeRow(**row._mapping) for row in found]

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

    def priced_since(self, since: float) -> tuple[list[Job], list[RunRow]]:
        """The jobs ended since ``since`` on priced capacity and the costly runs."""
        t, r = schema.jobs, schema.job_runs
        marked = t.c.marks.like(f'%"{RATE}"%')
        jobs = self._select_jobs(and_(t.c.end_time >= since, marked))
        with self.engine.connect() as conn:
            found = conn.execute(select(r).where(r.c.end_time >= since, r.c.cost > 0))
            runs = [RunRow(**dict(row._mapping)) for row in found]
        return jobs, sorted(runs, key=lambda x: (x.job_id, x.attempt))

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
        if self.job_memo is not None and not self.is_sqlite:
            return self._select_changed_jobs(cond, self.job_memo)
        return self._select_jobs(cond, memo=self.job_memo)

    def _select_changed_jobs(self, cond: Any, memo: JobRowMemo) -> list[Job]:
        """PostgreSQL: the jobs meeting ``cond`` in id order, as ``_select_jobs``, with
        only the rows ``memo`` has not at their current version (``xmin``) fetched whole
        and decoded. Both reads see one snapshot (REPEATABLE READ)."""
        t, s = schema.jobs, schema.job_scripts
        xmin = literal_column("jobs.xmin::text", String).label("xmin")
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                versions = [
                    (int(r.id), str(r.xmin))
                    for r in conn.execute(select(t.c.id, xmin).where(cond).order_by(t.c.id))
                ]
                stale = memo.stale(versions)
                stmt = select(t, s.c.script, xmin).join(s, s.c.id == t.c.script_id)
                for at in range(0, len(stale), IN_LIST):
                    chunk = stmt.where(t.c.id.in_(stale[at : at + IN_LIST]))
                    for row in conn.execute(chunk):
                        memo.versioned(row)
        memo.keep({job_id for job_id, _ in versions})
        return [memo.at_version(job_id) for job_id, _ in versions]

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
            rows = conn.execute(_finished_page(cols, limit, before))
            return [finished_run_from_row(row) for row in rows]

    def finished_usage_changed(self, since: float | None, memo: UsageMemo[T]) -> list[T]:
        """PostgreSQL: the charges (``memo.charge``) of the runs that ended at or after
        ``since`` (None: all), in ``finished_usage``'s order (latest end first, ties:
        higher id first), with only the rows ``memo`` has not at their current version
        (``xmin``) fetched and decoded; both reads see one snapshot (REPEATABLE READ).
        A standby's read ahead of the fair-share history, and its takeover's read."""
        t = schema.jobs
        xmin = literal_column("jobs.xmin::text", String).label("xmin")
        cond = _finished_cond()
        if since is not None:
            cond = and_(cond, t.c.end_time >= since)
        order = (t.c.end_time.desc(), t.c.id.desc())
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                versions = [
                    (int(r.id), int(r.xmin))
                    for r in conn.execute(select(t.c.id, xmin).where(cond).order_by(*order))
                ]
                stale = memo.stale(versions)
                cols = select(
                    t.c.id, t.c.user_name, t.c.spec, t.c.start_time, t.c.end_time,
                    t.c.allocation, t.c.marks, xmin,
                )  # fmt: skip
                for at in range(0, len(stale), IN_LIST):
                    chunk = cols.where(t.c.id.in_(stale[at : at + IN_LIST]))
                    for row in conn.execute(chunk):
                        memo.put(finished_run_from_row(row), int(row.xmin))
        ids = [job_id for job_id, _ in versions]
        memo.keep(set(ids))
        return memo.charges(ids)

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
        memo: JobRowMemo | None = None,
    ) -> list[Job]:
        """The jobs meeting ``cond``, in id order. ``specs``: shared by the calls of one
        read, so that an array's elements share one ``JobSpec`` (``job_from_row``).
        ``memo``: jobs decoded by an earlier read of the same rows (``load_jobs``)."""
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
            if memo is None:
                return [job_from_row(row, row.script, specs) for row in conn.execute(stmt)]
            jobs = [memo.job(row, specs) for row in conn.execute(stmt)]
        memo.keep({job.id for job in jobs})
        return jobs

    def load_nodes(self) -> list[Node]:
        t = schema.nodes
        with self.engine.connect() as conn:
            return [node_from_row(r) for r in conn.execute(select(t).order_by(t.c.name))]

    def load_reservations(self) -> list[Reservation]:
        t = schema.reservations
        with self.engine.connect() as conn:
            return [reservation_from_row(r) for r in conn.execute(select(t).order_by(t.c.name))]

    def partition_overrides(self) -> list[PartitionOverride]:
        t = schema.partition_overrides
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).order_by(t.c.name))
            return [PartitionOverride(**row._mapping) for row in rows]

    def events_after(self, after: int, limit: int = 1000) -> list[StoredEvent]:
        t = schema.events
        stmt = select(t).where(t.c.id > after).order_by(t.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [event_from_row(r) for r in conn.execute(stmt)]

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


def _json_rows(rows: list[dict[str, Any]]) -> str | None:
    """``rows`` as one JSON array, for the statements that read it with
    ``json_to_recordset``; None for rows JSON cannot carry (a float that is not finite,
    a value of no JSON type): those go a row at a time."""
    try:
        return json.dumps(rows, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):
        return None


def _finished_cond() -> Any:
    """The jobs that ran and have ended: those fair share charges."""
    t = schema.jobs
    return and_(
        t.c.start_time.is_not(None),
        t.c.end_time.is_not(None),
        t.c.state.not_in(ACTIVE_STATES),
    )


def _finished_page(stmt: Select[Any], limit: int, before: tuple[float, int] | None) -> Select[Any]:
    """``stmt`` over the jobs that ran and have ended, latest end first (ties: higher id
    first), at most ``limit``, strictly before ``before`` = (end time, id)."""
    t = schema.jobs
    cond = _finished_cond()
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


def sql_store(store: StateStore) -> SqlStateStore:
    """``store`` as the SQL store, for a module that keeps SQL tables of its own (the
    ``StateStore`` protocol covers none of them)."""
    if isinstance(store, SqlStateStore):
        return store
    raise TypeError(
        f"this needs the SQL state store, and the cluster runs on a {type(store).__name__}: "
        "build it over SQLite (hal.testing.mirror.new_cluster with a database URL)"
    )


def sql_transaction(tx: StateTransaction) -> Transaction:
    """``tx`` as a SQL transaction, for a module that writes SQL tables of its own in the
    same transaction (``sql_store``)."""
    if isinstance(tx, Transaction):
        return tx
    raise TypeError(
        f"this needs a transaction of the SQL state store, not a {type(tx).__name__}: "
        "build the cluster over SQLite (hal.testing.mirror.new_cluster with a database URL)"
    )


if TYPE_CHECKING:  # mypy checks that the SQL store is a StateStore
    _check: type[StateStore] = SqlStateStore


def _feedback_row(series: FeedbackSeries) -> dict[str, Any]:
    return {
        "job_id": series.job_id,
        "metric": series.metric,
        "count": series.count,
        "last_time": series.last_time,
        "last_value": series.last_value,
        "points": json.dumps([list(p) for p in series.points], separators=(",", ":")),
    }
