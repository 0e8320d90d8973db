from __future__ import annotations

from hal.core.job import Job, JobSpec
from hal.predict import Avg2Predictor


def job(user: str, limit: int, jid: int = 1) -> Job:
    return Job(id=jid, spec=JobSpec(user=user, script=""), time_limit_s=limit)


def test_without_history_the_request_is_the_prediction() -> None:
    assert Avg2Predictor().predict(job("ann", 3600)) == 3600.0


def test_the_average_of_the_users_last_two_jobs() -> None:
    p = Avg2Predictor()
    for runtime in (1000.0, 100.0, 300.0):
        p.observe(job("ann", 3600), runtime)
    assert p.predict(job("ann", 3600)) == 200.0  # (100 + 300) / 2: the first is forgotten
    assert p.predict(job("bob", 3600)) == 3600.0  # other users have their own history


def test_never_more_than_the_request() -> None:
    p = Avg2Predictor()
    p.observe(job("ann", 7200), 5000.0)
    assert p.predict(job("ann", 600)) == 600.0
