"""``PinnedPredictor``: waiting jobs are predicted afresh, started jobs keep the
prediction they started with."""

from __future__ import annotations

from collections.abc import Sequence

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
