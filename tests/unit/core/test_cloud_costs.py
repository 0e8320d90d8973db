"""Cloud costs and budgets (hal.core.cloud_costs, [[accounts]]/[[qos]] cloud_budget):
what a run costs, and the budgets hal.toml may hold, mistakes refused saying what to write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hal.config.model import config_from_dict
from hal.core.cloud_costs import (
    CloudBudget,
    parse_budget,
    period_start,
    rate_mark,
    rate_of,
    run_cost,
)
from hal.core.errors import InvalidRequest


def test_a_run_costs_its_rate_times_its_hours() -> None:
    """Two nodes of 0.25 and 0.50 an hour for 90 minutes: 1.125; unpriced nodes add nothing."""
    mark = rate_mark(("c1", "c2", "owned"), {"c1": 0.25, "c2": 0.5})
    assert mark == "0.75"
    assert run_cost(rate_of({"cloud_rate": mark}), 1000.0, 1000.0 + 5400) == pytest.approx(1.125)
    assert rate_mark(("owned",), {"c1": 0.25}) is None
    assert run_cost(0.75, None, 5000.0) == 0.0  # never started


@pytest.mark.parametrize(
    ("text", "budget"),
    [
        ("500 USD/month", CloudBudget(500.0, "USD", "month")),
        ("12.5 usd / day", CloudBudget(12.5, "USD", "day")),
        ("0 USD/week", CloudBudget(0.0, "USD", "week")),
    ],
)
def test_budgets_read(text: str, budget: CloudBudget) -> None:
    assert parse_budget(text, "cloud_budget") == budget


def test_periods_begin_at_utc_calendar_bounds() -> None:
    now = datetime(2026, 11, 26, 15, 30, tzinfo=UTC).timestamp()  # a Thursday
    assert period_start("day", now) == datetime(2026, 11, 26, tzinfo=UTC).timestamp()
    assert period_start("week", now) == datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    assert period_start("month", now) == datetime(2026, 11, 1, tzinfo=UTC).timestamp()


def refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict(raw)
    return err.value.message


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("500", 'add the currency and period, e.g. "500 USD/month"'),
        ("lots USD/month", "'lots' is not an amount"),
        ("500 USD/fortnight", "unknown period 'fortnight'; write one of day, week, month"),
        ("500 EUR/month", "write the budget in USD"),
        (500, 'must be a string like "500 USD/month"'),
        ("-5 USD/month", "'-5' is not an amount"),
    ],
)
def test_bad_budgets_are_refused_with_the_key_and_what_to_write(value: object, says: str) -> None:
    message = refusal({"accounts": [{"name": "physics", "cloud_budget": value}]})
    assert "accounts[0].cloud_budget" in message and says in message
    message = refusal({"qos": [{"name": "high", "cloud_budget": value}]})
    assert "qos[0].cloud_budget" in message and says in message


def test_accounts_and_qos_carry_their_budgets() -> None:
    policy = config_from_dict(
        {
            "accounts": [{"name": "physics", "cloud_budget": "500 USD/month"}],
            "qos": [{"name": "high", "cloud_budget": "50 USD/day"}],
        }
    ).priority
    assert policy.accounts[0].cloud_budget == CloudBudget(500.0, "USD", "month")
    assert policy.qos[0].cloud_budget == CloudBudget(50.0, "USD", "day")
    assert not policy.accounts[0].has_limits  # the autoscaler's, not the scheduler's


def test_a_price_that_is_not_a_number_is_refused() -> None:
    group = {"name": "g", "provider": "local", "nodes": "g1", "cpus": 1, "memory": "1G"}
    message = refusal({"cloud": {"groups": [{**group, "price_per_hour": "cheap"}]}})
    assert "cloud.groups[0].price_per_hour" in message and "e.g. 0.17" in message
    message = refusal({"cloud": {"price_interval_seconds": 0}})
    assert "cloud.price_interval_seconds" in message
