"""Application feedback's shapes (``hal.core.feedback``): what a job may report, the goals
it may declare, the job token, and a metric's series staying bounded over a long run."""

from __future__ import annotations

import math

import pytest

from hal.core.errors import InvalidRequest, Unauthenticated
from hal.core.feedback import (
    MAX_METRICS,
    FeedbackSeries,
    check_report,
    check_token,
    format_goals,
    job_token,
    parse_goals,
)

KEY = b"k" * 32


def test_a_report_of_named_finite_numbers_is_taken_as_floats() -> None:
    assert check_report({"samples_per_s": 1830, "loss_2": 0.25, "_x": -1.5}) == {
        "samples_per_s": 1830.0,
        "loss_2": 0.25,
        "_x": -1.5,
    }


@pytest.mark.parametrize(
    ("metrics", "says"),
    [
        ({}, "at least one metric"),
        ({"bad-name": 1.0}, "not allowed"),
        ({"2fast": 1.0}, "not allowed"),
        ({"a b": 1.0}, "not allowed"),
        ({"x" * 65: 1.0}, "not allowed"),
        ({"nan": math.nan}, "not a finite number"),
        ({"inf": math.inf}, "not a finite number"),
        ({"flag": True}, "not a number"),
        ({"text": "12"}, "not a number"),
        ({f"m{i}": 1.0 for i in range(MAX_METRICS + 1)}, "at most"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_fault(
    metrics: dict[str, float], says: str
) -> None:
    with pytest.raises(InvalidRequest, match=says):
        check_report(metrics)


def test_goals_are_parsed_in_order_and_written_back_the_same() -> None:
    goals = parse_goals(["samples_per_s:max,latency_ms:MIN", " loss : min "])
    assert goals == (("samples_per_s", "max"), ("latency_ms", "min"), ("loss", "min"))
    assert format_goals(goals) == "samples_per_s:max,latency_ms:min,loss:min"
    assert parse_goals([]) == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x", "not NAME:max"),
        ("x:up", "not NAME:max"),
        ("a-b:max", "not allowed"),
        ("x:max,x:min", "twice"),
    ],
)
def test_a_bad_goal_is_refused(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        parse_goals([text])


def test_a_token_is_good_for_its_own_job_and_run_only() -> None:
    token = job_token(KEY, 12, 0)
    check_token(KEY, 12, 0, f"Bearer {token}")
    for job_id, attempt, key in ((13, 0, KEY), (12, 1, KEY), (12, 0, b"o" * 32)):
        with pytest.raises(Unauthenticated, match="not job"):
            check_token(key, job_id, attempt, f"Bearer {token}")
    for header in (None, "", token, "Basic abc"):
        with pytest.raises(Unauthenticated, match="missing token"):
            check_token(KEY, 12, 0, header)
    assert job_token(KEY, 12, 0) == token and job_token(KEY, 1, 20) != job_token(KEY, 12, 0)


def test_a_long_series_stays_bounded_and_keeps_its_recent_points_in_full() -> None:
    series = FeedbackSeries.first(1, "m", 0.0, 0.0)
    for t in range(1, 5000):
        series = series.add_point(float(t), float(t), limit=100)
    assert series.count == 5000
    assert (series.last_time, series.last_value) == (4999.0, 4999.0)
    assert len(series.points) <= 100
    times = [t for t, _ in series.points]
    assert times == sorted(times)  # still oldest first
    assert series.points[-40:] == tuple((float(t), float(t)) for t in range(4960, 5000))
    assert series.points[0] == (0.0, 0.0)  # the start of the run is still there
    assert all(t == v for t, v in series.points)  # values reported, none made up
