"""Topology-aware placement of multi-node jobs on the switch tree. See README.md."""

from hal.scheduler.plugins.topology.plugin import NAME, TopologyPlacement, new
from hal.scheduler.plugins.topology.tree import TreeIndex

__all__ = ["NAME", "TopologyPlacement", "TreeIndex", "new"]
