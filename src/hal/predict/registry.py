"""Predictors by name: what ``[scheduler] predictor`` in ``hal.toml``, the backfill
plugin's ``predictor`` argument and ``hal predict eval --predictors`` may name.

``perfect`` is not among them: it needs every job's true run time in advance, which only a
simulator has (the simulator builds it itself).
"""

from __future__ import annotations

from hal.predict.avg2 import Avg2Predictor
from hal.predict.baselines import UserPredictor
from hal.predict.learned import LearnedPredictor
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
        return LearnedPredictor()
    raise ValueError(f"unknown predictor {name!r}; choose from {', '.join(CONFIGURABLE)}")
