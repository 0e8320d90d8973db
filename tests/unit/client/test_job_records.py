"""A job list read with ``omit_defaults`` (ADR 0028): the client's table of the values
left out is ``JobInfo``'s, the fields that hold objects are never left out for it, and
a record reads a field left out as its default, and only the fields asked for."""

from __future__ import annotations

from typing import Any

import pytest

from hal.api.job_list import JOB_DEFAULTS as SERVER_DEFAULTS
from hal.client.records import JOB_DEFAULTS, NESTED_JOB_FIELDS, job_defaults, records
from hal.wire.jobs import JobInfo


def test_the_client_defaults_are_jobinfos() -> None:
    expected: dict[str, Any] = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in SERVER_DEFAULTS.items()
    }
    assert expected == JOB_DEFAULTS
    assert [type(v) for v in JOB_DEFAULTS.values()] == [type(expected[k]) for k in JOB_DEFAULTS]


def test_the_fields_that_hold_objects_are_named() -> None:
    schema = JobInfo.model_json_schema()
    holding = {
        name
        for name, prop in schema["properties"].items()
        if "$ref" in str(prop)  # an object, a list of them, or one or null
    }
    assert holding == NESTED_JOB_FIELDS
    assert job_defaults(["id", "steps"]) is None
    assert job_defaults(None) is None
    assert job_defaults(["id", "start_time"]) == {"start_time": None}


def test_a_record_reads_a_field_left_out_as_its_default_and_no_other() -> None:
    defaults = job_defaults(["id", "start_time", "nodes", "requeue"])
    assert defaults is not None
    body = '{"jobs":[{"id":1},{"id":2,"start_time":5.0,"nodes":["a"],"requeue":false}]}'
    first, second = records(body, defaults).jobs
    assert (first.id, first.start_time, first.nodes, first.requeue) == (1, None, (), True)
    assert (second.start_time, second.nodes, second.requeue) == (5.0, ["a"], False)
    with pytest.raises(AttributeError):
        first.name  # noqa: B018 (not asked for: not there)
    assert not hasattr(records(body).jobs[0], "start_time")
