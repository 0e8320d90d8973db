"""Slurm's multifactor job priority::

    priority = site
             + weight_age       · age          (time eligible / max_age, at most 1)
             + weight_fairshare · fairshare    (the user's fair-share factor, see fairshare)
             + weight_job_size  · job_size     (mean of the node and CPU shares of the cluster
                                                asked for; favor_small turns it around)
             + weight_partition · partition    (PriorityJobFactor / the largest one)
             + weight_qos       · qos          (QoS priority / the largest one)
             − nice

Each factor is in [0, 1]; the weighted ones are what ``sprio`` prints. The result is
rounded and at least 1 (0 means held in Slurm). A job whose priority an administrator set
keeps it: the calculation is not applied to it at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hal.core.job import Job
from hal.core.node import Partition
from hal.core.priority import PriorityPolicy

DEFAULT_QOS = "normal"


@dataclass(frozen=True, slots=True)
class Factors:
    """The normalised factors of one job (each in [0, 1]) and its nice value."""

    age: float = 0.0
    fairshare: float = 0.0
    job_size: float = 0.0
    partition: float = 0.0
    qos: float = 0.0
    nice: int = 0
    site: int = 0


@dataclass(frozen=True, slots=True)
class Weighted:
    """The factors times their weights, as ``sprio`` prints them, and the priority."""

    priority: int
    site: int
    age: float
    fairshare: float
    job_size: float
    partition: float
    qos: float
    nice: int


class MultifactorPriority:
    """Pure: the same job, time, cluster size and fair-share factor give the same
    priority. Build one per configuration; ``cluster_size`` changes with the nodes."""

    def __init__(self, policy: PriorityPolicy, partitions: Sequence[Partition]) -> None:
        self.policy = policy
        top = max((p.priority_job_factor for p in partitions), default=0)
        self._partition = {
            p.name: (p.priority_job_factor / top if top > 0 else 0.0) for p in partitions
        }
        top_qos = max((q.priority for q in policy.qos), default=0)
        self._qos = {q.name: (q.priority / top_qos if top_qos > 0 else 0.0) for q in policy.qos}

    def factors(
        self, job: Job, now: float, fairshare: float, cluster_size: tuple[int, int]
    ) -> Factors:
        """``cluster_size`` is (nodes, CPUs) of the whole cluster (job size factor)."""
        spec = job.spec
        max_age = self.policy.max_age_s
        waited = max(now - job.eligible_since(now), 0.0)
        age = min(waited / max_age, 1.0) if max_age > 0 else 1.0
        nodes, cpus = cluster_size
        wanted_nodes = max(spec.nodes_min, 1)
        wanted_cpus = spec.cpus_per_node(wanted_nodes) * wanted_nodes
        # as Slurm's (priority/multifactor without SMALL_RELATIVE_TO_TIME): the mean of
        # the node and the CPU shares (1 CPU of 4 on the one node: 0.625, checked against
        # Slurm 22.05.8, docs/slurm-checks.md)
        node_share = min(wanted_nodes / nodes, 1.0) if nodes > 0 else 0.0
        cpu_share = min(wanted_cpus / cpus, 1.0) if cpus > 0 else 0.0
        fraction = (node_share + cpu_share) / 2
        size = 1.0 - fraction if self.policy.favor_small else fraction
        return Factors(
            age=age,
            fairshare=min(max(fairshare, 0.0), 1.0),
            job_size=size,
            partition=self._partition.get(job.partition, 0.0),
            qos=self._qos.get(spec.qos or DEFAULT_QOS, 0.0),
            nice=spec.nice,
        )

    def weigh(self, f: Factors) -> Weighted:
        p = self.policy
        age = p.weight_age * f.age
        fairshare = p.weight_fairshare * f.fairshare
        size = p.weight_job_size * f.job_size
        partition = p.weight_partition * f.partition
        qos = p.weight_qos * f.qos
        total = round(f.site + age + fairshare + size + partition + qos) - f.nice
        return Weighted(max(total, 1), f.site, age, fairshare, size, partition, qos, f.nice)
