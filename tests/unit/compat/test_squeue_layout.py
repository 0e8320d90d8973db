"""squeue lays its lines out a column at a time (``job_lines``: a column's distinct values
worked out once, timestamps a local minute at a time, every line by one ``%`` format of
the columns zipped): each line is what laying every job out alone, cell by cell, gives
(``one_by_one``), for jobs of every shape and formats of every kind, as squeue reads the
jobs (records of the JSON), pending array elements folded."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from compat_fakes import T0, job, job_shapes, running

from hal.client import records as job_records
from hal.client.records import Record, job_defaults, job_list, records
from hal.compat.formats import Field, cell, parse_format, parse_long_names, timestamp, timestamps
from hal.compat.job_fields import JOB_LETTERS, LONG_FIELD_WIDTH, LONG_FIELDS, TIME_LETTERS
from hal.compat.squeue import (
    _NODE_LIST_TITLES,
    ALL_FORMAT,
    DEFAULT_FORMAT,
    LONG_FORMAT,
    START_FORMAT,
    _uncut,
    fold_arrays,
    job_lines,
    parse_query,
    query_fields,
    sort_jobs,
)
from hal.wire.jobs import JobInfo, JobList

NOW = T0 + 100


def shapes() -> list[JobInfo]:
    """``job_shapes`` and more: het components, many nodes, long and odd names, run
    times of days, reasons with a description, times a microsecond from a second."""
    return [
        *job_shapes(),
        *[running(20 + k, het_job_id=20, het_job_offset=k, het_job_id_set="20-21") for k in (0, 1)],
        running(
            30,
            nodes=[f"node{n:02d}" for n in (1, 2, 3, 4, 7, 9)],
            node_count=6,
            start_time=T0 - 3 * 86400 - 5,
            time_limit_seconds=5 * 86400,
            name="a-name-longer-than-its-column",
        ),
        running(31, nodes=["n1", "m2"], node_count=2, start_time=T0 - 7200, name="100%"),
        job(32, reason="ReqNodeNotAvail, Reserved for maintenance", user="a-long-user-name"),
        job(33, submit_time=T0 + 0.9999996, eligible_time=T0 + 59.5, preempt_time=T0 + 61),
        job(34, submit_time=T0 + 0.4, time_limit_seconds=2 * 86400 + 1),
        *[job(40 + i, array_job_id=40, array_task_id=i, name="big") for i in range(5)],
        running(45, array_job_id=40, array_task_id=5, nodes=["vm"]),
    ]


def as_read(infos: list[JobInfo]) -> list[JobInfo]:
    """The jobs as squeue reads them: records of the list's JSON, arrays folded, sorted."""
    listed: list[JobInfo] = records(JobList(jobs=infos).model_dump_json()).jobs
    return sort_jobs(fold_arrays(listed), "P,t,-p", NOW)


def one_by_one(layout: list[Field | str], jobs: list[JobInfo], *, header: bool) -> list[str]:
    """Each job's line, cell by cell: its column's value as the letter works it out,
    padded and cut to the width, a right-aligned node list or duration never cut."""

    def line(value_of: dict[str, str], title: bool) -> str:
        out = []
        for part in layout:
            if isinstance(part, str):
                out.append(part)
                continue
            value = value_of[part.letter]
            width, right = part.width, part.right
            whole = part.letter in _NODE_LIST_TITLES if title else _uncut(part.letter, value)
            out.append(
                value.rjust(width) if right and width > 0 and whole else cell(value, width, right)
            )
        return "".join(out)

    letters = {part.letter for part in layout if isinstance(part, Field)}
    lines = [line({k: JOB_LETTERS[k][0] for k in letters}, True)] if header else []
    for info in jobs:
        lines.append(line({k: JOB_LETTERS[k][1](info, NOW) for k in letters}, False))
    return lines


