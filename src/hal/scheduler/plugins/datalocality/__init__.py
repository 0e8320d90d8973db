"""Data locality: prefer nodes whose cache already holds the job's inputs. See README.md."""

from hal.scheduler.plugins.datalocality.plugin import NAME, DataLocality, new

__all__ = ["NAME", "DataLocality", "new"]
