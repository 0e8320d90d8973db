"""Predictors by name, and the planning policy built from a predictor's and a correction's
name: what ``[scheduler] predictor`` and ``[scheduler] correction`` in ``hal.toml``, the
backfill plugin's ``predictor`` argument, ``hal sim run --predictor/--correction`` and
``hal predict eval --predictors`` may name.

``planning_predictor`` is the one place a predictor and its expiry correction are put
together: the server plans with what it builds, the simulator replays with it, so a
policy measured on traces is the policy that runs.

``perfect`` is not among them: it needs every job's true run time in advance, which only a
simulator has (the simulator builds it itself).
"""

from __future__ import annotations

from hal.predict.avg2 import Avg2Predictor
from hal.predict.baselines import UserPredictor
from hal.predict.learned import UNDER_RATE_OWN_CORRECTION, LearnedPredictor
from hal.predict.pinned import PinnedPredictor
from hal.predict.protocol import Predictor

CONFIGURABLE = ("user", "avg2", "learned")
# what an expired prediction becomes (``PinnedPredictor``); "default": the predictor's
# own rule where it has one (``learned``), Tsafrir's steps for the others (EASY++)
CORRECTIONS = ("default", "steps", "request", "model")


def effective_correction(predictor: str, correction: str = "default") -> str:
    """``default`` resolved: the learned predictor's own rule, the stepwise one (EASY++)
    for the others."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    if correction != "default":
        return correction
    return "model" if predictor == "learned" else "steps"


def make_predictor(name: str, correction: str = "default", *, train_lag: int = 0) -> Predictor:
    """A fresh predictor called ``name`` (one of ``CONFIGURABLE``), as the correction it
    will be planned with wants it: ``learned`` corrected by its own rule is calibrated to
    the median (``UNDER_RATE_OWN_CORRECTION``: an overrun costs one re-prediction), with
    another rule to its class's default (30 % under-predicted); ``train_lag``: its
    models trained that many finished jobs before use (the simulator's setting).
    ``ValueError`` for any other name or correction."""
    rule = effective_correction(name, correction)
    if name == "user":
        return UserPredictor()
    if name == "avg2":
        return Avg2Predictor()
    if name == "learned":
        if rule == "model":
            return LearnedPredictor(under_rate=UNDER_RATE_OWN_CORRECTION, train_lag=train_lag)
        return LearnedPredictor(train_lag=train_lag)
    raise ValueError(f"unknown predictor {name!r}; choose from {', '.join(CONFIGURABLE)}")


def planning_predictor(name: str, correction: str = "default", *, train_lag: int = 0) -> Predictor:
    """What plans with the predictor ``name`` under ``correction``: ``avg2`` and
    ``learned`` pinned (a started job keeps its prediction until it ends; then only the
    correction moves it, as in Tsafrir, Etsion and Feitelson's EASY++; see
    ``PinnedPredictor``), ``user`` as it is (the request never moves)."""
    model = make_predictor(name, correction, train_lag=train_lag)
    if name == "user":
        return model
    return PinnedPredictor(model, correction=effective_correction(name, correction))
