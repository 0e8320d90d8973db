"""Topology in the simulator: a synthetic switch tree or blocks for SWF traces and how
many leaf switches (base blocks) the multi-node jobs span.

``--topology leaf=16,levels=3`` gives the virtual cluster leaves of 16 nodes under
three switch levels in all (``ClusterModel.tree_levels``); ``--topology
block=16,levels=3`` gives it base blocks of 16 consecutive nodes and block sizes 16, 32
and 64 (Slurm's topology/block with ``BlockSizes=16,32,64``), and the summary counts
``mean_blocks_per_multinode_job`` instead. With ``aware=True`` the
policy's scheduler gets the ``topology`` plugin; with ``aware=False`` the nodes carry
the same paths but placement ignores them, which is the baseline the issue asks to
compare with. Either way the run records every placement and the summary gains
``mean_leaves_per_multinode_job`` (and ``multinode_jobs``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hal.core.errors import InvalidRequest
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.scheduler import PassResult, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins.topology import NAME as TOPOLOGY
from hal.scheduler.plugins.topology import TopologyPlacement
from hal.sim.cluster import ClusterModel

_SPEC_HINT = "write leaf=N,levels=L or block=N,levels=L, e.g. leaf=16,levels=3"


@dataclass(frozen=True, slots=True)
class TreeSpec:
    leaf: int  # nodes per leaf switch (or per base block)
    levels: int  # switch levels in all (1: leaves only); with blocks: block sizes in all
    blocks: bool = False  # topology/block: base blocks of ``leaf`` nodes

    @classmethod
    def parse(cls, text: str) -> TreeSpec:
        values: dict[str, int] = {}
        for part in text.split(","):
            key, eq, value = part.strip().partition("=")
            if key not in ("leaf", "block", "levels") or not eq or not value.isdigit():
                raise InvalidRequest(f"invalid --topology {text!r}; {_SPEC_HINT}", field="topology")
            values[key] = int(value)
        blocks = "block" in values
        size = values.get("block" if blocks else "leaf", 0)
        if ("leaf" in values and blocks) or size < 1 or values.get("levels", 0) < 1:
            raise InvalidRequest(f"invalid --topology {text!r}; {_SPEC_HINT}", field="topology")
        return cls(size, values["levels"], blocks)


class PlacementRecorder(Scheduler):
    """The same scheduler, remembering the nodes of every placement it plans."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner.profile)
        self.placed: dict[int, tuple[str, ...]] = {}

    def run_pass(
        self,
        snapshot: ClusterSnapshot,
        *,
        nodes: NodeTable | None = None,
        backfill: bool = True,
        explain: bool = True,
        updates: bool = True,
        time_plugins: bool = False,
        depth: int | None = None,
        max_starts: int | None = None,
    ) -> PassResult:
        result = super().run_pass(
            snapshot,
            nodes=nodes,
            backfill=backfill,
            explain=explain,
            updates=updates,
            time_plugins=time_plugins,
            depth=depth,
            max_starts=max_starts,
        )
        for p in result.plan.placements:
            self.placed[p.job_id] = p.allocation.nodes
        return result


def with_topology(
    cluster: ClusterModel, scheduler: Scheduler, spec: str, *, aware: bool = True
) -> tuple[ClusterModel, PlacementRecorder]:
    """The cluster with a synthetic tree, and the scheduler (with the topology plugin
    when ``aware``) wrapped to record placements."""
    tree = TreeSpec.parse(spec)
    if tree.blocks:
        cluster = replace(cluster, block_size=tree.leaf, block_levels=tree.levels)
    else:
        cluster = replace(cluster, nodes_per_switch=tree.leaf, tree_levels=tree.levels)
    profile = scheduler.profile
    others = tuple(p for p in profile.pre_filter if p.name != TOPOLOGY)
    if aware:  # the default profile has the plugin; a custom one may not
        plugin = TopologyPlacement()
        profile = replace(profile, pre_filter=(*others, plugin), placement_generate=plugin)
    elif isinstance(profile.placement_generate, TopologyPlacement):
        profile = replace(profile, pre_filter=others, placement_generate=None)
    scheduler = Scheduler(profile)
    return cluster, PlacementRecorder(scheduler)


def leaf_summary(cluster: ClusterModel, recorder: PlacementRecorder) -> dict[str, Any]:
    """Mean leaf switches (base blocks, with blocks) spanned per multi-node job (0.0
    when there were none)."""
    leaf = {n.name: n.topology[-1] if n.topology else n.name for n in cluster.build_nodes()}
    spans = [len({leaf[n] for n in nodes}) for nodes in recorder.placed.values() if len(nodes) > 1]
    what = "blocks" if cluster.block_size > 0 else "leaves"
    return {
        "multinode_jobs": len(spans),
        f"mean_{what}_per_multinode_job": sum(spans) / len(spans) if spans else 0.0,
    }


SPAN_KEYS = ("mean_leaves_per_multinode_job", "mean_blocks_per_multinode_job")
