"""QueueSort by priority. See README.md."""

from hal.scheduler.plugins.priority.sort import NAME, PrioritySort, new

__all__ = ["NAME", "PrioritySort", "new"]
