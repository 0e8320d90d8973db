"""What one job becomes when a change to it is allowed: held, given a lowered limit,
requeued, and the checks of ``--time-min`` and ``Priority=`` (Slurm 22.05.8's rules,
docs/slurm-checks.md). Pure functions over ``Job``; ``hal.state.cluster`` commits what
they return under its lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest, PermissionDenied
from hal.core.job import Job
from hal.core.node import Partition
from hal.core.states import JobState, PendingReason
from hal.slurm.syntax import duration_long
from hal.state import preempt
from hal.state.suspension import SUSPENDED_AT, SUSPENDED_S

if TYPE_CHECKING:
    from hal.state.cluster import Caller

# job.extra: the time limit a job had before backfill lowered it within its --time-min
LIMIT_BEFORE_TIME_MIN = "limit_before_time_min"


# how a requeued job's last run ended ("STATE CODE SIGNAL"), for its accounting record
RUN_END = "run_end"

# why the scheduler chose the job's nodes, when a plugin's choice decided them
# (``Placement.note``: the traffic graph's), kept from its start until a requeue; read by
# ``hal explain`` and ``hal show``
PLACEMENT_NOTE = "placement"


def held_by(job: Job, caller: Caller, *, user_hold: bool) -> Job:
    """``job`` held by ``caller`` (``scontrol hold``, or ``update Priority=0``): an
    administrator's hold only an administrator releases, unless ``user_hold``
    (``scontrol uhold``); a user's a hold the owner may release. Also of the
    administrator's own job, as Slurm 22.05.8 makes root's hold of root's job
    ``JobHeldAdmin`` (docs/slurm-checks.md)."""
    if caller.admin and not user_hold:
        return job.evolve(held_by_admin=True, reason=PendingReason.JOB_HELD_ADMIN)
    return job.evolve(spec=job.spec.with_changes(hold=True), reason=PendingReason.JOB_HELD_USER)


def held_on_requeue(job: Job) -> Job:
    """``job`` just requeued by ``scontrol requeuehold``: held as its owner's hold (its
    owner may release it), with Slurm's reason."""
    return job.evolve(spec=job.spec.with_changes(hold=True), reason=PendingReason.REQUEUED_HELD)


def check_time_min(time_min: int | None, limit: int, where: str = "") -> None:
    """``--time-min`` may not exceed the job's time limit (0: unlimited), as in Slurm."""
    if time_min and limit and time_min > limit:
        raise InvalidRequest(
            f"Invalid time-min specification (exceeds job's time or other limits): "
            f"time-min {time_min}s is more than the time limit {limit}s; give a "
            "--time-min no longer than --time (or raise --time)",
            field=where + "time_min",
        )


def lowered_limit(job: Job, limit: int) -> Job:
    """``job`` starting with ``limit``, which backfill chose within its ``--time-min``;
    the limit it had is kept (``LIMIT_BEFORE_TIME_MIN``) for a new run after a requeue."""
    extra = {**job.extra, LIMIT_BEFORE_TIME_MIN: str(job.time_limit_s)}
    return job.evolve(time_limit_s=limit, extra=extra)


