"""``SharedPredictor``: the server's planning predictor, used by several of its threads.

The scheduling pass (``predict``/``prepare``/``planned`` on the scheduler's worker
thread), the prediction service's trainer (``observe``, which may train a model for a
fraction of a second) and request handlers (``hal show job``) all reach the same
predictor. Predictors themselves are single-threaded; this wrapper serialises every call
with one lock.

Code on the event loop must never wait for that lock (training holds it, and a pass's
backfill stage holds it for the whole stage: ``Backfill.planning``): it uses
``try_planned_runtime``, which answers ``None`` instead of waiting.
``PredictionService.estimate`` (``hal show job``'s expected end, the cloud budget's
expected cost) then stands in with the last answer it read for the job, or its
prediction at start.

What it wraps is what ``hal.predict.planning_predictor`` builds from ``[scheduler]
predictor`` and ``[scheduler] correction``, the simulator's own policy: for ``avg2`` and
``learned`` a ``PinnedPredictor``, so a running job keeps the prediction it started with
(per run: a requeued job is predicted afresh) while models retrain on other jobs' ends,
and an expired prediction is corrected by the configured rule (``PinnedPredictor.planned``:
the server has no expiry events, so each pass applies the expiries that came since, as
the simulator did when each happened). ``inner`` is the model underneath (what is
trained, saved and loaded).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from hal.core.job import Job
from hal.predict.pinned import PinnedPredictor, PinsChanges, PinsMark
from hal.predict.protocol import BatchPredictor, Predictor, planned_runtime


class SharedPredictor:
    def __init__(self, planner: Predictor) -> None:
        self._planner = planner
        self._pinned = planner if isinstance(planner, PinnedPredictor) else None
        # checked once: isinstance against a runtime-checkable Protocol walks its members
        self._batch = planner if isinstance(planner, BatchPredictor) else None
        self.lock = threading.RLock()

    @property
    def name(self) -> str:
        return self._planner.name

    @property
    def inner(self) -> Predictor:
        """The model (under the pins, if any); hold ``lock`` while using it."""
        return self._pinned.inner if self._pinned is not None else self._planner

    @property
    def correction(self) -> str:
        """The rule an expired prediction is corrected by (``hal.predict.CORRECTIONS``,
        resolved)."""
        return self._pinned.correction if self._pinned is not None else "steps"

    def replace(self, inner: Predictor) -> None:
        """Swap in another model of the same name (e.g. one rebuilt from history); the
        runs pinned so far keep their predictions."""
        if inner.name != self.name:
            raise ValueError(f"cannot replace predictor {self.name!r} by {inner.name!r}")
        with self.lock:
            if self._pinned is not None:
                self._pinned.replace(inner)
            else:
                self._planner = inner
                self._batch = inner if isinstance(inner, BatchPredictor) else None

    def predict(self, job: Job) -> float:
        with self.lock:
            return self._planner.predict(job)

    def forget(self, job_id: int) -> None:
        """The job's run ended without it being observed (requeued, or cancelled before
        it ran): drop its pin."""
        if self._pinned is not None:
            with self.lock:
                self._pinned.forget(job_id)

    def unpin_started_before(self, when: float) -> None:
        """Forget the predictions of runs started before ``when``: at the server's start,
        the jobs it found running were pinned by its first passes, before the accounting
        history was replayed (knowing none of it: with no model, their time limit). Not
        what they started with; the replayed predictor plans them instead."""
        if self._pinned is not None:
            with self.lock:
                self._pinned.unpin_started_before(when)

    def observe(self, job: Job, runtime_s: float) -> None:
        with self.lock:
            self._planner.observe(job, runtime_s)

    def prepare(self, jobs: Sequence[Job]) -> None:
        batch = self._batch
        if batch is not None:
            with self.lock:
                batch.prepare(jobs)

    def model_version(self) -> int:
        """The model's version (0: it has none, e.g. ``user``)."""
        return int(getattr(self.inner, "model_version", 0))

    def planned(self, job: Job, elapsed_s: float = 0.0) -> float:
        """The run time to plan ``job`` with after ``elapsed_s`` of running: the pinned
        prediction corrected by the configured rule (``PinnedPredictor.planned``), or
        ``planned_runtime`` for a predictor that pins nothing (``user``)."""
        with self.lock:
            pinned = self._pinned
            if pinned is not None:
                return pinned.planned(job, elapsed_s)
            return planned_runtime(self._planner, job, elapsed_s)

    def try_planned_runtime(self, job: Job, elapsed_s: float = 0.0) -> float | None:
        """``planned`` without waiting: ``None`` while another thread holds the
        predictor (the trainer, for a fraction of a second; a pass's backfill stage, for
        the whole stage)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.planned(job, elapsed_s)
        finally:
            self.lock.release()

    # -- a pass decided in a forked process (``hal.scheduler.forked.PassCarried``): the
    # pins a pass makes (``PinnedPredictor``) travel back to the server ------------------

    def fork_began(self) -> set[int] | None:
        if self._pinned is None:
            return None
        with self.lock:
            return self._pinned.fork_began()

    def fork_ended(self, token: set[int] | None) -> None:
        if self._pinned is not None and token is not None:
            with self.lock:
                self._pinned.fork_ended(token)

    def pass_mark(self) -> PinsMark | None:
        return self._pinned.pass_mark() if self._pinned is not None else None

    def pass_changes(self, mark: PinsMark | None) -> PinsChanges | None:
        if self._pinned is None or mark is None:
            return None
        return self._pinned.pass_changes(mark)

    def adopt(self, changes: PinsChanges | None, token: set[int] | None) -> None:
        if self._pinned is not None and changes is not None and token is not None:
            with self.lock:
                self._pinned.adopt(changes, token)
