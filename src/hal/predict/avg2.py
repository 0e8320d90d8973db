"""``avg2``: Tsafrir, Etsion and Feitelson's predictor (2007). A job is expected to run as
long as the average of its user's last two completed jobs, never longer than it asked
for; a user with no history gets the requested time. With shortest-job-first backfilling
(``easy-sjbf``) this is the literature's EASY++.

Stepwise correction when a job outlives its prediction is shared by every predictor
(``hal.predict.protocol.corrected``).
"""

from __future__ import annotations

from collections import deque

from hal.core.job import Job
from hal.predict.baselines import UserPredictor


class Avg2Predictor:
    name = "avg2"

    def __init__(self, history: int = 2) -> None:
        self._history = history
        self._runs: dict[str, deque[float]] = {}
        self._fallback = UserPredictor()

    def predict(self, job: Job) -> float:
        requested = self._fallback.predict(job)
        runs = self._runs.get(job.spec.user)
        if not runs:
            return requested
        return max(min(sum(runs) / len(runs), requested), 1.0)

    def observe(self, job: Job, runtime_s: float) -> None:
        runs = self._runs.get(job.spec.user)
        if runs is None:
            runs = self._runs[job.spec.user] = deque(maxlen=self._history)
        runs.append(max(runtime_s, 0.0))
