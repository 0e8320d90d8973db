"""What one job asks of each node, resolved for a node count, and the job's placement key.

``NodeRequest`` is the framework's own reading of ``JobSpec.request_per_node``: the
runtime needs it to build the ``Allocation`` it hands to Reserve, so it cannot live in a
plugin. Two rules Slurm users rely on are kept here:

* ``--mem=0`` asks for all of each node's memory, so the memory wanted differs per node
  (``memory_bytes is None`` here; ``on_node`` resolves it).
* ``--exclusive`` takes the whole node: the allocation records the node's full capacity,
  so no other job can be put there while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.core.job import Job, JobSpec
from hal.core.resources import ResourceVector
from hal.scheduler.framework.node_table import BoolArray, IntArray, NodeTable


@dataclass(frozen=True, slots=True)
class NodeRequest:
    n_nodes: int
    cpus: int
    memory_bytes: int | None  # None: the whole node's memory (--mem=0)
    gpus: int
    exclusive: bool = False

    @classmethod
    def for_job(cls, spec: JobSpec, n_nodes: int) -> NodeRequest:
        per_node = spec.request_per_node(n_nodes)
        whole_memory = spec.memory_per_node_bytes == 0
        return cls(
            n_nodes=n_nodes,
            cpus=per_node.cpus,
            memory_bytes=None if whole_memory else per_node.memory_bytes,
            gpus=per_node.gpus,
            exclusive=spec.exclusive,
        )

    def fits(
        self,
        cpus: IntArray,
        memory: IntArray,
        gpus: IntArray,
        jobs: IntArray,
        exclusive: IntArray,
        cap_memory: IntArray,
        within: BoolArray | None = None,
    ) -> BoolArray:
        """Which nodes could take this request, from their free ``cpus``, ``memory`` and
        ``gpus``, how many ``jobs`` and ``exclusive`` jobs hold them, and their memory
        (``--mem=0`` wants all of it free); ``within``: only these. The one fit rule the
        noderesources Filter, backfill's availability profile and the reservation plugin
        share. An array the request does not need is not read (it may be any length)."""
        fit: BoolArray = cpus >= self.cpus
        if within is not None:
            fit &= within
        if self.memory_bytes is None:
            fit &= memory >= cap_memory
        elif self.memory_bytes:
            fit &= memory >= self.memory_bytes
        if self.gpus:
            fit &= gpus >= self.gpus
        if self.exclusive:
            fit &= jobs == 0
        else:
            fit &= exclusive == 0
        return fit

    def on_node(self, table: NodeTable, row: int) -> ResourceVector:
        """What the job will hold on node ``row``."""
        if self.exclusive:
            return ResourceVector(
                int(table.cap_cpus[row]), int(table.cap_memory[row]), int(table.cap_gpus[row])
            )
        memory = int(table.cap_memory[row]) if self.memory_bytes is None else self.memory_bytes
        return ResourceVector(self.cpus, memory, self.gpus)


PlacementKey = tuple[object, ...]


def node_counts(spec: JobSpec, table: NodeTable) -> range:
    """The node counts a job may run on: ``nodes_min..nodes_max`` (at least its
    ``--nodelist``), and for a job without -N (``fewest_nodes``) none below what its
    CPUs need on the cluster's largest node (``-n 1000`` need not try 1..15 nodes of 64)."""
    lo = max(spec.nodes_min, len(spec.nodelist), 1)
    hi = max(spec.nodes_max, lo)
    if spec.fewest_nodes and len(table.cap_cpus):
        widest = max(int(table.cap_cpus.max()), 1)
        lo = max(lo, -(-spec.ntasks * spec.cpus_per_task // widest))
    return range(lo, hi + 1)


def placement_key(job: Job) -> PlacementKey:
    """Everything in a job that the default Filter plugins read.

    Jobs with equal keys (typically the elements of one array) fit on exactly the same
    nodes, so the pass computes a failed fit once per key instead of once per job, and
    plugins cache per-key work (static node masks) under it.
    """
    s = job.spec
    return (
        job.partition,
        s.nodes_min,
        s.nodes_max,
        s.ntasks,
        s.ntasks_per_node,
        s.cpus_per_task,
        s.memory_per_node_bytes,
        s.memory_per_cpu_bytes,
        s.memory_per_gpu_bytes,
        s.gpus_per_node,
        s.gpus_total,
        s.gpus_per_task,
        s.gpu_type,
        s.constraint,
        s.exclude,
        s.nodelist,
        s.exclusive,
        s.reservation,
        s.topology,  # --topology required=nvlink filters nodes
    )


ElementGroup = tuple[object, ...]


def element_group(job: Job) -> ElementGroup | None:
    """The pending elements of one array that no PreFilter plugin tells apart: the same
    array and spec (Slurm keeps them as one record), partition, time limit and holds.

    The main pass asks PreFilter about the first element of a group and gives the
    others the same answer until some job is placed (only Reserve changes what
    PreFilter reads). None for a job that is no array element, or whose dependency may
    pair elements by index (``aftercorr``). The spec is compared by identity: elements
    share one spec object, and an element changed on its own (``scontrol update``) gets
    its own.
    """
    spec = job.spec
    if job.array_job_id is None or spec.dependency is not None:
        return None
    return (
        job.array_job_id,
        id(spec),
        job.partition,
        job.time_limit_s,
        job.held_by_admin,
        job.array_max_running,
    )


def matching_nodes(table: NodeTable, job: Job) -> BoolArray:
    """The nodes of ``job``'s partition that carry its ``--constraint`` features and GPU
    type and that it does not ``--exclude``, whatever their state and load (a new array)."""
    spec = job.spec
    mask = table.partition_mask(job.partition).copy()
    for feature in spec.constraint:
        mask &= table.feature_mask(feature)
    if spec.typed_gpus is not None:
        mask &= table.gpu_type_mask(spec.typed_gpus)
    if spec.exclude:
        mask &= ~table.names_mask(spec.exclude)
    return mask


def big_enough(table: NodeTable, request: NodeRequest) -> BoolArray:
    """The nodes big enough for ``request`` when empty."""
    mask = table.cap_cpus >= request.cpus
    if request.memory_bytes:
        mask &= table.cap_memory >= request.memory_bytes
    if request.gpus:
        mask &= table.cap_gpus >= request.gpus
    return mask
