"""The ``--array=...%N`` concurrency limit. See README.md."""

from hal.scheduler.plugins.arraythrottle.throttle import NAME, ArrayThrottle, new

__all__ = ["NAME", "ArrayThrottle", "new"]
