"""``MemoryStateStore``: the ``StateStore`` in memory, for tests of the state logic that
need no database (``hal.testing.mirror.new_cluster``).

It is a store, not a mock: it keeps the same rows as the SQL tables, encoded by the same
codecs (``hal.state.codec``, ``hal.state.rows``), so what it reads back is what SQLite
would, and it passes the same conformance suite (``hal.testing.store_conformance``).

Transactions are atomic by copy on write: a transaction works on its own copy of each
table it writes (copied at its first write) and the commit puts the copies in place at
once; an exception in the ``with`` block drops them. A table is never changed in place
(the event list is only appended to), so a reader sees one commit or the next. Writers
take one lock, as SQLite's single writer does; a second transaction opened on the thread
that holds one is a bug (on SQLite it would wait for itself) and raises at once.

SQL-only parts (artifacts, crontabs, retention, the server lock) are not here: over this
store they raise (``hal.state.store.sql_store``).
"""

from __future__ import annotations

import bisect
import copy
import json
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from hal.core.cloud_costs import RATE
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job, JobSpec
from hal.core.node import Node
from hal.core.reservation import Reservation
from hal.state.codec import job_from_row, job_to_row
from hal.state.migrations import STEPS
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
from hal.state.store_protocol import SubmitKeyTaken

if TYPE_CHECKING:
    from hal.state.store_protocol import StateStore

Row = SimpleNamespace  # a table row, its columns as attributes (what the codecs read)
StepKey = tuple[int, int, int]  # (job id, attempt, step id)


@dataclass(slots=True)
class _Tables:
    """The store's tables, keyed as the SQL tables are. Rows are never changed in place:
    a write puts a new row."""

    next_job_id: int = 1
    scripts: dict[int, str] = field(default_factory=dict)
    jobs: dict[int, Row] = field(default_factory=dict)  # codec.job_to_row and the usage
    runs: dict[tuple[int, int], RunRow] = field(default_factory=dict)
    steps: dict[StepKey, StepRow] = field(default_factory=dict)
    running_steps: dict[StepKey, RunningStepRow] = field(default_factory=dict)
    nodes: dict[str, Row] = field(default_factory=dict)  # rows.node_to_row
    users: dict[str, Row] = field(default_factory=dict)
    reservations: dict[str, Row] = field(default_factory=dict)  # rows.reservation_to_row
    overrides: dict[str, PartitionOverride] = field(default_factory=dict)
    # (user, key) -> (digest, created, result as JSON)
    submit_keys: dict[tuple[str, str], tuple[str, float, str]] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)  # rows.event_to_row with ids, in id order
    traffic: dict[tuple[str, str], TrafficEdgeRow] = field(default_factory=dict)  # by (a, b)
    feedback: dict[tuple[int, str], FeedbackSeries] = field(default_factory=dict)  # job, metric


