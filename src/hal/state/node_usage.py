"""What running jobs hold on each node (``NodeUsage``), kept by the mirror as jobs start,
are suspended for preemption, resume and end (``hold``, ``release``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hal.core.job import Job
from hal.core.preemption import holding
from hal.core.resources import ResourceVector


@dataclass(slots=True)
class NodeUsage:
    """What running jobs hold on one node."""

    allocated: ResourceVector = field(default_factory=ResourceVector)
    gpu_ids: set[int] = field(default_factory=set)
    jobs: set[int] = field(default_factory=set)
    exclusive: bool = False
    # when its last job to go ended (0: none since the server started): [cloud] counts a
    # node idle from then, though no pass saw a job shorter than its interval
    released_at: float = 0.0


def hold(usage: dict[str, NodeUsage], job: Job) -> None:
    """Account what ``job`` holds on its nodes (``hal.core.preemption.holding``: all its
    allocation, but no CPUs while it is suspended by preemption)."""
    alloc, exclusive = holding(job)
    if alloc is None:
        return
    for i, name in enumerate(alloc.nodes):
        u = usage.setdefault(name, NodeUsage())
        u.allocated = u.allocated + alloc.per_node[i]
        u.jobs.add(job.id)
        if exclusive:
            u.exclusive = True
        if i < len(alloc.gpu_ids):
            u.gpu_ids.update(alloc.gpu_ids[i])


def release(usage: dict[str, NodeUsage], job: Job, ended_at: float = 0.0) -> None:
    """Give back what ``hold`` accounted for this version of ``job``; ``ended_at``: when
    the job ended (its next version's end time; 0: it did not end, e.g. suspended)."""
    alloc, exclusive = holding(job)
    if alloc is None:
        return
    for i, name in enumerate(alloc.nodes):
        u = usage.get(name)
        if u is None or job.id not in u.jobs:
            continue
        u.allocated = u.allocated - alloc.per_node[i]
        u.jobs.discard(job.id)
        u.released_at = max(u.released_at, ended_at)
        if exclusive:
            u.exclusive = False
        if i < len(alloc.gpu_ids):
            u.gpu_ids.difference_update(alloc.gpu_ids[i])
