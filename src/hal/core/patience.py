"""A job's patience before new cloud nodes are made for it (``--burst-after``; the
decision is ``hal.cloud.burst``'s): parsed here, where the configuration, the Slurm
commands and the server all reach it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

NEVER = math.inf  # --burst-after=never: this job gets no new nodes


@dataclass(frozen=True, slots=True)
class Patience:
    """How much later than a new node could start it a job may start on the capacity
    there: ``seconds``, plus ``of_limit`` times its time limit (``--burst-after=0.5x``:
    a job waits up to half its own length, so a long, dear job waits longer before it
    is worth new nodes); ``never``: no new nodes for it."""

    seconds: float = 0.0
    of_limit: float = 0.0

    def at(self, time_limit_s: float) -> float:
        """In seconds, for a job of ``time_limit_s`` (0: unlimited, counted as none)."""
        if self.seconds == NEVER:
            return NEVER
        return self.seconds + self.of_limit * max(time_limit_s, 0.0)

    def __str__(self) -> str:
        if self.seconds == NEVER:
            return "never"
        parts = [f"{self.seconds:g}s"] if self.seconds or not self.of_limit else []
        if self.of_limit:
            parts.append(f"{self.of_limit:g}x")
        return "+".join(parts)


def parse_patience(text: str, *, field: str = "--burst-after") -> Patience:
    """``--burst-after`` and the config's values: ``never``; a duration (``90`` seconds,
    ``10m``, ``2h``, ``1d``, ``01:30:00``); a multiple of the job's time limit
    (``0.5x``); or both (``10m+0.5x``)."""
    t = text.strip().lower()
    if t == "never":
        return Patience(NEVER)
    seconds = of_limit = 0.0
    for part in t.split("+") if t else [""]:
        part = part.strip()
        if part.endswith("x"):
            of_limit += _number(part[:-1], text, field)
        else:
            seconds += _duration(part, text, field)
    return Patience(seconds, of_limit)


def _number(part: str, text: str, field: str) -> float:
    try:
        value = float(part)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise _bad(text, field)
    return value


def _duration(part: str, text: str, field: str) -> float:
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    if part and part[-1] in units:
        return _number(part[:-1], text, field) * units[part[-1]]
    if ":" in part:
        pieces = part.split(":")
        if len(pieces) > 3:
            raise _bad(text, field)
        value = 0.0
        for piece in pieces:
            value = value * 60 + _number(piece, text, field)
        return value
    return _number(part, text, field)


def _bad(text: str, field: str) -> InvalidRequest:
    return InvalidRequest(
        f"{field} takes a duration like 90 (seconds), 10m, 2h or 01:30:00, a multiple "
        f"of the job's time limit like 0.5x, both (10m+0.5x), or never (got {text!r})",
        field=field.lstrip("-").replace("-", "_"),
    )
