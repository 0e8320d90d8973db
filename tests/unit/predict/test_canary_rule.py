"""The canary rule (hal.predict.anomaly.CanaryRule): a canary version is bad when both it
and the version before it have enough ended jobs, its failure rate is past the effect
size, and the rank-sum test on the outcomes says it is worse beyond chance."""

from __future__ import annotations

import pytest

from hal.predict.anomaly import CanaryRule, NodeFailures


def test_a_canary_failing_every_job_against_none_is_bad() -> None:
    verdict = CanaryRule().judge(NodeFailures(5, 5), NodeFailures(20, 0))
    assert verdict is not None
    assert (verdict.canary_jobs, verdict.canary_failed) == (5, 5)
    assert (verdict.previous_jobs, verdict.previous_failed) == (20, 0)
    assert verdict.canary_rate == 1.0 and verdict.previous_rate == 0.0
    assert verdict.threshold == pytest.approx(0.2)
    assert 0 < verdict.p_value < 0.001


@pytest.mark.parametrize(
    ("canary", "previous"),
    [
        ((4, 4), (20, 0)),  # too few canary jobs yet
        ((5, 5), (4, 0)),  # too few on the version before: nothing to compare with
        ((10, 3), (10, 1)),  # 30 % against 10 %: under 3 × 10 % + 20 %
        ((6, 4), (6, 2)),  # 67 % against 33 %: not past 3 × 33 % + 20 %
    ],
)
def test_too_few_jobs_or_too_small_a_difference_is_no_verdict(
    canary: tuple[int, int], previous: tuple[int, int]
) -> None:
    assert CanaryRule().judge(NodeFailures(*canary), NodeFailures(*previous)) is None


def test_a_large_rate_on_few_jobs_needs_the_test_too() -> None:
    # 3 of 5 against 1 of 20 passes the effect size (60 % > 35 %); p is about 0.03
    rule = CanaryRule()
    assert rule.judge(NodeFailures(5, 3), NodeFailures(20, 1)) is None  # alpha 0.01
    loose = CanaryRule(alpha=0.05).judge(NodeFailures(5, 3), NodeFailures(20, 1))
    assert loose is not None and 0.01 < loose.p_value < 0.05


def test_more_jobs_make_the_same_rates_significant() -> None:
    small = CanaryRule(alpha=1.0).judge(NodeFailures(5, 3), NodeFailures(20, 1))
    large = CanaryRule(alpha=1.0).judge(NodeFailures(50, 30), NodeFailures(200, 10))
    assert small is not None and large is not None
    assert large.p_value < small.p_value / 100
