"""``PinnedPredictor``: a started job keeps the prediction it started with.

A predictor's answer for a job changes whenever another job finishes (``avg2`` averages
the user's last two, ``learned`` retrains). For a job that is still waiting that is what
we want: it is planned with all we know. For a *running* job it is not: in Tsafrir,
Etsion and Feitelson's EASY++ a job's prediction is made once and only ever changed by
the expiry correction (``hal.predict.protocol.corrected``). Re-predicting a running job
from its user's later jobs moves its planned end for reasons unrelated to the job itself
(a user's quick failure can make a ten-hour job "overdue" in the middle of its run), and
a simulator cannot know when to revisit a plan whose ends move at every completion.

This wrapper asks the wrapped predictor as usual while a job waits (``start_time`` is
None) and remembers the last answer; once the job has started it answers with that
remembered value for good. The caller must therefore ask about a job when it starts
(the simulator does: it records the prediction each job starts with), else the first
question about the running job fixes it. ``observe`` forgets the job.

``expire_to_request=True`` swaps the stepwise correction for the other rule the
literature uses: a job that outlives its prediction is planned to run until its time
limit (the user's estimate, the one bound that cannot be wrong). The caller says when a
prediction has expired (``expired``; the simulator does at the instant it happens).

``correction="model"`` lets a predictor with its own correction (``ExpiryPredictor``:
``learned``) re-predict an expired job knowing how long it has run already; the new
value is pinned until it expires in turn. Predictors without one keep the stepwise rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from hal.core.job import Job
from hal.predict.protocol import BatchPredictor, ExpiryPredictor, Predictor

CORRECTIONS = ("steps", "request", "model")


class PinnedPredictor:
    def __init__(
        self, inner: Predictor, *, expire_to_request: bool = False, correction: str = ""
    ) -> None:
        if correction and correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}")
        self.inner = inner
        # the protocols checked once: isinstance against a runtime-checkable Protocol
        # walks its members, and prepare/expired run at every pass and expiry
        self._batch = inner if isinstance(inner, BatchPredictor) else None
        self._own = inner if isinstance(inner, ExpiryPredictor) else None
        self.correction = correction or ("request" if expire_to_request else "steps")
        self.expire_to_request = self.correction == "request"
        self._first: dict[int, float] = {}  # expired jobs: the prediction they started with
        self._pending: dict[int, float] = {}  # last answer while the job waited
        self._pinned: dict[int, float] = {}  # running jobs: the answer they started with

    @property
    def name(self) -> str:
        return self.inner.name

    def predict(self, job: Job) -> float:
        if job.start_time is None:
            value = self._pending[job.id] = self.inner.predict(job)
            return value
        found = self._pinned.get(job.id)
        if found is None:
            found = self._pending.pop(job.id, None)
            if found is None:
                found = self.inner.predict(job)
            self._pinned[job.id] = found
        return found

    def expired(self, job: Job) -> None:
        """``job`` (running) has just outlived its prediction. With the "request"
        correction it is planned to its time limit from now on; with "model" (and a
        predictor that has its own correction) it is re-predicted given that it has run
        as long as its last prediction (it expires at that instant); otherwise nothing
        changes here (the stepwise correction applies)."""
        if self.correction == "request" and job.time_limit_s > 0:
            self._pinned[job.id] = float(job.time_limit_s)
            return
        own = self._own
        current = self._pinned.get(job.id)
        if self.correction == "model" and own is not None and current:
            first = self._first.setdefault(job.id, current)
            self._pinned[job.id] = own.extended(job, first, current)

    def observe(self, job: Job, runtime_s: float) -> None:
        self._pinned.pop(job.id, None)
        self._pending.pop(job.id, None)
        self._first.pop(job.id, None)
        self.inner.observe(job, runtime_s)

    def prepare(self, jobs: Sequence[Job]) -> None:
        batch = self._batch
        if batch is not None:
            # a running job answers with its pinned value, or the last one it had waiting
            todo = [
                j
                for j in jobs
                if j.start_time is None or not (j.id in self._pinned or j.id in self._pending)
            ]
            if todo:
                batch.prepare(todo)
