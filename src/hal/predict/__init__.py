"""Runtime predictors: how long a job is expected to run, for planning only.

Owns the ``Predictor`` protocol and the baseline predictors (``user``: the requested time;
``perfect``: the true run time, known only to a simulator). Learned predictors arrive
later behind the same protocol. Imports ``hal.core`` only: the scheduler's plugins import
this package's protocol, so it must not import the scheduler, state or anything with I/O.

A prediction never shortens a job's life: jobs are killed at their requested time, not at
their predicted end. Predictions only move planned start times (backfill, ``squeue
--start``).
"""

from hal.predict.baselines import PerfectPredictor, UserPredictor, predictor_names
from hal.predict.protocol import Predictor, planned_runtime

__all__ = ["PerfectPredictor", "Predictor", "UserPredictor", "planned_runtime", "predictor_names"]
