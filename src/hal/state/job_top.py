"""``scontrol top JOB[,JOB...]``: move pending jobs ahead of their owner's other jobs.

Slurm 22.05.8's way (``job_set_top``, checked on its peer, docs/slurm-checks.md): the
listed jobs take the highest priorities among the pending jobs of the first listed
job's user, partition, account and QoS, in the order listed; the others of that set are
lowered evenly by what the listed ones gained, so the set's sum of priorities, and so
the user's standing against other users, stays as it was. The change is made through
each job's nice value (its priority moves by the same amount), so it lasts when the
priority is computed again. Only an administrator may do it, unless ``[scheduler]
enable_user_top`` lets users move their own jobs (Slurm's ``enable_user_top``).

- A job that is unknown, not pending, in several partitions, or not the caller's
  refuses the whole request; nothing changes.
- A held job, or one of another user, partition, account or QoS than the first, is
  passed over. A request that leaves no job to move is refused when one was held.
- Slurm's priorities are all different; HAL's basic ones are equal unless a nice or a
  tier sets them apart, and its queue puts equal ones in submission order. So a listed
  job that would not end up above the jobs after it is raised to one above them, and
  the others are lowered by that too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.core.states import JobState
from hal.state.store import EventRow

if TYPE_CHECKING:
    from hal.core.job import Job
    from hal.state.cluster import Caller, Cluster

NOT_PENDING = "Job is no longer pending execution"
HELD = "Job is in held state, pending scheduler release"
PARTITIONS = "Requested partition configuration not available now"


async def set_top(cluster: Cluster, listed: str, caller: Caller) -> list[int]:
    """Move the jobs of ``listed`` ("12,15") to the top of their owner's queue; the
    ids of the jobs whose priority changed."""
    if not caller.admin and not cluster.config.enable_user_top:
        raise PermissionDenied(
            "Access/permission denied: only an administrator moves jobs to the top "
            "([scheduler] enable_user_top = true lets users move their own)"
        )
    async with cluster.change() as change:
        jobs = [_one(cluster, word, caller) for word in listed.split(",")]
        top = _movable(jobs)
        ids = {j.id for j in top}
        others = [j for j in cluster.jobs.values() if _alike(j, top[0]) and j.id not in ids]
        moved = _priorities(top, sorted(others, key=lambda j: j.id))
        changed = [
            job.evolve(priority=new, spec=job.spec.with_changes(nice=job.spec.nice - new + old))
            for job, old, new in ((j, j.priority, moved[j.id]) for j in (*top, *others))
            if new != old
        ]
        now = cluster.clock.now()
        events = [EventRow(now, "job.updated", job_id=j.id, state=j.state.value) for j in changed]
        await change.commit(changed, events)
        return [j.id for j in changed]


def _one(cluster: Cluster, word: str, caller: Caller) -> Job:
    text = word.strip()
    try:
        found = cluster.resolve(text) if text and "[" not in text else []
    except (InvalidRequest, NotFound):
        found = []
    if len(found) != 1:
        raise NotFound(f"Invalid job id specified: no one job {text!r}")
    job = found[0]
    if not caller.may_modify(job):
        raise PermissionDenied(
            f"Access/permission denied: job {job.display_id} belongs to {job.spec.user}"
        )
    if job.state is not JobState.PENDING:
        raise Conflict(f"{NOT_PENDING}: job {job.display_id} is {job.state.value}")
    if len(job.spec.partitions) > 1:
        raise Conflict(
            f"{PARTITIONS}: job {job.display_id} waits in several partitions "
            f"({','.join(job.spec.partitions)}); only a job of one partition moves to the top"
        )
    return job


def _movable(jobs: list[Job]) -> list[Job]:
    """The listed jobs that move: not held, and alike the first of them, each once."""
    kept = [j for j in jobs if not _held(j)]
    if not kept:
        raise Conflict(f"{HELD}: release it first (scontrol release)")
    first = kept[0]
    alike = [j for j in kept if _alike(j, first)]
    return list({j.id: j for j in alike}.values())


def _held(job: Job) -> bool:
    return job.held or job.priority <= 1


def _alike(job: Job, first: Job) -> bool:
    """A pending job of ``first``'s user, partition, account and QoS, not held (Slurm
    also leaves out priority 1: lowered, it would be held), of one partition."""
    return (
        job.state is JobState.PENDING
        and not _held(job)
        and len(job.spec.partitions) <= 1
        and job.spec.user == first.spec.user
        and job.partition == first.partition
        and job.spec.account == first.spec.account
        and job.spec.qos == first.spec.qos
    )


def _priorities(top: list[Job], others: list[Job]) -> dict[int, int]:
    """Each job's new priority: the highest of the set's to ``top`` in order, and the
    others lowered evenly by what ``top`` gained. Then, where HAL's equal priorities
    would leave a listed job behind the job after it, it is raised one above, and the
    others are lowered by that as well."""
    ranked = sorted((j.priority for j in (*top, *others)), reverse=True)
    new = {job.id: ranked[i] for i, job in enumerate(top)}
    new.update(_lowered(others, sum(new[j.id] - j.priority for j in top), {}))
    floor = max((new[j.id] for j in others), default=None)
    raised = 0
    for job in reversed(top):
        if floor is not None and new[job.id] <= floor:
            raised += floor + 1 - new[job.id]
            new[job.id] = floor + 1
        floor = new[job.id]
    new.update(_lowered(others, raised, new))
    return new


def _lowered(others: list[Job], amount: int, new: dict[int, int]) -> dict[int, int]:
    """``others`` lowered by ``amount`` (>= 0: the listed jobs took the highest) in
    all, evenly, the last one the remainder, as Slurm's integer division leaves it;
    from their priorities in ``new`` where given. Never to 1 or less (held)."""
    out = {}
    for left, job in zip(range(len(others), 0, -1), others, strict=True):
        share = amount // left
        out[job.id] = max(2, new.get(job.id, job.priority) - share)
        amount -= share
    return out
