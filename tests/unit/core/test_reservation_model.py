"""The reservation model: recurrence, overlap with a run, access, flag parsing."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hal.core.reservation import (
    Reservation,
    ReservationFlag,
    blocking,
    parse_flags,
    windows_clash,
)
from hal.testing.examples import examples

H = 3600.0
DAY = 86_400.0


def res(start: float = 100.0, end: float = 200.0, **kw: object) -> Reservation:
    base: dict[str, object] = {"name": "r", "start": start, "end": end, "nodes": ("n1",)}
    base.update(kw)
    return Reservation(**base)  # type: ignore[arg-type]


def test_a_one_off_window_and_its_overlaps() -> None:
    r = res()
    assert r.window_at(0) == (100, 200) and r.window_at(500) == (100, 200)
    assert not r.active(99) and r.active(100) and r.active(199.9) and not r.active(200)
    assert r.overlaps(50, 101) and r.overlaps(150, 160) and r.overlaps(0, math.inf)
    assert not r.overlaps(0, 100)  # ends exactly at the start: [t0, t1) is half open
    assert not r.overlaps(200, 300) and not r.overlaps(150, 150)
    assert r.ended(200) and not r.ended(199)
    assert r.first_overlap(0, 150) == (100, 200) and r.first_overlap(0, 50) is None


def test_a_daily_reservation_moves_forward_by_its_period() -> None:
    r = res(0, 2 * H, flags=frozenset({ReservationFlag.DAILY}))
    assert r.period == DAY and not r.ended(10 * DAY)
    assert r.window_at(3 * H) == (DAY, DAY + 2 * H)
    assert r.window_at(DAY + H) == (DAY, DAY + 2 * H)
    assert r.window_at(5 * DAY + 2 * H) == (6 * DAY, 6 * DAY + 2 * H)
    assert r.active(3 * DAY + 1) and not r.active(3 * DAY + 3 * H)
    # a run between two windows fits only if it ends by the next one
    assert not r.overlaps(3 * H, DAY)
    assert r.overlaps(3 * H, DAY + 1)
    assert r.overlaps(3 * H, math.inf)  # an unlimited job meets every later window
    moved = r.at(2 * DAY + 5 * H)
    assert (moved.start, moved.end) == (3 * DAY, 3 * DAY + 2 * H) and moved.name == "r"


@pytest.mark.parametrize(("flag", "period"), [("HOURLY", H), ("WEEKLY", 7 * DAY)])
def test_other_periods(flag: str, period: float) -> None:
    r = res(0, 60, flags=parse_flags(flag))
    assert r.period == period
    assert r.window_at(61) == (period, period + 60)


def test_access_needs_the_user_and_the_account_when_both_are_listed() -> None:
    users = res(users=("alice",))
    assert users.allows("alice", None) and not users.allows("bob", "physics")
    accounts = res(accounts=("physics",))
    assert accounts.allows("bob", "physics") and not accounts.allows("bob", None)
    both = res(users=("alice",), accounts=("physics",))
    assert both.allows("alice", "physics")
    assert not both.allows("alice", "chem") and not both.allows("bob", "physics")


def test_flags_parse_and_refuse_unknown_ones() -> None:
    assert parse_flags("maint, daily") == {ReservationFlag.MAINT, ReservationFlag.DAILY}
    assert parse_flags("") == frozenset()
    with pytest.raises(ValueError, match="unknown reservation flag 'FLEX'"):
        parse_flags("FLEX")
    with pytest.raises(ValueError, match="at most one"):
        parse_flags("DAILY,WEEKLY")
    assert res(flags=parse_flags("MAINT")).maintenance
    assert res(flags=parse_flags("OVERLAP")).overlap


def test_clashes_between_reservations() -> None:
    a = res(0, 100)
    assert windows_clash(a, res(50, 150), math.inf) == 50
    assert windows_clash(a, res(100, 150), math.inf) is None
    daily = res(10 * H, 11 * H, flags=parse_flags("DAILY"))
    # a one-off window on day 3 at 10:30 meets the daily one
    assert windows_clash(daily, res(3 * DAY + 10.5 * H, 3 * DAY + 12 * H), math.inf) == (
        3 * DAY + 10.5 * H
    )
    # a one-off window in the daily gap never does
    assert windows_clash(daily, res(3 * DAY, 3 * DAY + 9 * H), math.inf) is None
    # two dailies at different hours never meet; the walk stops at the horizon
    other = res(12 * H, 13 * H, flags=parse_flags("DAILY"))
    assert windows_clash(daily, other, 30 * DAY) is None


class CountedReservation(Reservation):
    """A reservation that counts the windows asked of it (the clash walk's steps)."""

    asked: ClassVar[list[float]] = []

    def window_at(self, t: float) -> tuple[float, float]:
        self.asked.append(t)
        return Reservation.window_at(self, t)


def counted(start: float, end: float, flags: str) -> CountedReservation:
    return CountedReservation(
        name="c", start=start, end=end, nodes=("n1",), flags=parse_flags(flags)
    )


def test_the_clash_walk_does_not_replay_years_of_windows() -> None:
    """Creating a reservation next to a recurring one that began long ago (an HOURLY
    one a year back) walked every window since its first: ~17,000 steps (22 ms) per
    pair, per node of a ``NodeCnt=`` pick, in the server's event loop. The walk starts
    at the later first window and, between two recurring ones, covers one common
    period: the same answers in a bounded number of steps."""
    now = 400 * DAY
    CountedReservation.asked.clear()
    hourly = counted(now - 365 * DAY, now - 365 * DAY + 600, "HOURLY")
    daily = counted(now + 1800, now + 2400, "DAILY")  # in the hourly gaps: never meets
    assert windows_clash(daily, hourly, now + 366 * DAY) is None
    assert len(CountedReservation.asked) <= 2 * (24 + 2)  # one day of hourly windows
    CountedReservation.asked.clear()
    old_daily = counted(10 * H, 11 * H, "DAILY")  # since day 0
    one_off = counted(now + 10.5 * H, now + 12 * H, "")
    assert windows_clash(old_daily, one_off, now + 366 * DAY) == now + 10.5 * H
    assert len(CountedReservation.asked) <= 2 * 2
    CountedReservation.asked.clear()
    weekly = counted(now + 3 * DAY + 10 * H, now + 3 * DAY + 10.5 * H, "WEEKLY")
    assert windows_clash(old_daily, weekly, math.inf) == now + 3 * DAY + 10 * H
    assert len(CountedReservation.asked) <= 2 * (7 + 2)


def _walked_from_the_first_window(a: Reservation, b: Reservation, horizon: float) -> float | None:
    """The clash walk as it was: from the earlier first window, window by window."""
    t = min(a.start, b.start)
    while t < horizon and not (a.ended(t) or b.ended(t)):
        wa, wb = a.window_at(t), b.window_at(t)
        lo, hi = max(wa[0], wb[0]), min(wa[1], wb[1])
        if lo < hi:
            return lo if lo < horizon else None
        t = min(wa[1], wb[1])
    return None


@st.composite
def reservations(draw: st.DrawFn) -> Reservation:
    flags = draw(st.sampled_from(["", "HOURLY", "DAILY", "WEEKLY"]))
    period = {"": 30 * DAY, "HOURLY": H, "DAILY": DAY, "WEEKLY": 7 * DAY}[flags]
    start = draw(st.integers(0, 60 * 24)) * 600.0  # 10-minute steps over 10 days
    length = draw(st.integers(1, int(period // 600))) * 600.0
    return Reservation(
        name="r", start=start, end=start + length, nodes=("n1",), flags=parse_flags(flags)
    )


@settings(max_examples=examples(300), deadline=None)
@given(reservations(), reservations(), st.sampled_from([5 * DAY, 20 * DAY, math.inf]))
def test_the_clash_walk_answers_as_the_full_walk(
    a: Reservation, b: Reservation, horizon: float
) -> None:
    """Same first clash as walking every window from the earlier first one (which,
    between two recurring reservations that never meet, stops only at the horizon)."""
    if horizon == math.inf and a.period and b.period:
        horizon = 60 * DAY  # the full walk would never end
    assert windows_clash(a, b, horizon) == _walked_from_the_first_window(a, b, horizon)
    assert windows_clash(b, a, horizon) == _walked_from_the_first_window(a, b, horizon)


def test_blocking_lists_the_windows_meeting_a_run() -> None:
    a, b = res(100, 200, name="a"), res(300, 400, name="b")
    assert [r.name for r in blocking([a, b], 0, 150)] == ["a"]
    assert [r.name for r in blocking([a, b], 150, math.inf)] == ["a", "b"]
    assert blocking([a, b], 200, 300) == []


def test_weekday_and_weekend_skip_the_other_days() -> None:
    """``Flags=WEEKDAY``/``WEEKEND`` (Slurm 22.05.8): after the first window,
    which stays where it was given, the next daily window starting Monday to Friday
    (Saturday or Sunday). Noon UTC keeps the weekday the same in any time zone."""
    import calendar

    from hal.core.reservation import flag_words, read_flags

    friday = float(calendar.timegm((2026, 11, 27, 12, 0, 0)))
    day = 86_400.0

    def resv(flags: str) -> Reservation:
        found, purge = read_flags(flags)
        return Reservation("w", friday, friday + 3600, ("n1",), flags=found, purge_after=purge)

    weekday, weekend = resv("WEEKDAY"), resv("WEEKEND,PURGE_COMP=60")
    assert weekday.window_at(friday)[0] == friday
    assert weekday.window_at(friday + 3600)[0] == friday + 3 * day  # Monday
    assert weekend.window_at(friday + 3600)[0] == friday + day  # Saturday
    assert weekend.window_at(friday + day + 3600)[0] == friday + 2 * day  # Sunday
    assert weekend.window_at(friday + 2 * day + 3600)[0] == friday + 8 * day
    assert flag_words(weekend) == ["WEEKEND", "PURGE_COMP=60"]
