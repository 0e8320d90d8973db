"""`hal explain` of a job that waits only on its dependency said "nodes: 0/2 nodes
available" while a node was idle: the nodes were never looked at. Now it names the
dependency as the reason, with the jobs it waits for and their states."""

from __future__ import annotations

import pytest

from hal.cli.explain import explain_lines
from hal.cli.main import main
from hal.testing.live import LiveServer
from hal.wire.jobs import JobSubmit
from hal.wire.priority import ExplainInfo


def test_explain_names_the_jobs_a_dependency_waits_for_and_their_states(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    def job(**fields: object) -> JobSubmit:
        return JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", **fields)  # type: ignore[arg-type]

    with env.client() as c:
        first = c.submit(job(hold=True)).job_id
        array = c.submit(job(hold=True, array="1-2")).job_id
        after = c.submit(job(dependency=f"afterok:{first}:{array}")).job_id
    try:
        assert main(["explain", str(after)]) == 0
        out = capsys.readouterr().out
        assert (
            f"  why: waits for its dependency (afterok:{first}(unfulfilled),afterok:{array}"
            f"(unfulfilled): job {first} PENDING, array {array} (2 PENDING)); nodes are "
            "looked at once it holds\n"
        ) in out
        assert "nodes available" not in out
    finally:
        with env.client() as c:
            for job in (after, array, first):
                c.cancel(str(job))


def explain(**fields: object) -> ExplainInfo:
    base: dict[str, object] = {
        "job_id": 7, "display_id": "7", "state": "PENDING", "reason": "Dependency",
        "detail": "waits for its dependency", "blocking_plugin": "dependency",
        "nodes_total": 2, "nodes_available": 0, "nodes_needed": 1, "rejections": [],
        "summary": "0/2 nodes available", "jobs_ahead": 0, "ahead_ids": [], "priority": None,
        "fairshare": None, "expected_start": None, "earliest_start": None,
    }  # fmt: skip
    return ExplainInfo.model_validate(base | fields)


def test_nodes_never_looked_at_are_not_shown_as_unavailable() -> None:
    lines = explain_lines(explain())
    assert "  nodes: not looked at while Dependency holds it" in lines
    judged = explain_lines(
        explain(
            reason="Resources",
            rejections=[{"plugin": "noderesources", "reason": "insufficient cpu", "nodes": 2}],
            summary="0/2 nodes available: 2 insufficient cpu",
        )
    )
    assert "  nodes: 0/2 nodes available: 2 insufficient cpu" in judged
