"""Backfill in the live server (Slurm's sched/backfill is the default profile): a job
that fits in a hole starts ahead of a blocked one, and the blocked one gets an expected
start in REST, `hal squeue --start`, `hal show job` and `scontrol show job`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.scheduler.plugins import default_profile
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # The default profile, with bf_interval 1 s instead of 30 s so that the test does not
    # wait for the second backfill pass.
    profile = default_profile()
    profile["plugin_args"] = {"noderesources": {"score": "best_fit"}, "backfill": {"interval_s": 1}}
    data = tmp_path_factory.mktemp("hal")
    # Slurm's predictor (the requested time), so that the planned start stays put: with
    # avg2/learned it moves earlier as soon as a short job of the same user ends.
    overrides = {
        "kill_wait_seconds": 2,
        "scheduler_profile": profile,
        "scheduler_predictor": "user",
    }
    with LiveServer(data, config_overrides=overrides) as live, live.agents(2, cpus=2, memory="1G"):
        yield live


def _job(tmp: Path, script: str, *, limit: int, nodes: int = 1, cpus: int = 2) -> JobSubmit:
    return JobSubmit(
        script=f"#!/bin/sh\n{script}\n",
        workdir=str(tmp),
        time_limit_seconds=limit,
        nodes_min=nodes,
        cpus_per_task=cpus,
        ntasks_per_node=1,
    )


def test_a_blocked_job_gets_an_expected_start_and_a_short_one_backfills(
    server: LiveServer, tmp_path: Path
) -> None:
    with server.client() as c:
        long = c.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: c.job(long).state == "RUNNING", message="the long job to start")
        started = c.job(long).start_time
        assert started is not None
        # both nodes whole: waits for the long job's node (its time limit: 300 s)
        wide = c.submit(_job(tmp_path, "true", limit=60, nodes=2)).job_id
        wait_until(
            lambda: c.job(wide).expected_start is not None,
            message="backfill to plan the blocked job",
        )
        info = c.job(wide)
        assert (info.state, info.reason) == ("PENDING", "Resources")
        assert info.expected_start is not None
        # planned at the long job's end (start + limit), on bf_resolution's 60 s grid
        assert started + 300 <= info.expected_start <= started + 300 + 60 + 2
        # a 30 s job on the free node ends before that: it starts now (without backfill
        # it would wait behind the blocked job with reason Priority)
        short = c.submit(_job(tmp_path, "sleep 1", limit=30)).job_id
        wait_until(lambda: c.job(short).state == "COMPLETED", message="the short job to backfill")
        assert c.job(wide).state == "PENDING"
        expected = info.expected_start
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(expected))

    sq = server.cli("squeue", "--start", "-h", "-j", str(wide), "-o", "%i %S %r")
    assert sq.returncode == 0, sq.stderr
    assert sq.stdout.split() == [str(wide), when, "Resources"], sq.stdout
    shown = server.cli("show", str(wide))
    assert shown.returncode == 0, shown.stderr
    assert f"ExpectedStart={when} " in shown.stdout
    sc = server.cli("scontrol", "show", "job", str(wide))
    assert f"StartTime={when}" in sc.stdout, sc.stdout

    with server.client() as c:
        c.cancel(str(wide))
        c.cancel(str(long))
        wait_until(lambda: c.job(long).state not in ("RUNNING", "COMPLETING"), message="cleanup")


def test_every_waiting_job_gets_a_forecast_start_behind_the_blocked_one(
    server: LiveServer, tmp_path: Path
) -> None:
    """EASY reserves for the first blocked job only; the jobs behind it get a forecast
    start (Slurm's squeue --start shows one for every job its backfill tests): a second
    two-node job after the first one's planned end, in `squeue --start` and REST."""
    with server.client() as c:
        long = c.submit(_job(tmp_path, "sleep 300", limit=300)).job_id
        wait_until(lambda: c.job(long).state == "RUNNING", message="the long job to start")
        wide = c.submit(_job(tmp_path, "true", limit=120, nodes=2)).job_id
        behind = c.submit(_job(tmp_path, "true", limit=60, nodes=2)).job_id
        wait_until(
            lambda: c.job(behind).expected_start is not None,
            message="backfill to forecast the job behind the blocked one",
        )
        first, second = c.job(wide), c.job(behind)
        assert (first.reason, second.reason) == ("Resources", "Priority")
        assert first.expected_start is not None and second.expected_start is not None
        # the first holds both nodes for its 120 s limit; the second starts after it
        assert second.expected_start >= first.expected_start + 120
    sq = server.cli("squeue", "--start", "-h", "-o", "%i %S %r")
    assert sq.returncode == 0, sq.stderr
    rows = {line.split()[0]: line.split()[1:] for line in sq.stdout.splitlines()}
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(second.expected_start))
    assert rows[str(behind)] == [when, "Priority"], sq.stdout
    with server.client() as c:
        for job in (behind, wide, long):
            c.cancel(str(job))
        wait_until(lambda: c.job(long).state not in ("RUNNING", "COMPLETING"), message="cleanup")
