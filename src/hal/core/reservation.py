"""Advance reservations (Slurm's ``scontrol create reservation``): the pure model.

A reservation sets nodes aside for some users or accounts over a time window. Recurring
ones (``HOURLY``, ``DAILY``, ``WEEKDAY``, ``WEEKEND``, ``WEEKLY``) move forward by their
period once a window ends, so a reservation is a series of windows
``[start + k*period, end + k*period)``, k >= 0; ``WEEKDAY`` (``WEEKEND``) keeps, after the
first, only the daily windows starting Monday to Friday (Saturday or Sunday) in the
server's local time, as slurmctld. Nothing here reads a clock: every question takes the
instant it is asked about.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum


class ReservationFlag(StrEnum):
    """In the order ``scontrol show reservation`` prints them (Slurm 22.05.8's)."""

    MAINT = "MAINT"  # maintenance: no ordinary job may use the nodes
    OVERLAP = "OVERLAP"  # may share nodes and time with other reservations
    IGNORE_JOBS = "IGNORE_JOBS"  # created even if running jobs would run into it
    HOURLY = "HOURLY"
    DAILY = "DAILY"
    WEEKDAY = "WEEKDAY"
    WEEKEND = "WEEKEND"
    WEEKLY = "WEEKLY"
    SPEC_NODES = "SPEC_NODES"  # implied: the nodes were named (Nodes=), not counted
    ALL_NODES = "ALL_NODES"  # implied: Nodes=ALL
    PURGE_COMP = "PURGE_COMP"  # deleted once idle (no unfinished job) for purge_after s
    # at its end, its pending jobs lose it and may run anywhere (else they are held)
    NO_HOLD_JOBS_AFTER_END = "NO_HOLD_JOBS_AFTER_END"


PERIODS: dict[ReservationFlag, float] = {
    ReservationFlag.HOURLY: 3600.0,
    ReservationFlag.DAILY: 86_400.0,
    ReservationFlag.WEEKDAY: 86_400.0,
    ReservationFlag.WEEKEND: 86_400.0,
    ReservationFlag.WEEKLY: 604_800.0,
}
# WEEKDAY, WEEKEND: the days (time.struct_time.tm_wday, Monday 0) a later window may start
_DAYS = {
    ReservationFlag.WEEKDAY: frozenset(range(5)),
    ReservationFlag.WEEKEND: frozenset({5, 6}),
}
# set by the server from how the nodes were given, never by the user: dropped when given
IMPLIED = frozenset({ReservationFlag.SPEC_NODES, ReservationFlag.ALL_NODES})
PURGE_DEFAULT_S = 300.0  # PURGE_COMP without a time: Slurm's five minutes


def parse_flags(text: str) -> frozenset[ReservationFlag]:
    """``MAINT,DAILY`` → flags (``read_flags`` without PURGE_COMP's time)."""
    return read_flags(text)[0]


def read_flags(text: str) -> tuple[frozenset[ReservationFlag], float]:
    """``MAINT,PURGE_COMP=600`` → (flags, seconds PURGE_COMP waits; 0 without it). The
    implied flags are dropped. Raises ValueError naming the flags HAL knows."""
    flags: set[ReservationFlag] = set()
    purge = 0.0
    for item in text.split(","):
        word, _, value = item.strip().upper().partition("=")
        if not word:
            continue
        try:
            flag = ReservationFlag(word)
        except ValueError:
            known = ", ".join(f.value for f in ReservationFlag if f not in IMPLIED)
            raise ValueError(f"unknown reservation flag {word!r}; HAL knows {known}") from None
        if flag is ReservationFlag.PURGE_COMP:
            try:
                purge = float(value) if value else PURGE_DEFAULT_S
            except ValueError:
                raise ValueError(f"PURGE_COMP takes seconds, got {value!r}") from None
            if purge <= 0:
                raise ValueError("PURGE_COMP needs a positive time")
        elif value:
            raise ValueError(f"reservation flag {word} takes no value")
        if flag not in IMPLIED:
            flags.add(flag)
    if len(flags & set(PERIODS)) > 1:
        raise ValueError("give at most one of HOURLY, DAILY, WEEKDAY, WEEKEND and WEEKLY")
    return frozenset(flags), purge


def flag_words(r: Reservation) -> list[str]:
    """``r``'s flags in Slurm's order, ``PURGE_COMP=<seconds>``: what the store and the
    REST API carry (``parse_flags`` reads it back, less the implied ones)."""
    return [
        f"{f.value}={r.purge_after:g}" if f is ReservationFlag.PURGE_COMP else f.value
        for f in ReservationFlag
        if f in r.flags
    ]


def stored_flags(words: list[str]) -> tuple[frozenset[ReservationFlag], float]:
    """``flag_words`` read back with the implied flags kept."""
    flags, purge = read_flags(",".join(words))
    implied = {ReservationFlag(w) for w in words if w in IMPLIED}
    return flags | implied, purge


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
    purge_after: float = 0.0  # PURGE_COMP: seconds idle before it is deleted

    def __post_init__(self) -> None:
        if (ReservationFlag.PURGE_COMP in self.flags) != (self.purge_after > 0):
            raise ValueError("PURGE_COMP and purge_after go together")

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

    @property
    def cycle(self) -> float:
        """Seconds after which the pattern of windows repeats (0: not recurring)."""
        return 604_800.0 if self._days else self.period

    @property
    def _days(self) -> frozenset[int] | None:
        for flag, days in _DAYS.items():
            if flag in self.flags:
                return days
        return None

    def window_at(self, t: float) -> tuple[float, float]:
        """The window in force at ``t`` or the next one (the first whose end is after
        ``t``); for a one-off reservation that has ended, its only window."""
        period = self.period
        if not period or self.end > t:
            return self.start, self.end
        k = math.floor((t - self.end) / period) + 1
        days = self._days
        # (the first window stays where it was given, as slurmctld leaves it)
        while days is not None and time.localtime(self.start + k * period).tm_wday not in days:
            k += 1
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
    if a.cycle and b.cycle:
        stop = min(horizon, t + math.lcm(int(a.cycle), int(b.cycle)))
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
