"""The simulator with a synthetic switch tree: leaves spanned per multi-node job, with
and without topology-aware placement."""

from __future__ import annotations

from typing import Any

import pytest

from hal.core.errors import InvalidRequest
from hal.sim import SimOptions, run_trace
from hal.sim.cluster import ClusterModel
from hal.sim.topology import TreeSpec

# 8 single-CPU nodes in two leaves of 4. Job 1 takes 3 nodes (n0-n2); job 2 (2 nodes)
# arrives while it runs: row order gives it n3 and n4 (two leaves), topology the
# second leaf (one).
TRACE = [(1, 0, 100, 3, 100), (2, 1, 100, 2, 100)]


@pytest.mark.parametrize(("aware", "mean"), [(True, 1.0), (False, 1.5)])
def test_mean_leaves_per_multinode_job(write_trace: Any, aware: bool, mean: float) -> None:
    path = write_trace(TRACE, procs=8)
    options = SimOptions(policy="fcfs", topology="leaf=4,levels=2", topology_aware=aware)
    _, summary = run_trace(path, options)
    assert summary["multinode_jobs"] == 2
    assert summary["mean_leaves_per_multinode_job"] == mean
    assert summary["topology_aware"] is aware


def test_no_topology_no_leaf_keys(write_trace: Any) -> None:
    _, summary = run_trace(write_trace(TRACE, procs=8), SimOptions(policy="fcfs"))
    assert "mean_leaves_per_multinode_job" not in summary


def test_synthetic_tree_paths_on_the_virtual_cluster() -> None:
    nodes = ClusterModel(nodes=40, nodes_per_switch=4, tree_levels=3).build_nodes()
    assert {len(n.topology) for n in nodes} == {3}
    assert nodes[0].topology[-1] == nodes[3].topology[-1] != nodes[4].topology[-1]
    assert ClusterModel(nodes=4).build_nodes()[0].topology == ("sim", "switch-0")


@pytest.mark.parametrize(
    "text", ["leaf=16", "levels=3", "leaf=0,levels=2", "leaf=x,levels=2", "rack=4"]
)
def test_bad_tree_specs(text: str) -> None:
    with pytest.raises(InvalidRequest, match="leaf=N,levels=L"):
        TreeSpec.parse(text)
