"""A user's scrontab file read as Slurm's scrontab reads it: cron lines, ``#SCRON``
option lines that belong to the next entry only, comments and blank lines; a bad line is
refused with its number and what is wrong, and nothing of the file is taken."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.crontab import CronEntry, disable_entry, next_run, parse_crontab

FILE = """\
# nightly work
#SCRON -p debug -t 5
#SCRON --job-name=nightly
30 2 * * * ./nightly.sh --all

*/15 9-17 * jan-mar mon-fri echo quarter hour
@hourly date
"""


def test_entries_their_options_and_lines() -> None:
    entries = parse_crontab(FILE)
    assert entries == [
        CronEntry(
            first_line=2,
            line=4,
            schedule="30 2 * * *",
            command="./nightly.sh --all",
            options=((2, "-p debug -t 5"), (3, "--job-name=nightly")),
        ),
        CronEntry(6, 6, "*/15 9-17 * jan-mar mon-fri", "echo quarter hour", ()),
        CronEntry(7, 7, "@hourly", "date", ()),
    ]


def test_scron_options_apply_to_the_next_entry_only() -> None:
    entries = parse_crontab("#SCRON -c 2\n* * * * * a\n* * * * * b\n")
    assert entries[0].options == ((1, "-c 2"),)
    assert entries[1].options == ()


def test_comments_blank_lines_and_an_empty_file() -> None:
    assert parse_crontab("") == []
    assert parse_crontab("\n   \n# a comment\n#DISABLED: * * * * * x\n") == []


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("* * * * *\n", 1, "no command"),
        ("* * * *\n", 1, "five fields"),
        ("61 * * * * x\n", 1, "Bad minute"),
        ("# ok\n0 25 * * * x\n", 2, "Bad hour"),
        ("0 0 31 2 * x\n", 1, "Bad day-of-month"),
        ("0 0 L * * x\n", 1, "L"),
        ("0 0 * * 1#2 x\n", 1, "1#2"),
        ("@reboot x\n", 1, "@reboot"),
        ("@daily\n", 1, "no command"),
        ("#SCRON -p debug\n", 1, "no entry follows"),
        ("#SCRON -p debug\n\n# c\n", 1, "no entry follows"),
    ],
)
def test_a_bad_line_is_named_with_its_reason(text: str, line: int, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_crontab(text)
    assert caught.value.message.startswith(f"line {line}: "), caught.value.message
    assert words in caught.value.message


@pytest.fixture
def local_tz() -> Iterator[None]:
    """Cron times are the server's local time: pin one zone with daylight saving."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Paris"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.mark.usefixtures("local_tz")
@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        ("* * * * *", "2026-03-10 12:00:30", "2026-03-10 12:01:00"),
        ("* * * * *", "2026-03-10 12:01:00", "2026-03-10 12:02:00"),  # strictly after
        ("30 2 * * *", "2026-03-10 03:00:00", "2026-03-11 02:30:00"),
        ("*/15 9-17 * jan-mar mon-fri", "2026-03-13 17:50:00", "2026-03-16 09:00:00"),
        ("0 0 1,15 * *", "2026-03-02 00:00:00", "2026-03-15 00:00:00"),
        ("@hourly", "2026-03-10 12:59:59", "2026-03-10 13:00:00"),
        ("@daily", "2026-03-10 12:00:00", "2026-03-11 00:00:00"),
        ("@midnight", "2026-03-10 12:00:00", "2026-03-11 00:00:00"),
        ("@weekly", "2026-03-10 12:00:00", "2026-03-15 00:00:00"),  # Sunday
        ("@monthly", "2026-03-10 12:00:00", "2026-04-01 00:00:00"),
        ("@yearly", "2026-03-10 12:00:00", "2027-01-01 00:00:00"),
        ("@annually", "2026-03-10 12:00:00", "2027-01-01 00:00:00"),
        ("0 12 * * sun", "2026-03-10 12:00:00", "2026-03-15 12:00:00"),
        ("0 12 * * 7", "2026-03-10 12:00:00", "2026-03-15 12:00:00"),  # 7 is Sunday too
        # the spring-forward night: 02:30 does not exist in Paris on 2026-03-29; it
        # runs an hour later, at 03:30 summer time
        ("30 2 * * *", "2026-03-29 01:00:00", "2026-03-29 03:30:00"),
        ("0 0 1 4 *", "2026-03-10 12:00:00", "2026-04-01 00:00:00"),  # summer time then
        # the fall-back night repeats 02:00-03:00: 02:30 runs once
        ("30 2 * * *", "2026-10-25 02:31:00+01:00", "2026-10-26 02:30:00"),
    ],
)
def test_next_run(schedule: str, after: str, expected: str) -> None:
    assert next_run(schedule, at(after)) == at(expected)


def test_disable_entry_comments_out_its_option_lines_and_its_line() -> None:
    entry = parse_crontab(FILE)[0]
    text = disable_entry(FILE, entry.first_line, entry.line)
    lines = text.splitlines()
    assert lines[1:4] == [
        "#DISABLED: #SCRON -p debug -t 5",
        "#DISABLED: #SCRON --job-name=nightly",
        "#DISABLED: 30 2 * * * ./nightly.sh --all",
    ]
    assert [e.command for e in parse_crontab(text)] == ["echo quarter hour", "date"]
    assert text.endswith("\n")
