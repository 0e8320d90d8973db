"""``[accounting]`` of ``hal.toml``: how long the database keeps events and finished jobs.

Example (slurmdbd.conf's ``PurgeEventAfter`` / ``PurgeJobAfter``, in snake_case)::

    [accounting]                   # optional; without it nothing is ever deleted
    purge_events_after = "90days"  # PurgeEventAfter: the event log (/v1/events)
    purge_jobs_after = "12months"  # PurgeJobAfter: finished jobs (sacct), with their scripts

A value is a whole number and a unit, as slurmdbd writes them: ``"48hours"``, ``"30days"``,
``"12months"`` (a unit may be shortened: ``"48h"``, ``"30day"``, ``"12mon"``; no unit is
months, as in Slurm). A month is a calendar month (UTC). docs/admin/accounting.md says what is
kept, what is never purged and why ``purge_jobs_after`` has a least value.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hal.config.priority import LONGEST_S, fail, unknown_key
from hal.core.priority import PriorityPolicy

ACCOUNTING_KEYS = ("purge_events_after", "purge_jobs_after")
HOUR_S = 3600
DAY_S = 86_400
# the shortest calendar month: what a number of months is at least, for the checks that
# compare a retention with a duration
SHORTEST_MONTH_S = 28 * DAY_S
# how often the server looks for records to purge (Slurm purges at the start of each
# hour, day or month of the unit). Not a hal.toml key: tests set a shorter one through
# ``HalConfig`` (``LiveServer(config_overrides=...)``).
PURGE_CHECK_S = 3600.0
_VALUE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")
_HINT = 'write a number and a unit: "48hours", "30days" or "12months"'


@dataclass(frozen=True, slots=True)
class Retention:
    """How long a record is kept after it was made (events) or ended (jobs): ``seconds``
    (hours and days) plus ``months`` calendar months."""

    seconds: float = 0.0
    months: int = 0

    def cutoff(self, now: float) -> float:
        """Records from before this time are purged."""
        when = now - self.seconds
        if self.months == 0:
            return when
        at = datetime.fromtimestamp(when, UTC)
        index = at.year * 12 + at.month - 1 - self.months
        year, month = divmod(index, 12)
        day = min(at.day, calendar.monthrange(year, month + 1)[1])  # 31 March → 28 Feb
        return at.replace(year=year, month=month + 1, day=day).timestamp()

    @property
    def least_s(self) -> float:
        """The shortest time this retention can be (a month at its shortest)."""
        return self.seconds + self.months * SHORTEST_MONTH_S

    def __str__(self) -> str:
        if self.months:
            return f"{self.months}months"
        if self.seconds % DAY_S == 0:
            return f"{int(self.seconds) // DAY_S}days"
        if self.seconds % HOUR_S == 0:
            return f"{int(self.seconds) // HOUR_S}hours"
        return f"{self.seconds:g}s"  # only set by tests (not a hal.toml unit)


@dataclass(frozen=True, slots=True)
class AccountingConfig:
    """``[accounting]``: None keeps that kind of record forever (the default, as in Slurm)."""

    purge_events_after: Retention | None = None
    purge_jobs_after: Retention | None = None
    purge_check_seconds: float = PURGE_CHECK_S

    @property
    def purges(self) -> bool:
        return self.purge_events_after is not None or self.purge_jobs_after is not None


def parse_retention(value: Any, source: str, field: str) -> Retention:
    """slurmdbd's purge value: a whole number > 0 and a unit, a prefix of ``hours``,
    ``days`` or ``months`` in any case (none: months; a TOML integer too)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise fail(source, field, f"{value!r} is not a retention; {_HINT}")
    match = _VALUE.fullmatch(str(value))
    if match is None:
        raise fail(source, field, f"{value!r} is not a retention; {_HINT}")
    amount, unit = int(match.group(1)), match.group(2).lower()
    if amount == 0:
        raise fail(
            source, field, f"{value!r} would purge everything; {_HINT}, or leave the key out"
        )
    if unit == "" or "months".startswith(unit):
        retention = Retention(months=amount)
    elif "hours".startswith(unit):
        retention = Retention(seconds=float(amount * HOUR_S))
    elif "days".startswith(unit):
        retention = Retention(seconds=float(amount * DAY_S))
    else:
        raise fail(source, field, f"{value!r}: unknown unit {match.group(2)!r}; {_HINT}")
    if retention.least_s > LONGEST_S:
        raise fail(source, field, f"{value!r} is too long; {_HINT}")
    return retention


def accounting_from_table(
    table: Any, source: str, *, policy: PriorityPolicy, min_job_age_s: float
) -> AccountingConfig:
    """``[accounting]`` → ``AccountingConfig``. ``purge_jobs_after`` must keep the jobs
    that fair share and MinJobAge still read (docs/admin/accounting.md)."""
    if not isinstance(table, dict):
        hint = 'must be a table: [accounting] purge_jobs_after = "12months"'
        raise fail(source, "accounting", hint)
    unknown = sorted(set(table) - set(ACCOUNTING_KEYS))
    if unknown:
        raise fail(source, f"accounting.{unknown[0]}", unknown_key(unknown[0], ACCOUNTING_KEYS))
    found = {
        key: parse_retention(table[key], source, f"accounting.{key}")
        for key in ACCOUNTING_KEYS
        if key in table
    }
    jobs = found.get("purge_jobs_after")
    if jobs is not None:
        check_job_retention(jobs, source, policy=policy, min_job_age_s=min_job_age_s)
    return AccountingConfig(
        purge_events_after=found.get("purge_events_after"), purge_jobs_after=jobs
    )


def check_job_retention(
    jobs: Retention, source: str, *, policy: PriorityPolicy, min_job_age_s: float
) -> None:
    """Refuse a ``purge_jobs_after`` that would delete jobs the server still reads.

    With multifactor priority (``[priority]``), fair-share usage is rebuilt at every start
    from the jobs that ended within ``policy.usage_window_s`` (40 half-lives): purging
    sooner would change users' fair share after a restart, silently. So the retention must
    cover that window (or the half-life be shorter). Without ``[priority]`` usage only
    shows in ``sshare`` and the priority does not depend on it."""
    field = "accounting.purge_jobs_after"
    if jobs.least_s <= min_job_age_s:
        raise fail(
            source,
            field,
            f'"{jobs}" is not longer than min_job_age_seconds ({min_job_age_s:g}); '
            "keep jobs longer than they stay in memory",
        )
    if not policy.enabled:
        return
    window = policy.usage_window_s
    if window is None:
        raise fail(
            source,
            field,
            "fair-share usage never decays here ([priority] decay_half_life = 0), so it is "
            "rebuilt from every job ever run: purging jobs would change it after a restart; "
            "leave purge_jobs_after out, or set a decay_half_life",
        )
    if jobs.least_s < window:
        days = -(-window // DAY_S)  # rounded up
        raise fail(
            source,
            field,
            f'"{jobs}" is shorter than the {window / DAY_S:g} days of finished jobs that fair '
            f"share is rebuilt from at start-up (40 x [priority] decay_half_life): purging "
            f'them would change fair share after a restart; keep at least "{days:.0f}days", '
            "or shorten decay_half_life",
        )
