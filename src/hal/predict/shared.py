"""``SharedPredictor``: one predictor used by several threads of the server.

The scheduling pass (``predict``/``prepare`` on the scheduler's worker thread), the
prediction service's trainer (``observe``, which may train a model for a fraction of a
second) and request handlers (``hal show job``) all reach the same predictor. Predictors
themselves are single-threaded; this wrapper serialises every call with one lock.

Code on the event loop must never wait for that lock (training holds it): it uses
``try_predict``, which answers ``None`` instead of waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from hal.core.job import Job
from hal.predict.protocol import BatchPredictor, Predictor, planned_runtime


class SharedPredictor:
    def __init__(self, inner: Predictor) -> None:
        self._inner = inner
        self.lock = threading.RLock()

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

    def predict(self, job: Job) -> float:
        with self.lock:
            return self._inner.predict(job)

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

    def try_planned_runtime(self, job: Job, elapsed_s: float = 0.0) -> float | None:
        """``planned_runtime`` without waiting: ``None`` while another thread holds the
        predictor (the trainer may hold it for a fraction of a second)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return planned_runtime(self._inner, job, elapsed_s)
        finally:
            self.lock.release()
