"""``[accounting]``: slurmdbd's purge values (``"12months"``, ``"30days"``, ``"48hours"``)
read as slurmdbd reads them, and a retention that would delete what the server still reads
(fair share's history, jobs in memory) refused at start-up naming the key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hal.config.accounting import DAY_S, HOUR_S, Retention, parse_retention
from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest


@pytest.mark.parametrize(
    ("text", "retention"),
    [
        ("48hours", Retention(seconds=48 * HOUR_S)),
        ("1hour", Retention(seconds=HOUR_S)),
        ("12h", Retention(seconds=12 * HOUR_S)),
        ("30days", Retention(seconds=30 * DAY_S)),
        ("30DAY", Retention(seconds=30 * DAY_S)),
        ("7d", Retention(seconds=7 * DAY_S)),
        ("12months", Retention(months=12)),
        ("12month", Retention(months=12)),
        ("3mon", Retention(months=3)),
        ("6m", Retention(months=6)),
        ("12", Retention(months=12)),  # slurmdbd: no unit is months
        (12, Retention(months=12)),
        (" 90 days ", Retention(seconds=90 * DAY_S)),
    ],
)
def test_slurmdbd_purge_values_are_read_as_slurmdbd_reads_them(
    text: str | int, retention: Retention
) -> None:
    assert parse_retention(text, "hal.toml", "accounting.purge_jobs_after") == retention


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("5min", "unknown unit 'min'"),
        ("30 weeks", "unknown unit 'weeks'"),
        ("days", "not a retention"),
        ("-3days", "not a retention"),
        ("1.5days", "not a retention"),
        (1.5, "not a retention"),
        (True, "not a retention"),
        ("0days", "would purge everything"),
        ("99999999999months", "too long"),
    ],
)
def test_a_bad_retention_names_the_key_and_what_to_write(value: Any, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"accounting": {"purge_events_after": value}}, source="hal.toml")
    assert err.value.field == "accounting.purge_events_after"
    message = str(err.value)
    assert message.startswith("hal.toml: accounting.purge_events_after: ")
    assert says in message and '"30days"' in message


def test_a_misspelt_key_gets_did_you_mean() -> None:
    with pytest.raises(InvalidRequest, match="did you mean 'purge_jobs_after'") as err:
        config_from_dict({"accounting": {"purge_job_after": "12months"}})
    assert err.value.field == "accounting.purge_job_after"
    with pytest.raises(InvalidRequest, match="must be a table"):
        config_from_dict({"accounting": "90days"})


def test_without_accounting_nothing_is_purged() -> None:
    config = config_from_dict({})
    assert config.accounting.purge_events_after is None
    assert config.accounting.purge_jobs_after is None
    assert not config.accounting.purges


def test_a_job_retention_shorter_than_fair_shares_history_is_refused() -> None:
    """With [priority], usage is rebuilt at start-up from the jobs that ended within 40
    half-lives (280 days by default): purging them sooner would change fair share after
    a restart without anyone noticing."""
    with pytest.raises(InvalidRequest, match=r'keep at least "280days"') as err:
        config_from_dict({"priority": {}, "accounting": {"purge_jobs_after": "90days"}})
    assert err.value.field == "accounting.purge_jobs_after"
    # a shorter half-life shortens the history fair share reads
    short = config_from_dict(
        {"priority": {"decay_half_life": "2-0"}, "accounting": {"purge_jobs_after": "90days"}}
    )
    assert short.accounting.purge_jobs_after == Retention(seconds=90 * DAY_S)
    # ten months are at least 280 days, whatever the months
    config_from_dict({"priority": {}, "accounting": {"purge_jobs_after": "10months"}})
    with pytest.raises(InvalidRequest, match="never decays"):
        config_from_dict(
            {"priority": {"decay_half_life": 0}, "accounting": {"purge_jobs_after": "12months"}}
        )
    # without [priority] the priority does not depend on usage (basic, FIFO)
    config_from_dict({"accounting": {"purge_jobs_after": "1hours"}})
    # events are not what fair share reads
    config_from_dict({"priority": {}, "accounting": {"purge_events_after": "1hours"}})


def test_a_job_retention_must_outlast_min_job_age() -> None:
    with pytest.raises(InvalidRequest, match="min_job_age_seconds") as err:
        config_from_dict(
            {"min_job_age_seconds": 7200, "accounting": {"purge_jobs_after": "2hours"}}
        )
    assert err.value.field == "accounting.purge_jobs_after"


def test_months_are_calendar_months() -> None:
    def at(year: int, month: int, day: int) -> float:
        return datetime(year, month, day, 12, 0, tzinfo=UTC).timestamp()

    assert Retention(months=12).cutoff(at(2026, 5, 17)) == at(2025, 5, 17)
    assert Retention(months=1).cutoff(at(2026, 3, 31)) == at(2026, 2, 28)  # no 31 February
    assert Retention(months=1).cutoff(at(2024, 3, 31)) == at(2024, 2, 29)
    assert Retention(months=14).cutoff(at(2026, 1, 15)) == at(2024, 11, 15)
    assert Retention(seconds=2 * DAY_S).cutoff(at(2026, 3, 3)) == at(2026, 3, 1)
    assert [str(r) for r in (Retention(months=3), Retention(seconds=3 * DAY_S))] == [
        "3months",
        "3days",
    ]
    assert str(Retention(seconds=5 * HOUR_S)) == "5hours"
