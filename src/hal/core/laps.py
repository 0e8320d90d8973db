"""Seconds taken by each step of a sequence (a takeover's load, a start), for a log line
that says where the time went."""

from __future__ import annotations

import time


class Laps:
    """``lap(name)`` records the seconds since the previous lap (or since made) as
    ``took[name]``, rounded to the millisecond."""

    def __init__(self) -> None:
        self.took: dict[str, float] = {}
        self._at = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.took[name] = round(now - self._at, 3)
        self._at = now
