"""What the autoscaler and power saving both ask of the cluster: a job's partitions, and
how many of its nodes could take the job's share now."""

from __future__ import annotations

from collections.abc import Callable, Container

from hal.core.job import Job, JobSpec
from hal.core.node import Node, Partition
from hal.core.resources import ResourceVector
from hal.state.cluster import Cluster


def job_partitions(cluster: Cluster, job: Job) -> tuple[Partition, ...]:
    """The partitions a pending job may run in (its own list, else the default)."""
    names = job.partition.split(",") if job.partition else list(job.spec.partitions)
    known = cluster.partitions
    return tuple(known[n] for n in names or [cluster.default_partition()] if n in known)


def nodes_with_room(
    cluster: Cluster,
    spec: JobSpec,
    partitions: tuple[Partition, ...],
    holds: Callable[[JobSpec, Node, ResourceVector], bool],
    skip: Container[str] = (),
) -> int:
    """The schedulable nodes of ``partitions`` (not ``skip``ped nor excluded by the job)
    whose free part ``holds`` the job's share now."""
    count = 0
    for node in cluster.nodes.values():
        if node.name in skip or not node.schedulable or node.name in spec.exclude:
            continue
        if not any(p.contains(node.name) for p in partitions):
            continue
        usage = cluster.usage.get(node.name)
        if usage is not None and (usage.exclusive or (spec.exclusive and usage.jobs)):
            continue
        free = node.resources - (usage.allocated if usage else ResourceVector())
        if holds(spec, node, free):
            count += 1
    return count
