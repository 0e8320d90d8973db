"""sacct's UserCPU and SystemCPU on a real server with two real agents: a batch script
that burns about a second of user time and a step that does the same show it as UserCPU
on the batch and the step line, UserCPU + SystemCPU is TotalCPU on every line, and the
job line's are the sums over its steps, as its TotalCPU; whether srun ran the step on
the batch node itself (its ``wait4``) or the agents on both nodes (the step keepers')."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
# about a second of user time: a loop that asks for its CPU time rarely (each ask is a
# system call, system time)
BURN = """\
import time
t = time.process_time()
while time.process_time() - t < 1.0:
    sum(range(10000))
"""
FIELDS = "JobID,UserCPU,SystemCPU,TotalCPU"
MS = 0.0015  # sacct prints milliseconds: a sum of rounded figures may be off by one or two


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("cpuparts")
    with LiveServer(data) as srv, srv.agents(2, cpus=2, memory="1G"):
        yield srv


def run(server: LiveServer, tmp_path: Path, srun: str, *args: str) -> int:
    (tmp_path / "burn.py").write_text(BURN)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{sys.executable} burn.py\n{srun} {sys.executable} burn.py\n")
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())

    def ended() -> bool:
        with server.client() as c:
            return c.job(job_id).state == "COMPLETED"

    wait_until(ended, 120, message="the job to end")
    return job_id


def seconds(text: str) -> float:
    """sacct's TotalCPU under an hour (``MM:SS.mmm``) in seconds."""
    minutes, rest = text.split(":")
    return int(minutes) * 60 + float(rest)


def lines(server: LiveServer, job_id: int) -> dict[str, tuple[float, float, float]]:
    """JobID → (UserCPU, SystemCPU, TotalCPU) of ``sacct -j ID -P -n``'s lines."""
    done = server.cli("sacct", "-j", str(job_id), "-P", "-n", "-o", FIELDS)
    assert done.returncode == 0, done.stderr
    found = {}
    for line in done.stdout.splitlines():
        name, user, system, total = line.split("|")
        assert user and system, line  # measured apart: never blank here
        found[name] = (seconds(user), seconds(system), seconds(total))
    return found


def check(found: dict[str, tuple[float, float, float]], job_id: int) -> None:
    assert sorted(found) == [str(job_id), f"{job_id}.0", f"{job_id}.batch"], found
    for user, system, total in found.values():
        assert abs(user + system - total) <= MS, found
    # the script's own second (srun's step is its child too: at least one more)
    assert found[f"{job_id}.batch"][0] >= 0.9, found
    assert found[f"{job_id}.0"][0] >= 0.9, found
    job, batch, step = found[str(job_id)], found[f"{job_id}.batch"], found[f"{job_id}.0"]
    for part in range(3):
        assert abs(job[part] - batch[part] - step[part]) <= MS, found


def test_a_step_srun_ran_on_the_batch_node(server: LiveServer, tmp_path: Path) -> None:
    job_id = run(server, tmp_path, SRUN)
    check(lines(server, job_id), job_id)


def test_a_step_the_agents_ran_on_two_nodes(server: LiveServer, tmp_path: Path) -> None:
    job_id = run(server, tmp_path, f"{SRUN} -N2 --ntasks-per-node=1", "-N2")
    found = lines(server, job_id)
    check(found, job_id)
    assert found[f"{job_id}.0"][0] >= 1.8, found  # both tasks' seconds
