"""The ``Predictor`` protocol: one number per job, the seconds it is expected to run,
and the one rule every predictor shares when a job outlives its prediction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from hal.core.job import Job

# Tsafrir, Etsion and Feitelson's correction: a job still running at its predicted end is
# given the original prediction plus the first of these steps that takes it past now.
CORRECTION_STEPS_S = (
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    18_000.0,
    36_000.0,
    72_000.0,
    180_000.0,
    360_000.0,
)


@runtime_checkable
class Predictor(Protocol):
    """Estimates run times for planning.

    ``predict`` is called by the backfill planner for every running and pending job it
    plans with, possibly many times per pass, so it must be cheap and pure (same job, same
    answer until ``observe`` is called). ``observe`` is told each finished job's actual run
    time, so that learned predictors can update online; baselines ignore it. The job given
    to ``observe`` carries its final state (COMPLETED, FAILED, TIMEOUT, ...).
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


@runtime_checkable
class BatchPredictor(Predictor, Protocol):
    """A predictor that is cheaper per job when asked about many at once (a model call
    has a fixed cost). The backfill planner calls ``prepare`` with every job of a stage
    before asking ``predict`` about them one by one."""

    def prepare(self, jobs: Sequence[Job]) -> None: ...


@runtime_checkable
class ExpiryPredictor(Predictor, Protocol):
    """A predictor with its own expiry correction (``learned``): when a running job
    outlives its plan, ``extended`` re-predicts it knowing that it has already run
    ``elapsed_s``, instead of the stepwise rule. ``first_s`` is the prediction the job
    started with. The answer is a run time from the job's start, greater than
    ``elapsed_s`` and at most the time limit."""

    def extended(self, job: Job, first_s: float, elapsed_s: float) -> float: ...


def corrected(predicted: float, elapsed_s: float, limit_s: float) -> float:
    """``predicted`` for a job that has run ``elapsed_s`` so far: unchanged while the job
    is inside it, else extended by the first correction step that reaches past now, and
    never beyond the time limit (``limit_s`` > 0) where the job will be killed anyway."""
    if elapsed_s < predicted:
        return predicted
    for step in CORRECTION_STEPS_S:
        if predicted + step > elapsed_s:
            predicted += step
            break
    else:
        predicted = elapsed_s + CORRECTION_STEPS_S[-1]
    return min(predicted, limit_s) if limit_s > 0 else predicted


def planned_runtime(predictor: Predictor, job: Job, elapsed_s: float = 0.0) -> float:
    """The run time to plan with, from the job's start: the prediction (corrected when a
    running job has outlived it, see ``corrected``), never beyond the time limit (the job
    is killed there), and at least one second (a zero-length job would occupy no slot)."""
    predicted = predictor.predict(job)
    limit = float(job.time_limit_s)
    if limit > 0:
        predicted = min(predicted, limit)
    if elapsed_s > 0:
        predicted = corrected(predicted, elapsed_s, limit)
    return max(predicted, 1.0)
