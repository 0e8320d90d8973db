"""What users and administrators do to jobs that exist: cancel (``scancel``), hold and
release, requeue, suspend and resume, and ``scontrol update``'s changes. Each checks who
asks (``authorise``), works out the jobs' new values from the mirror, and writes them
through the cluster's change handle, then tells the jobs' agents."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from signal import SIGKILL
from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest, PermissionDenied
from hal.core.job import Job
from hal.core.preemption import PREEMPTED_BY, suspended_by_preemption
from hal.core.states import JobState, PendingReason
from hal.state import agents, crontabs, pending_update, preempt
from hal.state.job_changes import (
    LIMIT_BEFORE_TIME_MIN,
    basic_priority,
    check_priority_update,
    check_time_limit_update,
    check_time_min,
    held_by,
    held_on_requeue,
    requeued,
)
from hal.state.store import EventRow
from hal.state.suspension import suspension

if TYPE_CHECKING:
    from hal.state.cluster import Caller, Cluster

# jobs scontrol hold/release act on: a running job's hold keeps it held once requeued
_HOLDABLE = (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


async def cancel(
    cluster: Cluster,
    ident: str,
    caller: Caller,
    signal: int | None = None,
    *,
    batch_only: bool = False,
) -> list[int]:
    async with cluster.change() as change:
        jobs = cluster.resolve(ident)
        authorise(jobs, caller)
        now = cluster.clock.now()
        signalled: list[int] = []
        if signal is not None:
            live = [j for j in jobs if j.state.is_active]
            for job in live:
                agents.send_signal(cluster, job, signal, batch_only=batch_only)
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
        await change.commit(changed, events, crontabs.disabling(changed))
        for job in changed:
            if job.state is JobState.COMPLETING:
                agents.send_cancel(cluster, job, JobState.CANCELLED)
        return signalled + [j.id for j in changed]


async def set_hold(
    cluster: Cluster, ident: str, caller: Caller, held: bool, *, user_hold: bool = False
) -> list[int]:
    """Hold (``scontrol hold``) or release jobs that have not ended. An
    administrator's hold, of any job, is an admin hold (only an administrator
    releases it), unless ``user_hold`` (``scontrol uhold``: a hold its owner may
    release). A running job's hold shows (priority 0, its reason) and keeps it from
    running again once requeued, as in Slurm 22.05.8 (HAL dropped it); jobs that
    have all ended are refused with Slurm's words."""
    async with cluster.change() as change:
        found = cluster.resolve(ident)
        authorise(found, caller)  # whatever their state, as Slurm refuses
        # a running job's hold waits for its requeue, as Slurm 22.05.8 keeps it
        jobs = [j for j in found if j.state in _HOLDABLE]
        if found and not jobs:
            raise Conflict(f"Job has already finished for job {found[0].display_id}")
        now = cluster.clock.now()
        changed: list[Job] = []
        for job in jobs:
            pending = job.state is JobState.PENDING
            if held:
                new = held_by(job, caller, user_hold=user_hold)
            else:
                if job.held_by_admin and not caller.admin:
                    raise PermissionDenied(
                        f"job {job.display_id} was held by an administrator; ask one to release it"
                    )
                new = job.evolve(
                    held_by_admin=False,
                    spec=job.spec.with_changes(hold=False),
                    reason=PendingReason.WAITING_FOR_SCHEDULING if pending else PendingReason.NONE,
                    # eligible from now on (its --switches wait starts now)
                    eligible_time=now if job.held and pending else job.eligible_time,
                )
            changed.append(new)
        events = [
            EventRow(now, "job.held" if held else "job.released", job_id=j.id, state="PENDING")
            for j in changed
        ]
        await change.commit(changed, events)
        return [j.id for j in changed]


async def requeue(cluster: Cluster, ident: str, caller: Caller, *, hold: bool = False) -> list[int]:
    """``scontrol requeue``: running jobs end their run and go back to the queue,
    finished ones go back at once. ``hold`` (``scontrol requeuehold``): they come
    back held, as their owner's hold (``REQUEUED_HELD``), so none starts again
    before someone releases it."""
    async with cluster.change() as change:
        # a het job goes back to the queue whole: its components start together
        jobs = cluster.with_het_components(cluster.resolve(ident))
        authorise(jobs, caller)
        for job in jobs:  # --no-requeue (Requeue=0): never run again, as Slurm's
            if not job.spec.requeue:
                raise Conflict(
                    f"Requested operation is presently disabled for job "
                    f"{job.display_id}: it may not run again (--no-requeue, Requeue=0)"
                )
        now = cluster.clock.now()
        changed: list[Job] = []
        events: list[EventRow] = []
        for job in jobs:
            if job.state in (JobState.RUNNING, JobState.SUSPENDED):
                # ends on the agent first; the finish report puts it back in the queue
                # (components 1.. of a het job: with component 0's report)
                flags = {preempt.REQUEUE: "1", **({preempt.REQUEUE_HOLD: "1"} if hold else {})}
                changed.append(job.evolve(state=JobState.COMPLETING, extra={**job.extra, **flags}))
                events.append(EventRow(now, "job.requeueing", job_id=job.id, state="COMPLETING"))
            elif job.state.is_terminal:  # its run keeps how it ended
                again = requeued(job, now, run=(job.state.value, job.exit_code, job.exit_signal))
                changed.append(held_on_requeue(again) if hold else again)
                events.append(EventRow(now, "job.requeued", job_id=job.id, state="PENDING"))
        if not changed:
            raise Conflict("only running or finished jobs can be requeued")
        await change.commit(changed, events)
        for job in changed:
            if job.state is JobState.COMPLETING:
                agents.send_cancel(cluster, job, JobState.PENDING)
        return [j.id for j in changed]


