"""The baseline predictors: ``user`` (the requested time) and ``perfect`` (the truth)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from hal.core.job import Job

# A job without a time limit (0 = unlimited) has no user estimate: plan with a year, which
# keeps it from ever looking like it ends inside a backfill window.
UNLIMITED_S = 365.0 * 86400.0
_LIMIT = attrgetter("time_limit_s")


class UserPredictor:
    """The user's requested time (``--time``): what EASY and conservative backfilling
    assume in the literature and what Slurm's backfill plans with."""

    name = "user"

    def predict(self, job: Job) -> float:
        return float(job.time_limit_s) if job.time_limit_s > 0 else UNLIMITED_S

    def planned_all(self, jobs: Sequence[Job]) -> npt.NDArray[np.float64]:
        """``planned_runtime(self, job)`` of each of ``jobs``, none started, at once (a
        busy queue's thousand jobs in one array, every pass): the time limit, a whole
        number of seconds, or ``UNLIMITED_S`` without one."""
        limits = np.fromiter(map(_LIMIT, jobs), dtype=np.float64, count=len(jobs))
        return np.where(limits > 0, limits, UNLIMITED_S)

    def observe(self, job: Job, runtime_s: float) -> None:
        return None


class PerfectPredictor:
    """The actual run time, known in advance: an upper bound on what any predictor can
    give. Only a simulator can build one (it knows every job's future). Jobs it has no
    run time for fall back to the requested time."""

    name = "perfect"

    def __init__(self, runtimes: Mapping[int, float]) -> None:
        self._runtimes = runtimes
        self._fallback = UserPredictor()

    def predict(self, job: Job) -> float:
        found = self._runtimes.get(job.id)
        return self._fallback.predict(job) if found is None else max(found, 1.0)

    def observe(self, job: Job, runtime_s: float) -> None:
        return None


def predictor_names() -> tuple[str, ...]:
    return ("user", "perfect", "avg2", "learned")
