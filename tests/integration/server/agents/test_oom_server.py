"""A job or an srun step the cgroup kills for memory looks as it does under Slurm 22.05.8
with cgroup v1 (checked against it, docs/slurm-checks.md): state OUT_OF_MEMORY with
ExitCode 0:125 (Slurm's SIG_OOM) whatever the script exited with, slurmstepd's "Detected
N oom-kill event(s)" line in the output, and for srun "task N: Out Of Memory" and exit
code 1. Real server, real agent, the kernel's OOM killer."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from two_agents import SRUN, sacct, state, submit

from hal.agent.isolation import detect_isolation
from hal.testing.live import LiveServer, wait_until

HOG = (
    f'{sys.executable} -c "import time; x = bytearray(300 << 20); '
    "x[::4096] = b'y' * (len(x) // 4096); time.sleep(2)\""
)
OOM_LINE = "slurmstepd-{node}: error: Detected 1 oom-kill event(s) in StepId={step}."

pytestmark = pytest.mark.skipif(
    not detect_isolation("auto", "probe-oom").base,
    reason="needs a writable cgroup memory controller (cgroup v1 or v2, as root)",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("oom")
    with LiveServer(data) as srv, srv.agents(1, cpus=2, memory="1G"):
        yield srv


def test_a_batch_script_killed_for_memory(server: LiveServer, tmp_path: Path) -> None:
    job_id = submit(server, tmp_path, f"{HOG}\n", "--mem=150M")
    wait_until(lambda: state(server, job_id) == "OUT_OF_MEMORY", 60, message="the OOM kill")
    assert sacct(server, job_id, "JobID,State,ExitCode") == [
        f"{job_id}|OUT_OF_MEMORY|0:125",
        f"{job_id}.batch|OUT_OF_MEMORY|0:125",
    ]
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert OOM_LINE.format(node="node1", step=f"{job_id}.batch") in out, out


def test_a_child_killed_for_memory_makes_the_job_oom_whatever_it_exits(
    server: LiveServer, tmp_path: Path
) -> None:
    """The script goes on after its child was killed and exits 0: still 0:125."""
    job_id = submit(server, tmp_path, f"{HOG}\necho after=$?\nexit 0\n", "--mem=150M")
    wait_until(lambda: state(server, job_id) == "OUT_OF_MEMORY", 60, message="the OOM kill")
    assert sacct(server, job_id, "JobID,ExitCode") == [f"{job_id}|0:125", f"{job_id}.batch|0:125"]
    assert "after=137" in (tmp_path / f"slurm-{job_id}.out").read_text()


def test_an_srun_step_killed_for_memory(server: LiveServer, tmp_path: Path) -> None:
    """srun on the batch node: its tasks run in the step's own cgroup (the agent gave the
    job's to its user), so the step is OUT_OF_MEMORY 0:125 and the job, whose script
    exits 0, COMPLETED with DerivedExitCode 0:125, as Slurm's; srun says so, exits 1."""
    job_id = submit(server, tmp_path, f"{SRUN} {HOG}\necho after=$?\n", "--mem=150M")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    assert sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode") == [
        f"{job_id}|COMPLETED|0:0|0:125",
        f"{job_id}.batch|COMPLETED|0:0|",
        f"{job_id}.0|OUT_OF_MEMORY|0:125|",
    ]
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "srun: error: node1: task 0: Out Of Memory\n" in out, out
    assert OOM_LINE.format(node="node1", step=f"{job_id}.0") in out, out
    assert "after=1\n" in out, out


def test_a_step_is_held_to_its_own_memory(server: LiveServer, tmp_path: Path) -> None:
    """As Slurm 22.05.8's task/cgroup (docs/slurm-checks.md, "Steps hold their job's
    memory"): in a job of 600 MB, a step of ``--mem=100M`` is killed for memory at 300 MB
    (its own cgroup's limit) and one without ``--mem`` is not; srun on the batch node and
    a step the agent runs (``srun --jobid`` from outside the job) alike."""
    script = f"{SRUN} --mem=100M {HOG}; echo small=$?\n{SRUN} {HOG}; echo whole=$?\nsleep 30\n"
    job_id = submit(server, tmp_path, script, "--mem=600M")
    out = tmp_path / f"slurm-{job_id}.out"
    wait_until(lambda: out.exists() and "whole=" in out.read_text(), 60, message="the steps")
    text = out.read_text()
    assert "srun: error: node1: task 0: Out Of Memory\n" in text, text
    assert "small=1\n" in text and "whole=0\n" in text, text
    outside = server.cli("srun", f"--jobid={job_id}", "--mem=100M", *shlex.split(HOG))
    assert outside.returncode == 1, outside.stderr
    assert "task 0: Out Of Memory" in outside.stderr, outside.stderr
    assert server.cli("srun", f"--jobid={job_id}", *shlex.split(HOG)).returncode == 0
    assert sacct(server, job_id, "JobID,State")[2:] == [
        f"{job_id}.0|OUT_OF_MEMORY",
        f"{job_id}.1|COMPLETED",
        f"{job_id}.2|OUT_OF_MEMORY",
        f"{job_id}.3|COMPLETED",
    ]
    assert server.cli("scancel", str(job_id)).returncode == 0
