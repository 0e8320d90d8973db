"""Suspended time: recorded on suspend and resume, left out of run times."""

from __future__ import annotations

from hal.core.suspension import suspended_seconds
from hal.state.suspension import SUSPENDED_AT, suspension
from hal.testing import make_job


def test_suspensions_add_up_and_an_ongoing_one_counts_until_now_or_the_end() -> None:
    extra = suspension({}, 100.0)  # suspended at 100
    assert extra == {SUSPENDED_AT: "100.0"}
    extra = suspension(extra, 130.0)  # resumed at 130
    extra = suspension(extra, 200.0)  # suspended again at 200
    job = make_job(1).build().evolve(extra=extra, start_time=50.0)
    assert suspended_seconds(job, 210.0) == 40.0  # 30 + 10 so far
    ended = job.evolve(end_time=205.0)  # cancelled while suspended
    assert suspended_seconds(ended, 999.0) == 35.0
    resumed = job.evolve(extra=suspension(extra, 250.0))
    assert SUSPENDED_AT not in resumed.extra
    assert suspended_seconds(resumed, 999.0) == 80.0
