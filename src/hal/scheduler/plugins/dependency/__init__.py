"""``--dependency`` and ``--kill-on-invalid-dep``. See README.md."""

from hal.scheduler.plugins.dependency.dependency import NAME, DependencyCheck, new

__all__ = ["NAME", "DependencyCheck", "new"]
