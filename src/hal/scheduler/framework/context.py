"""``PassContext``: what every plugin call of one pass (or one what-if run) shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hal.core.job import Job
from hal.core.node import Partition
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.snapshot import ClusterSnapshot


@dataclass(slots=True)
class PassContext:
    """The snapshot, the node table being filled, and the pass-wide scratch space.

    ``now`` is the time decisions are made for: ``snapshot.now`` in the main pass, a
    future instant in will-run. ``running`` is the jobs still holding resources at
    ``now`` (in will-run, those whose expected end is later). Plugins never read a clock.
    """

    snapshot: ClusterSnapshot
    nodes: NodeTable
    now: float
    running: tuple[Job, ...]
    partitions: Mapping[str, Partition]
    data: CycleState = field(default_factory=CycleState)
    # while a placement is planned on a future window (backfill), the table of *now*:
    # Score may use it to break ties (see noderesources: reserve on nodes busy now)
    present_nodes: NodeTable | None = None

    @classmethod
    def from_snapshot(
        cls, snapshot: ClusterSnapshot, nodes: NodeTable | None = None
    ) -> PassContext:
        """``nodes``: a table the caller kept up to date itself (the simulator); it must
        equal ``NodeTable.build(snapshot.nodes, snapshot.partitions, snapshot.running)``
        and becomes the pass's own (it is written to)."""
        if nodes is None:
            nodes = NodeTable.build(snapshot.nodes, snapshot.partitions, snapshot.running)
        return cls(
            snapshot=snapshot,
            nodes=nodes,
            now=snapshot.now,
            running=snapshot.running,
            partitions={p.name: p for p in snapshot.partitions},
        )

    def fork(self, *, now: float, nodes: NodeTable, running: tuple[Job, ...]) -> PassContext:
        """A what-if context at another instant. Pass data starts empty: caches built
        for this context may depend on ``running``."""
        return PassContext(self.snapshot, nodes, now, running, self.partitions)
