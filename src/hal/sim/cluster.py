"""The virtual cluster: nodes with resource vectors and topology labels, and how a trace
job's processor count becomes a ``JobSpec`` on it.

SWF counts processors. Each simulated node has ``cores_per_node`` CPUs; a job of ``p``
processors asks for ``ceil(p / cores)`` nodes and ``p`` tasks of one CPU, spread evenly
(Slurm's ``-n p -N ceil(p / cores)``). With one core per node (the SP2 machines) this is
exact; with more, a job whose size is not a multiple of the node may hold a few CPUs more
than it asked for (``ceil(p / nodes)`` per node), as on a real cluster.

Topology: by default each node is labelled ``("sim", "switch-N")`` with
``nodes_per_switch`` nodes a switch. With ``tree_levels > 0`` the nodes get paths in a
balanced synthetic switch tree instead (``hal.core.topology.synthetic_tree``: leaves of
``nodes_per_switch`` nodes, ``tree_levels`` switch levels), which the topology plugin
places on.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.core.node import Node, Partition
from hal.core.resources import GiB, ResourceVector
from hal.core.topology import Block, Topology, synthetic_tree

PARTITION = "batch"


@dataclass(frozen=True, slots=True)
class ClusterModel:
    nodes: int
    cores_per_node: int = 1
    memory_per_core_bytes: int = 2 * GiB
    gpus_per_node: int = 0
    nodes_per_switch: int = 32  # topology label: (cluster, switch-N); a leaf's size
    tree_levels: int = 0  # > 0: a synthetic switch tree of this many levels
    block_size: int = 0  # > 0: base blocks of this many nodes (topology/block) instead
    block_levels: int = 1  # block sizes in all: block_size * 1, 2, 4 ... (aggregations)

    def __post_init__(self) -> None:
        if self.cores_per_node < 1:
            raise InvalidRequest(
                f"--cores-per-node must be 1 or more, not {self.cores_per_node}"
                " (SP2 traces: 1; CEA-Curie: 16)"
            )
        if self.nodes < 1:
            raise InvalidRequest(f"a simulated cluster needs 1 node or more, not {self.nodes}")

    @classmethod
    def for_procs(cls, procs: int, cores_per_node: int = 1) -> ClusterModel:
        """A machine of exactly ``procs`` CPUs in whole nodes: nodes that do not fill it
        exactly are refused (rounding up gave a bigger machine than the one named, its
        utilisation measured against CPUs the trace never had)."""
        # (max: the constructor, not a division by zero, refuses a count below 1)
        model = cls(nodes=-(-procs // max(cores_per_node, 1)), cores_per_node=cores_per_node)
        if model.total_cpus != procs:
            lower = procs - procs % cores_per_node
            sizes = f"{lower} or {model.total_cpus}" if lower else str(model.total_cpus)
            raise InvalidRequest(
                f"--cores-per-node {cores_per_node} does not divide the machine's {procs}"
                f" processors (--procs, else the header's MaxProcs): give --procs {sizes}",
                field="cores_per_node",
            )
        return model

    @property
    def total_cpus(self) -> int:
        return self.nodes * self.cores_per_node

    def build_nodes(self) -> tuple[Node, ...]:
        res = ResourceVector(
            self.cores_per_node,
            self.cores_per_node * self.memory_per_core_bytes,
            self.gpus_per_node,
        )
        names = self.node_names()
        tree = self.topology()
        switch = max(self.nodes_per_switch, 1)
        return tuple(
            Node(
                name=name,
                resources=res,
                partitions=(PARTITION,),
                topology=(
                    tree.path_of(name) if tree is not None else ("sim", f"switch-{i // switch}")
                ),
            )
            for i, name in enumerate(names)
        )

    def node_names(self) -> list[str]:
        width = max(5, len(str(self.nodes)))
        return [f"n{i:0{width}d}" for i in range(self.nodes)]

    def topology(self) -> Topology | None:
        """The synthetic switch tree or blocks (None unless ``tree_levels`` or
        ``block_size`` > 0)."""
        if self.block_size > 0:
            names = self.node_names()
            size = self.block_size
            blocks = tuple(
                Block(f"b{i // size}", tuple(names[i : i + size]))
                for i in range(0, len(names), size)
            )
            sizes = tuple(size * 2**k for k in range(max(self.block_levels, 1)))
            return Topology(blocks=blocks, block_sizes=sizes)
        if self.tree_levels <= 0:
            return None
        return synthetic_tree(self.node_names(), max(self.nodes_per_switch, 1), self.tree_levels)

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