class MemoryTransaction:
    """One unit of work (``StateTransaction``), from ``MemoryStateStore.transaction()``."""

    def __init__(self, tables: _Tables) -> None:
        self.tables = copy.copy(tables)  # this transaction's view: its copies once written
        self._copied: set[str] = set()
        self.new_events: list[Row] = []  # appended at the commit
        self.stored_events: list[StoredEvent] = []

    def _own(self, *names: str) -> None:
        """Copy the tables ``names`` before this transaction's first write to them."""
        for name in names:
            if name not in self._copied:
                setattr(self.tables, name, copy.copy(getattr(self.tables, name)))
                self._copied.add(name)

    def reserve_job_ids(self, count: int) -> int:
        first = self.tables.next_job_id
        self.tables.next_job_id += count
        return first

    def insert_scripts(self, scripts: Sequence[tuple[int, str]]) -> None:
        self._own("scripts")
        for script_id, text in scripts:
            _new_key(self.tables.scripts, script_id, "job script")
            self.tables.scripts[script_id] = text

    def insert_jobs(self, jobs: Sequence[Job], script_ids: Sequence[int]) -> None:
        self._own("jobs")
        for job, script_id in zip(jobs, script_ids, strict=True):
            _new_key(self.tables.jobs, job.id, "job")
            self.tables.jobs[job.id] = Row(
                **job_to_row(job, script_id),
                max_rss=0,
                cpu_seconds=0.0,
                user_cpu_seconds=None,
                system_cpu_seconds=None,
            )

    def update_jobs(self, jobs: Sequence[Job], same_spec: Collection[int] = ()) -> None:
        self._own("jobs")
        stored = self.tables.jobs
        for job in jobs:
            old = stored.get(job.id)
            if old is not None:
                full = job.id not in same_spec
                new = job_to_row(job, 0, spec=full)
                columns = UPDATED_COLUMNS if full else KEPT_SPEC_COLUMNS
                stored[job.id] = Row(**(vars(old) | {c: new[c] for c in columns}))

    def add_runs(self, runs: Sequence[RunRow]) -> None:
        self._own("runs")
        for run in runs:
            self.tables.runs[run.job_id, run.attempt] = run

    def record_usage(self, usage: Sequence[JobUse]) -> None:
        self._own("jobs")
        stored = self.tables.jobs
        for job_id, rss, cpu, user, system in usage:
            old = stored.get(job_id)
            if old is not None:  # floats, as the SQL columns give them back
                stored[job_id] = Row(
                    **vars(old)
                    | {
                        "max_rss": int(rss),
                        "cpu_seconds": float(cpu),
                        "user_cpu_seconds": None if user is None else float(user),
                        "system_cpu_seconds": None if system is None else float(system),
                    }
                )

    def add_events(self, rows: Sequence[EventRow]) -> None:
        events = self.tables.events
        last = self.new_events[-1].id if self.new_events else events[-1].id if events else 0
        for i, r in enumerate(rows, start=last + 1):
            self.new_events.append(Row(id=i, **event_to_row(r)))
            self.stored_events.append(
                StoredEvent(i, r.time, r.kind, r.job_id, r.node, r.state, dict(r.data or {}))
            )

    def upsert_node(self, node: Node) -> None:
        self.upsert_nodes((node,))

    def upsert_nodes(self, nodes: Sequence[Node]) -> None:
        self._own("nodes")
        for node in nodes:
            self.tables.nodes[node.name] = Row(**node_to_row(node))

    def delete_node(self, name: str) -> None:
        self._own("nodes")
        self.tables.nodes.pop(name, None)

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
        self._own("users")
        _new_key(self.tables.users, name, "user")
        self._token_free(token_sha256, name)
        self.tables.users[name] = Row(
            name=name,
            token_sha256=token_sha256,
            admin=admin,
            created=created,
            agent=agent,
            agent_nodes=agent_nodes,
        )

    def _token_free(self, token_sha256: str, name: str) -> None:
        """Tokens are unique (``users.token_sha256``): ``name`` may take this one."""
        for user in self.tables.users.values():
            if user.token_sha256 == token_sha256 and user.name != name:
                raise ValueError(f"user {user.name!r} has this token already")

    def set_agent_nodes(self, name: str, agent_nodes: str) -> None:
        self._own("users")
        old = self.tables.users.get(name)
        if old is not None:
            self.tables.users[name] = Row(**vars(old) | {"agent_nodes": agent_nodes})

    def set_user_token(self, name: str, token_sha256: str, admin: bool | None = None) -> bool:
        self._own("users")
        old = self.tables.users.get(name)
        if old is None:
            return False
        self._token_free(token_sha256, name)
        admin = old.admin if admin is None else admin
        self.tables.users[name] = Row(**vars(old) | {"token_sha256": token_sha256, "admin": admin})
        return True

    def delete_user(self, name: str) -> int:
        self._own("users")
        return 0 if self.tables.users.pop(name, None) is None else 1

    def put_reservation(self, r: Reservation) -> None:
        self._own("reservations")
        self.tables.reservations[r.name] = Row(**reservation_to_row(r))

    def delete_reservation(self, name: str) -> int:
        self._own("reservations")
        return 0 if self.tables.reservations.pop(name, None) is None else 1

    def put_partition_override(self, row: PartitionOverride) -> None:
        self._own("overrides")
        self.tables.overrides[row.name] = row

    def clear_partition_overrides(self) -> None:
        self.tables.overrides = {}
        self._copied.add("overrides")

    def add_submit_key(
        self, key: SubmitKey, created: float, result: Sequence[tuple[int, int]]
    ) -> None:
        self._own("submit_keys")
        if (key.user, key.key) in self.tables.submit_keys:
            raise SubmitKeyTaken(key.key)
        self.tables.submit_keys[key.user, key.key] = (key.digest, created, json.dumps(result))

    # -- the store's own writes outside the protocol's transaction --------------------------
    def keep_step(self, row: StepRow) -> None:
        self._own("steps", "running_steps")
        key = (row.job_id, row.attempt, row.step_id)
        self.tables.steps[key] = row
        self.tables.running_steps.pop(key, None)

    def keep_running_step(self, row: RunningStepRow) -> None:
        self._own("running_steps")
        self.tables.running_steps[row.job_id, row.attempt, row.step_id] = row

    def keep_traffic_edges(
        self, rows: Sequence[TrafficEdgeRow], dropped: Sequence[tuple[str, str]]
    ) -> None:
        self._own("traffic")
        for pair in dropped:
            self.tables.traffic.pop(pair, None)
        for row in rows:
            self.tables.traffic[row.a, row.b] = row

    def keep_job_feedback(self, series: Sequence[FeedbackSeries]) -> None:
        self._own("feedback")
        for s in series:
            self.tables.feedback[s.job_id, s.metric] = s

    def forget_submit_keys(self, before: float) -> int:
        self._own("submit_keys")
        keys = self.tables.submit_keys
        old = [k for k, (_digest, created, _result) in keys.items() if created < before]
        for k in old:
            del keys[k]
        return len(old)


