"""``learned``: gradient-boosted trees (LightGBM) trained online on finished jobs.

* **What it learns**: log run time from the job's request and its user's, its same-named
  jobs' and its account's recent history (``hal.predict.features``). Trained only on jobs
  that have finished, in the order they finished: it never sees the future.
* **When**: the first model after ``min_train`` finished jobs, then again every
  ``retrain_every`` (fewer while the history is young), on the last ``window`` jobs;
  with ``min_retrain_interval_s`` (the live server's setting) no sooner than that many
  seconds of wall time after the last model, so a burst of short jobs does not spend
  its CPU on models a few seconds apart (the jobs still join the training rows).
* **Training in the background** (``train_lag``, the simulator's setting): a model due
  at the N-th finished job is trained on a worker thread from a copy of the rows as
  they were then, while the current model keeps predicting; it replaces that model at
  a fixed point, N + ``train_lag`` finished jobs or the next retrain if that comes
  first, waiting for the thread there if it is not done. What is learned and when it is
  used depend only on the sequence of finished jobs, never on the thread's timing:
  a replay gives the same results however fast the model trains (LightGBM releases
  the GIL, so on a second core it costs the replay almost nothing). 0 (the default,
  the server's: it trains on its own worker thread already): trained in ``observe``.
* **Calibration** (split conformal): the residuals log(actual) − log(predicted) of the
  last ``calibration`` finished jobs give an offset so that about ``under_rate`` of jobs
  run longer than predicted. Under-predictions are cheap for a backfilling scheduler (the
  correction extends them stepwise); over-predictions hide backfill holes.
* **Expiry correction** (``extended``, survival-style): a job that outlives its
  prediction is re-predicted from the same calibration residuals, conditioned on what
  is now known, that it has run at least as long as its plan: the new plan is the
  ``expiry_quantile`` of the run times the residuals beyond that point imply, capped at
  the request; with fewer than ``min_tail`` such residuals (jobs that overran this much
  are rare), the request.
* **Per-user fallback** (``switch_window``, ``switch_margin``): for each user the
  absolute log errors of the model's and of ``avg2``'s predictions over their last
  ``switch_window`` finished jobs are kept; while the model's mean error exceeds
  ``avg2``'s by more than ``switch_margin`` (log units: 3 is a factor of 20), that
  user's jobs get the lower of the two predictions. ``avg2`` follows a change of
  behaviour after two jobs (on HPC2N a user whose four-hour jobs start ending in a
  second, a thousand of them), the model only once retrained on enough of them; the
  lower prediction, not ``avg2``'s outright, because over-predictions are what hides
  backfill holes from short jobs.
* **Safety**: capped at the requested time and only used for planning; nobody is killed
  before the time they asked for (``hal.predict.protocol``).

Until the first model exists it answers like ``avg2``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hal.core.job import Job
from hal.predict.avg2 import Avg2Predictor
from hal.predict.features import (
    CATEGORICAL,
    NAMES,
    FloatRow,
    History,
    baseline,
    baselines,
    requested_s,
)
from hal.predict.trees import Trees

log = logging.getLogger("hal.predict")
# The under-prediction target when the predictor corrects its own expired predictions
# (``extended``): an overrun then costs little (the job is re-planned from what it has
# run, not one step at a time), so the median is the natural target; the server and the
# simulator both correct that way. With the stepwise correction overruns cost more, and
# 30 % stays the class's default.
UNDER_RATE_OWN_CORRECTION = 0.5
# The simulator's ``train_lag``: 0, each model trained in place when it is due (as
# before). A lag of 1,000 (each model used from the next retrain on, trained meanwhile
# on a worker thread) took 79 % of the model's CPU off the replay's thread on Curie's
# first 80,000 jobs, but SDSC-SP2's mean bsld went from 61.0 to 66.2 with models one
# retrain older (KTH-SP2 56.2 -> 53.6), so it stays off until a shorter lag is measured
# (docs/prediction.md, "Online training").
SIM_TRAIN_LAG = 0
PARAMS: dict[str, Any] = {
    "objective": "l1",  # the median correction: robust to the odd crashed or hung job
    "learning_rate": 0.1,
    "num_leaves": 31,
    "min_data_in_leaf": 20,
    "feature_fraction": 0.9,
    "verbose": -1,
    "num_threads": 1,
    "deterministic": True,
    # (LightGBM otherwise times both layouts at every training and takes the faster:
    # the same trees on our rows, but a choice made by the clock, and time spent)
    "force_col_wise": True,
    "seed": 7,
}


# What a training gives: the booster, how many rows it saw, and the last of them (features,
# targets) to calibrate on when there are no residuals of a model yet.
Fitted = tuple[Any, int, Any, Any]


def _fit(lgb: Any, x: Any, y: Any, rounds: int) -> Fitted:
    """One model from the rows ``x`` and targets ``y`` (arrays nobody else writes to)."""
    data = lgb.Dataset(
        x,
        y,
        feature_name=list(NAMES),
        categorical_feature=list(CATEGORICAL),
        free_raw_data=True,
    )
    booster = lgb.train(PARAMS, data, num_boost_round=rounds)
    return booster, len(y), x[-2000:].copy(), y[-2000:].copy()


class _Window:
    """The last ``size`` training rows and their targets, in the order they came: one
    array used as a ring (grown as rows come, up to ``size``), so that a training copies
    it in one go instead of stacking ``size`` separate rows, and a row costs its 23
    floats, not an array object of its own."""

    def __init__(self, size: int, width: int) -> None:
        self.size = size
        first = max(min(size, 1024), 1)
        self._x = np.empty((first, width))
        self._y = np.empty(first)
        self.added = 0  # rows ever appended

    def __len__(self) -> int:
        return min(self.added, self.size)

    def append(self, row: FloatRow, target: float) -> None:
        at = self.added % self.size
        if at >= len(self._y):  # full while it is still short of ``size``: grow
            grown = min(self.size, 2 * len(self._y))
            x, y = np.empty((grown, self._x.shape[1])), np.empty(grown)
            x[:at], y[:at] = self._x[:at], self._y[:at]
            self._x, self._y = x, y
        self._x[at] = row
        self._y[at] = target
        self.added += 1

    def arrays(self) -> tuple[Any, Any]:
        """Copies of the rows and targets, oldest first."""
        if self.added <= self.size:
            return self._x[: self.added].copy(), self._y[: self.added].copy()
        at = self.added % self.size
        return (
            np.concatenate((self._x[at:], self._x[:at])),
            np.concatenate((self._y[at:], self._y[:at])),
        )


class _Training:
    """A model being trained, on a daemon thread (``background``) or, when asked for,
    right then on the caller's (what the thread must be indistinguishable from)."""

    def __init__(self, fit: Callable[[], Fitted], *, background: bool = True) -> None:
        self._fit: Callable[[], Fitted] | None = fit
        self._result: Fitted | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="hal-learned-train", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        fit, self._fit = self._fit, None
        assert fit is not None
        try:
            self._result = fit()
        except BaseException as err:  # handed to the waiting caller
            self._error = err

    def wait(self) -> Fitted:
        if self._thread is not None:
            self._thread.join()
        else:
            self._run()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class LearnedPredictor:
    name = "learned"

    def __init__(
        self,
        *,
        under_rate: float = 0.3,
        min_train: int = 200,
        retrain_every: int = 1000,
        window: int = 50_000,
        calibration: int = 2000,
        rounds: int = 100,
        min_retrain_interval_s: float = 0.0,
        expiry_quantile: float = 0.9,
        min_tail: int = 20,
        switch_window: int = 4,
        switch_margin: float = 3.0,
        train_lag: int = 0,
        background: bool = True,
    ) -> None:
        if not 0.0 < under_rate < 1.0:
            raise ValueError("under_rate must be between 0 and 1")
        if not 0.0 <= expiry_quantile <= 1.0:
            raise ValueError("expiry_quantile must be between 0 and 1")
        if train_lag < 0:
            raise ValueError("train_lag must be at least 0")
        self.expiry_quantile = expiry_quantile
        # finished jobs between a retrain's start and its model's use (0: at once); with
        # background=False the model is trained at that point on the caller's thread
        # (the same model: what the threaded training is checked against)
        self.train_lag = train_lag
        self.background = background
        self._training: _Training | None = None
        self._basis = 0  # rows of the last training started: it sets the next interval
        self.switch_window = switch_window
        self.switch_margin = switch_margin
        # user → (model error, avg2 error) of their last finished jobs, and the users
        # whose jobs get the lower of the two predictions for now
        self._errors: dict[str, deque[tuple[float, float]]] = {}
        self._switched: set[str] = set()
        self.min_tail = min_tail
        self.under_rate = under_rate
        self.min_train = min_train
        self.retrain_every = retrain_every
        self.rounds = rounds
        self.min_retrain_interval_s = min_retrain_interval_s
        self._trained_at = -math.inf  # time.monotonic() of the last model
        self.history = History()
        self._fallback = Avg2Predictor()
        self._window = _Window(window, len(NAMES))
        self._residuals: deque[float] = deque(maxlen=calibration)
        self._ranked: list[float] = []  # the same residuals, sorted (``extended`` reads them)
        self._offset = 0.0
        self._trees: Trees | None = None  # the model (None: none yet)
        self.model_version = 0
        self.trained_on = 0
        self.saved_at: float | None = None
        self.unavailable = ""  # why no model can be trained, when lightgbm cannot load
        self._since_train = 0
        # job id → (model version, user history version, features, log prediction)
        self._cache: dict[int, tuple[int, int, FloatRow, float]] = {}

    # -- the protocol -------------------------------------------------------------------

    def predict(self, job: Job) -> float:
        if self._trees is None:
            return self._fallback.predict(job)
        predicted = math.expm1(self._log_prediction(job)[1] + self._offset)
        if job.spec.user in self._switched:  # the model has been far off: avg2 if lower
            predicted = min(predicted, self._fallback.predict(job))
        return max(min(predicted, requested_s(job)), 1.0)

    def observe(self, job: Job, runtime_s: float) -> None:
        avg2 = self._fallback.predict(job)
        self._fallback.observe(job, runtime_s)
        cached = self._cache.pop(job.id, None)
        row = cached[2] if cached is not None else self.history.features(job)
        actual = math.log1p(max(runtime_s, 0.0))
        trees = self._trees
        if trees is not None:
            log_pred = (
                cached[3]
                if cached is not None and cached[0] == self.model_version
                else baseline(row) + trees.one(row)
            )
            self._add_residual(actual - log_pred)
            used = min(log_pred + self._offset, math.log1p(requested_s(job)))
            self._compare(job.spec.user, abs(actual - used), abs(actual - math.log1p(avg2)))
        self._window.append(row, actual - baseline(row))
        self.history.add(job, runtime_s)
        self._since_train += 1
        if self._training is not None and self._since_train >= self.train_lag:
            self._install(self._training.wait())  # the fixed point: waits if not done
        if self._due():
            self.train()

    def _add_residual(self, value: float) -> None:
        """Joins the calibration window (its oldest residual leaving a full one), kept
        sorted too."""
        residuals, ranked = self._residuals, self._ranked
        if len(residuals) == residuals.maxlen:
            del ranked[bisect_left(ranked, residuals[0])]
        residuals.append(value)
        insort(ranked, value)

    def _compare(self, user: str, model_error: float, avg2_error: float) -> None:
        """Keeps the user's recent errors of both predictors and decides which one
        predicts their next jobs."""
        if self.switch_window <= 0:
            return
        errors = self._errors.get(user)
        if errors is None:
            errors = self._errors[user] = deque(maxlen=self.switch_window)
        errors.append((model_error, avg2_error))
        worse = sum(m - a for m, a in errors) / len(errors)
        if len(errors) >= 2 and worse > self.switch_margin:
            self._switched.add(user)
        else:
            self._switched.discard(user)

    # -- model --------------------------------------------------------------------------

    def _due(self) -> bool:
        seen = len(self._window)
        if seen < self.min_train or self.unavailable:
            return False
        if self._trees is None and self._training is None:
            return True
        every = min(self.retrain_every, max(self.min_train, self._basis // 2))
        if self._since_train < every:
            return False
        wait = self.min_retrain_interval_s
        return wait <= 0 or time.monotonic() - self._trained_at >= wait

    def train(self) -> None:
        """Starts a model on the rows finished so far: trained here, or with
        ``train_lag`` on a worker thread and used from ``train_lag`` finished jobs on
        (or from the next retrain, which installs it first)."""
        lgb = self._lightgbm()
        if lgb is None:
            return
        if self._training is not None:  # a retrain due before the lag ran out
            self._install(self._training.wait())
        x, y = self._window.arrays()
        self._since_train = 0
        self._basis = len(y)
        rounds = self.rounds
        if self.train_lag <= 0:
            self._install(_fit(lgb, x, y, rounds))
            return
        self._training = _Training(lambda: _fit(lgb, x, y, rounds), background=self.background)

    def _install(self, fitted: Fitted) -> None:
        """The new model replaces the current one; calibrated on the residuals of the
        jobs that finished until now."""
        booster, rows, x_tail, y_tail = fitted
        self._training = None
        trees = self._trees = Trees(self._lightgbm(), booster)
        self.model_version += 1
        self.history.freeze_accounts()
        self.trained_on = rows
        self._trained_at = time.monotonic()
        if len(self._residuals) < 50:
            # No residuals of a model yet: calibrate on the training rows (optimistic, so
            # the next calibration window replaces it as soon as it is full enough).
            for value in y_tail - trees.many(x_tail):
                self._add_residual(float(value))
        # residuals of the model's error; the baseline cancels out (target = actual - base)
        self._offset = float(np.quantile(np.fromiter(self._residuals, float), 1 - self.under_rate))

    def extended(self, job: Job, first_s: float, elapsed_s: float) -> float:
        """The correction: ``job`` started with the prediction ``first_s`` and has run
        ``elapsed_s`` (≥ it). Its model prediction before calibration was log1p(first_s)
        − offset; of the calibration residuals, those that would have let it run past
        ``elapsed_s`` describe what it may still do, and their ``expiry_quantile`` gives
        the new plan. Too few of them (or no model yet): the request."""
        limit = requested_s(job)
        if self._trees is None or limit <= elapsed_s:
            return limit
        ranked = self._ranked
        raw = math.log1p(first_s) - self._offset
        beyond = bisect_right(ranked, math.log1p(elapsed_s) - raw)  # the tail starts there
        tail = len(ranked) - beyond
        if tail < self.min_tail:
            return limit
        pick = ranked[beyond + min(int(self.expiry_quantile * tail), tail - 1)]
        return min(max(math.expm1(raw + pick), elapsed_s + 60.0), limit)

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Predicts every job whose cached prediction is stale in one model call."""
        trees = self._trees
        if trees is None:
            return
        version, users = self.model_version, self.history.version
        stale: list[tuple[Job, int]] = []
        for job in jobs:
            user_version = users.get(job.spec.user, 0)
            cached = self._cache.get(job.id)
            if cached is None or cached[0] != version or cached[1] != user_version:
                stale.append((job, user_version))
        if not stale:
            return
        # each job keeps its own row (one of the matrix's would keep the whole matrix
        # alive for as long as the job is cached, then as a training row)
        own = [self.history.features(job) for job, _ in stale]
        rows = np.vstack(own)
        log_preds = baselines(rows) + trees.many(rows)
        self._trim_cache()
        for (job, user_version), row, log_pred in zip(stale, own, log_preds, strict=True):
            self._cache[job.id] = (version, user_version, row, float(log_pred))

    def _trim_cache(self) -> None:
        if len(self._cache) > 500_000:  # jobs cancelled before they ran are never observed
            self._cache.clear()

    def _log_prediction(self, job: Job) -> tuple[FloatRow, float]:
        user_version = self.history.version.get(job.spec.user, 0)
        cached = self._cache.get(job.id)
        if cached is not None and cached[0] == self.model_version and cached[1] == user_version:
            return cached[2], cached[3]
        row = self.history.features(job)
        assert self._trees is not None  # (asked by ``predict`` once there is a model)
        log_pred = baseline(row) + self._trees.one(row)
        self._trim_cache()
        self._cache[job.id] = (self.model_version, user_version, row, log_pred)
        return row, log_pred

    # -- persistence --------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Writes the model and its calibration (LightGBM's text format + JSON), atomically:
        a crash mid-write leaves the previous model."""
        text = self.saved_text()
        if text is not None:
            write_model(path, text)

    def saved_text(self) -> str | None:
        """What ``save`` writes (None: no model yet), made from the model as it is now:
        the server takes it under the predictor's lock and writes it after letting go
        (``write_model``), so a pass does not wait for the disk."""
        if self._trees is None:
            return None
        model = self._trees.booster.model_to_string()
        meta = {
            "model_version": self.model_version,
            "min_train": self.min_train,  # finished jobs before the first model
            "trained_on": self.trained_on,
            "offset": self._offset,
            "features": list(NAMES),
            "saved_at": time.time(),
            "codes": self.history.codes(),
            "model": model,
            # checked before LightGBM reads the model: a damaged model string aborts the
            # whole process inside LightGBM, where no exception can catch it
            "model_sha256": hashlib.sha256(model.encode()).hexdigest(),
        }
        self.saved_at = float(meta["saved_at"])
        return json.dumps(meta)

    def load(self, path: Path) -> bool:
        """Reads a model written by ``save``; False (and nothing changed) when there is
        none, it was made for other features, or the file is damaged (the caller then
        trains a new one from the accounting history)."""
        lgb = self._lightgbm()
        if lgb is None:
            return False

        try:
            meta = json.loads(path.read_text())
            model = meta["model"]
            digest = meta.get("model_sha256")  # (absent from files saved before it was)
            if (
                meta.get("features") != list(NAMES)
                or not isinstance(model, str)
                or (digest is not None and digest != hashlib.sha256(model.encode()).hexdigest())
            ):
                return False
            version, trained = int(meta["model_version"]), int(meta["trained_on"])
            offset, saved_at = float(meta["offset"]), float(meta["saved_at"])
            codes = [(int(k), str(v), int(c)) for k, v, c in meta.get("codes", ())]
            trees = Trees(lgb, lgb.Booster(model_str=model))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, lgb.basic.LightGBMError):
            # (LightGBMError: a model string it refuses, e.g. another LightGBM's format
            # in a file saved before files carried the digest)
            return False
        self._trees = trees
        self._training = None  # a model still being trained is dropped for the loaded one
        self.model_version = version
        self.trained_on = self._basis = trained
        self._offset = offset
        self.saved_at = saved_at
        self.history.restore_codes(codes)
        self.caught_up()
        return True

    def caught_up(self) -> None:
        """The history has been brought up to date without a retrain (a loaded model, then
        the accounting replayed into it): features read the accounts as they are now."""
        self.history.freeze_accounts()
        self._cache.clear()

    def warm_up(self) -> None:
        """Load lightgbm now (about a second of CPU for it and pandas) rather than at the
        first training, which comes while the first jobs end — in a burst of them."""
        self._lightgbm()

    def near_training(self) -> bool:
        """Whether a model is near: half of ``min_train`` finished jobs seen, or a model
        trained, being trained or loaded (the server warms up from then on)."""
        if self._trees is not None or self._training is not None:
            return True
        return len(self._window) >= self.min_train // 2

    def _lightgbm(self) -> Any:
        """The lightgbm module, or None (once logged) when it cannot be loaded: its wheel
        needs the OpenMP runtime (``libgomp1`` on Debian/Ubuntu). The predictor then keeps
        answering like ``avg2`` instead of failing."""
        try:
            import lightgbm
        except (ImportError, OSError) as err:
            if not self.unavailable:
                self.unavailable = f"lightgbm cannot be loaded ({err}); predicting like avg2"
                log.warning("%s: install libgomp1 (apt install libgomp1)", self.unavailable)
            return None
        return lightgbm

    def status(self) -> dict[str, float | int]:
        """Model age and data size, for ``hal predict status``."""
        return {
            "model_version": self.model_version,
            "min_train": self.min_train,  # finished jobs before the first model
            "trained_on": self.trained_on,
            "finished_jobs_since_training": self._since_train,
            "calibration_offset": self._offset,
            "under_rate_target": self.under_rate,
        }


def write_model(path: Path, text: str) -> None:
    """``LearnedPredictor.saved_text`` to ``path``, atomically: a crash mid-write leaves
    the previous model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
