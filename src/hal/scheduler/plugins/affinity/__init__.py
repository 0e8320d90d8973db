"""``--near`` and ``--apart``: declared placement rules between jobs. See README.md."""

from hal.scheduler.plugins.affinity.plugin import AFFINITY_WEIGHT, NAME, Affinity, new

__all__ = ["AFFINITY_WEIGHT", "NAME", "Affinity", "new"]
