"""The virtual cluster: nodes with resource vectors and topology labels, and how a trace
job's processor count becomes a ``JobSpec`` on it.

SWF counts processors. Each simulated node has ``cores_per_node`` CPUs; a job of ``p``
processors asks for ``ceil(p / cores)`` nodes and ``p`` tasks of one CPU, spread evenly
(Slurm's ``-n p -N ceil(p / cores)``). With one core per node (the SP2 machines) this is
exact; with more, a job whose size is not a multiple of the node may hold a few CPUs more
than it asked for (``ceil(p / nodes)`` per node), as on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.core.job import JobSpec
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector

PARTITION = "batch"


@dataclass(frozen=True, slots=True)
class ClusterModel:
    nodes: int
    cores_per_node: int = 1
    memory_per_core_bytes: int = 2 * GiB
    gpus_per_node: int = 0
    nodes_per_switch: int = 32  # topology label: (cluster, switch-N)

    @classmethod
    def for_procs(cls, procs: int, cores_per_node: int = 1) -> ClusterModel:
        """A machine with at least ``procs`` CPUs in whole nodes."""
        return cls(nodes=-(-procs // cores_per_node), cores_per_node=cores_per_node)

    @property
    def total_cpus(self) -> int:
        return self.nodes * self.cores_per_node

    def build_nodes(self) -> tuple[Node, ...]:
        res = ResourceVector(
            self.cores_per_node,
            self.cores_per_node * self.memory_per_core_bytes,
            self.gpus_per_node,
        )
        width = max(5, len(str(self.nodes)))
        switch = max(self.nodes_per_switch, 1)
        return tuple(
            Node(
                name=f"n{i:0{width}d}",
                resources=res,
                partitions=(PARTITION,),
                topology=("sim", f"switch-{i // switch}"),
            )
            for i in range(self.nodes)
        )

    def partitions(self) -> tuple[Partition, ...]:
        return (Partition(PARTITION, default=True),)

    def spec_for(self, procs: int, user: int) -> JobSpec:
        procs = min(max(procs, 1), self.total_cpus)
        n_nodes = -(-procs // self.cores_per_node)
        return JobSpec(
            user=f"u{user}",
            script="",
            partitions=(PARTITION,),
            nodes_min=n_nodes,
            nodes_max=n_nodes,
            ntasks=procs,
        )
