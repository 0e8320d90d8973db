"""Users' crontabs (``scrontab``, docs/user/scrontab.md, ADR 0015): the stored file and the
one job each entry keeps in the queue.

Every entry has one job, pending until the next time its schedule names (its begin
time, reason ``BeginTime``), then running; when a run ends ``Cluster.finish`` queues it
again for the next time, under the same id (``queued_again``), as Slurm's slurmctld
requeues a cron job. The stored file is the truth for ``scrontab -l``; the jobs carry
their entry (``JobSpec.cron``), so nothing else links the two.

- A new file (``replace``) or none (``remove``) cancels the pending jobs of the old
  entries; a running one ends its run and is not queued again (``LAST_RUN``). The new
  entries' jobs are submitted in the same transaction (``Cluster.submit``'s ``along``).
- ``scancel`` of a cron job cancels it and comments its entry out of the file with
  ``#DISABLED:`` (``disabling``, in the cancel's transaction), as Slurm's scancel.

The server's clock and local time zone give the next runs (``hal.slurm.crontab``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, insert, select, update

from hal.core.job import Job, JobSpec
from hal.core.states import JobState, PendingReason
from hal.slurm.crontab import disable_entry, next_run
from hal.state import schema
from hal.state.job_changes import requeued
from hal.state.store import EventRow, Transaction

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

# job.extra on a running cron job whose entry a new crontab (or scrontab -r) dropped:
# this run is its last
LAST_RUN = "cron_last_run"


@dataclass(slots=True)
class Changes:
    """What a crontab change does besides submitting the new entries' jobs: the old
    entries' jobs (cancelled, or marked ``LAST_RUN``), their events, and the file."""

    jobs: list[Job] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    write: Callable[[Transaction], None] | None = None

    def write_to(self, tx: Transaction) -> None:
        tx.update_jobs(self.jobs)
        tx.add_events(self.events)
        if self.write is not None:
            self.write(tx)

    def ids(self) -> Iterator[int]:
        return (j.id for j in self.jobs)


def current_jobs(cluster: Cluster, user: str) -> list[Job]:
    """``user``'s cron jobs of the stored crontab's entries (pending or running)."""
    return [
        j
        for j in cluster.unfinished.values()
        if j.spec.cron is not None and j.spec.user == user and LAST_RUN not in j.extra
    ]


def read(conn: Connection, user: str) -> str | None:
    t = schema.crontabs
    return conn.execute(select(t.c.text).where(t.c.user_name == user)).scalar_one_or_none()


def _store(conn: Connection, user: str, text: str | None, now: float) -> None:
    t = schema.crontabs
    conn.execute(delete(t).where(t.c.user_name == user))
    if text is not None:
        conn.execute(insert(t).values(user_name=user, text=text, updated_at=now))


async def stored_text(cluster: Cluster, user: str) -> str | None:
    """``user``'s crontab as last saved (None: they have none)."""

    def work() -> str | None:
        with cluster.store.engine.connect() as conn:
            return read(conn, user)

    return await cluster.db(work)


def _ending(cluster: Cluster, user: str, by: str, text: str | None) -> Changes:
    """The changes that take ``user``'s old entries away and store ``text`` (None: no
    crontab). Called under the cluster's lock."""
    now = cluster.clock.now()
    out = Changes()
    for job in current_jobs(cluster, user):
        if job.state is JobState.PENDING:
            out.jobs.append(
                job.evolve(
                    state=JobState.CANCELLED,
                    reason=PendingReason.NONE,
                    end_time=now,
                    cancelled_by=by,
                )
            )
            out.events.append(
                EventRow(
                    now,
                    "job.finished",
                    job_id=job.id,
                    state="CANCELLED",
                    data={"by": by, "crontab": "replaced" if text is not None else "removed"},
                )
            )
        else:  # running (or ending): its run goes on, the last of its entry
            out.jobs.append(job.evolve(extra={**job.extra, LAST_RUN: "1"}))
    out.events.append(
        EventRow(now, "crontab.saved" if text is not None else "crontab.removed", data={
            "user": user, "by": by
        })
    )  # fmt: skip
    out.write = lambda tx: _store(tx.conn, user, text, now)
    return out


async def replace(
    cluster: Cluster, user: str, text: str, specs: Sequence[JobSpec], by: str
) -> list[int]:
    """Store ``text`` as ``user``'s crontab and submit its entries' jobs ``specs`` (their
    begin times set to their next runs); the old entries' jobs are cancelled (pending) or
    run their last run. Returns the new jobs' ids, in the entries' order."""
    if not specs:
        async with cluster.change() as change:
            changes = _ending(cluster, user, by, text)
            await change.commit(changes.jobs, changes.events, changes.write)
        return []
    done = await cluster.submit(specs, along=lambda: _ending(cluster, user, by, text))
    return [d.job_id for d in done]


async def remove(cluster: Cluster, user: str, by: str) -> list[int]:
    """``scrontab -r``: forget ``user``'s crontab; returns the ids of the jobs cancelled."""
    async with cluster.change() as change:
        changes = _ending(cluster, user, by, None)
        await change.commit(changes.jobs, changes.events, changes.write)
    return [j.id for j in changes.jobs if j.state is JobState.CANCELLED]


def runs_again(job: Job, state: JobState) -> bool:
    """Whether the run of ``job`` that ended in ``state`` is followed by another: a cron
    job's is, however it ended, unless it was cancelled (scancel, which disables its
    entry) or its entry is gone."""
    return (
        job.spec.cron is not None and state is not JobState.CANCELLED and LAST_RUN not in job.extra
    )


def queued_again(
    job: Job, state: JobState, now: float, exit_code: int, exit_signal: int
) -> tuple[Job, EventRow]:
    """``job``, whose run ended in ``state`` at ``now``, back in the queue under its id
    until the next time its schedule names (Slurm's requeue of a cron job)."""
    assert job.spec.cron is not None
    begin = next_run(job.spec.cron.schedule, now)
    run = (state.value, exit_code, exit_signal)
    new = requeued(job, now, run=run).evolve(spec=job.spec.with_changes(begin_time=begin))
    data: dict[str, object] = {
        "after": state.value,
        "exit_code": exit_code,
        "signal": exit_signal,
        "cron": True,
        "begin_time": begin,
    }
    return new, EventRow(now, "job.requeued", job_id=job.id, state="PENDING", data=data)


def disabling(jobs: Sequence[Job]) -> Callable[[Transaction], None] | None:
    """For a cancel's transaction: comment out the entries of the cron jobs in ``jobs``
    (being cancelled) in their users' crontabs; None when none is a cron job."""
    entries = [
        (j.spec.user, j.spec.cron.first_line, j.spec.cron.line)
        for j in jobs
        if j.spec.cron is not None and LAST_RUN not in j.extra
    ]
    if not entries:
        return None

    def write(tx: Transaction) -> None:
        t = schema.crontabs
        for user, first, last in entries:
            text = read(tx.conn, user)
            if text is not None:
                new = disable_entry(text, first, last)
                tx.conn.execute(update(t).where(t.c.user_name == user).values(text=new))

    return write
