"""Trace ids derived from the job, and TRACEPARENT in the job's environment."""

from __future__ import annotations

import re

from hal.core.job import JobSpec
from hal.observe import traceids
from hal.state.launch import job_environment
from hal.testing.builders import make_job

W3C = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


def test_traceparent_is_stable_per_attempt_and_distinct_between_attempts() -> None:
    a0 = traceids.traceparent("hal", 7, 100.5, 0)
    assert W3C.match(a0)
    assert traceids.traceparent("hal", 7, 100.5, 0) == a0  # any server process agrees
    a1 = traceids.traceparent("hal", 7, 100.5, 1)
    assert a1.split("-")[1] == a0.split("-")[1]  # one trace per job ...
    assert a1.split("-")[2] != a0.split("-")[2]  # ... one job.run span per attempt


def test_a_reused_job_id_in_a_fresh_database_gets_a_new_trace() -> None:
    """Job ids restart at 1 in a new database; the submit time keeps traces apart."""
    assert traceids.job_trace_id("hal", 1, 10.0) != traceids.job_trace_id("hal", 1, 11.0)
    assert traceids.job_trace_id("hal", 1, 10.0) != traceids.job_trace_id("other", 1, 10.0)


def test_job_environment_carries_traceparent_and_drops_the_submitters_tracestate() -> None:
    job = make_job(12).running_on("n1").build()
    job = job.evolve(
        submit_time=50.0,
        spec=JobSpec(
            user="alice",
            script="#!/bin/sh\n",
            environment=(("TRACEPARENT", "00-" + "a" * 32 + "-" + "b" * 16 + "-01"),
                         ("TRACESTATE", "vendor=x")),
        ),
    )  # fmt: skip
    env = job_environment(job, "hal")
    assert env["TRACEPARENT"] == traceids.traceparent("hal", 12, 50.0, 0)
    assert "TRACESTATE" not in env
