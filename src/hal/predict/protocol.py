"""The ``Predictor`` protocol: one number per job, the seconds it is expected to run."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hal.core.job import Job


@runtime_checkable
class Predictor(Protocol):
    """Estimates run times for planning.

    ``predict`` is called by the backfill planner for every running and pending job it
    plans with, possibly many times per pass, so it must be cheap and pure (same job, same
    answer until ``observe`` is called). ``observe`` is told each finished job's actual run
    time, so that learned predictors can update online; baselines ignore it.
    """

    @property
    def name(self) -> str: ...

    def predict(self, job: Job) -> float:
        """Expected run time of ``job`` in seconds (> 0). May exceed nothing: callers
        clamp it to the job's time limit (see ``planned_runtime``)."""
        ...

    def observe(self, job: Job, runtime_s: float) -> None:
        """``job`` ended after ``runtime_s`` seconds of running."""
        ...


def planned_runtime(predictor: Predictor, job: Job) -> float:
    """The run time to plan with: the prediction, never beyond the time limit (the job is
    killed there), and at least one second (a zero-length job would occupy no slot)."""
    predicted = predictor.predict(job)
    limit = job.time_limit_s
    if limit > 0:
        predicted = min(predicted, float(limit))
    return max(predicted, 1.0)
