"""``PredictionService``: the server's run-time predictor, trained from its own accounting.

The predictor (``[scheduler] predictor`` in ``hal.toml``: ``learned`` by default, ``avg2``
or ``user``, with the expiry correction ``[scheduler] correction``: the simulator's
planning policy, ``hal.predict.planning_predictor``) is one ``SharedPredictor``: the
backfill plugin plans with it on the scheduler's worker thread, this service trains it,
request handlers read it. Everything
that can take time runs on the service's own worker thread, fed by a queue, so the event
loop never waits for a model:

* **start-up**: load the model persisted in ``<data dir>/predict/learned.json`` (served at
  once), then replay the accounting history (the last ``history_limit`` jobs that ran, read
  in pages on the store's thread) into a fresh predictor, in the order things happened:
  each job is predicted when it started, knowing only the jobs that had ended by then, and
  observed when it ended. The fresh predictor replaces the live one when it is done (if
  it has a model, or the live one has none), and is saved.
* **a job starts**: the prediction it is pinned with is recorded (what the accuracy
  figures compare with, and what the anomaly detector measures overruns against).
* **a job that ran ends** (whatever its final state: the listener sees every committed
  job change, ``Cluster.on_jobs_changed``, and picks the runs that ended): the recorded
  prediction and the actual run time join the recent-accuracy window, then
  ``predictor.observe(job, runtime)`` (which drops its pin); a learned predictor may
  train a new model there (a fraction of a second, holding the predictor's lock, off the
  event loop), which is then saved; at most one new model per ``RETRAIN_INTERVAL_S``
  once the replay is done.

Predictions never kill or shorten a job; they move planned starts and feed the status
and anomaly reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hal.core.job import Job
from hal.core.states import JobState
from hal.core.suspension import suspended_seconds
from hal.predict import Predictor, SharedPredictor, make_predictor, planned_runtime
from hal.predict.baselines import UNLIMITED_S
from hal.predict.evaluate import quality
from hal.predict.learned import LearnedPredictor, write_model
from hal.state.cluster import Cluster

log = logging.getLogger("hal.predict")
HISTORY_LIMIT = 50_000  # finished jobs replayed at start-up
HISTORY_PAGE = 5_000  # rows per store call, so that writers are not held up for long
ACCURACY_WINDOW = 1_000  # finished jobs in the recent-accuracy figures
# a live model is retrained at most this often (seconds): a burst of short jobs would
# otherwise train one every few hundred jobs, each holding the predictor from the scheduler
RETRAIN_INTERVAL_S = 60.0
FINISHED_WINDOW = 500  # finished jobs kept with their prediction (GET /v1/predict/finished)
MODEL_FILE = Path("predict") / "learned.json"


@dataclass(frozen=True, slots=True)
class StartPrediction:
    """What the predictor said when a job started."""

    runtime_s: float  # planned run time (capped at the limit, at least 1 s)
    model_version: int  # 0: the predictor had no model (user, avg2, learned before its first)


@dataclass(frozen=True, slots=True)
class FinishedPrediction:
    """A finished run and what the predictor said when it started."""

    job_id: str  # display id (array and het ids as squeue shows them)
    user: str
    partition: str
    predicted_s: float
    actual_s: float
    time_limit_s: float | None  # None: no limit
    end_time: float


def _finished(job: Job, predicted: float, actual: float) -> FinishedPrediction:
    assert job.end_time is not None
    return FinishedPrediction(
        job.display_id, job.spec.user, job.partition, predicted, actual,
        float(job.time_limit_s) or None, job.end_time,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Started:
    job: Job


@dataclass(frozen=True, slots=True)
class _Finished:
    job: Job


@dataclass(frozen=True, slots=True)
class _Dropped:
    """A run that ended without finishing (requeued), or a job that ended without
    running: nothing to learn, and what was kept for it goes."""

    job_id: int


_Item = _Started | _Finished | _Dropped | None


def accuracy(samples: Sequence[tuple[float, float]]) -> dict[str, float | int]:
    """MAE (s), Tsafrir's accuracy (mean of min(p, r) / max(p, r)) and the share of
    under-predictions over (predicted, actual) pairs, both taken as at least 1 s (as
    ``hal.predict.evaluate`` does). Jobs that had no estimate at all (no time limit and
    no history: planned as a year) are left out: they would swamp the mean error."""
    known = [s for s in samples if s[0] < UNLIMITED_S]
    if not known:
        return {"jobs": 0}
    q = quality([p for p, _ in known], [r for _, r in known])
    return {
        "jobs": q.jobs,
        "mae_seconds": round(q.mae_s, 1),
        "accuracy": round(q.accuracy, 4),
        "underprediction_rate": round(q.underprediction_rate, 4),
    }


def _runtime(job: Job) -> float:
    """Start to end without the time suspended (which its limit does not count either)."""
    assert job.start_time is not None and job.end_time is not None
    return max(job.end_time - job.start_time - suspended_seconds(job, job.end_time), 0.0)


class PredictionService:
    def __init__(
        self,
        cluster: Cluster,
        predictor: SharedPredictor,
        *,
        model_path: Path | None = None,
        history_limit: int = HISTORY_LIMIT,
        accuracy_window: int = ACCURACY_WINDOW,
    ) -> None:
        self.cluster = cluster
        self.predictor = predictor
        self.model_path = model_path if hasattr(predictor.inner, "save") else None
        self.history_limit = history_limit
        self.clock = cluster.clock
        self.started_at = 0.0
        # Read on the event loop, written by the worker: single assignments and dict
        # operations on keys only, which are atomic under the GIL.
        self.at_start: dict[int, StartPrediction] = {}
        self.recent: deque[tuple[float, float]] = deque(maxlen=accuracy_window)
        self.finished: deque[FinishedPrediction] = deque(maxlen=FINISHED_WINDOW)
        self.observed = 0  # finished jobs observed (replayed + live)
        self.replayed = 0
        self.replaying = False
        self.model_time: float | None = None  # when the current model was trained or saved
        self.model_source = ""  # "loaded", "replay" or "live"
        self.last_error = ""
        # Called (on the worker) with (predictor, predicted at start, actual run time) of
        # each job that ends while the server runs and had an estimate: the metrics.
        self.on_finished: Callable[[str, float, float], None] | None = None
        # Called (on the worker) with (job, predicted at start, model version then, actual
        # run time) of each run that ends while the server runs and whose start was
        # recorded: the anomaly detector's run-time inflation rule.
        self.on_run_finished: Callable[[Job, float, int, float], None] | None = None
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._history: Future[list[Job]] = Future()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        # the last planned run time read for a job (event loop only), for reads that find
        # the predictor busy
        self._last_read: dict[int, float] = {}
        # listener state (event loop only): runs seen starting / ending
        self._running: dict[int, float] = {}  # job id → start time of the run recorded
        self._ended: dict[tuple[int, float], None] = {}  # (id, end time) seen, oldest first
        # (worker only) runs the replay observed that ended around start-up: the listener
        # may report them too
        self._replayed_recent: set[tuple[int, float]] = set()
        self._warmed = False  # (worker only) ``_warm_up_when_near`` has run the warm-up
        cluster.on_jobs_changed(self._on_jobs)

    @property
    def name(self) -> str:
        return self.predictor.name

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """After ``cluster.load()``: record predictions for the jobs already running, read
        the history in the background and start the worker."""
        self.started_at = self.clock.now()
        self._stop.clear()
        self._history = Future()
        for job in self.cluster.unfinished.values():
            if job.state.is_active and job.start_time is not None:
                self._running[job.id] = job.start_time
                self._queue.put(_Started(job))
        self.replaying = True
        self._thread = threading.Thread(target=self._work, name="hal-predict", daemon=True)
        self._thread.start()
        self._task = asyncio.create_task(self._read_history(), name="hal-predict-history")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not self._history.done():
            self._history.set_result([])
        self._queue.put(None)
        if self._thread is not None:
            # a model being trained finishes first (about a second at most)
            await asyncio.to_thread(self._thread.join, 30)
            self._thread = None

    async def _read_history(self) -> None:
        """The last ``history_limit`` runs, oldest end first, read a page at a time on the
        store's thread (other writes interleave between pages)."""
        store = self.cluster.store
        jobs: list[Job] = []
        before: tuple[float, int] | None = None
        try:
            while len(jobs) < self.history_limit and not self._stop.is_set():
                size = min(HISTORY_PAGE, self.history_limit - len(jobs))
                page = await self.cluster.db(store.finished_runs, size, before)
                jobs.extend(page)
                if len(page) < size:
                    break
                last = page[-1]
                assert last.end_time is not None
                before = (last.end_time, last.id)
        except Exception as err:  # the server runs on; the model learns from new jobs
            log.exception("reading the accounting history for the predictor failed")
            self.last_error = f"history: {err}"
            jobs = []
        jobs.reverse()
        if not self._history.done():
            self._history.set_result(jobs)

    # -- the listener (event loop) --------------------------------------------------------
    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        if self._thread is None:
            return  # not started (or stopped): nobody would take the items
        for job in jobs:
            state = job.state
            if state.is_active:
                start = job.start_time
                if start is not None and self._running.get(job.id) != start:
                    self._running[job.id] = start
                    self._queue.put(_Started(job))
            elif state.is_terminal:
                self._running.pop(job.id, None)
                if job.start_time is None or job.end_time is None:
                    # never ran (cancelled or refused while pending): its last answer
                    # while waiting is kept no longer
                    self._queue.put(_Dropped(job.id))
                    continue
                key = (job.id, job.end_time)
                if key in self._ended:
                    continue  # a later change to a finished job (scontrol update ...)
                self._ended[key] = None
                if len(self._ended) > 100_000:
                    del self._ended[next(iter(self._ended))]
                self._queue.put(_Finished(job))
            elif state is JobState.PENDING and self._running.pop(job.id, None) is not None:
                self._queue.put(_Dropped(job.id))  # its run ended without finishing

    # -- the worker thread ----------------------------------------------------------------
    def _work(self) -> None:
        try:
            self._load()
        except Exception as err:  # the replay below still rebuilds a model
            log.exception("loading the predictor model failed")
            self.last_error = f"load: {err}"
        try:
            history = self._history.result()
            if not self._stop.is_set():
                self._replay(history)
        except Exception as err:
            log.exception("the predictor's start-up replay failed")
            self.last_error = f"replay: {err}"
        finally:
            self.replaying = False
        inner = self.predictor.inner
        if isinstance(inner, LearnedPredictor):  # the replay trained unthrottled
            inner.min_retrain_interval_s = RETRAIN_INTERVAL_S
        while True:
            self._warm_up_when_near()
            item = self._queue.get()
            if item is None or self._stop.is_set():
                return
            if isinstance(item, _Dropped):
                self.at_start.pop(item.job_id, None)
                self.predictor.forget(item.job_id)
                continue
            try:
                if isinstance(item, _Started):
                    self._record_start(item.job)
                else:
                    self._finish(item.job)
            except Exception as err:
                log.exception("the predictor failed", extra={"job_id": item.job.display_id})
                self.last_error = f"job {item.job.display_id}: {err}"

    def _warm_up_when_near(self) -> None:
        """The predictor's heavy imports (``learned``: lightgbm and pandas, about a second
        of CPU) here, on the worker, once its first training is near
        (``near_training``), rather than at that training, which comes while jobs end in
        a burst. A server whose predictor has loaded or trained a model has them; one of
        a fresh cluster (and each test's) does not load them before its jobs need them. A
        predictor that does not say when its training is near is warmed up at once."""
        if self._warmed:
            return
        inner = self.predictor.inner
        warm_up = getattr(inner, "warm_up", None)
        near = getattr(inner, "near_training", None)
        if callable(warm_up) and callable(near) and not near():
            return
        self._warmed = True
        if callable(warm_up):
            warm_up()

    def _load(self) -> None:
        path = self.model_path
        if path is None or not path.exists():
            return
        inner: Any = self.predictor.inner
        with self.predictor.lock:
            loaded = bool(inner.load(path))
        if loaded:
            self.model_time = inner.saved_at
            self.model_source = "loaded"
            log.info(
                "predictor model loaded",
                extra={"path": str(path), "model_version": inner.model_version},
            )

    def _replay(self, history: Sequence[Job]) -> None:
        """Replay ``history`` (oldest end first) into a fresh predictor: each job predicted
        at its start, observed at its end, in time order (ends before starts at equal
        times: a job that ended at t is known to one that starts at t). A run whose end
        is recorded at or before its start ends right after it started."""
        if not history:
            return
        self._replayed_recent = {
            (j.id, j.end_time)
            for j in history
            if j.end_time is not None and j.end_time >= self.started_at - 3600
        }
        # the model as the configured correction calibrates it (``hal.predict.make_predictor``)
        fresh = make_predictor(self.predictor.name, self.predictor.correction)
        events: list[tuple[float, int, int]] = []
        for i, job in enumerate(history):
            assert job.start_time is not None and job.end_time is not None
            events.append((job.start_time, 1, i))
            if job.end_time > job.start_time:
                events.append((job.end_time, 0, i))
            else:  # ended as it started, or before (the wall clock stepped back)
                events.append((job.start_time, 2, i))  # right after its own start
        events.sort()
        predicted: dict[int, float] = {}
        samples: deque[tuple[float, float]] = deque(maxlen=self.recent.maxlen)
        finished: deque[FinishedPrediction] = deque(maxlen=self.finished.maxlen)
        for _, kind, i in events:
            if self._stop.is_set():
                return
            job = history[i]
            if kind == 1:
                predicted[i] = planned_runtime(fresh, job)
                continue
            runtime = _runtime(job)
            samples.append((predicted[i], runtime))
            finished.append(_finished(job, predicted.pop(i), runtime))
            fresh.observe(job, runtime)
            self.replayed += 1
        self.observed += self.replayed
        if _version(fresh) > 0 or self.predictor.model_version() == 0:
            self.predictor.replace(fresh)
            self.recent.extend(samples)
            self.finished.extend(finished)
            if _version(fresh) > 0:
                self.model_time = self.clock.now()
                self.model_source = "replay"
                self._save()
        else:
            # Too little history for a model, but one was loaded: keep it and give it
            # the history its features read.
            for job in history:
                self.predictor.observe(job, _runtime(job))
            inner = self.predictor.inner
            if isinstance(inner, LearnedPredictor):  # frozen at load, before this history
                with self.predictor.lock:
                    inner.caught_up()
            self.recent.extend(samples)
            self.finished.extend(finished)
        # the jobs running when the server started were planned before this history was
        # known; planned from now on with it (jobs started since keep their predictions)
        self.predictor.unpin_started_before(self.started_at)
        log.info(
            "predictor replayed the accounting history",
            extra={"jobs": self.replayed, "model_version": self.predictor.model_version()},
        )

    def _record_start(self, job: Job) -> None:
        with self.predictor.lock:
            runtime = self.predictor.planned(job)  # pins it, if not yet
            version = self.predictor.model_version()
        self.at_start[job.id] = StartPrediction(runtime, version)

    def _finish(self, job: Job) -> None:
        start = self.at_start.pop(job.id, None)
        assert job.end_time is not None
        if (job.id, job.end_time) in self._replayed_recent:
            self.predictor.forget(job.id)
            return  # ended while the server started: the replay has observed it
        runtime = _runtime(job)
        with self.predictor.lock:
            predicted = start.runtime_s if start is not None else self.predictor.planned(job)
            before = self.predictor.model_version()
            self.predictor.observe(job, runtime)  # (drops its pin)
            after = self.predictor.model_version()
            self.recent.append((predicted, runtime))
            self.finished.append(_finished(job, predicted, runtime))
            report = self.on_finished
            if report is not None and predicted < UNLIMITED_S:  # as ``accuracy`` leaves out
                report(self.predictor.name, predicted, runtime)
            tell = self.on_run_finished
            if tell is not None and start is not None:
                tell(job, start.runtime_s, start.model_version, runtime)
            self.observed += 1  # last: tests wait on it
            if after != before:
                self.model_time = self.clock.now()
                self.model_source = "live"
        if after != before:
            self._save()  # (with the lock let go: see ``_save``)

    def _save(self) -> None:
        path = self.model_path
        if path is None:
            return
        inner = self.predictor.inner
        if not isinstance(inner, LearnedPredictor):  # (the only one that saves)
            return
        try:
            # made under the lock, written after letting go of it (the caller must not
            # hold it): a pass's backfill stage, which holds the lock, does not wait for
            # the disk
            with self.predictor.lock:
                text = inner.saved_text()
            if text is not None:
                write_model(path, text)
        except OSError as err:
            log.warning("saving the predictor model failed", extra={"path": str(path)})
            self.last_error = f"save: {err}"

    # -- reads (event loop) ---------------------------------------------------------------
    def start_prediction(self, job_id: int) -> tuple[float, int] | None:
        """(run time predicted when the job started, model version then) of a running
        job, for the anomaly detector; None when not recorded (yet)."""
        found = self.at_start.get(job_id)
        return None if found is None else (found.runtime_s, found.model_version)

    def planned_runtime(self, job: Job, elapsed_s: float = 0.0) -> float | None:
        """The run time the scheduler plans ``job`` with (corrected after ``elapsed_s`` of
        running), or ``None`` while the predictor is busy (never waits): training, or a
        pass's backfill stage, which holds it for the whole stage. ``estimate`` stands
        in with the job's last answer instead."""
        return self.predictor.try_planned_runtime(job, elapsed_s)

    def estimate(self, job: Job, now: float) -> tuple[float, float | None] | None:
        """(planned run time, predicted end) of a pending or running job, as the backfill
        planner sees it: a running job ends at start + its prediction (corrected once it
        has outlived it: ``SharedPredictor.planned``) + the time it spent suspended
        (neither run time nor counted toward its limit), never before ``now`` (a job
        killed at its limit runs on for its kill wait), a pending one with an expected
        start at that start + its prediction (no end without one). ``None`` for a job
        that has ended, one without any estimate (no time limit and nothing learnt: the
        planner holds it for a year, as ``accuracy`` leaves out), or when the predictor
        is busy and nothing was read for the job before (or the job has outlived it).

        Never waits for the predictor: while it trains or a pass's backfill stage holds
        it, the last answer read for the job (or its prediction at start) stands in as
        long as the job has not outlived it (a running job's plan moves only when it
        does, by the configured correction, which may need the model); an answer
        outlived meanwhile gives ``None``."""
        state = job.state
        if not (state is JobState.PENDING or state.is_active):
            return None
        started = job.start_time if state.is_active else None
        # time suspended is no run time: the agent adds it to the job's deadline
        suspended = suspended_seconds(job, now) if started is not None else 0.0
        elapsed = max(now - started - suspended, 0.0) if started is not None else 0.0
        runtime = self.predictor.try_planned_runtime(job, elapsed)
        if runtime is None:
            base = self._last_read.get(job.id)
            if base is None:
                at_start = self.at_start.get(job.id)
                base = at_start.runtime_s if at_start is not None else None
            limit = float(job.time_limit_s)
            if base is None or (started is not None and elapsed >= base and not 0 < limit <= base):
                return None  # (a plan at the time limit never moves: the job ends there)
            runtime = base
        else:
            if len(self._last_read) >= 10_000:
                self._last_read.clear()
            self._last_read[job.id] = runtime
        if runtime >= UNLIMITED_S:
            return None  # no time limit, nothing learnt: planned as a year, no estimate
        if started is not None:
            # past its time limit (the planned run time stops there) a job still runs
            # through its kill wait: it ends now at the earliest, not at a moment past
            return runtime, max(started + suspended + runtime, now)
        start = job.expected_start
        return runtime, None if start is None else start + runtime

    def recent_finished(self, limit: int) -> list[FinishedPrediction]:
        """The last ``limit`` finished runs with a finite prediction, newest first."""
        # tuple(deque): a consistent copy while the worker appends (see ``status``)
        rows = [f for f in reversed(tuple(self.finished)) if f.predicted_s < UNLIMITED_S]
        return rows[:limit]

    def status(self) -> dict[str, Any]:
        inner: Any = self.predictor.inner
        now = self.clock.now()
        details = inner.status() if hasattr(inner, "status") else {}
        return {
            "predictor": self.predictor.name,
            "model_version": self.predictor.model_version(),
            "trained_on": int(getattr(inner, "trained_on", 0)),
            "model_age_seconds": (
                None if self.model_time is None else round(max(now - self.model_time, 0.0), 1)
            ),
            "model_source": self.model_source,
            "model_path": str(self.model_path) if self.model_path else None,
            "finished_jobs_seen": self.observed,
            "replayed_jobs": self.replayed,
            "replaying": self.replaying,
            "queued": self._queue.qsize(),
            # tuple(deque) runs in C without releasing the GIL: a consistent copy even
            # while the worker appends
            "recent": accuracy(tuple(self.recent)),
            "details": {k: v for k, v in details.items() if isinstance(v, int | float)},
            "last_error": self.last_error or str(getattr(inner, "unavailable", "")),
        }


def _version(predictor: Predictor) -> int:
    return int(getattr(predictor, "model_version", 0))