async def suspend(
    cluster: Cluster, ident: str, caller: Caller, *, resume: bool = False
) -> list[int]:
    """``scontrol suspend|resume``: stop a running job's processes (SIGSTOP) or let
    them go on (SIGCONT). Administrators only, as in Slurm. A suspended job keeps its
    allocation; its agent does not count the suspended time toward its limit."""
    if not caller.admin:
        raise PermissionDenied("only an administrator may suspend or resume jobs")
    before = JobState.SUSPENDED if resume else JobState.RUNNING
    after = JobState.RUNNING if resume else JobState.SUSPENDED
    async with cluster.change() as change:
        jobs = [j for j in cluster.resolve(ident) if j.state is before]
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
        now = cluster.clock.now()
        changed = [j.evolve(state=after, extra=suspension(j.extra, now)) for j in jobs]
        kind = "job.resumed" if resume else "job.suspended"
        events = [EventRow(now, kind, job_id=j.id, state=after.value) for j in changed]
        await change.commit(changed, events)
        signum = signal.SIGCONT if resume else signal.SIGSTOP
        for job in changed:
            agents.send_signal(cluster, job, signum)
        return [j.id for j in changed]


async def update(cluster: Cluster, ident: str, caller: Caller, **fields: object) -> list[Job]:
    async with cluster.change() as change:
        found = cluster.resolve(ident)
        authorise(found, caller)
        # nothing of an ended job changes, whatever the key (Slurm 22.05.8 refuses
        # each with "Job has already finished"); an array's ended tasks are left
        jobs = [j for j in found if not j.state.is_terminal]
        if not jobs:
            raise Conflict(f"Job has already finished for job {found[0].display_id}")
        now = cluster.clock.now()
        changed: list[Job] = []
        held: set[int] = set()  # by ``Priority=0``
        # StartTime, Dependency, QOS, ...: a pending job's request (read and checked
        # before anything changes)
        request = await pending_update.request_changes(cluster, jobs, fields)
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
                check_time_limit_update(job, limit, caller, cluster.partitions.get(job.partition))
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
                names = tuple(dict.fromkeys(p.strip() for p in str(fields["partition"]).split(",")))
                if job.state is not JobState.PENDING:
                    raise Conflict("the partition of a started job cannot change")
                for name in names:
                    if name not in cluster.partitions:
                        raise InvalidRequest(
                            f"Invalid partition name specified: {name!r}", field="partition"
                        )
                cluster.admission.fits_a_partition(job.spec, names, "")  # as at submit
                name = names[0]
                new = new.evolve(partition=name, spec=new.spec.with_changes(partitions=names))
                if not new.priority_fixed:  # its new partition's tier, as at submit
                    new = new.evolve(
                        priority=basic_priority(cluster.partitions[name], new.spec.nice)
                    )
            if fields.get("reservation") is not None:
                name = str(fields["reservation"])
                new = pending_update.moved_to_reservation(cluster, new, name)
            if request and new.state is JobState.PENDING:
                new = pending_update.with_request(cluster, new, request)
            changed.append(new)
        if "qos" in request or "account" in request:
            moved = [j for j in changed if j.state is JobState.PENDING]
            cluster.admission.check_submit_limits(
                [j.spec.with_changes(array=None) for j in moved],  # one job each
                frozenset(j.id for j in moved),
            )
        if fields.get("array_max_running") is not None:
            limit = int(fields["array_max_running"])  # type: ignore[call-overload]
            changed = pending_update.throttled(cluster, jobs, changed, limit)
        events = [
            EventRow(now, "job.updated", job_id=j.id, state=j.state.value) for j in changed
        ] + [EventRow(now, "job.held", job_id=j, state="PENDING") for j in sorted(held)]
        await change.commit(changed, events)
        before = {j.id: j for j in jobs}
        for new in changed:
            old = before.get(new.id)
            if old and new.state.is_active and new.time_limit_s != old.time_limit_s:
                agents.send_limit(cluster, new)  # the agent enforces the limit
        return changed


def authorise(jobs: Iterable[Job], caller: Caller) -> None:
    """Refuse (``PermissionDenied``) unless ``caller`` may change every one of ``jobs``."""
    for job in jobs:
        if not caller.may_modify(job):
            raise PermissionDenied(
                f"job {job.display_id} belongs to {job.spec.user}; only its owner or an "
                "administrator may change it"
            )
