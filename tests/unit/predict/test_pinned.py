"""``PinnedPredictor``: waiting jobs are predicted afresh, started jobs keep the
prediction they started with."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import Avg2Predictor, BatchPredictor, PinnedPredictor


def job(jid: int, user: str = "ann", limit: int = 3600) -> Job:
    return Job(id=jid, spec=JobSpec(user=user, script=""), time_limit_s=limit)


def started(j: Job, at: float = 0.0) -> Job:
    return j.evolve(state=JobState.RUNNING, start_time=at)


def test_a_waiting_job_follows_the_history_a_running_one_does_not() -> None:
    p = PinnedPredictor(Avg2Predictor())
    p.observe(job(1), 100.0)
    waiting, running = job(2), job(3)
    assert p.predict(running) == 100.0  # asked when it starts (the simulator does)
    assert p.predict(started(running)) == 100.0
    p.observe(job(4), 300.0)  # the user's history moves: avg2 is now 200
    assert p.predict(waiting) == 200.0
    assert p.predict(started(running)) == 100.0  # pinned at its start


def test_the_pin_is_forgotten_when_the_job_ends() -> None:
    p = PinnedPredictor(Avg2Predictor())
    j = job(1)
    p.predict(j)
    assert p.predict(started(j)) == 3600.0  # no history: the request
    p.observe(started(j), 50.0)
    assert p.predict(started(job(2))) == 50.0  # never asked while waiting: asked now
    assert p.name == "avg2"


class Batch:
    name = "batch"

    def __init__(self) -> None:
        self.prepared: list[int] = []

    def predict(self, job: Job) -> float:
        return 10.0

    def observe(self, job: Job, runtime_s: float) -> None:
        return None

    def prepare(self, jobs: Sequence[Job]) -> None:
        self.prepared.extend(j.id for j in jobs)


def test_only_unpinned_jobs_are_prepared() -> None:
    inner = Batch()
    p = PinnedPredictor(inner)
    assert isinstance(p, BatchPredictor)
    a, b = job(1), job(2)
    p.predict(a)
    p.predict(started(a))
    p.prepare([started(a), b])
    assert inner.prepared == [2]


class OwnCorrection:
    """A predictor with its own expiry correction: doubles what the job has run."""

    name = "own"

    def __init__(self) -> None:
        self.asked: list[tuple[float, float]] = []

    def predict(self, job: Job) -> float:
        return 100.0

    def observe(self, job: Job, runtime_s: float) -> None:
        return None

    def extended(self, job: Job, first_s: float, elapsed_s: float) -> float:
        self.asked.append((first_s, elapsed_s))
        return min(2 * elapsed_s, float(job.time_limit_s))


def test_the_model_correction_re_predicts_from_the_elapsed_time() -> None:
    inner = OwnCorrection()
    p = PinnedPredictor(inner, correction="model")
    j = started(job(1))
    assert p.predict(j) == 100.0
    p.expired(j)  # at 100 s
    assert p.predict(j) == 200.0
    p.expired(j)  # at 200 s: still told the prediction it started with
    assert p.predict(j) == 400.0
    assert inner.asked == [(100.0, 100.0), (100.0, 200.0)]
    p.observe(j, 450.0)
    p.predict(started(job(1)))
    p.expired(started(job(1)))  # the same id run again starts afresh
    assert inner.asked[-1] == (100.0, 100.0)


def test_without_its_own_correction_a_predictor_keeps_the_steps() -> None:
    p = PinnedPredictor(Avg2Predictor(), correction="model")
    p.observe(job(1), 100.0)
    j = started(job(2))
    assert p.predict(j) == 100.0
    p.expired(j)
    assert p.predict(j) == 100.0  # unchanged: planned_runtime applies the steps
    with pytest.raises(ValueError):
        PinnedPredictor(Avg2Predictor(), correction="sometimes")


def test_the_request_correction_is_still_there() -> None:
    p = PinnedPredictor(OwnCorrection(), expire_to_request=True)
    j = started(job(1, limit=3600))
    p.predict(j)
    p.expired(j)
    assert p.predict(j) == 3600.0
