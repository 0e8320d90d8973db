"""Account and QoS limits (Slurm's ``AccountingStorageEnforce=limits``). See README.md."""

from hal.scheduler.plugins.limits.limits import NAME, Limits, new

__all__ = ["NAME", "Limits", "new"]
