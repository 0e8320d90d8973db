"""Multifactor priority and fair share (classic or fair tree), as pure calculations.
See README.md."""

from hal.scheduler.plugins.multifactor.factors import (
    DEFAULT_QOS,
    Factors,
    MultifactorPriority,
    Weighted,
)
from hal.scheduler.plugins.multifactor.fairshare import ShareRow, ShareTree, Standing
from hal.scheduler.plugins.multifactor.fairtree import FairTree, fair_tree, level_fairshare
from hal.scheduler.plugins.multifactor.usage import (
    Assoc,
    UsageLedger,
    allocation_rate,
    billing_rate,
)

__all__ = [
    "DEFAULT_QOS",
    "Assoc",
    "Factors",
    "FairTree",
    "MultifactorPriority",
    "ShareRow",
    "ShareTree",
    "Standing",
    "UsageLedger",
    "Weighted",
    "allocation_rate",
    "billing_rate",
    "fair_tree",
    "level_fairshare",
]
