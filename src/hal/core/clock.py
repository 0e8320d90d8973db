"""Time, injected.

Core, scheduler and simulator code never call ``time.time()``; they get a ``Clock``. The
server and the agents use ``hal.host.clock.SystemClock``; tests and the simulator use
``VirtualClock`` so that the same inputs give the same decisions. Times are float seconds
since the Unix epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall time, may be virtual)."""
        ...


class VirtualClock:
    """A clock that only moves when told to. ``advance`` never goes backwards."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError("a clock cannot go backwards")
        self._now = when


def utc_text(t: float) -> str:
    """``t`` as an ISO-8601 UTC time for messages ("2026-11-25T08:00:00+00:00"); a time
    no date can show (past the year 9999, NaN) as its number, so a message about a bad
    time never fails itself."""
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{t} (Unix seconds)"
