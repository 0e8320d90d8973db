"""The numbers a run is judged by, with stable keys (``hal sim run --json``).

Bounded slowdown: ``max(1, (wait + run) / max(run, tau))`` with tau = 10 s (Feitelson's
threshold, so that very short jobs do not dominate the mean). Averages leave out the
first ``exclude_first_fraction`` of jobs (the warm-up: the machine starts empty), as in
Tsafrir, Etsion and Feitelson; utilization and makespan count every job.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hal.core.errors import InvalidRequest
from hal.predict.evaluate import quality
from hal.sim.engine import SimRun

TAU_S = 10.0
KEYS = (
    "jobs",
    "mean_wait_s",
    "median_wait_s",
    "p95_wait_s",
    "max_wait_s",
    "mean_bsld",
    "p95_bsld",
    "utilization",
    "makespan_s",
    "wall_s",
    "jobs_per_wall_s",
)


def job_arrays(run: SimRun) -> dict[str, np.ndarray]:
    """Per job, in trace order: submit, start, end, run, procs, wait, bsld."""
    submit = np.array([o.job.submit for o in run.outcomes], dtype=np.float64)
    start = np.array([o.start for o in run.outcomes], dtype=np.float64)
    end = np.array([o.end for o in run.outcomes], dtype=np.float64)
    procs = np.array([o.job.procs for o in run.outcomes], dtype=np.float64)
    ran = end - start
    wait = start - submit
    bsld = np.maximum(1.0, (wait + ran) / np.maximum(ran, TAU_S))
    return {
        "submit": submit,
        "start": start,
        "end": end,
        "run": ran,
        "procs": procs,
        "wait": wait,
        "bsld": bsld,
    }


def check_exclusion(fraction: float) -> None:
    """A warm-up fraction that leaves some jobs to average, or a clear error (before a
    replay that would otherwise end in averages of nothing)."""
    if not 0.0 <= fraction < 1.0:
        raise InvalidRequest(
            f"--exclude-first-fraction must be at least 0 and below 1, not {fraction:g} "
            "(the literature leaves out 0.01)",
            field="exclude_first_fraction",
        )


def summarize(run: SimRun, exclude_first_fraction: float = 0.0) -> dict[str, Any]:
    check_exclusion(exclude_first_fraction)
    a = job_arrays(run)
    n = len(run.outcomes)
    skip = math.floor(n * exclude_first_fraction)
    done = ~np.isnan(a["start"])
    keep = done.copy()
    keep[:skip] = False
    wait = a["wait"][keep]
    bsld = a["bsld"][keep]
    if done.any():
        first = float(a["submit"].min())
        makespan = float(np.nanmax(a["end"])) - first
        area = float((a["procs"][done] * a["run"][done]).sum())
        util = area / (run.machine_procs * makespan) if makespan > 0 else 0.0
    else:
        makespan = util = 0.0

    def stat(x: np.ndarray, f: str) -> float:
        if len(x) == 0:
            return 0.0
        if f == "mean":
            return float(x.mean())
        if f == "max":
            return float(x.max())
        return float(np.percentile(x, 50 if f == "median" else 95))

    summary: dict[str, Any] = {
        "jobs": int(keep.sum()),
        "mean_wait_s": stat(wait, "mean"),
        "median_wait_s": stat(wait, "median"),
        "p95_wait_s": stat(wait, "p95"),
        "max_wait_s": stat(wait, "max"),
        "mean_bsld": stat(bsld, "mean"),
        "p95_bsld": stat(bsld, "p95"),
        "utilization": util,
        "makespan_s": makespan,
        "wall_s": run.wall_s,
        "jobs_per_wall_s": n / run.wall_s if run.wall_s > 0 else 0.0,
    }
    summary.update(prediction_quality(run, keep))
    return summary


def prediction_quality(run: SimRun, keep: np.ndarray) -> dict[str, float]:
    """How good the predictions each job started with were, against its actual run time
    (both at least 1 s): mean absolute error, Tsafrir's accuracy (the mean of
    min(p, r) / max(p, r), 1 = perfect) and the share of jobs that ran longer than
    predicted. Empty when the run had no predictor."""
    predicted = np.array([o.predicted for o in run.outcomes], dtype=np.float64)
    mask = keep & ~np.isnan(predicted)
    if not mask.any():
        return {}
    ran = np.array([o.end - o.start for o in run.outcomes])
    q = quality(predicted[mask], ran[mask])
    return {
        "prediction_mae_s": q.mae_s,
        "prediction_accuracy": q.accuracy,
        "underprediction_rate": q.underprediction_rate,
    }
