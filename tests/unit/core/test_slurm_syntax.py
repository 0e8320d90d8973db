"""Slurm option syntaxes, as users type them in #SBATCH lines and on the command line."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from hal.core.errors import InvalidRequest
from hal.core.job import DependencyKind, DependencyTerm
from hal.slurm.syntax import (
    compress_hostlist,
    expand_hostlist,
    parse_array,
    parse_begin,
    parse_dependency,
    parse_gpus,
    parse_gres,
    parse_memory,
    parse_nodes,
    parse_signal,
    parse_switches,
    parse_time_limit,
)


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """Begin times are local time; pin the zone so expectations are stable."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),
        ("90", 90 * 60),
        ("1:30", 90),
        ("0:30", 30),  # Slurm would round up to a minute; HAL keeps the seconds
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-2", 86400 + 7200),
        ("1-2:30", 86400 + 7200 + 1800),
        ("1-02:30:15", 86400 + 7200 + 1800 + 15),
        ("0", 0),
        ("UNLIMITED", 0),
        ("infinite", 0),
        (" 10 ", 600),
    ],
)
def test_time_limit_forms(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "1-2:3:4:5", "-5", "1.5", "1-", "x-1"])
def test_time_limit_rejects_with_hint(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_time_limit(text)
    assert err.value.field == "time"
    assert "HH:MM:SS" in err.value.message


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "1-2:3:4:5", "-5", "1.5", "1-", "x-1", "1-2-3"])
def test_time_limit_error_quotes_the_whole_value_and_the_forms(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_time_limit(text)
    assert err.value.message.startswith(f"invalid --time value {text!r}: write minutes (30), ")
    for form in ("MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", "0/UNLIMITED"):
        assert form in err.value.message


def test_time_limit_names_an_scontrol_key_as_written() -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_time_limit("1-x", field="TimeLimit")
    assert err.value.field == "TimeLimit"
    assert err.value.message.startswith("invalid TimeLimit value '1-x': write minutes")


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite", "-1", "1-x"])
def test_time_limit_without_unlimited_neither_takes_nor_offers_it(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_time_limit(text, field="Duration", unlimited=False)
    assert repr(text) in err.value.message and "D-HH:MM:SS" in err.value.message
    assert "UNLIMITED for no limit" not in err.value.message
    assert parse_time_limit("0", field="Duration", unlimited=False) == 0  # the caller judges
    assert parse_time_limit("1-0", field="Duration", unlimited=False) == 86400


@pytest.mark.parametrize("text", ["2@x", "2@-5", "2@1-", "2@UNLIMITED"])
def test_switches_wait_error_quotes_the_whole_value(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_switches(text)
    assert err.value.field == "switches"
    assert err.value.message.startswith(f"invalid --switches value {text!r}: ")
    assert "MAX-WAIT is minutes (30), MM:SS" in err.value.message


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4000", 4000 << 20),
        ("0", 0),
        ("500M", 500 << 20),
        ("16G", 16 << 30),
        ("16g", 16 << 30),
        ("2T", 2 << 40),
        ("1024K", 1 << 20),
        ("0K", 0),  # still "all the node's memory" for --mem, as in Slurm
        ("4GB", 4 << 30),
        ("10MB", 10 << 20),
    ],
)
def test_memory_units(text: str, size: int) -> None:
    assert parse_memory(text) == size


@pytest.mark.parametrize(
    ("text", "size"), [("100K", 1 << 20), ("500K", 1 << 20), ("512k", 1 << 20), ("1025K", 2 << 20)]
)
def test_memory_in_kib_rounds_up_to_whole_mib(text: str, size: int) -> None:
    """Slurm 22.05.8 takes ``--mem=100K`` as ``MinMemoryNode=1M`` and ``--mem=1025K`` as
    ``2M``: memory is counted in whole MiB, rounded up. HAL kept the bytes, which the server
    floored to 0 MiB: the request read as ``--mem=0``, all of a node's memory."""
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["", "4X", "1.5G", "-1", "G", "4 G"])
def test_memory_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_memory(text, field="mem-per-cpu")
    assert err.value.field == "mem-per-cpu"
    assert "16G" in err.value.message


