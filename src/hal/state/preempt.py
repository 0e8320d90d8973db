"""Carrying out the scheduler's preemptions (``Plan.preemptions``; docs/admin/preemption.md).

A victim is marked in ``job.extra`` (kept with the job, so a restarted server goes on
where it stopped) and then ended the way Slurm's GraceTime does:

* no ``--signal``: it goes COMPLETING at once and its agent sends SIGTERM, then SIGKILL
  after grace time + KillWait;
* with ``--signal=[B:]SIG@SECS``: it is sent its signal now (time to checkpoint) and
  stays RUNNING until its grace time is over (``end_graced``, from housekeeping), then
  ends as above with KillWait. The grace time is the QoS's or ``[preemption]``'s; when
  that is 0 (the default) it is the job's own SECS, at most ``SIGNAL_GRACE_MAX_S``
  (``signal_grace``).

``requeue`` puts it back in the queue when its agent reports it ended (it keeps its
submit time, so its age priority: its place in the queue); ``cancel`` ends it PREEMPTED
whatever it exited with.

``suspend`` ends nothing: the victim goes SUSPENDED at once (SIGSTOP through its agent,
as ``scontrol suspend``; no grace time and no ``--signal``, as in Slurm) and gives its
CPUs to the preemptor, keeping its memory and GPUs (``hal.core.preemption.holding``).
``resume_freed`` (housekeeping, and after jobs end) lets it go on (SIGCONT, RUNNING,
marks cleared) once its preemptor no longer waits to start on its CPUs (it started,
ended, was held, or can no longer start on its nodes: moved, drained, reserved) and its
CPUs are free again on all its nodes, oldest suspension first. Its time suspended does
not count toward its limit.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hal.core.job import Job
from hal.core.preemption import (
    GRACE_END,
    PREEMPT_MODE,
    PREEMPTED_BY,
    PREEMPTING,
    PreemptMode,
    suspended_by_preemption,
)
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Preemption
from hal.state import reservations as advance_reservations
from hal.state.store import EventRow
from hal.state.suspension import SUSPENDED_AT, suspension

if TYPE_CHECKING:
    from hal.state.cluster import Cluster

# job.extra keys besides PREEMPTED_BY, PREEMPT_MODE and GRACE_END (when a victim's grace
# time ends; the mirror keeps the jobs with one), which hal.core.preemption defines
# kept after the victim is requeued or resumed (scontrol's PreemptTime, hal show): when it
# was last chosen as a victim
PREEMPT_TIME = "preempt_time"
# on a job the server put back in the queue: the state its last run ended in (PREEMPTED,
# NODE_FAIL); hal show, REST ``requeued_after``
REQUEUED_AFTER = "requeued_after"
# on a COMPLETING job ("1"): its end puts it back in the queue (``scontrol requeue``, or a
# victim in requeue mode)
REQUEUE = "requeue"
# with it ("1"): the job comes back held (``scontrol requeuehold``)
REQUEUE_HOLD = "requeue_hold"
# on a job a provider's interruption notice ends (``hal.state.interruptions``): "NOTICE
# ACTION_TIME"; it ends as a victim in requeue mode, NODE_FAIL where it may not be requeued
INTERRUPTED = "interrupted"
# With no configured grace time a --signal victim gets its @SECS to checkpoint, at most
# this long: the preemptor waits meanwhile (--signal allows up to 65535 s).
SIGNAL_GRACE_MAX_S = 300.0
CANCEL = PreemptMode.CANCEL.value
SUSPEND = PreemptMode.SUSPEND.value
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
        if p.mode == SUSPEND and not job.launched:
            continue  # no process to stop yet: the next pass chooses again
        extra = {**job.extra, PREEMPTED_BY: str(p.by), PREEMPT_MODE: p.mode}
        extra[PREEMPT_TIME] = repr(now)
        grace = 0.0 if p.mode == SUSPEND else signal_grace(job, p.grace_s)
        if grace > 0:  # a --signal victim runs until then; another is killed by then
            extra[GRACE_END] = repr(now + grace)
        if p.mode == SUSPEND:
            new = job.evolve(state=JobState.SUSPENDED, extra=suspension(extra, now))
        elif job.spec.signal is not None and grace > 0:
            new = job.evolve(extra=_requeued_if(extra, p.mode))
        else:
            new = job.evolve(state=JobState.COMPLETING, extra=_requeued_if(extra, p.mode))
        victims.append(new)
        if PREEMPTING not in by.extra:
            preemptors[by.id] = by.evolve(extra={**by.extra, PREEMPTING: repr(now)})
        events.append(
            EventRow(
                now,
                "job.preempted",
                job_id=job.id,
                state=new.state.value,
                data={"by": p.by, "mode": p.mode, "grace_s": grace},
            )
        )
    return victims + list(preemptors.values()), events


def signal_grace(job: Job, configured_s: float) -> float:
    """The victim's grace time: the configured one; when that is 0, a ``--signal`` job's
    own SECS (capped at ``SIGNAL_GRACE_MAX_S``) so that it is signalled first and can
    checkpoint. Suspension takes none (Slurm: no GraceTime to suspend); the caller
    decides that."""
    sig = job.spec.signal
    if configured_s > 0 or sig is None:
        return configured_s
    return float(min(sig.seconds_before, SIGNAL_GRACE_MAX_S))


def _requeued_if(extra: dict[str, str], mode: str) -> dict[str, str]:
    """``requeue`` (the default mode): the finish report puts it back in the queue."""
    return extra if mode == CANCEL else {**extra, REQUEUE: "1"}


def notify(cluster: Cluster, marked: Sequence[Job]) -> None:
    """Tell the victims' agents (after ``mark``'s jobs are committed)."""
    from hal.state import agents

    for job in marked:
        if PREEMPTED_BY not in job.extra:
            continue  # a preemptor
        if job.state is JobState.SUSPENDED:
            agents.send_signal(cluster, job, signal.SIGSTOP)
        elif job.state is JobState.COMPLETING:
            agents.send_end(cluster, job)  # with its grace time (``grace_left``)
        elif job.spec.signal is not None:
            sig = job.spec.signal
            agents.send_signal(cluster, job, sig.signum, batch_only=sig.batch_only)


def final_state(job: Job) -> JobState:
    """What the agent reports: PENDING (requeue: the finish report requeues it) or
    PREEMPTED; NODE_FAIL for an interrupted job that may not be requeued."""
    if INTERRUPTED in job.extra and job.extra.get(REQUEUE) != "1":
        return JobState.NODE_FAIL
    return JobState.PREEMPTED if job.extra.get(PREEMPT_MODE) == CANCEL else JobState.PENDING


def cancel_state(job: Job) -> JobState:
    """The state the agent of a COMPLETING job is told to report: a victim's
    ``final_state``, PENDING for a job being requeued, else CANCELLED."""
    if PREEMPTED_BY in job.extra or INTERRUPTED in job.extra:
        return final_state(job)
    return JobState.PENDING if job.extra.get(REQUEUE) == "1" else JobState.CANCELLED


def grace_left(job: Job, now: float) -> int:
    """Seconds of a preempted job's grace time still to come, rounded up (0 for any
    other job)."""
    return max(0, math.ceil(float(job.extra.get(GRACE_END, "0")) - now))


def ended_as(job: Job, reported: JobState) -> JobState:
    """A victim's run ended PREEMPTED whatever its agent saw it exit with (a requeued
    one's ``job.requeued`` event says so too). A suspended victim is not being ended:
    if it ends while suspended (cancelled, its node failed), it ends as reported. A run
    an interruption notice ends, to be requeued, ends PREEMPTED too."""
    if requeued_on_interruption(job):
        return JobState.PREEMPTED
    if PREEMPTED_BY not in job.extra or job.extra.get(PREEMPT_MODE) == SUSPEND:
        return reported
    return JobState.PREEMPTED


def requeued_on_interruption(job: Job) -> bool:
    """An interruption notice ended ``job``'s run, to be requeued, and its owner has not
    cancelled it since (``scancel`` during its grace time ends it CANCELLED)."""
    return INTERRUPTED in job.extra and job.extra.get(REQUEUE) == "1" and not job.cancelled_by


def cleared(extra: dict[str, str]) -> dict[str, str]:
    """``extra`` without the preemption marks (a requeued victim starts afresh, a
    preemptor that starts no longer goes first)."""
    return {k: v for k, v in extra.items() if k not in _MARKS}


async def end_graced(cluster: Cluster) -> None:
    """End the ``--signal`` victims whose grace time is over (housekeeping, every
    second)."""
    now = cluster.clock.now()
    # only the jobs with the mark (the mirror keeps their ids): a scan of every unfinished
    # job every second held the event loop tens of milliseconds at 25,000 jobs
    unfinished = cluster.unfinished
    due = [
        j
        for j in (unfinished[i] for i in sorted(cluster.graced))
        if j.state is JobState.RUNNING and float(j.extra[GRACE_END]) <= now
    ]
    if due:
        await end_preempted(cluster, due)


async def end_preempted(cluster: Cluster, jobs: Sequence[Job]) -> None:
    """The grace time of these preempted jobs is over: end them now."""
    from hal.state import agents

    async with cluster.change() as change:
        now = cluster.clock.now()
        due = [
            j.evolve(state=JobState.COMPLETING)
            for j in (cluster.jobs.get(job.id) for job in jobs)
            if j is not None and j.state is JobState.RUNNING
        ]
        events = [
            EventRow(now, "job.preempt_grace_over", job_id=j.id, state="COMPLETING") for j in due
        ]
        await change.commit(due, events)
        for job in due:
            agents.send_cancel(cluster, job, final_state(job))


def resumable(cluster: Cluster) -> list[Job]:
    """The jobs suspended by preemption that may go on now, oldest suspension first.

    One may once its preemptor no longer waits to start on its CPUs (started, ended,
    held or cancelled), its first node's agent is there to send SIGCONT to (after a
    server restart, once it has registered again), and its CPUs are free on every one of
    its nodes: never onto CPUs another job took meanwhile. Each one chosen takes its
    CPUs back before the next is checked, so two never count on the same CPUs.
    """
    waiting = [cluster.jobs[i] for i in cluster.preempt_suspended]
    waiting.sort(key=lambda j: (float(j.extra.get(SUSPENDED_AT, 0.0)), j.id))
    cpus_used = {name: u.allocated.cpus for name, u in cluster.usage.items()}
    out: list[Job] = []
    for job in waiting:
        alloc = job.allocation
        if alloc is None or alloc.nodes[0] not in cluster.agent_sessions:
            continue
        if _preemptor_waits(cluster, job) or not _room(cluster, job, cpus_used):
            continue
        for name, want in zip(alloc.nodes, alloc.per_node, strict=True):
            cpus_used[name] = cpus_used.get(name, 0) + want.cpus
        out.append(job)
    return out


def _room(cluster: Cluster, job: Job, cpus_used: dict[str, int]) -> bool:
    """``job``'s CPUs are free again on all its nodes (and, for an exclusive job, no
    other running job shares them)."""
    assert job.allocation is not None
    for name, want in zip(job.allocation.nodes, job.allocation.per_node, strict=True):
        node, used = cluster.nodes.get(name), cluster.usage.get(name)
        if node is None or used is None:
            continue  # the node left the cluster: nothing to take back there
        if used.exclusive or cpus_used.get(name, 0) + want.cpus > node.resources.cpus:
            return False
        if job.spec.exclusive and any(
            (other := cluster.jobs.get(i)) is not None and not suspended_by_preemption(other)
            for i in used.jobs
            if i != job.id
        ):
            return False
    return True


def _preemptor_waits(cluster: Cluster, job: Job) -> bool:
    """The job it was suspended for is still pending to start on its CPUs: not started,
    ended or held, and still able to start on one of its nodes. Slurm starts a
    preemptor as it suspends the victims, so a victim never waits for one that will not
    run there; here the preemptor starts a pass later, and meanwhile it may be moved to
    a partition or reservation without the victim's nodes, or those nodes drained or
    reserved, so it may never take the CPUs the victim waits for."""
    try:
        by = cluster.jobs.get(int(job.extra.get(PREEMPTED_BY, "")))
    except ValueError:
        return False
    if (
        by is None
        or by.state is not JobState.PENDING
        or PREEMPTING not in by.extra
        or by.spec.hold
        or by.held_by_admin
    ):
        return False
    assert job.allocation is not None
    return any(_may_start_on(cluster, by, name) for name in job.allocation.nodes)


def _may_start_on(cluster: Cluster, job: Job, node_name: str) -> bool:
    """Pending ``job`` may still start on ``node_name`` (its partition has the node,
    the node takes new jobs, no reservation keeps the job off it), as the plan applier
    judges a placement."""
    partition, node = cluster.partitions.get(job.partition), cluster.nodes.get(node_name)
    if partition is None or node is None or not partition.contains(node_name):
        return False
    if not node.schedulable:
        return False
    now = cluster.clock.now()
    return advance_reservations.placement_conflict(cluster, job, (node_name,), now) is None


def resumed(job: Job, now: float) -> Job:
    """``job`` going on after its suspension: RUNNING, its marks gone."""
    return job.evolve(state=JobState.RUNNING, extra=cleared(suspension(job.extra, now)))


async def resume_freed(cluster: Cluster) -> list[int]:
    """Resume the victims ``resumable`` allows (housekeeping, every second, and after
    agents report jobs ended); the ids resumed."""
    from hal.state import agents

    if not cluster.preempt_suspended:
        return []  # the common case: no lock taken
    async with cluster.change() as change:
        now = cluster.clock.now()
        jobs = [resumed(j, now) for j in resumable(cluster)]
        if not jobs:
            return []
        events = [
            EventRow(now, "job.resumed", job_id=j.id, state="RUNNING", data={"after": "preempted"})
            for j in jobs
        ]
        await change.commit(jobs, events)
        for job in jobs:
            agents.send_signal(cluster, job, signal.SIGCONT)
        return [j.id for j in jobs]
