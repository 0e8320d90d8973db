"""Cluster-wide licenses (``-L matlab:2``). See README.md."""

from hal.scheduler.plugins.licenses.plugin import NAME, Licenses, new

__all__ = ["NAME", "Licenses", "new"]