@pytest.mark.parametrize(
    ("text", "indices", "limit"),
    [
        ("0-3", (0, 1, 2, 3), 0),
        ("0,6,16-18", (0, 6, 16, 17, 18), 0),
        ("0-15:4", (0, 4, 8, 12), 0),
        ("1-3%2", (1, 2, 3), 2),
        ("7", (7,), 0),
        ("3,1,3", (1, 3), 0),
        ("0-1000", tuple(range(1001)), 0),
    ],
)
def test_array_forms(text: str, indices: tuple[int, ...], limit: int) -> None:
    spec = parse_array(text)
    assert spec.indices == indices
    assert spec.max_running == limit
    assert spec.text == text


@pytest.mark.parametrize("text", ["", "%4", "a-b", "5-2", "0-10:0", "1-", "0-1001", "-1"])
def test_array_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_array(text)
    assert err.value.field == "array"


def test_array_max_size_names_the_limit() -> None:
    with pytest.raises(InvalidRequest, match="largest index allowed is 9"):
        parse_array("0-10", max_array_size=10)


def test_dependency_all_of() -> None:
    dep = parse_dependency("afterok:12:13,afterany:14")
    assert not dep.any_of
    assert dep.terms == (
        DependencyTerm(DependencyKind.AFTEROK, (12, 13)),
        DependencyTerm(DependencyKind.AFTERANY, (14,)),
    )
    assert str(dep) == "afterok:12:13,afterany:14"


def test_dependency_any_of_and_singleton() -> None:
    dep = parse_dependency("afternotok:5?singleton")
    assert dep.any_of
    assert dep.terms[1].kind is DependencyKind.SINGLETON


@pytest.mark.parametrize("kind", ["after", "afterany", "afterok", "afternotok", "aftercorr"])
def test_dependency_every_kind(kind: str) -> None:
    assert parse_dependency(f"{kind}:1").terms[0].kind.value == kind


def test_dependency_without_type_is_afterany() -> None:
    assert parse_dependency("7:8").terms == (DependencyTerm(DependencyKind.AFTERANY, (7, 8)),)


def test_dependency_on_an_array_element_is_its_own_job_id() -> None:
    """``afterok:12_3`` (Slurm accepts it; HAL refused it): the element's job id, which the
    server knows; a client checking the syntax gets the array's id in its place."""
    elements = {(12, 3): 15}
    dep = parse_dependency("afterok:12_3:9", element=lambda a, i: elements[(a, i)])
    assert dep.terms == (DependencyTerm(DependencyKind.AFTEROK, (15, 9), elements=(15,)),)
    assert parse_dependency("afterok:12_3").terms[0].job_ids == (12,)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("afterok:1,afterany:2?afterok:3", "not both"),
        ("after:12+5", "+minutes"),
        ("afterok:12_x", "array index"),
        ("afterok", "at least one job id"),
        ("afterok:", "job id"),
        ("singleton:4", "no job ids"),
        ("before:4", "afterok"),
        ("afterburstbuffer:4", "not supported"),
        ("afterok:x", "job id"),
        ("", "singleton"),
    ],
)
def test_dependency_rejects_clearly(text: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_dependency(text)
    assert words in err.value.message
    assert err.value.field == "dependency"


@pytest.mark.parametrize(
    ("text", "signum", "seconds", "batch"),
    [
        ("USR1", signal.SIGUSR1, 60, False),
        ("SIGUSR2@30", signal.SIGUSR2, 30, False),
        ("B:USR2@30", signal.SIGUSR2, 30, True),  # Nextflow's
        ("b:term", signal.SIGTERM, 60, True),
        ("10@120", 10, 120, False),
        ("INT@0", signal.SIGINT, 0, False),
    ],
)
def test_signal_forms(text: str, signum: int, seconds: int, batch: bool) -> None:
    spec = parse_signal(text)
    assert (spec.signum, spec.seconds_before, spec.batch_only) == (signum, seconds, batch)


@pytest.mark.parametrize("text", ["NOPE", "USR1@x", "X:USR1", "B:R:USR1", "999", "USR1@70000", ""])
def test_signal_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_signal(text)
    assert err.value.field == "signal"


NOW = datetime(2026, 11, 21, 15, 30, 0).timestamp()  # a Saturday afternoon, UTC


def _at(*fields: int) -> float:
    return datetime(*fields).timestamp()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now+60", NOW + 60),
        ("now+1hour", NOW + 3600),
        ("now+2days", NOW + 2 * 86400),
        ("now+10minutes", NOW + 600),
        ("now-2days", NOW - 2 * 86400),
        ("2026-12-01", _at(2026, 12, 1)),
        ("2026-12-01T08:15", _at(2026, 12, 1, 8, 15)),
        ("2026-12-01T08:15:30", _at(2026, 12, 1, 8, 15, 30)),
        ("16:00", _at(2026, 11, 21, 16, 0)),
        ("09:00", _at(2026, 11, 22, 9, 0)),  # already past today: tomorrow
        ("4:00pm", _at(2026, 11, 21, 16, 0)),
        ("midnight", _at(2026, 11, 22)),
        ("noon", _at(2026, 11, 22, 12)),
        ("teatime", _at(2026, 11, 21, 16)),
        ("today", _at(2026, 11, 21)),
        ("tomorrow", _at(2026, 11, 22)),
        ("12/25", _at(2026, 12, 25)),
        ("01/02/27", _at(2027, 1, 2)),
        ("NOW+1HOUR", NOW + 3600),
    ],
)
def test_begin_forms(text: str, expected: float) -> None:
    assert parse_begin(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("09:00", _at(2026, 11, 21, 9, 0)),  # already past today: today
        ("16:00", _at(2026, 11, 21, 16, 0)),  # still ahead today: today too
        ("11:59pm", _at(2026, 11, 21, 23, 59)),
        ("teatime", _at(2026, 11, 21, 16)),
        ("midnight", _at(2026, 11, 21)),
        ("12/25", _at(2025, 12, 25)),  # a later month: last year
        ("11/01", _at(2026, 11, 1)),
        ("11/28", _at(2026, 11, 28)),  # this month, still ahead: this year
        ("now-2days", NOW - 2 * 86400),
    ],
)
def test_begin_forms_looking_back(text: str, expected: float) -> None:
    """sacct's -S/-E (Slurm's parse_time with ``past``), as Slurm 22.05.8's sacct read
    them (docs/slurm-checks.md): a time of day is today's, even one still ahead (``-S
    23:59`` at 02:56 is refused as after the end, now); a month/day is this year's unless
    its month is later than this one (``12/01`` on 26 November is last year's, ``11/27``
    this year's)."""
    assert parse_begin(text, NOW, past=True) == expected


