"""EASY and conservative backfill, per partition. See README.md."""

from hal.scheduler.plugins.backfill.plugin import NAME, Backfill, new

__all__ = ["NAME", "Backfill", "new"]
