"""Passes decided in a process of their own (``[scheduler] pass_process = "fork"``, ADR
0031) in the live server, with its agents and their processes: jobs start, a blocked
job gets its reservation's expected start, a short job backfills around it, and
``sdiag``'s longest pass says it was forked, with its process's CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.scheduler.plugins import default_profile
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    profile = default_profile()
    profile["plugin_args"] = {"backfill": {"interval_s": 1}}
    overrides: dict[str, object] = {
        "scheduler_profile": profile,
        "scheduler_predictor": "user",
        "scheduler_pass_process": "fork",
    }
    data = tmp_path_factory.mktemp("hal")
    with LiveServer(data, config_overrides=overrides) as live, live.agents(2, cpus=2, memory="1G"):
        yield live


def _job(tmp: Path, script: str, *, limit: int, nodes: int = 1) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\n{script}\n",
        workdir=str(tmp),
        time_limit_seconds=limit,
        nodes_min=nodes,
        cpus_per_task=2,
        ntasks_per_node=1,
    )


def test_forked_passes_start_backfill_and_forecast(server: LiveServer, tmp_path: Path) -> None:
    with server.client() as c:
        long = c.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: c.job(long).state == "RUNNING", message="the long job to start")
        started = c.job(long).start_time
        assert started is not None
        wide = c.submit(_job(tmp_path, "true", limit=60, nodes=2)).job_id
        wait_until(
            lambda: c.job(wide).expected_start is not None,
            message="the forked pass's forecast to plan the blocked job",
        )
        info = c.job(wide)
        assert (info.state, info.reason) == ("PENDING", "Resources")
        assert info.expected_start is not None
        assert started + 300 <= info.expected_start <= started + 300 + 60 + 2
        short = c.submit(_job(tmp_path, "sleep 1", limit=30)).job_id
        wait_until(lambda: c.job(short).state == "COMPLETED", message="the short job to backfill")
        assert c.job(wide).state == "PENDING"
        diag = c.diag()
    longest = diag.max_pass_breakdown
    assert longest is not None and longest["forked"] is True
    assert isinstance(longest["cpu_s"], float) and longest["cpu_s"] > 0
    assert diag.cycles >= 3