@pytest.mark.parametrize("text", ["later", "now+1fortnight", "2026-13-01", "25:00", "13:00pm"])
def test_begin_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_begin(text, NOW)
    assert err.value.field == "begin"


@pytest.mark.parametrize(
    ("text", "result"),
    [
        ("gpu", (None, 1)),
        ("gpu:2", (None, 2)),
        ("gpu:a100:4", ("a100", 4)),
        ("gpu:a100", ("a100", 1)),
        ("gres/gpu:2", (None, 2)),
        ("none", (None, 0)),
    ],
)
def test_gres(text: str, result: tuple[str | None, int]) -> None:
    assert parse_gres(text) == result


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("license:1", "only the gpu gres"),
        ("gpu:2,mps:100", "only the gpu gres"),
        ("gpu:1,gpu:2", "once"),
        ("gpu:a:b:c", "gpu:TYPE:N"),
        ("gpu:a100:x", "count"),
    ],
)
def test_gres_rejects(text: str, words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        parse_gres(text)


@pytest.mark.parametrize(
    ("text", "result"), [("2", (None, 2)), ("a100:4", ("a100", 4)), ("gpu:h100:1", ("h100", 1))]
)
def test_gpus(text: str, result: tuple[str | None, int]) -> None:
    assert parse_gpus(text) == result


@pytest.mark.parametrize("text", ["", "x", "a100:", "a b:1"])
def test_gpus_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_gpus(text)


@pytest.mark.parametrize(("text", "result"), [("1", (1, 1)), ("2-4", (2, 4)), ("3-3", (3, 3))])
def test_nodes(text: str, result: tuple[int, int]) -> None:
    assert parse_nodes(text) == result


@pytest.mark.parametrize("text", ["0", "4-2", "2,4", "a", "", "1-"])
def test_nodes_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_nodes(text)
    assert err.value.field == "nodes"


def test_hostlists_round_trip() -> None:
    names = expand_hostlist("n[1-3],gpu7")
    assert names == ["n1", "n2", "n3", "gpu7"]
    assert compress_hostlist(["n3", "n1", "n2"]) == "n[1-3]"
    assert compress_hostlist([]) == ""


def test_bad_hostlist_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as err:
        expand_hostlist("n[1-", field="exclude")
    assert err.value.field == "exclude"


def test_array_limit_zero_is_no_limit() -> None:
    """Slurm 22.05.8 takes ``--array=1-3%0`` as no throttle; HAL refused it."""
    assert parse_array("1-3%0").max_running == 0
