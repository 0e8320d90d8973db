"""``PinnedPredictor``: a started job keeps the prediction it started with, and when it
outlives it, the expiry correction it is planned with. The one planning policy of HAL:
the simulator replays with it and the server plans with it (``hal.predict.registry``
builds it from a predictor's and a correction's name).

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
remembered value for good (for that run: a requeued job that starts again is pinned
afresh). The caller should therefore ask about a job when it starts (the simulator does:
it records the prediction each job starts with), else the first question about the
running job fixes it. ``observe`` (or ``forget``) drops the job.

The correction, what an expired prediction becomes (``RULES``):

* ``steps``: Tsafrir's stepwise correction (``planned_runtime`` applies it);
* ``request``: the job's time limit (the user's estimate, the one bound that cannot be
  wrong), the other rule the literature uses;
* ``model``: a predictor with its own correction (``ExpiryPredictor``: ``learned``)
  re-predicts the job knowing how long it has run already, and the new value is pinned
  until it expires in turn; predictors without one keep the steps.

``expired`` applies it at the instant a prediction expires (the simulator calls it
then); ``planned`` is the run time to plan with after any time run, the expiries that
came meanwhile applied in turn as ``expired`` would have at each (the server, which has
no expiry events, asks at each pass): both give the same plan at the same moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hal.core.job import Job
from hal.predict.protocol import BatchPredictor, ExpiryPredictor, Predictor, planned_runtime

RULES = ("steps", "request", "model")


class PinnedPredictor:
    def __init__(
        self, inner: Predictor, *, expire_to_request: bool = False, correction: str = ""
    ) -> None:
        if correction and correction not in RULES:
            raise ValueError(f"correction must be one of {', '.join(RULES)}")
        self.correction = correction or ("request" if expire_to_request else "steps")
        self.expire_to_request = self.correction == "request"
        self.replace(inner)
        self._first: dict[int, float] = {}  # expired runs: the prediction they started with
        self._pending: dict[int, float] = {}  # last answer while the job waited
        # running jobs: (start time of the run, the answer it started with)
        self._pinned: dict[int, tuple[float, float]] = {}
        # per pass in a forked process still out (``fork_began``'s tokens): the jobs
        # forgotten since it began, whose changes by it are older than their forgetting
        self._watching: list[set[int]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def replace(self, inner: Predictor) -> None:
        """Predict with ``inner`` from now on (e.g. a model rebuilt from the accounting);
        the runs pinned so far keep their predictions."""
        self.inner = inner
        # the protocols checked once: isinstance against a runtime-checkable Protocol
        # walks its members, and prepare/expired run at every pass and expiry
        self._batch = inner if isinstance(inner, BatchPredictor) else None
        self._own = inner if isinstance(inner, ExpiryPredictor) else None

    def predict(self, job: Job) -> float:
        start = job.start_time
        if start is None:
            waiting = self._pending[job.id] = self.inner.predict(job)
            return waiting
        found = self._pinned.get(job.id)
        if found is not None and found[0] == start:
            return found[1]
        self._first.pop(job.id, None)  # (an earlier run of a requeued job)
        value = self._pending.pop(job.id, None)
        if value is None:
            value = self.inner.predict(job)
        self._pinned[job.id] = (start, value)
        return value

    def expired(self, job: Job) -> None:
        """``job`` (running) has just outlived its prediction. With the "request"
        correction it is planned to its time limit from now on; with "model" (and a
        predictor that has its own correction) it is re-predicted given that it has run
        as long as its last prediction (it expires at that instant); otherwise nothing
        changes here (the stepwise correction applies)."""
        start = job.start_time
        if start is None:
            return
        if self.correction == "request" and job.time_limit_s > 0:
            self._pinned[job.id] = (start, float(job.time_limit_s))
            return
        own = self._own
        if self.correction == "model" and own is not None:
            current = self.predict(job)
            if current:
                first = self._first.setdefault(job.id, current)
                self._pinned[job.id] = (start, own.extended(job, first, current))

    def planned(self, job: Job, elapsed_s: float = 0.0) -> float:
        """The run time to plan ``job`` with after ``elapsed_s`` of running: its pinned
        prediction, each expiry it has outlived since corrected by ``expired`` in turn
        (what a replay that saw every expiry as it happened has planned by now), then
        ``planned_runtime`` (which applies the steps to what no rule moved)."""
        if job.start_time is not None and elapsed_s > 0:
            planned = planned_runtime(self, job)
            while elapsed_s >= planned:
                self.expired(job)
                after = planned_runtime(self, job)
                if after <= planned:  # nothing moved it (the steps, or the time limit)
                    break
                planned = after
        return planned_runtime(self, job, elapsed_s)

    def observe(self, job: Job, runtime_s: float) -> None:
        self.forget(job.id)
        self.inner.observe(job, runtime_s)

    def forget(self, job_id: int) -> None:
        """Drop what is kept for the job: it ended without being observed (cancelled
        while waiting) or its run ended and it waits again (requeued)."""
        self._pinned.pop(job_id, None)
        self._pending.pop(job_id, None)
        self._first.pop(job_id, None)
        for forgotten in self._watching:
            forgotten.add(job_id)

    def unpin_started_before(self, when: float) -> None:
        """Forget the predictions of runs started before ``when`` (the server's jobs
        found running at its start, pinned before the accounting was replayed): the next
        question pins them afresh."""
        for job_id in [j for j, (start, _) in self._pinned.items() if start < when]:
            del self._pinned[job_id]
            self._first.pop(job_id, None)
            for forgotten in self._watching:
                forgotten.add(job_id)

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

    # -- a pass decided in a forked process (``hal.scheduler.forked.PassCarried``) -----

    def fork_began(self) -> set[int]:
        """A pass is being forked (the parent): the jobs forgotten from now on, until
        ``fork_ended``, are gathered in the set returned (its token)."""
        forgotten: set[int] = set()
        self._watching.append(forgotten)
        return forgotten

    def fork_ended(self, token: set[int]) -> None:
        self._watching = [w for w in self._watching if w is not token]

    def pass_mark(self) -> PinsMark:
        """What is kept, before a pass or its forecast (the child)."""
        return dict(self._first), dict(self._pending), dict(self._pinned)

    def pass_changes(self, mark: PinsMark) -> PinsChanges:
        """What changed of what is kept since ``mark``, each with what was there then
        (the child)."""
        first, pending, pinned = mark
        return _diff(first, self._first), _diff(pending, self._pending), _diff(pinned, self._pinned)

    def adopt(self, changes: PinsChanges, token: set[int]) -> None:
        """A forked pass's changes (the parent), each where this predictor still holds
        what the pass found and forgot nothing of the job since the pass began (its
        ``token``): a job that ended meanwhile is not pinned again, and what a later
        pass changed is not put back."""
        kept_dicts: tuple[_Kept, ...] = (self._first, self._pending, self._pinned)
        for kept, changed in zip(kept_dicts, changes, strict=True):
            for job_id, (found, value) in changed.items():
                if job_id in token or kept.get(job_id, _MISSING) != found:
                    continue
                if value is _MISSING:
                    kept.pop(job_id, None)
                else:
                    kept[job_id] = value


class _Missing:
    """Nothing kept for a job (pickled as itself: one per process)."""

    def __reduce__(self) -> str:
        return "_MISSING"


_MISSING: Any = _Missing()
_Kept = dict[int, Any]
PinsMark = tuple[dict[int, float], dict[int, float], dict[int, tuple[float, float]]]
# per kept dict: job id → (what the pass found, what it left; ``_MISSING``: nothing)
PinsChanges = tuple[dict[int, tuple[Any, Any]], ...]


def _diff(before: _Kept, after: _Kept) -> dict[int, tuple[Any, Any]]:
    changed = {
        k: (before.get(k, _MISSING), v) for k, v in after.items() if before.get(k, _MISSING) != v
    }
    changed.update((k, (v, _MISSING)) for k, v in before.items() if k not in after)
    return changed
