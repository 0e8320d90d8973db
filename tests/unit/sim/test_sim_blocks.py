"""The simulator with synthetic blocks (``--topology block=N,levels=L``): block paths on
the virtual cluster, and base blocks spanned per multi-node job with and without
topology-aware placement; plain runs keep node-score placement."""

from __future__ import annotations

from typing import Any

import pytest

from hal.core.errors import InvalidRequest
from hal.core.topology import BLOCK_ROOT
from hal.sim import SimOptions, run_trace
from hal.sim.cluster import ClusterModel
from hal.sim.policies import profile_config
from hal.sim.topology import TreeSpec

# 8 single-CPU nodes in two blocks of 4. Job 1 takes 3 nodes; job 2 (2 nodes) arrives
# while it runs: row order gives it n3 and n4 (two blocks), block placement b1 (one).
TRACE = [(1, 0, 100, 3, 100), (2, 1, 100, 2, 100)]


@pytest.mark.parametrize(("aware", "mean"), [(True, 1.0), (False, 1.5)])
def test_mean_blocks_per_multinode_job(write_trace: Any, aware: bool, mean: float) -> None:
    path = write_trace(TRACE, procs=8)
    options = SimOptions(policy="fcfs", topology="block=4,levels=2", topology_aware=aware)
    _, summary = run_trace(path, options)
    assert summary["multinode_jobs"] == 2
    assert summary["mean_blocks_per_multinode_job"] == mean
    assert "mean_leaves_per_multinode_job" not in summary


def test_block_paths_on_the_virtual_cluster() -> None:
    """Base blocks of 4, aggregated by 2 and 4 (block sizes 4, 8, 16)."""
    nodes = ClusterModel(nodes=16, block_size=4, block_levels=3).build_nodes()
    assert nodes[0].topology == (BLOCK_ROOT, "b0..b3", "b0..b1", "b0")
    assert nodes[5].topology == (BLOCK_ROOT, "b0..b3", "b0..b1", "b1")
    assert nodes[12].topology[-2:] == ("b2..b3", "b3")


@pytest.mark.parametrize(
    ("text", "spec"),
    [("block=16,levels=3", TreeSpec(16, 3, True)), ("leaf=8,levels=2", TreeSpec(8, 2, False))],
)
def test_parse(text: str, spec: TreeSpec) -> None:
    assert TreeSpec.parse(text) == spec


@pytest.mark.parametrize("text", ["block=16", "block=0,levels=2", "block=4,leaf=4,levels=2"])
def test_bad_specs_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="block=N,levels=L"):
        TreeSpec.parse(text)


def test_plain_simulator_profiles_leave_the_topology_plugin_out() -> None:
    """The virtual nodes carry synthetic switch paths; only --topology places on them."""
    assert "topology" not in profile_config("easy")["plugins"]  # type: ignore[operator]
