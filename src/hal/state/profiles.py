"""The running jobs' profiles on the server, and the class each one is in.

An agent's usage sample carries each running job's profile over its last sampling
window (``JobUsage.profile``, ``hal.agent.profile``); the latest sample of each job stays
in memory with its node's session (``agents.usage_of``) and shows in ``hal show`` and
``GET /v1/jobs/{id}``. The class (``hal.core.profiles.classify``) is kept with the job,
in ``job.extra[PROFILE_CLASS]``, for the interference model and the ``dissonance``
plugin, and stays after the job ends.

A class is written only when it changes, and only once ``CONFIRM_SAMPLES`` samples in a
row agree on the new one: a job that hovers at a threshold does not commit every
sample, and a phase of a few seconds (a checkpoint's burst of writes) does not reclass
a job. Each change is one commit of the jobs it touches and a ``job.profile`` event
(``{"class": new, "was": old or None}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hal.core.profiles import PROFILE_CLASS, JobProfile, classify
from hal.state.store import EventRow
from hal.wire.jobs import JobProfileSample

if TYPE_CHECKING:
    from hal.core.job import Job
    from hal.state.cluster import Cluster
    from hal.wire.agent import JobUsage

CONFIRM_SAMPLES = 3  # samples in a row (about 6 s at the agent's 2-s cadence)

Votes = dict[int, tuple[str, int]]  # job → (the class its samples say, how many in a row)


def job_profile(sample: JobProfileSample, cpus: int, memory_bytes: int) -> JobProfile:
    """The core profile of an agent's ``sample`` of a job given ``cpus`` and
    ``memory_bytes`` on that node (network not attributed: 0)."""
    return JobProfile(
        cpu_util=sample.cpu_util,
        rss_bytes=sample.rss_bytes,
        read_bytes_per_s=sample.read_bytes_per_s,
        write_bytes_per_s=sample.write_bytes_per_s,
        net_bytes_per_s=sample.net_bytes_per_s or 0.0,
        cpu_pressure=sample.cpu_pressure,
        memory_pressure=sample.memory_pressure,
        io_pressure=sample.io_pressure,
        cpus=cpus,
        memory_bytes=memory_bytes,
    )


def class_of(job: Job, sample: JobProfileSample) -> str:
    """The class ``sample`` puts ``job`` in, measured against what it was given on its
    batch node (the node whose agent samples it)."""
    given = job.allocation.per_node[0] if job.allocation and job.allocation.per_node else None
    cpus, memory = (given.cpus, given.memory_bytes) if given is not None else (0, 0)
    return classify(job_profile(sample, cpus, memory))


def changed_classes(
    jobs: Mapping[int, Job], votes: Votes, usage: Sequence[JobUsage]
) -> dict[int, str]:
    """The running jobs (of ``jobs``) in one node's ``usage`` whose class changed and held for
    ``CONFIRM_SAMPLES`` samples, with their new class; ``votes`` (the node's, kept with
    its session) counts the samples in a row, and forgets the jobs no longer sampled."""
    sampled: set[int] = set()
    changed: dict[int, str] = {}
    for use in usage:
        job = jobs.get(use.job_id)
        if use.profile is None or job is None or not job.state.is_active:
            continue
        if use.attempt != job.restarts:
            continue  # an earlier run's, reported late
        sampled.add(job.id)
        found = class_of(job, use.profile)
        if found == job.extra.get(PROFILE_CLASS):
            votes.pop(job.id, None)
            continue
        seen, count = votes.get(job.id, (found, 0))
        count = count + 1 if seen == found else 1
        votes[job.id] = (found, count)
        if count >= CONFIRM_SAMPLES:
            changed[job.id] = found
    for job_id in votes.keys() - sampled:  # ended, or moved on
        del votes[job_id]
    return changed


async def record(cluster: Cluster, votes: Votes, usage: Sequence[JobUsage]) -> None:
    """Keep the class of the jobs in one node's ``usage`` whose class changed (and held:
    ``changed_classes``) in ``job.extra[PROFILE_CLASS]``, one commit for them all."""
    changed = changed_classes(cluster.jobs, votes, usage)
    if not changed:
        return
    async with cluster.change() as change:
        now = cluster.clock.now()
        jobs, events = [], []
        for job_id, found in changed.items():
            job = cluster.jobs.get(job_id)
            if job is None or not job.state.is_active:
                continue  # ended meanwhile
            was = job.extra.get(PROFILE_CLASS)
            jobs.append(job.evolve(extra={**job.extra, PROFILE_CLASS: found}))
            events.append(
                EventRow(
                    now,
                    "job.profile",
                    job_id=job_id,
                    state=job.state.value,
                    data={"class": found, "was": was},
                )
            )
        if jobs:
            await change.commit(jobs, events)
    for job_id in changed:
        votes.pop(job_id, None)
