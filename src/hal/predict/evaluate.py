"""Replaying a job history through a predictor, in the order things happened: each job is
predicted when it was submitted, after the predictor was told every job that had ended
by then (never one that ended later). ``hal predict eval`` runs it on a trace or on the
server's accounting.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hal.core.job import Job
from hal.predict.protocol import Predictor


@dataclass(frozen=True, slots=True)
class Quality:
    """Predictions against actual run times (both taken as at least 1 s)."""

    jobs: int
    mae_s: float  # mean absolute error
    accuracy: float  # Tsafrir's: mean of min(p, r) / max(p, r), 1 = perfect
    underprediction_rate: float  # share of jobs that ran longer than predicted


def quality(predicted: npt.ArrayLike, actual: npt.ArrayLike) -> Quality:
    """The figures every report of prediction quality uses (``hal predict eval``, the
    simulator's summary, ``hal predict status``)."""
    p = np.maximum(np.asarray(predicted, dtype=np.float64), 1.0)
    r = np.maximum(np.asarray(actual, dtype=np.float64), 1.0)
    if not len(p):
        return Quality(0, 0.0, 0.0, 0.0)
    return Quality(
        len(p),
        float(np.abs(p - r).mean()),
        float((np.minimum(p, r) / np.maximum(p, r)).mean()),
        float((p < r).mean()),
    )


@dataclass(frozen=True, slots=True)
class Finished:
    """One job of the history: as submitted (``job.submit_time``, ``job.time_limit_s``)
    with its final state, how long it ran, and when it ended."""

    job: Job
    runtime_s: float
    end_time: float


def evaluate(history: Iterable[Finished], predictor: Predictor) -> dict[str, Any]:
    """Mean absolute error (s), Tsafrir's accuracy (mean of min(p, r) / max(p, r)), the
    share of under-predictions, and the predictor's cost per call."""
    ordered = sorted(history, key=lambda f: (f.job.submit_time, f.job.id))
    ending: list[tuple[float, int, Finished]] = []
    predicted: list[float] = []
    actual: list[float] = []
    observe_s = predict_s = 0.0
    for item in ordered:
        while ending and ending[0][0] <= item.job.submit_time:
            done = heapq.heappop(ending)[2]
            t = time.perf_counter()
            predictor.observe(done.job, done.runtime_s)
            observe_s += time.perf_counter() - t
        t = time.perf_counter()
        p = predictor.predict(item.job)
        predict_s += time.perf_counter() - t
        limit = item.job.time_limit_s
        predicted.append(min(p, limit) if limit > 0 else p)
        actual.append(item.runtime_s)
        heapq.heappush(ending, (item.end_time, item.job.id, item))
    n = len(predicted)
    if not n:
        return {"predictor": predictor.name, "jobs": 0}
    q = quality(predicted, actual)
    return {
        "predictor": predictor.name,
        "jobs": n,
        "mae_s": round(q.mae_s, 1),
        "accuracy": round(q.accuracy, 4),
        "underprediction_rate": round(q.underprediction_rate, 4),
        "predict_us_per_job": round(1e6 * predict_s / n, 2),
        "observe_ms_per_job": round(1e3 * observe_s / n, 4),
    }
