"""The expiry correction every predictor shares (Tsafrir, Etsion and Feitelson)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hal.core.job import Job, JobSpec
from hal.predict import CORRECTION_STEPS_S, UserPredictor, corrected, planned_runtime


class Fixed:
    name = "fixed"

    def __init__(self, value: float) -> None:
        self.value = value

    def predict(self, job: Job) -> float:
        return self.value

    def observe(self, job: Job, runtime_s: float) -> None:
        return None


def job(limit: int) -> Job:
    return Job(id=1, spec=JobSpec(user="u", script=""), time_limit_s=limit)


def test_a_job_inside_its_prediction_keeps_it() -> None:
    assert corrected(600.0, 599.0, 3600.0) == 600.0


def test_an_overdue_job_gets_the_first_step_that_reaches_past_now() -> None:
    assert corrected(600.0, 600.0, 0.0) == 660.0  # + 1 min
    assert corrected(600.0, 700.0, 0.0) == 900.0  # + 5 min
    assert corrected(600.0, 2000.0, 0.0) == 2400.0  # + 30 min


def test_the_correction_never_passes_the_time_limit() -> None:
    assert corrected(600.0, 3000.0, 3000.0) == 3000.0
    assert planned_runtime(Fixed(100.0), job(limit=150), elapsed_s=120.0) == 150.0


def test_past_the_last_step_the_plan_moves_with_the_clock() -> None:
    assert corrected(60.0, 10**6, 0.0) == 10**6 + CORRECTION_STEPS_S[-1]


@given(
    predicted=st.floats(1.0, 1e6),
    elapsed=st.floats(0.0, 2e6),
    limit=st.integers(1, 2 * 10**6),
)
def test_planned_runtime_is_bounded_by_the_limit_and_never_in_the_past(
    predicted: float, elapsed: float, limit: int
) -> None:
    """The plan never reaches past the time limit, and while the job can still run (now
    before its limit) the planned end is in the future."""
    planned = planned_runtime(Fixed(predicted), job(limit), elapsed)
    assert 1.0 <= planned <= max(limit, 1)
    if elapsed < limit:
        assert planned > elapsed


def test_the_user_predictor_plans_with_the_request() -> None:
    assert planned_runtime(UserPredictor(), job(limit=3600), elapsed_s=10.0) == 3600.0
