"""``scontrol suspend|resume`` with a real agent and a real process: a suspended job
stops making progress (SIGSTOP to its process group), keeps its allocation, and the time
it spends suspended does not count toward its time limit; only administrators may do it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.compat.job_fields import time_used
from hal.core.errors import PermissionDenied
from hal.testing.live import LiveServer, tree_stopped, wait_until
from hal.wire.jobs import JobSubmit

TICKER = """#!/bin/sh
while true; do echo tick >> "$PWD/ticks.$SLURM_JOB_ID"; sleep 0.1; done
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"kill_wait_seconds": 1})
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _ticks(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_suspend_stops_the_job_and_its_clock(live: LiveServer, tmp_path: Path) -> None:
    with live.client() as admin:
        job = admin.submit(
            JobSubmit(script=TICKER, workdir=str(tmp_path), time_limit_seconds=6, cpus_per_task=2)
        ).job_id
        ticks = tmp_path / f"ticks.{job}"
        wait_until(lambda: _ticks(ticks) >= 5, message="the job ticking")
        assert admin.suspend(job) == [job]
        assert admin.job(job).state == "SUSPENDED"
        # the server's SUSPENDED comes first; the SIGSTOP reaches the node a little later
        pid, _ = live.wait_job_started("node1", job)
        wait_until(lambda: tree_stopped(pid), message="the job's processes to stop")
        frozen, stopped_at = _ticks(ticks), time.time()
        wait_until(
            lambda: time.time() > stopped_at + 7, 30, message="longer than the whole time limit"
        )
        assert tree_stopped(pid) and _ticks(ticks) == frozen  # no progress
        info = admin.job(job)
        assert info.state == "SUSPENDED" and info.nodes  # it keeps its node
        out = live.cli("squeue", "-j", str(job), "-h", "-o", "%T")
        assert out.stdout.split() == ["SUSPENDED"]

        live.cli("scontrol", "resume", str(job))
        wait_until(lambda: _ticks(ticks) > frozen + 3, message="the job ticking again")
        assert admin.job(job).state == "RUNNING"  # 7 s suspended did not time it out
        wait_until(lambda: admin.job(job).state == "TIMEOUT", 20, message="its time limit")
        info = admin.job(job)
        assert info.end_time is not None and info.start_time is not None
        assert info.end_time - info.start_time > 6 + 6  # its limit plus the suspension
        # run time (squeue TIME, sacct Elapsed) leaves the suspension out: about the limit
        # (above it by the time the job took to start on the node: seconds on a busy host)
        assert info.suspended_seconds > 6.5
        assert 5 < time_used(info, info.end_time) < 6 + 6.5


def test_only_admins_suspend(live: LiveServer, tmp_path: Path) -> None:
    with live.client() as admin:
        token = admin.add_user("mallory").token
        job = admin.submit(
            JobSubmit(script=TICKER, workdir=str(tmp_path), time_limit_seconds=60)
        ).job_id
        wait_until(lambda: admin.job(job).state == "RUNNING", message="the job")
        with live.client(token) as user, pytest.raises(PermissionDenied):
            user.suspend(job)
        out = live.cli("scontrol", "resume", str(job))
        assert out.returncode != 0 and "not suspended" in out.stderr
        admin.cancel(str(job))
