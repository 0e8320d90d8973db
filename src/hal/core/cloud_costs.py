"""What cloud capacity costs: a run's cost, and the budgets that cap an account's spend.

A job that starts on nodes of ``[cloud]`` groups carries the hourly rate of those nodes
at its start (``RATE``: the sum of each node's group price, as the server knew it then),
so its cost is that rate times its run time: node-hours × price, whole nodes, as the
provider bills them. A requeued job's runs each keep their own cost. Costs are in one
currency, ``CURRENCY``.

A budget (``[[accounts]] cloud_budget = "500 USD/month"``, and per QoS) caps what new
nodes may be made for: the spend of a period (what its runs cost: the runs that ended in
it, and the cost so far of those running) plus what the bursts already asked for will
cost must stay within it. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hal.core.errors import InvalidRequest

CURRENCY = "USD"
# a started job's mark: the hourly rate of its cloud nodes at its start, in CURRENCY
RATE = "cloud_rate"
PERIODS = ("day", "week", "month")
_BUDGET = re.compile(r"^\s*(?P<amount>\S+)\s+(?P<currency>[A-Za-z]{3})\s*/\s*(?P<period>\w+)\s*$")
EXAMPLE = '"500 USD/month" (an amount, a currency, and day, week or month)'


@dataclass(frozen=True, slots=True)
class CloudBudget:
    """At most ``amount`` (in ``currency``) of cloud cost per ``period`` (calendar, UTC)."""

    amount: float
    currency: str = CURRENCY
    period: str = "month"  # one of PERIODS

    def __str__(self) -> str:
        return f"{self.amount:g} {self.currency}/{self.period}"


def parse_budget(text: object, field: str) -> CloudBudget:
    """``"500 USD/month"``; anything else is refused with what to write."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{field}: must be a string like {EXAMPLE}", field=field)
    found = _BUDGET.match(text)
    if found is None:
        hint = "add the currency and period" if _number(text.strip()) is not None else ""
        raise InvalidRequest(
            f"{field}: {text!r} is not a budget; write it as {EXAMPLE}"
            + (f' ({hint}, e.g. "{text.strip()} {CURRENCY}/month")' if hint else ""),
            field=field,
        )
    amount = _number(found["amount"])
    if amount is None or amount < 0:
        raise InvalidRequest(
            f"{field}: {found['amount']!r} is not an amount; write a number >= 0, e.g. {EXAMPLE}",
            field=field,
        )
    currency = found["currency"].upper()
    if currency != CURRENCY:
        raise InvalidRequest(
            f"{field}: prices are kept in {CURRENCY}; write the budget in {CURRENCY} "
            f"(got {currency})",
            field=field,
        )
    period = found["period"].lower()
    if period not in PERIODS:
        raise InvalidRequest(
            f"{field}: unknown period {found['period']!r}; write one of {', '.join(PERIODS)}, "
            f"e.g. {EXAMPLE}",
            field=field,
        )
    return CloudBudget(amount, currency, period)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def period_start(period: str, now: float) -> float:
    """The Unix time the calendar ``period`` holding ``now`` began (UTC; a week begins
    on Monday)."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        day -= timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    return day.timestamp()


def run_cost(rate: float, start: float | None, end: float) -> float:
    """What a run at ``rate`` an hour cost from ``start`` to ``end`` (0: never started)."""
    if start is None or rate <= 0:
        return 0.0
    return rate * max(0.0, end - start) / 3600.0


def rate_of(extra: dict[str, str]) -> float:
    """A started job's hourly rate (``RATE``; 0: it holds no priced node)."""
    try:
        return float(extra.get(RATE, "0") or 0)
    except ValueError:
        return 0.0


def rate_mark(nodes: tuple[str, ...], prices: dict[str, float]) -> str | None:
    """The ``RATE`` mark of a start on ``nodes`` (``prices``: node → its group's price an
    hour); None where none of them is priced."""
    rate = sum(prices.get(n, 0.0) for n in nodes)
    return f"{rate:.6g}" if rate > 0 else None


def money(value: float) -> str:
    """A cost as sacct and the CLI print it: ``0.42``."""
    return f"{value:.2f}"
