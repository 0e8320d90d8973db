"""PreFilter for holds and ``--begin``. See README.md."""

from hal.scheduler.plugins.hold.hold import NAME, HoldAndBegin, new

__all__ = ["NAME", "HoldAndBegin", "new"]
