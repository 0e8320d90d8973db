"""Topology in the simulator: a synthetic switch tree for SWF traces and how many leaf
switches the multi-node jobs span.

``--topology leaf=16,levels=3`` gives the virtual cluster leaves of 16 nodes under
three switch levels in all (``ClusterModel.tree_levels``). With ``aware=True`` the
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
from hal.scheduler.plugins.topology import TopologyPlacement
from hal.sim.cluster import ClusterModel

_SPEC_HINT = "write leaf=N,levels=L, e.g. leaf=16,levels=3"


@dataclass(frozen=True, slots=True)
class TreeSpec:
    leaf: int  # nodes per leaf switch
    levels: int  # switch levels in all (1: leaves only)

    @classmethod
    def parse(cls, text: str) -> TreeSpec:
        values: dict[str, int] = {}
        for part in text.split(","):
            key, eq, value = part.strip().partition("=")
            if key not in ("leaf", "levels") or not eq or not value.isdigit():
                raise InvalidRequest(f"invalid --topology {text!r}; {_SPEC_HINT}", field="topology")
            values[key] = int(value)
        if values.get("leaf", 0) < 1 or values.get("levels", 0) < 1:
            raise InvalidRequest(f"invalid --topology {text!r}; {_SPEC_HINT}", field="topology")
        return cls(values["leaf"], values["levels"])


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
    ) -> PassResult:
        result = super().run_pass(snapshot, nodes=nodes, backfill=backfill, explain=explain)
        for p in result.plan.placements:
            self.placed[p.job_id] = p.allocation.nodes
        return result


def with_topology(
    cluster: ClusterModel, scheduler: Scheduler, spec: str, *, aware: bool = True
) -> tuple[ClusterModel, PlacementRecorder]:
    """The cluster with a synthetic tree, and the scheduler (with the topology plugin
    when ``aware``) wrapped to record placements."""
    tree = TreeSpec.parse(spec)
    cluster = replace(cluster, nodes_per_switch=tree.leaf, tree_levels=tree.levels)
    if aware:
        plugin = TopologyPlacement()
        profile = scheduler.profile
        scheduler = Scheduler(
            replace(profile, pre_filter=(*profile.pre_filter, plugin), placement_generate=plugin)
        )
    return cluster, PlacementRecorder(scheduler)


def leaf_summary(cluster: ClusterModel, recorder: PlacementRecorder) -> dict[str, Any]:
    """Mean leaf switches spanned per multi-node job (0.0 when there were none)."""
    leaf = {n.name: n.topology[-1] if n.topology else n.name for n in cluster.build_nodes()}
    spans = [len({leaf[n] for n in nodes}) for nodes in recorder.placed.values() if len(nodes) > 1]
    return {
        "multinode_jobs": len(spans),
        "mean_leaves_per_multinode_job": sum(spans) / len(spans) if spans else 0.0,
    }
