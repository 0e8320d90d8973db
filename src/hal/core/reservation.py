"""Advance reservations (Slurm's ``scontrol create reservation``): the pure model.

A reservation sets nodes aside for some users or accounts over a time window. Recurring
ones (``DAILY``, ``WEEKLY``, ``HOURLY``) move forward by their period once a window ends,
so a reservation is a series of windows ``[start + k*period, end + k*period)``, k >= 0.
Nothing here reads a clock: every question takes the instant it is asked about.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum


class ReservationFlag(StrEnum):
    MAINT = "MAINT"  # maintenance: no ordinary job may use the nodes
    OVERLAP = "OVERLAP"  # may share nodes and time with other reservations
    IGNORE_JOBS = "IGNORE_JOBS"  # created even if running jobs would run into it
    # at its end, its pending jobs lose it and may run anywhere (else they are held)
    NO_HOLD_JOBS_AFTER_END = "NO_HOLD_JOBS_AFTER_END"
    HOURLY = "HOURLY"
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"


PERIODS: dict[ReservationFlag, float] = {
    ReservationFlag.HOURLY: 3600.0,
    ReservationFlag.DAILY: 86_400.0,
    ReservationFlag.WEEKLY: 604_800.0,
}


def parse_flags(text: str) -> frozenset[ReservationFlag]:
    """``MAINT,DAILY`` → flags. Raises ValueError naming the flags HAL knows."""
    flags: set[ReservationFlag] = set()
    for word in text.split(","):
        word = word.strip().upper()
        if not word:
            continue
        try:
            flags.add(ReservationFlag(word))
        except ValueError:
            known = ", ".join(f.value for f in ReservationFlag)
            raise ValueError(f"unknown reservation flag {word!r}; HAL knows {known}") from None
    if len(flags & set(PERIODS)) > 1:
        raise ValueError("give at most one of HOURLY, DAILY and WEEKLY")
    return frozenset(flags)


@dataclass(frozen=True, slots=True)
class Reservation:
    """``nodes`` are set aside over ``[start, end)`` (the first window) for ``users``
    and ``accounts``. With both lists given a job must match both, as in Slurm."""

    name: str
    start: float
    end: float
    nodes: tuple[str, ...]
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    flags: frozenset[ReservationFlag] = field(default_factory=frozenset)
    partition: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def period(self) -> float:
        """Seconds between two windows (0: not recurring)."""
        for flag, seconds in PERIODS.items():
            if flag in self.flags:
                return seconds
        return 0.0

    @property
    def maintenance(self) -> bool:
        return ReservationFlag.MAINT in self.flags

    @property
    def overlap(self) -> bool:
        return ReservationFlag.OVERLAP in self.flags

    def window_at(self, t: float) -> tuple[float, float]:
        """The window in force at ``t`` or the next one (the first whose end is after
        ``t``); for a one-off reservation that has ended, its only window."""
        period = self.period
        if not period or self.end > t:
            return self.start, self.end
        k = math.floor((t - self.end) / period) + 1
        return self.start + k * period, self.end + k * period

    def active(self, t: float) -> bool:
        start, end = self.window_at(t)
        return start <= t < end

    def ended(self, t: float) -> bool:
        """A one-off reservation whose window is over (recurring ones never end)."""
        return not self.period and self.end <= t

    def overlaps(self, t0: float, t1: float) -> bool:
        """Whether some window meets ``[t0, t1)`` (``t1`` may be ``math.inf``)."""
        if t1 <= t0:
            return False
        start, end = self.window_at(t0)
        return end > t0 and start < t1

    def first_overlap(self, t0: float, t1: float) -> tuple[float, float] | None:
        """The first window meeting ``[t0, t1)``, or None."""
        if not self.overlaps(t0, t1):
            return None
        return self.window_at(t0)

    def at(self, t: float) -> Reservation:
        """This reservation with its window moved to the one in force at ``t`` (or the
        next): what ``scontrol show reservation`` prints."""
        start, end = self.window_at(t)
        if start == self.start:
            return self
        return replace(self, start=start, end=end)

    def allows(self, user: str, account: str | None) -> bool:
        """May a job of ``user`` charged to ``account`` run in this reservation?"""
        if self.users and user not in self.users:
            return False
        return not (self.accounts and (account is None or account not in self.accounts))

    def shares_nodes_with(self, other: Reservation) -> tuple[str, ...]:
        mine = set(self.nodes)
        return tuple(n for n in other.nodes if n in mine)


def judged_account(account: str | None, user: str, defaults: Mapping[str, str]) -> str | None:
    """The account a reservation's ``Accounts=`` judges a job by: the one it names, else
    its user's default account (``defaults``: user → account), as Slurm charges it."""
    return account or defaults.get(user)


def windows_clash(a: Reservation, b: Reservation, horizon: float) -> float | None:
    """The first instant before ``horizon`` at which a window of ``a`` and one of ``b``
    are both in force, or None. Windows are walked one by one, but only where a clash
    can first be: from the later of the two first windows (neither is in force before
    its start), so a reservation recurring for a year costs no more than a new one; and,
    when both recur, for one common period (the least common multiple of the periods:
    from the later start on, the pattern of windows repeats with it, so a first clash
    falls within it or never happens). The caller's ``horizon`` bounds the rest."""
    t = max(a.start, b.start)
    stop = horizon
    if a.period and b.period:
        stop = min(horizon, t + math.lcm(int(a.period), int(b.period)))
    while t < stop and not (a.ended(t) or b.ended(t)):
        wa, wb = a.window_at(t), b.window_at(t)
        lo, hi = max(wa[0], wb[0]), min(wa[1], wb[1])
        if lo < hi:
            return lo if lo < horizon else None
        t = min(wa[1], wb[1])  # the window that ends first meets nothing more
    return None


def blocking(reservations: Iterable[Reservation], t0: float, t1: float) -> list[Reservation]:
    """The reservations with a window meeting ``[t0, t1)``."""
    return [r for r in reservations if r.overlaps(t0, t1)]
