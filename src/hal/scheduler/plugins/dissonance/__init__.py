"""Dissonance: keep work that clashes off one node. See README.md."""

from hal.scheduler.plugins.dissonance.plugin import NAME, Dissonance, new

__all__ = ["NAME", "Dissonance", "new"]
