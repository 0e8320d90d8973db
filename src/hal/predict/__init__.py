"""Runtime predictors: how long a job is expected to run, for planning only.

Owns the ``Predictor`` protocol, the expiry correction every predictor shares, and the
predictors: ``user`` (the requested time), ``perfect`` (the true run time, known only to a
simulator), ``avg2`` (Tsafrir's average of the user's last two jobs) and ``learned``
(gradient-boosted trees trained online, calibrated); ``PinnedPredictor`` keeps a started
job's prediction fixed and applies the expiry correction. ``make_predictor`` builds the
configurable ones by name, ``planning_predictor`` the planning policy (a predictor and its
correction, by name) that both the server and the simulator plan with;
``SharedPredictor`` lets the server's threads share one;
``hal.predict.anomaly`` holds the pure anomaly rules (overrunning jobs, failing nodes).

Imports ``hal.core`` only: the scheduler's plugins import this package's protocol, so it
must not import the scheduler, state or anything with I/O.

A prediction never shortens a job's life: jobs are killed at their requested time, not at
their predicted end. Predictions only move planned start times (backfill, ``squeue
--start``).
"""

from hal.predict.avg2 import Avg2Predictor
from hal.predict.baselines import PerfectPredictor, UserPredictor, predictor_names
from hal.predict.learned import LearnedPredictor
from hal.predict.pinned import PinnedPredictor
from hal.predict.protocol import (
    CORRECTION_STEPS_S,
    BatchPredictor,
    ExpiryPredictor,
    Predictor,
    corrected,
    planned_runtime,
)
from hal.predict.registry import (
    CONFIGURABLE,
    CORRECTIONS,
    effective_correction,
    make_predictor,
    planning_predictor,
)
from hal.predict.shared import SharedPredictor

__all__ = [
    "CONFIGURABLE",
    "CORRECTIONS",
    "CORRECTION_STEPS_S",
    "Avg2Predictor",
    "BatchPredictor",
    "ExpiryPredictor",
    "LearnedPredictor",
    "PerfectPredictor",
    "PinnedPredictor",
    "Predictor",
    "SharedPredictor",
    "UserPredictor",
    "corrected",
    "effective_correction",
    "make_predictor",
    "planned_runtime",
    "planning_predictor",
    "predictor_names",
]
