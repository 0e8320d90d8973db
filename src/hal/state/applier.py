"""The plan applier: re-check a scheduler plan against the latest state before committing.

The scheduler works on a snapshot that may be stale by the time its plan arrives (a job was
cancelled, a node went down, an agent reported a finish that freed room). Like Nomad's plan
applier, we re-validate every placement against the current mirror and accept only those
that still fit; rejected ones simply stay pending and the next cycle retries them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hal.core.job import Job
from hal.core.node import Node, Partition
from hal.core.partition_list import partitions_of
from hal.core.preemption import holding
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement


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


def check_placement(
    placement: Placement,
    jobs: Mapping[int, Job],
    nodes: Mapping[str, Node],
    usage: Mapping[str, NodeUsage],
    partitions: Mapping[str, Partition] | None = None,
) -> str | None:
    """``None`` when the placement still fits; otherwise why it was rejected.
    ``partitions``: the partition it starts in (``Placement.partition``, one of the
    job's) must hold every node (it may have been moved to another since the pass read
    it)."""
    job = jobs.get(placement.job_id)
    if job is None or job.state is not JobState.PENDING:
        return "job is no longer pending"
    if job.held:  # held since the pass read it
        return "job is held"
    lowered = placement.time_limit_s  # backfill's, within --time-min
    if lowered is not None and not (job.spec.time_min_s or 0) <= lowered < (
        job.time_limit_s or lowered + 1
    ):
        return "time limit or time-min changed since the pass"  # lowered again next
    alloc = placement.allocation
    if not alloc.nodes or len(alloc.nodes) != len(alloc.per_node):
        return "malformed allocation"
    if len(set(alloc.nodes)) != len(alloc.nodes):
        return "node listed twice"
    where = placement.partition or job.partition
    if where not in partitions_of(job):
        return f"job is no longer queued in partition {where}"
    partition = partitions.get(where) if partitions is not None else None
    if partition is not None:
        outside = [name for name in alloc.nodes if not partition.contains(name)]
        if outside:
            return f"node {outside[0]} is not in partition {where}"
    for i, name in enumerate(alloc.nodes):
        node = nodes.get(name)
        if node is None or not node.schedulable:
            return f"node {name} is not available"
        used = usage.get(name, NodeUsage())
        if used.exclusive or (job.spec.exclusive and used.jobs):
            return f"node {name} is not free for an exclusive allocation"
        want = alloc.per_node[i]
        if not (used.allocated + want).fits_in(node.resources):
            return f"node {name} no longer has room"
        if i < len(alloc.gpu_ids):
            ids = set(alloc.gpu_ids[i])
            if ids & used.gpu_ids or any(g >= node.resources.gpus or g < 0 for g in ids):
                return f"GPUs on node {name} are taken"
    return None


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


def release(usage: dict[str, NodeUsage], job: Job) -> None:
    """Give back what ``hold`` accounted for this version of ``job``."""
    alloc, exclusive = holding(job)
    if alloc is None:
        return
    for i, name in enumerate(alloc.nodes):
        u = usage.get(name)
        if u is None or job.id not in u.jobs:
            continue
        u.allocated = u.allocated - alloc.per_node[i]
        u.jobs.discard(job.id)
        u.released_at = max(u.released_at, job.end_time or 0.0)
        if exclusive:
            u.exclusive = False
        if i < len(alloc.gpu_ids):
            u.gpu_ids.difference_update(alloc.gpu_ids[i])