def within_deadline(job: Job, now: float) -> Job:
    """``job`` starting at ``now`` with a limit that ends by its ``--deadline``, as
    Slurm's: cut to the whole minutes left (not below its ``--time-min``) where it would
    run past it, an unlimited job too."""
    deadline = job.spec.deadline
    if deadline is None:
        return job
    left = max(int(deadline - now) // 60 * 60, job.spec.time_min_s or 0)
    if left <= 0 or 0 < job.time_limit_s <= left:
        return job  # (past it: the scheduler ends such a job instead)
    if LIMIT_BEFORE_TIME_MIN in job.extra:  # (lowered by backfill already: its own is kept)
        return job.evolve(time_limit_s=left)
    return lowered_limit(job, left)


def requeued(
    job: Job, now: float, after: str | None = None, run: tuple[str, int, int] | None = None
) -> Job:
    """``job`` back in the queue at ``now`` for a new run; ``after``: the state the server
    ended its last run in (``preempt.REQUEUED_AFTER``; None: an administrator's requeue).
    ``run``: how that run ended for accounting (state, exit code, signal; default
    ``after`` or REQUEUED, 0:0), kept as ``RUN_END`` for ``hal.state.job_runs``.
    A limit backfill lowered within ``--time-min`` was for that run's start: the job's own
    is back, for backfill to lower again if it must. It is eligible anew from ``now``
    (Slurm 22.05.8 moves SubmitTime and EligibleTime to the requeue, EligibleTime with a
    121 s delay that HAL does not add: docs/slurm-checks.md)."""
    dropped = (
        preempt.REQUEUE, preempt.REQUEUE_HOLD, SUSPENDED_AT, SUSPENDED_S,
        preempt.REQUEUED_AFTER, LIMIT_BEFORE_TIME_MIN, PLACEMENT_NOTE, preempt.INTERRUPTED,
    )  # start afresh  # fmt: skip
    extra = preempt.cleared({k: v for k, v in job.extra.items() if k not in dropped})
    if after is not None:
        extra[preempt.REQUEUED_AFTER] = after
    state, code, sig = run or (after or "REQUEUED", 0, 0)
    extra[RUN_END] = f"{state} {code} {sig}"
    if LIMIT_BEFORE_TIME_MIN in job.extra:
        job = job.evolve(time_limit_s=int(job.extra[LIMIT_BEFORE_TIME_MIN]))
    reason = PendingReason.WAITING_FOR_SCHEDULING
    if job.held:  # held while it ran (scontrol hold): it stays held
        reason = PendingReason.JOB_HELD_ADMIN if job.held_by_admin else PendingReason.JOB_HELD_USER
    return job.evolve(
        state=JobState.PENDING,
        reason=reason,
        start_time=None,
        end_time=None,
        allocation=None,
        restarts=job.restarts + 1,
        eligible_time=now,
        exit_code=0,
        exit_signal=0,
        launched=False,
        extra=extra,
    )


def check_priority_update(job: Job, priority: int, caller: Caller) -> None:
    """Refuse ``Priority=priority`` (not 0: a hold) of ``job`` as Slurm 22.05.8 does
    (docs/slurm-checks.md): a held job's priority stays 0 until it is released, for
    administrators too; only an administrator sets a priority, its owner may give only
    the one it has (lower: "not persistent", higher: permission denied)."""
    if job.held and job.state is JobState.PENDING:
        raise Conflict(
            f"Job is in held state, pending scheduler release for job {job.display_id}: "
            f"release it first (scontrol release {job.display_id}), then set its priority"
        )
    if caller.admin or priority == job.priority:
        return
    if priority < job.priority:
        raise InvalidRequest(
            f"Changes to job priority are not persistent, change nice instead for job "
            f"{job.display_id}: e.g. scontrol update jobid={job.display_id} "
            f"nice={job.priority - priority} (only an administrator sets a priority)",
            field="priority",
        )
    raise PermissionDenied(
        f"job {job.display_id}'s priority is {job.priority}: only an administrator may "
        "raise it (its owner may lower it with a nice, or hold it with 0)"
    )


def check_time_limit_update(
    job: Job, limit: int, caller: Caller, partition: Partition | None
) -> None:
    """Refuse ``TimeLimit=limit`` (seconds, 0: unlimited) of ``job`` as Slurm 22.05.8's
    ``update_job`` does (docs/slurm-checks.md): anyone who may update the
    job lowers its limit; its owner raises it only while it is pending and up to its
    partition's MaxTime (``partition``: the one it waits in); an administrator always."""
    raising = job.time_limit_s != 0 and (limit == 0 or limit > job.time_limit_s)
    if caller.admin or not raising:
        return
    max_time = partition.max_time_s if partition is not None else 0
    if job.state is JobState.PENDING and (max_time == 0 or 0 < limit <= max_time):
        return
    why = (
        f"its partition's MaxTime is {duration_long(max_time)}"
        if job.state is JobState.PENDING
        else f"it is {job.state.value}"
    )
    raise PermissionDenied(
        f"Access/permission denied for job {job.display_id}: {why}, and only an "
        "administrator may raise the time limit of a job that has started or above "
        "its partition's MaxTime (its owner may lower it)"
    )


def basic_priority(partition: Partition, nice: int) -> int:
    """A job's priority without the multifactor plugin: its partition's tier, less its
    nice (the multifactor service recomputes it when configured)."""
    return max(0, 1_000_000 + 10_000 * partition.priority_tier - nice)
