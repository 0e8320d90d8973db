"""Harmonic placement: jobs near the running jobs they talk to. See README.md."""

from hal.scheduler.plugins.harmonic.plugin import NAME, HarmonicPlacement, new

__all__ = ["NAME", "HarmonicPlacement", "new"]
