"""Purging old records: ``[accounting] purge_events_after`` / ``purge_jobs_after``
(slurmdbd's PurgeEventAfter / PurgeJobAfter; docs/admin/accounting.md).

``RecordPurge.run`` wakes every ``purge_check_seconds`` and deletes what has passed its
retention, ``BATCH`` rows per transaction on the store's thread, so the scheduler, agents
and requests get the database (and the cluster's lock) between batches; the old rows are
found through an index on their time (``ix_events_time``, ``ix_jobs_end``).

What is never purged:

* the newest event, whatever its age: its id is the store's revision, and a SQLite table
  emptied would hand out its ids again (event-stream clients resume by id);
* a job that is pending, running or in memory (MinJobAge), or that a job in memory names
  in ``--dependency``;
* part of an array or a heterogeneous job: one goes with all its elements or components,
  when every one of them has ended before the cutoff, so ``sacct`` never shows half of one.

A purged job's batch script goes with it (an array's, with its last element), and its
steps (``job_steps``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, delete, func, or_, select

from hal.config.accounting import AccountingConfig
from hal.state import schema
from hal.state.cluster import Cluster
from hal.state.store import (
    ACTIVE_STATES,
    IN_LIST,
    DatabaseUnavailable,
    SqlStateStore,
    sql_store,
)

log = logging.getLogger("hal.accounting")
BATCH = 1000  # rows read (jobs) or deleted (events) per transaction: one short write

Cursor = tuple[float, int]  # (end time, id) of the last job a batch read


@dataclass(frozen=True, slots=True)
class Purged:
    """What one purge deleted."""

    events: int = 0
    jobs: int = 0


def purge_events(store: SqlStateStore, before: float, limit: int = BATCH) -> int:
    """Delete up to ``limit`` events older than ``before``, never the newest event."""
    t = schema.events
    newest = select(func.max(t.c.id)).scalar_subquery()
    old = select(t.c.id).where(t.c.time < before, t.c.id < newest).limit(limit)
    with store.engine.begin() as conn:
        return int(conn.execute(delete(t).where(t.c.id.in_(old))).rowcount)


def purge_jobs(
    store: SqlStateStore,
    before: float,
    keep: Collection[int] = (),
    after: Cursor | None = None,
    limit: int = BATCH,
) -> tuple[int, Cursor | None]:
    """Read up to ``limit`` finished jobs that ended before ``before`` (after ``after``,
    in (end time, id) order) and delete them with their arrays or het jobs where all of
    those ended before ``before`` and none of their ids, array or het job ids is in
    ``keep``. Returns the number of jobs deleted and where the next batch reads from
    (None: nothing is left to read)."""
    t = schema.jobs
    cond = and_(t.c.end_time < before, t.c.state.not_in(ACTIVE_STATES))
    if after is not None:
        end, job_id = after
        cond = and_(cond, t.c.end_time >= end, or_(t.c.end_time > end, t.c.id > job_id))
    with store.engine.begin() as conn:
        rows = conn.execute(
            select(t.c.id, t.c.end_time, t.c.array_job_id, t.c.state, t.c.script_id, t.c.spec)
            .where(cond)
            .order_by(t.c.end_time, t.c.id)
            .limit(limit)
        ).all()
        if not rows:
            return 0, None
        cursor = (float(rows[-1].end_time), int(rows[-1].id)) if len(rows) == limit else None
        groups = _groups(conn, rows)
        doomed = [
            member
            for name, members in groups.items()
            if name not in keep and all(_gone(m, before) and m.id not in keep for m in members)
            for member in members
        ]
        _delete(conn, doomed)
    return len(doomed), cursor


def _gone(row: Any, before: float) -> bool:
    return row.state not in ACTIVE_STATES and row.end_time is not None and row.end_time < before


def _het_ids(spec: str) -> range | None:
    """The ids of the het job a stored spec is a component of (None: not one)."""
    if '"het":[' not in spec:  # most jobs: no JSON to parse
        return None
    het = json.loads(spec).get("het")
    return None if het is None else range(int(het[0]), int(het[0]) + int(het[2]))


def _groups(conn: Connection, rows: Sequence[Any]) -> dict[int, list[Any]]:
    """The candidates' arrays, het jobs and lone jobs, by the id that names them
    (array job id, het job id, job id), with all their stored rows."""
    t = schema.jobs
    cols = (t.c.id, t.c.end_time, t.c.array_job_id, t.c.state, t.c.script_id)
    groups: dict[int, list[Any]] = {}
    arrays: set[int] = set()
    hets: dict[int, range] = {}
    for row in rows:
        if row.array_job_id is not None:
            arrays.add(int(row.array_job_id))
        elif (ids := _het_ids(row.spec)) is not None:
            hets[ids.start] = ids
        else:
            groups[int(row.id)] = [row]
    for chunk in _chunks(sorted(arrays)):
        for row in conn.execute(select(*cols).where(t.c.array_job_id.in_(chunk))):
            groups.setdefault(int(row.array_job_id), []).append(row)
    members = {i: het_id for het_id, ids in hets.items() for i in ids}
    for chunk in _chunks(sorted(members)):
        for row in conn.execute(select(*cols).where(t.c.id.in_(chunk))):
            groups.setdefault(members[int(row.id)], []).append(row)
    return groups


def _delete(conn: Connection, doomed: Sequence[Any]) -> None:
    """Delete ``doomed`` job rows, then the scripts no job refers to any more. A script's
    id is the id of the first job it was stored for (an array's: the array job id), so
    the jobs still using one are found by id and array job id, both indexed."""
    t, s, steps = schema.jobs, schema.job_scripts, schema.job_steps
    for chunk in _chunks([int(row.id) for row in doomed]):
        conn.execute(delete(t).where(t.c.id.in_(chunk)))
        conn.execute(delete(steps).where(steps.c.job_id.in_(chunk)))  # its steps go with it
        runs = schema.job_runs  # and its earlier runs
        conn.execute(delete(runs).where(runs.c.job_id.in_(chunk)))
        running = schema.running_steps  # (one left by a server that stopped meanwhile)
        conn.execute(delete(running).where(running.c.job_id.in_(chunk)))
        feedback = schema.job_feedback  # and what it reported (hal feedback)
        conn.execute(delete(feedback).where(feedback.c.job_id.in_(chunk)))
    scripts = sorted({int(row.script_id) for row in doomed})
    for chunk in _chunks(scripts):
        used = set(
            conn.execute(
                select(t.c.script_id).where(
                    or_(t.c.id.in_(chunk), t.c.array_job_id.in_(chunk)),
                    t.c.script_id.in_(chunk),
                )
            ).scalars()
        )
        unused = [i for i in chunk if i not in used]
        if unused:
            conn.execute(delete(s).where(s.c.id.in_(unused)))


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for at in range(0, len(ids), IN_LIST):
        yield ids[at : at + IN_LIST]


def jobs_to_keep(cluster: Cluster) -> set[int]:
    """Ids no purge may delete: the jobs in memory, their arrays, and what jobs in memory
    name in their dependencies (also those whose rows ``fill_related`` keeps)."""
    keep = set(cluster.jobs)
    keep.update(cluster.arrays)
    keep.update(cluster.stored_related)
    for job in cluster.unfinished.values():
        if job.spec.dependency is not None:
            for term in job.spec.dependency.terms:
                keep.update(term.job_ids)
    return keep


class RecordPurge:
    """The server's background purge (``HalServer`` runs it when ``[accounting]`` asks
    for one). ``on_purged`` is told what each purge deleted (the metrics)."""

    def __init__(self, cluster: Cluster, config: AccountingConfig, batch: int = BATCH) -> None:
        self.cluster = cluster
        self.config = config
        self.batch = batch
        self.on_purged: Callable[[Purged], None] = lambda purged: None

    async def run(self, stop: asyncio.Event) -> None:
        """Purge now, then every ``purge_check_seconds``, until ``stop`` is set."""
        while not stop.is_set():
            try:
                if await self.cluster.database_ok():
                    await self.purge(stop)
            except DatabaseUnavailable as err:  # the outage is logged once, by the cluster
                log.debug("purge put off: %s", err)
            except Exception:
                log.exception("purging old accounting records failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.purge_check_seconds)

    async def purge(self, stop: asyncio.Event | None = None) -> Purged:
        """Delete the events and jobs past their retention, a batch at a time."""
        cluster, now = self.cluster, self.cluster.clock.now()
        events = jobs = 0
        if self.config.purge_events_after is not None:
            before = self.config.purge_events_after.cutoff(now)
            while stop is None or not stop.is_set():
                done = await cluster.db(purge_events, sql_store(cluster.store), before, self.batch)
                events += done
                if done < self.batch:
                    break
            # the event stream serves recent events from memory: not those purged
            recent = cluster.recent_events
            while len(recent) > 1 and recent[0].time < before:
                recent.popleft()
        if self.config.purge_jobs_after is not None:
            cluster.prune()  # what has been in memory for MinJobAge leaves it now
            # never a job that is still in memory, whatever the retention says
            before = min(
                self.config.purge_jobs_after.cutoff(now),
                now - cluster.config.min_job_age_seconds,
            )
            cursor: Cursor | None = None
            while stop is None or not stop.is_set():
                # under the cluster's lock: a submission naming an old job in --dependency
                # lands either before this batch (its target is kept) or after (refused)
                async with cluster.change():
                    keep = jobs_to_keep(cluster)
                    done, cursor = await cluster.db(
                        purge_jobs, sql_store(cluster.store), before, keep, cursor, self.batch
                    )
                jobs += done
                if cursor is None:
                    break
        purged = Purged(events=events, jobs=jobs)
        if events or jobs:
            parts = [
                f"{count} {what} older than {retention}"
                for count, what, retention in (
                    (events, "events", self.config.purge_events_after),
                    (jobs, "finished jobs", self.config.purge_jobs_after),
                )
                if retention is not None
            ]
            log.info(
                "purged %s",
                " and ".join(parts),
                extra={"purged_events": events, "purged_jobs": jobs},
            )
        self.on_purged(purged)
        return purged
