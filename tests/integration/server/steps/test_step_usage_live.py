"""What ended steps used, on a real server with two real agents: a step whose task
holds 60 MiB and burns half a second of CPU shows in ``sacct -j N`` with MaxRSS of at
least that, where (MaxRSSNode, MaxRSSTask), AveRSS and TotalCPU, as Slurm's sacct shows a
step's; whether srun ran it on the batch node itself (its children, ``wait4``) or the
agents on both nodes (the step keeper's ``wait4`` and the agent's samples)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
MiB = 1 << 20
HOG = """\
import os, time
x = bytearray(60 << 20)
x[::4096] = b"y" * (len(x) // 4096)  # every page resident
t = time.process_time()
while time.process_time() - t < 0.5:
    pass
"""
FIELDS = "JobID,MaxRSS,AveRSS,MaxRSSNode,MaxRSSTask,TotalCPU"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("stepusage")
    with LiveServer(data) as srv, srv.agents(2, cpus=2, memory="1G"):
        yield srv


def submit(server: LiveServer, tmp_path: Path, body: str, *args: str) -> int:
    (tmp_path / "hog.py").write_text(HOG)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def ended(server: LiveServer, job_id: int) -> None:
    def done() -> bool:
        with server.client() as c:
            return c.job(job_id).state == "COMPLETED"

    wait_until(done, 90, message="the job to end")


def step_line(server: LiveServer, job_id: int, fields: str = FIELDS) -> list[str]:
    done = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", fields)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    return line.split("|")


def size(text: str) -> float:
    """sacct's MaxRSS (``71680K``, ``70M``, ``1.50G``) in bytes."""
    units = "KMGT"
    return float(text[:-1]) * 1024 ** (units.index(text[-1]) + 1)


def cpu(text: str) -> float:
    """sacct's TotalCPU under an hour (``MM:SS.mmm``) in seconds."""
    minutes, seconds = text.split(":")
    return int(minutes) * 60 + float(seconds)


def test_a_step_srun_ran_on_the_batch_node_keeps_what_it_used(
    server: LiveServer, tmp_path: Path
) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} {sys.executable} hog.py\n")
    ended(server, job_id)
    line = step_line(server, job_id)
    assert line[0] == f"{job_id}.0", line
    assert size(line[1]) >= 60 * MiB and line[2] == line[1], line  # one task: AveRSS too
    assert line[3:5] == ["node1", "0"], line
    assert cpu(line[5]) >= 0.4, line
    # the three columns the ask names, parsable as sacct -P prints them
    assert step_line(server, job_id, "JobID,MaxRSS,TotalCPU")[1:] == [line[1], line[5]]


def test_a_step_across_two_nodes_keeps_what_its_tasks_used(
    server: LiveServer, tmp_path: Path
) -> None:
    """One task per node: MaxRSS is one task's most (not the sum), TotalCPU both tasks'."""
    job_id = submit(
        server, tmp_path, f"{SRUN} -N2 --ntasks-per-node=1 {sys.executable} hog.py\n", "-N2"
    )
    ended(server, job_id)
    line = step_line(server, job_id)
    assert line[0] == f"{job_id}.0", line
    assert 60 * MiB <= size(line[1]) < 120 * MiB, line
    assert 60 * MiB <= size(line[2]) <= size(line[1]), line
    assert (line[3], line[4]) in (("node1", "0"), ("node2", "1")), line
    assert cpu(line[5]) >= 0.8, line
