"""``scontrol update TimeLimit=`` on a running job reaches its agent, which enforces the
new limit (counted from the job's start, as Slurm does): lowered, the job times out at
the new limit; raised, it runs past the old one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit, JobUpdate

SLEEPER = "#!/bin/sh\nsleep 300\n"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"kill_wait_seconds": 1})
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _running(live: LiveServer, tmp_path: Path, limit_s: int) -> int:
    with live.client() as admin:
        job = admin.submit(
            JobSubmit(script=SLEEPER, workdir=str(tmp_path), time_limit_seconds=limit_s)
        ).job_id
        wait_until(lambda: admin.job(job).state == "RUNNING", message="the job running")
    return job


def test_a_lowered_limit_ends_the_job_there(live: LiveServer, tmp_path: Path) -> None:
    job = _running(live, tmp_path, 3600)
    out = live.cli("scontrol", "update", f"JobId={job}", "TimeLimit=0:03")
    assert out.returncode == 0, out.stderr
    with live.client() as admin:
        wait_until(lambda: admin.job(job).state == "TIMEOUT", 20, message="the new limit")
        info = admin.job(job)
        assert info.start_time is not None and info.end_time is not None
        # not the old hour (however long the command took to start on a busy machine)
        assert info.end_time - info.start_time < 60


def test_a_raised_limit_lets_the_job_run_on(live: LiveServer, tmp_path: Path) -> None:
    """The raise goes through the API (the path `scontrol update` takes, tested above):
    the command's interpreter can take longer to start on a busy machine than the old
    limit lasts, and the raise must reach the node before that limit passes."""
    old_limit_s = 5
    job = _running(live, tmp_path, old_limit_s)
    with live.client() as admin:
        admin.update_job(job, JobUpdate(time_limit_seconds=600))
        # the agent counts the limit from the job's start on the node, which comes after
        # the server's RUNNING: past that start, the old limit and the kill wait (1 s)
        _, started = live.wait_job_started("node1", job)
        wait_until(
            lambda: time.time() > started + old_limit_s + 1 + 1,
            old_limit_s + 30,
            message="the old limit and its kill wait to pass",
        )
        assert admin.job(job).state == "RUNNING"
        admin.cancel(str(job))


def test_the_limit_of_a_finished_job_stays(live: LiveServer, tmp_path: Path) -> None:
    """`scontrol update TimeLimit=` of a job that has ended was accepted (exit 0, a
    job.updated event) and rewrote the finished run's limit; a raise that came after the
    job had timed out looked as if it had worked. Slurm 22.05.8 refuses it, as every
    update of an ended job: "Job has already finished for job N"."""
    with live.client() as admin:
        job = admin.submit(
            JobSubmit(script="#!/bin/sh\ntrue\n", workdir=str(tmp_path), time_limit_seconds=60)
        ).job_id
        wait_until(lambda: admin.job(job).state == "COMPLETED", message="the job to end")
    out = live.cli("scontrol", "update", f"JobId={job}", "TimeLimit=10:00")
    assert out.returncode != 0
    assert f"Job has already finished for job {job}" in out.stderr, out.stderr
    with live.client() as admin:
        assert admin.job(job).time_limit_seconds == 60
        kinds = [e.kind for e in admin.events(follow=False) if e.job_id == job]
        assert "job.updated" not in kinds
