"""How sacct prints sizes (``--units``) and times (``SLURM_TIME_FORMAT``), as Slurm 22.05.8.

Checked against sacct 22.05.8 with slurmdbd (docs/slurm-checks.md):

- ``--units=M`` prints every size in that unit: ReqMem 23593 MiB as ``23593M``, in G
  ``23.04G``, 1536 MiB in K ``1572864K``; two decimals only where the value is not whole,
  0 stays ``0``. Only the first letter counts (``MB`` is M), either case; any other is
  ``Invalid unit type 'X'. Possible options are 'KMGTP'``.
- ``SLURM_TIME_FORMAT``: unset, empty or ``standard`` is ``2026-11-27T18:37:28``;
  ``relative`` is ``18:37:28`` today, ``Ystday 18:37``, ``Tomorr 18:37``, ``Fri 18:37``
  up to six days ahead, ``22 Nov 18:37`` further (or any day before yesterday) and
  ``26 Nov 2025`` more than 365 "days" away, counted as Slurm counts them (year*1000 +
  day of the year, so any day of another year but its neighbours is far); any other
  value with a ``%`` is an strftime format (``%s``: seconds since the epoch); one
  without is refused with an error and the standard form used.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hal.core.errors import InvalidRequest

UNITS = "KMGTP"
_STANDARD = "%Y-%m-%dT%H:%M:%S"


def parse_units(text: str) -> str:
    """``--units`` → one of ``KMGTP``."""
    unit = text[:1].upper()
    if not unit or unit not in UNITS:
        raise InvalidRequest(
            f"Invalid unit type '{text}'. Possible options are '{UNITS}'", field="units"
        )
    return unit


def in_unit(value: float, base: str, unit: str) -> str:
    """``value`` counted in ``base`` units (K, M...) printed in ``unit``."""
    if value == 0:
        return "0"
    scaled = value * 1024.0 ** (UNITS.index(base) - UNITS.index(unit))
    if scaled == int(scaled):
        return f"{int(scaled)}{unit}"
    return f"{scaled:.2f}{unit}"


@dataclass(frozen=True, slots=True)
class TimeStyle:
    """A ``SLURM_TIME_FORMAT``: ``relative``, or an strftime format."""

    relative: bool = False
    strftime: str = _STANDARD

    def text(self, when: float | None, missing: str, now: float) -> str:
        if when is None:
            return missing
        moment = datetime.fromtimestamp(when)
        if not self.relative:
            return moment.strftime(self.strftime)
        return moment.strftime(_relative_format(moment, datetime.fromtimestamp(now)))


def time_style(value: str | None) -> tuple[TimeStyle, str]:
    """``SLURM_TIME_FORMAT`` → the style and an error to print ("": none)."""
    if not value or value == "standard":
        return TimeStyle(), ""
    if value == "relative":
        return TimeStyle(relative=True), ""
    if "%" not in value:
        return TimeStyle(), f"invalid SLURM_TIME_FORMAT = '{value}'"
    return TimeStyle(strftime=value), ""


def _relative_format(moment: datetime, now: datetime) -> str:
    """Slurm's ``_relative_date_fmt`` (src/common/parse_time.c)."""
    day = moment.timetuple()
    today = now.timetuple()
    distance = 1000 * day.tm_year + day.tm_yday - (1000 * today.tm_year + today.tm_yday)
    if distance == -1:
        return "Ystday %H:%M"
    if distance == 0:
        return "%H:%M:%S"
    if distance == 1:
        return "Tomorr %H:%M"
    if abs(distance) > 365:
        return f"{moment.day} %b %Y"  # Slurm's %-d
    if distance < -1 or distance > 6:
        return f"{moment.day} %b %H:%M"
    return "%a %H:%M"
