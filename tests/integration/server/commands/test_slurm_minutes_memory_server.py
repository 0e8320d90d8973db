"""Two forms a real Slurm 22.05.8 took differently, on a real server with real
agents: a time limit with seconds is whole minutes everywhere it shows (``-t 5:30``:
``TimeLimit=00:06:00``, squeue ``%l`` ``6:00``, sacct ``Timelimit`` ``00:06:00``), and a
batch job of ``--mem=0``, ``--mem-per-cpu=0`` or ``--mem-per-gpu=0`` has no
``SLURM_MEM_PER_NODE`` (``--mem=100``: ``100``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.compat.time_limits import EXACT_SECONDS_VARIABLE
from hal.testing.live import LiveServer, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("minutes")) as srv, srv.agents(1, memory="1G"):
        yield srv


def as_a_user(server: LiveServer, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``hal ARGV`` without the live server's ``HAL_EXACT_TIME_LIMITS`` (Slurm's minutes)."""
    env = {k: v for k, v in server.env().items() if k != EXACT_SECONDS_VARIABLE}
    return subprocess.run(
        [sys.executable, "-m", "hal.cli.main", *argv],
        env=env,
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_a_limit_with_seconds_is_whole_minutes_where_it_shows(
    server: LiveServer, tmp_path: Path
) -> None:
    """HAL kept ``-t 5:30`` as 330 s: ``TimeLimit=00:05:30``, ``%l`` ``5:30``."""
    done = as_a_user(
        server, "sbatch", "--parsable", "--hold", "-t", "5:30", "--wrap", "true", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    show = as_a_user(server, "scontrol", "show", "job", job, cwd=tmp_path).stdout
    assert "TimeLimit=00:06:00" in show, show
    assert as_a_user(server, "squeue", "-h", "-j", job, "-o", "%l", cwd=tmp_path).stdout == "6:00\n"
    sacct = as_a_user(server, "sacct", "-n", "-X", "-P", "-j", job, "-o", "Timelimit", cwd=tmp_path)
    assert sacct.stdout == "00:06:00\n", sacct.stdout + sacct.stderr
    moved = as_a_user(server, "scontrol", "update", f"JobId={job}", "TimeLimit=+0:30", cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert as_a_user(server, "squeue", "-h", "-j", job, "-o", "%l", cwd=tmp_path).stdout == "7:00\n"
    assert as_a_user(server, "scancel", job, cwd=tmp_path).returncode == 0


def completed(server: LiveServer, job: int) -> bool:
    with server.client() as c:
        jobs = c.jobs(ids=[str(job)], include_finished=True)
    return bool(jobs) and jobs[0].state == "COMPLETED"


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--mem=0", "node= cpu="),
        ("--mem-per-cpu=0", "node= cpu="),
        ("--mem-per-gpu=0", "node= cpu="),
        ("--mem=100", "node=100 cpu="),
    ],
)
def test_mem_per_node_only_for_a_mem_above_zero(
    server: LiveServer, tmp_path: Path, option: str, expected: str
) -> None:
    """HAL set ``SLURM_MEM_PER_NODE`` to the node's total (1024) for the zeros."""
    (tmp_path / "job.sh").write_text(
        '#!/bin/sh\necho "node=$SLURM_MEM_PER_NODE cpu=$SLURM_MEM_PER_CPU"\n'
    )
    done = server.cli("sbatch", "--parsable", "-o", "out.txt", option, "job.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.strip())
    wait_until(lambda: completed(server, job), message=f"job {job} to complete")
    assert (tmp_path / "out.txt").read_text() == f"{expected}\n"
