"""The variables a step's tasks get on the agents' nodes, as Slurm 22.05.8's (on a
two-node peer): ``SLURM_JOB_CPUS_PER_NODE`` is the job's list, not the node's count;
each task's ``SLURM_TASK_PID`` is its own pid; ``srun --jobid`` from outside the job
names the tasks' ``SLURM_JOB_NAME`` after its ``-J`` or its command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_srun_options_server import run
from two_agents import (
    SRUN,
)

from hal.testing.live import LiveServer


def test_a_multi_node_steps_tasks_see_the_jobs_cpus_and_their_own_pid(
    server: LiveServer, tmp_path: Path
) -> None:
    body = (
        "echo batch=$SLURM_JOB_CPUS_PER_NODE\n"
        f"{SRUN} -l sh -c 'echo cpn=$SLURM_JOB_CPUS_PER_NODE pid=$SLURM_TASK_PID self=$$'\n"
    )
    out, err = run(server, tmp_path, body, "-N2", "-n4")
    lines = out.splitlines()
    assert lines[0] == "batch=2(x2)", (out, err)
    tasks = sorted(lines[1:])
    assert [x.split(" ")[:2] for x in tasks] == [[f"{r}:", "cpn=2(x2)"] for r in range(4)]
    for line in tasks:
        pid, own = (x.split("=")[1] for x in line.split(" ")[2:])
        assert pid == own, line  # (slurmstepd's: the task's own pid)


def test_srun_jobid_from_outside_names_the_tasks_job_after_its_step(
    server: LiveServer, tmp_path: Path
) -> None:
    env = {k: v for k, v in server.env().items() if not k.startswith("SLURM_")}
    hal = [sys.executable, "-m", "hal.cli.main"]
    granted = subprocess.run(
        [*hal, "salloc", "-N1", "--no-shell", "-J", "held"],
        env=env, text=True, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    job = granted.stderr.split()[-1]
    try:
        names = []
        for extra in ([], ["-J", "stepname"]):
            done = subprocess.run(
                [*hal, "srun", f"--jobid={job}", *extra, "sh", "-c", "echo $SLURM_JOB_NAME"],
                env=env, cwd=tmp_path, text=True, capture_output=True, timeout=60, check=False,
            )  # fmt: skip
            names.append(done.stdout.strip())
    finally:
        server.cli("scancel", job)
    assert names == ["sh", "stepname"]  # (not the allocation's "held")