FORMATS = [
    DEFAULT_FORMAT,
    LONG_FORMAT,
    START_FORMAT,
    ALL_FORMAT,
    "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R %Q %V",
    "%i|%t|%%|%50R|%.3N|%3N|%.2l|%2l|%.3L|%5M|%-10j|%.1D|%.2R",
    "%V %.10V %-25V %5S %.30e",
    "just text",
    "",
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("header", [True, False])
def test_every_line_is_its_jobs_cells_one_by_one(fmt: str, header: bool) -> None:
    jobs = as_read(shapes())
    layout = parse_format(fmt)
    expected = one_by_one(layout, jobs, header=header)
    assert job_lines(layout, jobs, NOW, header=header) == expected
    assert len(expected) == len(jobs) + header


@pytest.mark.parametrize("letter", sorted(k for k in JOB_LETTERS if len(k) == 1))
def test_every_letter_cut_padded_and_whole_is_laid_out_as_cell_by_cell(letter: str) -> None:
    jobs = as_read(shapes())
    layout = parse_format(f"%{letter} %.4{letter}|%-3{letter}|%.30{letter}")
    assert job_lines(layout, jobs, NOW, header=True) == one_by_one(layout, jobs, header=True)


def test_every_long_name_is_laid_out_as_cell_by_cell() -> None:
    jobs = as_read(shapes())
    unknown: list[str] = []
    names = ",".join(f"{name}:.{n % 12}|" if n % 3 else name for n, name in enumerate(LONG_FIELDS))
    layout = parse_long_names(names, LONG_FIELDS, LONG_FIELD_WIDTH, unknown=unknown)
    assert not unknown
    assert job_lines(layout, jobs, NOW, header=True) == one_by_one(layout, jobs, header=True)


def test_the_layout_tells_a_second_rounded_up_and_a_literal_percent() -> None:
    jobs = as_read(shapes())
    lines = job_lines(parse_format("%i %V %j%%"), jobs, NOW, header=False)
    stamped = {line.split()[0]: line.split()[1] for line in lines}
    # (datetime rounds .9999996 up to the next second; cut at the second it would not)
    assert stamped["33"] == timestamp(T0 + 1) != timestamp(T0)
    assert stamped["34"] == timestamp(T0)
    assert any(line.endswith(" 100%%") for line in lines)


def test_a_time_letter_is_its_field_as_a_timestamp() -> None:
    for letter, name in TIME_LETTERS.items():
        for info in shapes():
            assert JOB_LETTERS[letter][1](info, NOW) == timestamp(getattr(info, name)), letter


@pytest.fixture
def zone() -> Iterator[None]:
    """The test's own time zones, the one before restored."""
    before = os.environ.get("TZ")
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


# a zone whose offset had seconds (Monrovia, -0:44:30 until 1972), ones with summer
# time and half hours, and UTC
@pytest.mark.parametrize(
    "name", ["UTC", "Africa/Monrovia", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kathmandu"]
)
@pytest.mark.usefixtures("zone")
def test_timestamps_are_each_times_timestamp_in_every_zone(name: str) -> None:
    os.environ["TZ"] = name
    time.tzset()
    values: list[float | None] = [None, 0.0, 1.9999996, 59.9999994, -3.5, 2.0**37 + 0.5]
    values += [63_593_070 + k * 7.25 for k in range(-4_000, 4_000)]  # Monrovia's change
    values += [T0 + k * 0.37 for k in range(2_000)] + [float(s) for s in range(0, 2**31, 345_653)]
    # summer time in Europe: its start and end in 2026 (01:00 UTC)
    for change in (1_774_746_000, 1_792_890_000):
        values += [change + k * 1.3 for k in range(-3_000, 3_000)]
    got = timestamps(values, missing="Unknown")
    assert got == [timestamp(v, "Unknown") for v in values]
    assert got[0] == "Unknown"


# -- a long list decoded by msgspec (``records.job_list``) ---------------------------------


def odd_shapes() -> list[JobInfo]:
    """``shapes`` and jobs whose every field is odd: unicode names and users, a reason
    with quotes and a backslash, optional values missing, a pending het component."""
    return [
        *shapes(),
        job(60, name="naïve-名前-🚀", user="üser", account=None, qos=None, reservation=""),
        job(61, name='a "quoted" \\ name', reason="Dependency", nice=-5, priority=0),
        job(62, het_job_id=62, het_job_offset=0, het_job_id_set="62-63", submit_time=T0 - 1e-6),
        running(63, het_job_id=62, het_job_offset=1, het_job_id_set="62-63", nodes=["é1"]),
        job(64, array_job_id=64, array_task_id=7, array_max_running=3, name=""),
    ]


def listed_as_sent(infos: list[JobInfo], fields: list[str]) -> bytes:
    """``GET /v1/jobs?fields=...&omit_defaults=true`` of ``infos`` as the server sends it:
    each job's ``fields``, those at their default left out."""
    import json

    defaults = job_defaults(fields) or {}
    sent = []
    for info in json.loads(JobList(jobs=infos).model_dump_json())["jobs"]:
        picked = {name: info[name] for name in fields}
        # (a list field's default is a tuple; the server compares with its list)
        at = {k: list(d) if isinstance(d, tuple) else d for k, d in defaults.items()}
        sent.append({k: v for k, v in picked.items() if k not in at or v != at[k]})
    return json.dumps({"jobs": sent}, ensure_ascii=False).encode()


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job list decoded by msgspec, however short."""
    monkeypatch.setattr(job_records, "TYPED_FROM_BYTES", 0)


@pytest.mark.usefixtures("typed")
@pytest.mark.parametrize("fmt", [*FORMATS, "%all"])
def test_a_list_decoded_by_msgspec_prints_the_lines_of_the_records(fmt: str) -> None:
    query = parse_query(["-o", fmt, "-S", "P,t,-p,V"])
    assert query is not None
    fields = query_fields(query)
    assert fields is not None
    body = listed_as_sent(odd_shapes(), fields)
    defaults = job_defaults(fields)
    assert defaults is not None
    structs = job_list(body, fields, defaults)
    records_of = records(body, defaults).jobs
    assert not isinstance(structs[0], Record)  # (msgspec's, not the records' fallback)
    for struct, record in zip(structs, records_of, strict=True):
        assert {name: getattr(struct, name) for name in fields} == {
            name: getattr(record, name) for name in fields
        }
    shown = [sort_jobs(fold_arrays(jobs), query.sort, NOW) for jobs in (structs, records_of)]
    lines = [job_lines(query.layout, jobs, NOW, header=True) for jobs in shown]
    assert lines[0] == lines[1] == one_by_one(query.layout, shown[1], header=True)
    assert "name" not in fields or "naïve-名前-🚀" in {struct.name for struct in structs}


@pytest.mark.usefixtures("typed")
def test_what_msgspec_refuses_the_records_read() -> None:
    fields = ["id", "display_id", "state", "array_job_id"]
    defaults = job_defaults(fields)
    assert defaults is not None
    nan = b'{"jobs":[{"id":1,"display_id":"1","state":"PENDING","array_job_id":NaN}]}'
    (read,) = job_list(nan, fields, defaults)
    assert read.array_job_id != read.array_job_id  # (NaN, as the standard scanner reads it)
    assert isinstance(read, Record)
    missing = b'{"jobs":[{"id":1,"state":"PENDING"}]}'  # (no display_id: no default)
    (read,) = job_list(missing, fields, defaults)
    assert read.array_job_id is None
    assert isinstance(read, Record)


def test_a_short_list_is_read_as_records() -> None:
    fields = ["id", "display_id", "state", "array_job_id"]
    body = listed_as_sent(odd_shapes(), fields)
    assert len(body) < job_records.TYPED_FROM_BYTES
    assert all(isinstance(read, Record) for read in job_list(body, fields, {}))


@pytest.mark.usefixtures("typed")
def test_a_decoded_job_is_copied_with_changes_as_a_record_is() -> None:
    """``replaced`` (sacct's and sprio's copies) of a job msgspec decoded: a record of its
    fields with the changes, the job itself left as it was."""
    fields = ["id", "display_id", "state", "nodes"]
    defaults = job_defaults(fields)
    assert defaults is not None
    body = b'{"jobs":[{"id":7,"display_id":"7","state":"RUNNING","nodes":["n1"]}]}'
    (decoded,) = job_list(body, fields, defaults)
    assert not isinstance(decoded, Record)
    copied = job_records.replaced(decoded, {"state": "COMPLETED"})
    assert copied == Record(id=7, display_id="7", state="COMPLETED", nodes=["n1"])
    assert decoded.state == "RUNNING"


@pytest.mark.usefixtures("typed")
def test_a_body_not_utf8_is_refused_as_the_records_refuse_it() -> None:
    body = b'{"jobs":[{"id":1,"display_id":"\xff","state":"PENDING"}]}'
    with pytest.raises(UnicodeDecodeError) as typed_error:
        job_list(body, ["id", "display_id", "state"], {})
    with pytest.raises(UnicodeDecodeError) as records_error:
        records(body)
    assert str(typed_error.value) == str(records_error.value)
