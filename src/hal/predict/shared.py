"""``SharedPredictor``: one predictor used by several threads of the server.

The scheduling pass (``predict``/``prepare`` on the scheduler's worker thread), the
prediction service's trainer (``observe``, which may train a model for a fraction of a
second) and request handlers (``hal show job``) all reach the same predictor. Predictors
themselves are single-threaded; this wrapper serialises every call with one lock.

Code on the event loop must never wait for that lock (training holds it): it uses
``try_predict``, which answers ``None`` instead of waiting.

A running job keeps the prediction it was first given once started (keyed by job id and
start time, so a requeued job is predicted afresh), as ``hal.predict.pinned`` does in the
simulator: a model retrained on other jobs' ends must not move the planned end of a job
already running; only the expiry correction does. ``unpin`` when the job ends. (The
jobs found running at the server's start are pinned again once the accounting has been
replayed: ``unpin_started_before``.)

The correction: a predictor with its own (``ExpiryPredictor``: ``learned``) re-predicts a
job that has outlived its plan from how long it has run (``planned``, the simulator's
``correction="model"``), and the new value is pinned until it expires in turn, always
from the prediction the job started with; others get Tsafrir's steps
(``hal.predict.protocol.corrected``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from hal.core.job import Job
from hal.predict.protocol import BatchPredictor, ExpiryPredictor, Predictor, planned_runtime


class SharedPredictor:
    def __init__(self, inner: Predictor) -> None:
        self._inner = inner
        self._own = inner if isinstance(inner, ExpiryPredictor) else None
        self.lock = threading.RLock()
        self._pins: dict[tuple[int, float], float] = {}  # (job id, start) → prediction
        # (job id, start) → the prediction it started with, once it has outlived it
        self._first: dict[tuple[int, float], float] = {}

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def inner(self) -> Predictor:
        """The wrapped predictor; hold ``lock`` while using it."""
        return self._inner

    def replace(self, inner: Predictor) -> None:
        """Swap in another predictor of the same name (e.g. one rebuilt from history)."""
        if inner.name != self._inner.name:
            raise ValueError(f"cannot replace predictor {self.name!r} by {inner.name!r}")
        with self.lock:
            self._inner = inner
            self._own = inner if isinstance(inner, ExpiryPredictor) else None

    def predict(self, job: Job) -> float:
        with self.lock:
            start = job.start_time
            if start is None:
                return self._inner.predict(job)
            found = self._pins.get((job.id, start))
            if found is None:
                found = self._pins[(job.id, start)] = self._inner.predict(job)
            return found

    def unpin(self, job: Job) -> None:
        """``job`` has ended: forget the prediction it ran with."""
        if job.start_time is not None:
            with self.lock:
                self._pins.pop((job.id, job.start_time), None)
                self._first.pop((job.id, job.start_time), None)

    def unpin_started_before(self, when: float) -> None:
        """Forget the predictions of runs started before ``when``: at the server's start,
        the jobs it found running were pinned by its first passes, before the accounting
        history was replayed (knowing none of it: with no model, their time limit). Not
        what they started with; the replayed predictor plans them instead."""
        with self.lock:
            for pins in (self._pins, self._first):
                for key in [k for k in pins if k[1] < when]:
                    del pins[key]

    def observe(self, job: Job, runtime_s: float) -> None:
        with self.lock:
            self._inner.observe(job, runtime_s)

    def prepare(self, jobs: Sequence[Job]) -> None:
        inner = self._inner
        if isinstance(inner, BatchPredictor):
            with self.lock:
                inner.prepare(jobs)

    def model_version(self) -> int:
        """The inner predictor's model version (0: it has no model, e.g. ``user``)."""
        return int(getattr(self._inner, "model_version", 0))

    def planned(self, job: Job, elapsed_s: float = 0.0) -> float:
        """The run time to plan ``job`` with after ``elapsed_s`` of running
        (``planned_runtime``), corrected by the predictor's own rule when it has one."""
        with self.lock:
            own, start = self._own, job.start_time
            if own is not None and start is not None and elapsed_s > 0:
                pinned = self.predict(job)
                if elapsed_s >= pinned:
                    key = (job.id, start)
                    first = self._first.setdefault(key, pinned)
                    self._pins[key] = own.extended(job, first, elapsed_s)
            return planned_runtime(self, job, elapsed_s)

    def try_planned_runtime(self, job: Job, elapsed_s: float = 0.0) -> float | None:
        """``planned`` without waiting: ``None`` while another thread holds the
        predictor (the trainer may hold it for a fraction of a second)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.planned(job, elapsed_s)
        finally:
            self.lock.release()
