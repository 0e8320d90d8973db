"""``--exclusive=user``: nodes shared only with the same user's jobs. See README.md."""

from hal.scheduler.plugins.exclusiveuser.plugin import NAME, ExclusiveUser, new

__all__ = ["NAME", "ExclusiveUser", "new"]
