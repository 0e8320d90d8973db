"""A user's scrontab file (Slurm 20.11's ``scrontab``): its entries and their schedules.

The file is a crontab: ``MIN HOUR DOM MON DOW COMMAND`` lines (or ``@hourly COMMAND``
...), comments and blank lines, and ``#SCRON`` lines that give sbatch options to the next
entry only. This module reads the lines; the options' words are read by sbatch's parser
on the client (``hal.compat.scrontab``), as Slurm's scrontab does. Schedules are computed
with cronsim in the server's local time, as slurmctld computes them in its own.

Pure functions: no I/O, no clock (``next_run`` is handed the time to count from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from cronsim import CronSim, CronSimError

from hal.core.errors import InvalidRequest

# Slurm's scrontab macros; @reboot has no meaning for a batch job and is refused
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
OPTION_PREFIX = "#SCRON"
DISABLED_PREFIX = "#DISABLED: "  # what scancel of a cron job puts before its lines
# a field: numbers, names (jan, mon), *, ranges, steps and lists; cronsim's extensions
# (L, W, #, ?) are not crontab(5)'s nor Slurm's
_FIELD = re.compile(r"^[0-9A-Za-z*,/-]+$")
_NAME = re.compile(r"[A-Za-z]+")
_MONTHS = frozenset(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
)
_DAYS = frozenset(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


@dataclass(frozen=True, slots=True)
class CronEntry:
    """One entry: its ``#SCRON`` lines (line number, the text after ``#SCRON``), its
    schedule as written (five fields or a macro) and its command. ``first_line`` is the
    first of its ``#SCRON`` lines (``line`` when it has none); lines count from 1."""

    first_line: int
    line: int
    schedule: str
    command: str
    options: tuple[tuple[int, str], ...] = ()


def parse_crontab(text: str) -> list[CronEntry]:
    """The entries of a scrontab file; raises ``InvalidRequest`` ("line N: reason") at the
    first line that is not a comment, a blank line, a ``#SCRON`` line or a valid entry."""
    entries: list[CronEntry] = []
    options: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith(OPTION_PREFIX) and (
            len(line) == len(OPTION_PREFIX) or line[len(OPTION_PREFIX)].isspace()
        ):
            options.append((number, line[len(OPTION_PREFIX) :].strip()))
            continue
        if not line or line.startswith("#"):
            continue
        schedule, command = _split_entry(line, number)
        first = options[0][0] if options else number
        entries.append(CronEntry(first, number, schedule, command, tuple(options)))
        options = []
    if options:
        raise _bad(options[0][0], "#SCRON options but no entry follows them")
    return entries


def _split_entry(line: str, number: int) -> tuple[str, str]:
    if line.startswith("@"):
        macro, _, command = line.partition(" ")
        if macro.lower() not in MACROS:
            raise _bad(
                number,
                f"unknown {macro!r}: use five fields (MIN HOUR DOM MON DOW) or one of "
                + ", ".join(MACROS),
            )
        schedule = macro
    else:
        words = line.split(None, 5)
        if len(words) < 5:
            raise _bad(number, "a cron line has five fields (MIN HOUR DOM MON DOW), then a command")
        schedule, command = " ".join(words[:5]), words[5] if len(words) > 5 else ""
    command = command.strip()
    if not command:
        raise _bad(number, f"{schedule!r} has no command to run")
    try:
        check_schedule(schedule)
    except InvalidRequest as err:
        raise _bad(number, err.message) from None
    return schedule, command


_CHECKED_FROM = datetime(2000, 1, 1)


def check_schedule(schedule: str) -> None:
    """Refuse a schedule that is not five valid fields or a macro (``InvalidRequest``)."""
    expression = MACROS.get(schedule.lower(), schedule)
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidRequest(f"{schedule!r}: a schedule has five fields", field="crontab")
    for name, value in zip(_FIELD_NAMES, fields, strict=True):
        names = {w.lower() for w in _NAME.findall(value)}
        allowed = _MONTHS if name == "month" else _DAYS if name == "day-of-week" else set()
        if not _FIELD.match(value) or not names <= allowed:
            raise InvalidRequest(
                f"Bad {name} {value!r}: write numbers, *, ranges (1-5), steps (*/15), "
                "lists (1,15) or names (jan, mon)",
                field="crontab",
            )
    try:
        CronSim(expression, _CHECKED_FROM)  # any start: the fields are checked, not walked
    except CronSimError as err:
        raise InvalidRequest(f"{err} in {schedule!r}", field="crontab") from None


def next_run(schedule: str, after: float) -> float:
    """The first time strictly after ``after`` that ``schedule`` names, in the local time
    zone. The schedule walks local wall-clock times (naive datetimes, which Python turns
    into instants with the zone's rules of that day): a time that a daylight-saving change
    skips runs that much later (02:30 on a spring-forward night at 03:30), one that it
    repeats runs once, at its first occurrence."""
    expression = MACROS.get(schedule.lower(), schedule)
    times = CronSim(expression, datetime.fromtimestamp(after))
    while True:  # past a repeated hour, a wall-clock time can be an earlier instant
        found = next(times).timestamp()
        if found > after:
            return found


def disable_entry(text: str, first_line: int, line: int) -> str:
    """``text`` with the lines ``first_line``..``line`` (an entry and its ``#SCRON``
    lines) commented out with ``#DISABLED: ``, as scancel of a cron job does in Slurm."""
    lines = text.splitlines(keepends=True)
    for i in range(first_line - 1, min(line, len(lines))):
        if not lines[i].startswith(DISABLED_PREFIX):
            lines[i] = DISABLED_PREFIX + lines[i]
    return "".join(lines)


def _bad(number: int, reason: str) -> InvalidRequest:
    return InvalidRequest(f"line {number}: {reason}", field="crontab")