class MemoryStateStore:
    """A ``StateStore`` in memory: empty when made, kept until the object goes. ``close``
    keeps the data, so a new ``Cluster`` over the same object is a server restart."""

    def __init__(self) -> None:
        self._tables = _Tables()
        self._writer = threading.Lock()
        self._writing: int | None = None  # the thread in a transaction

    def ping(self) -> None:
        """Memory always answers."""

    def migrate(self) -> int:
        """Nothing to migrate: the schema version the SQL store would be at."""
        return len(STEPS)

    def close(self) -> None:
        """Nothing to let go of; the data stays."""

    @contextmanager
    def transaction(self) -> Iterator[MemoryTransaction]:
        if self._writing == threading.get_ident():
            raise RuntimeError(
                "a transaction of this store is open on this thread already: end it "
                "before opening another (on SQLite the second would wait for the first)"
            )
        with self._writer:
            self._writing = threading.get_ident()
            try:
                tx = MemoryTransaction(self._tables)
                yield tx
                tx.tables.events.extend(tx.new_events)  # (the same list: appended only)
                self._tables = tx.tables
            finally:
                self._writing = None

    def _write(self, work: Callable[[MemoryTransaction], int | None]) -> int | None:
        """Run ``work`` in a transaction of its own (the SQL store's single statements)."""
        with self.transaction() as tx:
            return work(tx)

    # -- events ---------------------------------------------------------------------------
    def revision(self) -> int:
        events = self._tables.events
        return int(events[-1].id) if events else 0

    def events_after(self, after: int, limit: int = 1000) -> list[StoredEvent]:
        events = self._tables.events
        at = bisect.bisect_right(events, after, key=lambda e: int(e.id))
        return [event_from_row(e) for e in events[at : at + max(limit, 0)]]

    # -- jobs -----------------------------------------------------------------------------
    def load_jobs(self, *, active_or_ended_after: float) -> list[Job]:
        after = active_or_ended_after
        return self._jobs(
            lambda r: r.state in ACTIVE_STATES or (r.end_time is not None and r.end_time >= after)
        )

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
        named, in_arrays = set(ids), set(array_ids)
        checks: list[Callable[[Row], bool]] = []
        if named or in_arrays:
            checks.append(lambda r: r.id in named or r.array_job_id in in_arrays)
        for column, wanted in (
            ("user_name", users),
            ("name", names),
            ("state", states),
            ("partition", partitions),
        ):
            if wanted:
                checks.append(_column_in(column, wanted))
        if start_after is not None:  # still around after it (Slurm's --starttime)
            checks.append(lambda r: r.end_time is None or r.end_time >= start_after)
        if end_before is not None:
            checks.append(lambda r: r.submit_time <= end_before)
        return self._jobs(lambda r: all(check(r) for check in checks), limit)

    def finished_runs(self, limit: int, before: tuple[float, int] | None = None) -> list[Job]:
        return [job_from_row(r, "") for r in self._finished_page(limit, before)]

    def finished_usage(
        self, limit: int, before: tuple[float, int] | None = None
    ) -> list[FinishedRun]:
        return [finished_run_from_row(r) for r in self._finished_page(limit, before)]

    def jobs_by_id(self, ids: Sequence[int]) -> list[Job]:
        wanted = set(ids)
        return self._jobs(lambda r: r.id in wanted)

    def count_jobs(self) -> int:
        return len(self._tables.jobs)

    def _jobs(self, keep: Callable[[Row], bool], limit: int | None = None) -> list[Job]:
        """The jobs whose row passes ``keep``, in id order, at most ``limit``; a row whose
        script is missing is left out (SQL joins the scripts). An array's elements share
        one ``JobSpec``, as ``job_from_row`` gives them within one read."""
        t = self._tables
        specs: dict[tuple[str, str], JobSpec] = {}
        found: list[Job] = []
        for job_id in sorted(t.jobs):
            if limit is not None and len(found) >= limit:
                break
            row = t.jobs[job_id]
            script = t.scripts.get(row.script_id)
            if script is not None and keep(row):
                found.append(job_from_row(row, script, specs))
        return found

    def _finished_page(self, limit: int, before: tuple[float, int] | None) -> list[Row]:
        """The rows of jobs that ran and have ended, latest end first (ties: higher id
        first), at most ``limit``, strictly before ``before`` = (end time, id)."""
        rows = [
            r
            for r in self._tables.jobs.values()
            if r.start_time is not None
            and r.end_time is not None
            and r.state not in ACTIVE_STATES
            and (before is None or (r.end_time, r.id) < before)
        ]
        rows.sort(key=lambda r: (r.end_time, r.id), reverse=True)
        return rows[: max(limit, 0)]

    # -- runs and steps -------------------------------------------------------------------
    def priced_since(self, since: float) -> tuple[list[Job], list[RunRow]]:
        def priced(r: Row) -> bool:
            return r.end_time is not None and r.end_time >= since and f'"{RATE}"' in r.marks

        runs = self._tables.runs
        costly = [runs[k] for k in sorted(runs) if runs[k].cost > 0 and runs[k].end_time >= since]
        return self._jobs(priced), costly

    def runs_of(self, job_ids: Sequence[int]) -> list[RunRow]:
        wanted = set(job_ids)
        runs = self._tables.runs
        return [runs[k] for k in sorted(runs) if k[0] in wanted]

    def record_step(self, row: StepRow) -> None:
        self._write(lambda tx: tx.keep_step(row))

    def steps_of(self, job_ids: Sequence[int]) -> list[StepRow]:
        wanted = set(job_ids)
        steps = self._tables.steps
        return [steps[k] for k in sorted(steps) if k[0] in wanted]

    def last_step_id(self, job_id: int, attempt: int) -> int:
        ids = [s for j, a, s in self._tables.steps if (j, a) == (job_id, attempt)]
        return max(ids, default=-1)

    def keep_running_step(self, row: RunningStepRow) -> None:
        self._write(lambda tx: tx.keep_running_step(row))

    def running_steps(self) -> list[RunningStepRow]:
        running = self._tables.running_steps
        return [running[k] for k in sorted(running)]

    # -- nodes, reservations, partitions --------------------------------------------------
    def load_nodes(self) -> list[Node]:
        nodes = self._tables.nodes
        return [node_from_row(nodes[name]) for name in sorted(nodes)]

    def load_reservations(self) -> list[Reservation]:
        stored = self._tables.reservations
        return [reservation_from_row(stored[name]) for name in sorted(stored)]

    def partition_overrides(self) -> list[PartitionOverride]:
        overrides = self._tables.overrides
        return [overrides[name] for name in sorted(overrides)]

    # -- the traffic graph ----------------------------------------------------------------
    def keep_traffic_edges(
        self, rows: Sequence[TrafficEdgeRow], dropped: Sequence[tuple[str, str]]
    ) -> None:
        self._write(lambda tx: tx.keep_traffic_edges(rows, dropped))

    def keep_job_feedback(self, series: Sequence[FeedbackSeries]) -> None:
        self._write(lambda tx: tx.keep_job_feedback(series))

    def job_feedback(self, job_ids: Sequence[int]) -> list[FeedbackSeries]:
        wanted = set(job_ids)
        kept = self._tables.feedback
        return [kept[k] for k in sorted(kept) if k[0] in wanted]

    def traffic_edges(self) -> list[TrafficEdgeRow]:
        edges = self._tables.traffic
        return [edges[k] for k in sorted(edges)]

    # -- users ----------------------------------------------------------------------------
    def users(self) -> list[StoredUser]:
        users = self._tables.users
        return [_user(users[name]) for name in sorted(users)]

    def user_by_token_hash(self, token_sha256: str) -> StoredUser | None:
        found = (u for u in self._tables.users.values() if u.token_sha256 == token_sha256)
        row = next(found, None)
        return None if row is None else _user(row)

    # -- submission keys ------------------------------------------------------------------
    def find_submit_key(self, user: str, key: str) -> tuple[str, list[tuple[int, int]]] | None:
        found = self._tables.submit_keys.get((user, key))
        if found is None:
            return None
        digest, _created, result = found
        return digest, [(int(j), int(n)) for j, n in json.loads(result)]

    def forget_submit_keys(self, before: float) -> int:
        return int(self._write(lambda tx: tx.forget_submit_keys(before)) or 0)


def _new_key(table: dict[Any, Any], key: object, what: str) -> None:
    """Refuse a row whose key is taken, as the SQL table's primary key does."""
    if key in table:
        raise ValueError(f"{what} {key!r} is stored already")


def _column_in(column: str, values: Sequence[str]) -> Callable[[Row], bool]:
    """Whether a row's ``column`` is one of ``values`` (SQL's IN)."""
    wanted = set(values)
    return lambda row: getattr(row, column) in wanted


def _user(row: Row) -> StoredUser:
    return StoredUser(row.name, bool(row.admin), bool(row.agent), row.agent_nodes)


if TYPE_CHECKING:  # mypy checks that the memory store is a StateStore
    _check: type[StateStore] = MemoryStateStore
