"""A job that names several partitions (``sbatch -p a,b``): Slurm queues it in each and
starts it in whichever can run it first. While it waits, ``Job.partition`` is the first
of its list (where its priority and time limit were resolved at submit); the scheduler
tries it in every one (``in_partition``) and the job takes the partition it starts in.
"""

from __future__ import annotations

from collections.abc import Mapping

from hal.core.job import Job
from hal.core.node import Partition
from hal.core.states import JobState


def partitions_of(job: Job) -> tuple[str, ...]:
    """The partitions ``job`` may start in: its list (``-p a,b``) while it waits, else
    its one partition."""
    listed = job.spec.partitions
    if len(listed) > 1 and job.partition in listed:
        return listed
    return (job.partition,)


def shown_partition(job: Job) -> str:
    """What squeue's PARTITION shows: the list (``a,b``) while the job waits, the one it
    runs in once started (as Slurm's)."""
    return ",".join(partitions_of(job)) if job.state is JobState.PENDING else job.partition


def in_partition(job: Job, partitions: Mapping[str, Partition], name: str) -> Job:
    """``job`` as it would start in ``name``, one of its partitions. A job that named no
    ``--time`` gets that partition's DefaultTime (else MaxTime), as Slurm sets it when
    the job starts, unless its limit is not the one its first partition gave it at
    submit (a QoS or account MaxWall capped it, or an administrator changed it): that
    limit then holds in every partition."""
    if name == job.partition:
        return job
    limit = job.time_limit_s
    here, there = partitions.get(job.partition), partitions.get(name)
    if (
        job.spec.time_limit_s is None
        and here is not None
        and there is not None
        and limit == here.default_limit_s
    ):
        limit = there.default_limit_s
    return job.evolve(partition=name, time_limit_s=limit)
