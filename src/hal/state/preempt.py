"""Carrying out the scheduler's preemptions (``Plan.preemptions``; docs/preemption.md).

A victim is marked in ``job.extra`` (kept with the job, so a restarted server goes on
where it stopped) and then ended the way Slurm's GraceTime does:

* no ``--signal``, or no grace time: it goes COMPLETING at once and its agent sends
  SIGTERM, then SIGKILL after grace time + KillWait;
* with ``--signal`` and a grace time: it is sent its signal now (time to checkpoint) and
  stays RUNNING until the grace time is over (``end_graced``, from housekeeping), then
  ends as above with KillWait.

``requeue`` puts it back in the queue when its agent reports it ended (it keeps its
submit time, so its age priority: its place in the queue); ``cancel`` ends it PREEMPTED
whatever it exited with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hal.core.job import Job
from hal.core.preemption import PREEMPTED_BY, PREEMPTING
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Preemption
from hal.state.store import EventRow

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

# job.extra keys besides PREEMPTED_BY (which the preemption plugin reads too)
PREEMPT_MODE = "preempt_mode"
GRACE_END = "preempt_grace_end"  # while a --signal victim has its grace time
CANCEL = "cancel"
_MARKS = (PREEMPTED_BY, PREEMPT_MODE, GRACE_END, PREEMPTING)


def mark(
    cluster: Cluster, preemptions: Sequence[Preemption], now: float
) -> tuple[list[Job], list[EventRow]]:
    """The marked victims that still hold (running, not yet preempted, their preemptor
    still pending), their preemptors marked PREEMPTING (the queue tries them first), and
    the events; the caller commits them, then calls ``notify``."""
    victims: list[Job] = []
    events: list[EventRow] = []
    preemptors: dict[int, Job] = {}
    for p in preemptions:
        job, by = cluster.jobs.get(p.job_id), cluster.jobs.get(p.by)
        if job is None or job.state is not JobState.RUNNING or PREEMPTED_BY in job.extra:
            continue
        if by is None or by.state is not JobState.PENDING:
            continue
        extra = {**job.extra, PREEMPTED_BY: str(p.by), PREEMPT_MODE: p.mode}
        if p.mode != CANCEL:
            extra["requeue"] = "1"
        if job.spec.signal is not None and p.grace_s > 0:
            extra[GRACE_END] = repr(now + p.grace_s)
            new = job.evolve(extra=extra)
        else:
            new = job.evolve(state=JobState.COMPLETING, extra=extra)
        victims.append(new)
        if PREEMPTING not in by.extra:
            preemptors[by.id] = by.evolve(extra={**by.extra, PREEMPTING: repr(now)})
        events.append(
            EventRow(
                now,
                "job.preempted",
                job_id=job.id,
                state=new.state.value,
                data={"by": p.by, "mode": p.mode, "grace_s": p.grace_s},
            )
        )
    return victims + list(preemptors.values()), events


def notify(cluster: Cluster, marked: Sequence[Job], preemptions: Sequence[Preemption]) -> None:
    """Tell the victims' agents (after ``mark``'s jobs are committed)."""
    from hal.state import agents

    grace = {p.job_id: p.grace_s for p in preemptions}
    for job in marked:
        if PREEMPTED_BY not in job.extra:
            continue  # a preemptor
        if job.state is JobState.COMPLETING:
            wait = int(grace.get(job.id, 0.0)) + cluster.config.kill_wait_seconds
            agents.send_cancel(cluster, job, final_state(job), kill_wait_s=wait)
        elif job.spec.signal is not None:
            sig = job.spec.signal
            agents.send_signal(cluster, job, sig.signum, batch_only=sig.batch_only)


def final_state(job: Job) -> JobState:
    """What the agent reports: PENDING (requeue: the finish report requeues it) or
    PREEMPTED."""
    return JobState.PREEMPTED if job.extra.get(PREEMPT_MODE) == CANCEL else JobState.PENDING


def ended_as(job: Job, reported: JobState) -> JobState:
    """A victim's run ended PREEMPTED whatever its agent saw it exit with (a requeued
    one's ``job.requeued`` event says so too)."""
    return JobState.PREEMPTED if PREEMPTED_BY in job.extra else reported


def cleared(extra: dict[str, str]) -> dict[str, str]:
    """``extra`` without the preemption marks (a requeued victim starts afresh, a
    preemptor that starts no longer goes first)."""
    return {k: v for k, v in extra.items() if k not in _MARKS}


async def end_graced(cluster: Cluster) -> None:
    """End the ``--signal`` victims whose grace time is over (housekeeping, every
    second)."""
    now = cluster.clock.now()
    due = [
        j
        for j in cluster.unfinished.values()
        if j.state is JobState.RUNNING and float(j.extra.get(GRACE_END, "inf")) <= now
    ]
    if due:
        await cluster.end_preempted(due)
