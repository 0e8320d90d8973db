"""Predictors by name: what ``[scheduler] predictor`` in ``hal.toml``, the backfill
plugin's ``predictor`` argument and ``hal predict eval --predictors`` may name.

``perfect`` is not among them: it needs every job's true run time in advance, which only a
simulator has (the simulator builds it itself).
"""

from __future__ import annotations

from hal.predict.avg2 import Avg2Predictor
from hal.predict.baselines import UserPredictor
from hal.predict.learned import UNDER_RATE_OWN_CORRECTION, LearnedPredictor
from hal.predict.protocol import Predictor

CONFIGURABLE = ("user", "avg2", "learned")


def make_predictor(name: str) -> Predictor:
    """A fresh predictor called ``name`` (one of ``CONFIGURABLE``); ``ValueError`` for any
    other name."""
    if name == "user":
        return UserPredictor()
    if name == "avg2":
        return Avg2Predictor()
    if name == "learned":
        # the server corrects its expired predictions with the model's own rule
        # (``SharedPredictor.planned``), as the simulator does: calibrated to the median
        return LearnedPredictor(under_rate=UNDER_RATE_OWN_CORRECTION)
    raise ValueError(f"unknown predictor {name!r}; choose from {', '.join(CONFIGURABLE)}")
