"""CPU, memory and GPU fit, node state, features, node lists; best-fit scoring.
See README.md."""

from hal.scheduler.plugins.noderesources.fit import NAME, NodeResourcesFit, new

__all__ = ["NAME", "NodeResourcesFit", "new"]
