"""squeue asks the server for the fields its format, sort and filters read
(``GET /v1/jobs?fields=``, ``hal.compat.squeue.query_fields``), not all 99 of a job's:
every column, sort key and filter shows the same with just those as with every field,
over a queue of jobs in every shape a column reads differently."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, call, job_shapes, node

from hal.api.job_list import SQUEUE_FIELDS
from hal.client.records import job_defaults
from hal.compat.job_fields import JOB_LETTERS, LETTER_FIELDS, LONG_FIELDS
from hal.compat.squeue import SORT_LETTERS, parse_query, query_fields
from hal.wire.jobs import JobInfo


def both(*argv: str) -> tuple[str, str]:
    """squeue's output with the fields it asks for, and with every field."""
    nodes = [node(name) for name in ("vm", "vm1", "vm2")]
    some = FakeClient(job_list=job_shapes(), node_list=nodes)
    every = FakeClient(job_list=job_shapes(), node_list=nodes, fields=False)
    asked, whole = call(some, "squeue", *argv), call(every, "squeue", *argv)
    assert asked.rc == whole.rc == 0, asked.err
    assert some.jobs_calls[-1]["fields"] is not None  # (the fields were asked for)
    return asked.out, whole.out


@pytest.mark.parametrize("letter", sorted(k for k in JOB_LETTERS if len(k) == 1))
def test_every_format_letter_shows_the_same_with_the_fields_it_asks_for(letter: str) -> None:
    asked, whole = both("-t", "all", "-r", "-o", f"%i %{letter}")
    assert asked == whole
    assert len(asked.splitlines()) == 1 + len(job_shapes())


@pytest.mark.parametrize("name", sorted(LONG_FIELDS))
def test_every_long_name_shows_the_same_with_the_fields_it_asks_for(name: str) -> None:
    asked, whole = both("-t", "all", "-O", f"JobArrayID,{name}")
    assert asked == whole


@pytest.mark.parametrize("letter", sorted(SORT_LETTERS))
def test_every_sort_key_sorts_the_same_with_the_fields_it_asks_for(letter: str) -> None:
    for key in (letter, f"-{letter}"):
        asked, whole = both("-t", "all", "-o", "%i", "-S", key)
        assert asked == whole


@pytest.mark.parametrize(
    "argv",
    [
        ["-u", "alice"],
        ["-n", "arr"],
        ["-A", "physics"],
        ["-q", "high"],
        ["-R", "maint"],
        ["-p", "gpu"],
        ["-w", "vm2"],
        ["-j", "13"],
        ["-j", "4_2"],
        ["-t", "R,S"],
        ["-t", "CD,CA,F"],
        ["-l"],
        ["--start"],
        [],
    ],
)
def test_every_filter_and_the_default_formats_show_the_same(argv: list[str]) -> None:
    asked, whole = both(*argv)
    assert asked == whole


def asks(*argv: str) -> list[str] | None:
    query = parse_query(list(argv))
    assert query is not None
    return query_fields(query)


def test_squeue_asks_for_its_columns_sort_keys_and_filters_fields_only() -> None:
    fields = asks("-o", "%i %u", "-S", "V", "-A", "physics")
    assert fields is not None
    assert {"display_id", "user", "submit_time", "account", "id", "state"} <= set(fields)
    assert "name" not in fields and "workdir" not in fields
    default = asks()
    assert default is not None and len(default) < 20  # of JobInfo's 99
    assert asks("--json") is None  # --json shows every field


def test_the_server_keeps_squeues_default_set_up_to_date() -> None:
    """The server builds ``SQUEUE_FIELDS``' JSON (with ``omit_defaults``) between
    requests: the set a plain ``squeue`` asks for, leaving out defaults."""
    default = asks()
    assert default is not None
    assert frozenset(default) == SQUEUE_FIELDS
    assert job_defaults(default)  # (so it asks with omit_defaults)


def test_a_plain_column_is_its_field_as_it_is() -> None:
    from hal.compat.job_fields import PLAIN_LETTERS

    for letter, name in PLAIN_LETTERS.items():
        assert LETTER_FIELDS[letter] == (name,)
        for info in job_shapes():
            assert JOB_LETTERS[letter][1](info, T0) == getattr(info, name), letter


def test_a_sort_key_read_as_a_field_is_its_number() -> None:
    from hal.compat.squeue import _SORT_FIELD, _SORT_NUMBERS

    for letter, name in _SORT_FIELD.items():
        for info in job_shapes():
            assert _SORT_NUMBERS[letter](info, T0) == getattr(info, name), letter


def test_every_column_says_which_fields_it_reads() -> None:
    assert LETTER_FIELDS.keys() == JOB_LETTERS.keys()
    names = set(JobInfo.model_fields)
    assert all(set(fields) <= names for fields in LETTER_FIELDS.values())
