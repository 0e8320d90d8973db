"""Artifact canaries (hal.state.rollout): the share a canary takes, chosen by a hash of
the job id, and the shares refused."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.state.rollout import canary_pick, parse_share


@pytest.mark.parametrize("share", [10.0, 50.0, 90.0])
def test_a_canary_takes_about_its_share_of_job_ids(share: float) -> None:
    picked = sum(canary_pick("app", "stable", job_id, share) for job_id in range(1, 20_001))
    assert abs(picked / 20_000 - share / 100) < 0.01


def test_the_choice_is_the_same_each_time_and_differs_by_alias() -> None:
    first = [canary_pick("app", "stable", i, 30.0) for i in range(1000)]
    assert first == [canary_pick("app", "stable", i, 30.0) for i in range(1000)]
    assert first != [canary_pick("app", "beta", i, 30.0) for i in range(1000)]


def test_a_larger_share_keeps_the_jobs_a_smaller_one_took() -> None:
    small = {i for i in range(5000) if canary_pick("app", "stable", i, 10.0)}
    large = {i for i in range(5000) if canary_pick("app", "stable", i, 25.0)}
    assert small < large


@pytest.mark.parametrize(("text", "share"), [("10%", 10.0), ("2.5 %", 2.5), ("99", 99.0)])
def test_shares_are_read_with_or_without_percent(text: str, share: float) -> None:
    assert parse_share(text) == share


@pytest.mark.parametrize("text", ["0%", "100%", "150%", "-5", "ten", "nan", ""])
def test_a_share_outside_0_to_100_is_refused_saying_what_to_give(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"between 0 and 100 %.*10%"):
        parse_share(text)
