"""Partition state, limits and membership. See README.md."""

from hal.scheduler.plugins.partition.partition import NAME, PartitionLimits, new

__all__ = ["NAME", "PartitionLimits", "new"]
