"""``scancel JOB.STEP`` on a real server with real agents, as Slurm 22.05.8's
(docs/slurm-checks.md, "scancel of a step, and what srun and slurmstepd say"): the
step's tasks are killed on every node, srun says "Job step aborted", each node's
slurmstepd line says the step was cancelled, the step is CANCELLED in sacct and the job
goes on; ``scancel -s USR1 JOB.STEP`` only signals its tasks; ``srun -t`` ends a step
at its own time limit. On the batch node (srun runs the tasks, in the step's cgroup the
agent reaches) and across nodes (the agents run them)."""

from __future__ import annotations

import re
from pathlib import Path

from two_agents import (
    SRUN,
    sacct,
    state,
    submit,
)

from hal.slurm.steps import step_aborted
from hal.testing.live import LiveServer, wait_until


def step_line(node: str, step: str, why: str = "") -> str:
    """slurmstepd's line for a step it ended, as a pattern (any time)."""
    because = f" {why}" if why else ""
    what = rf"STEP {step} ON {node} CANCELLED AT \S+{because}"
    return rf"slurmstepd-{node}: error: \*\*\* {what} \*\*\*\n"


def running_step(live: LiveServer, job_id: int) -> None:
    def started() -> bool:
        with live.client() as c:
            return any(s.step_id == 0 for s in c.job_steps(job_id))

    wait_until(started, 60, message=f"step {job_id}.0 to run")


def output_once_ended(live: LiveServer, tmp_path: Path, job_id: int) -> str:
    wait_until(lambda: state(live, job_id) == "COMPLETED", 60, message="the job to end")
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def test_a_step_on_the_batch_node_is_cancelled(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    job_id = submit(
        server, tmp_path, f"{SRUN} sleep 100; echo after=$?\n{SRUN} true; echo next=$?\n"
    )
    running_step(server, job_id)
    done = server.cli("scancel", f"{job_id}.0")
    assert done.returncode == 0, done.stderr
    text = output_once_ended(server, tmp_path, job_id)
    line = step_line("node1", f"{job_id}.0")
    expected = f"{step_aborted(2)}\n{line}srun: error: node1: task 0: Killed\nafter=137\nnext=0\n"
    assert re.fullmatch(expected, text), text
    # as Slurm 22.05.8's: who cancelled the step, and its signal in the job's derived code
    rows = sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode")
    assert rows[0] == f"{job_id}|COMPLETED|0:0|0:9", rows
    assert re.fullmatch(rf"{job_id}\.0\|CANCELLED by \S+\|0:9\|", rows[2]), rows
    assert rows[3] == f"{job_id}.1|COMPLETED|0:0|", rows
    again = server.cli("scancel", f"{job_id}.0")  # ended: as Slurm's, the job's id, 225
    assert again.returncode == 225
    assert f"Kill job error on job step id {job_id}: Invalid job id" in again.stderr


def test_a_step_across_nodes_is_cancelled(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} sleep 100; echo after=$?\n", "-N2", "-n2")
    running_step(server, job_id)
    assert server.cli("scancel", f"{job_id}.0").returncode == 0
    text = output_once_ended(server, tmp_path, job_id)
    assert text.startswith(f"{step_aborted(2)}\n"), text
    for node in ("node1", "node2"):
        assert re.search(step_line(node, f"{job_id}.0"), text), text
    assert "srun: error: node1: task 0: Killed\n" in text, text
    assert "srun: error: node2: task 1: Killed\n" in text, text
    assert text.endswith("after=137\n"), text
    assert re.fullmatch(rf"{job_id}\.0\|CANCELLED by \S+", sacct(server, job_id, "JobID,State")[2])


def test_scancel_s_signals_a_steps_tasks(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """On the batch node, where srun's children are out of the server's reach: the
    agent signals the step's cgroup."""
    task = "trap 'echo got usr1; exit 3' USR1; echo ready; sleep 100 & wait"
    job_id = submit(server, tmp_path, f'{SRUN} bash -c "{task}"; echo after=$?\n')
    out = tmp_path / f"slurm-{job_id}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text(), 60, message="the trap")
    assert server.cli("scancel", "-s", "USR1", f"{job_id}.0").returncode == 0
    text = output_once_ended(server, tmp_path, job_id)
    assert "got usr1\n" in text and text.endswith("after=3\n"), text
    assert "aborted" not in text and "CANCELLED" not in text, text


def test_scancel_s_of_a_job_signals_its_steps_not_its_batch_shell(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Slurm 22.05.8's scancel sends a signal other than SIGKILL to the job's steps and
    not to its batch shell (docs/slurm-checks.md): a step checkpointing on USR1 ends
    well and the script goes on to COMPLETED; a script running no step gets nothing;
    ``-f`` signals the batch shell and its children too. HAL signalled the batch shell,
    which died of it (the job CANCELLED)."""
    task = "trap 'echo got usr1; exit 0' USR1; echo ready; sleep 100 & wait"
    job_id = submit(server, tmp_path, f'{SRUN} bash -c "{task}"; echo after=$?\n')
    out = tmp_path / f"slurm-{job_id}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text(), 60, message="the trap")
    assert server.cli("scancel", "-s", "USR1", str(job_id)).returncode == 0
    text = output_once_ended(server, tmp_path, job_id)
    assert text.endswith("got usr1\nafter=0\n"), text
    plain = submit(server, tmp_path, "echo ready; sleep 100\n")
    out = tmp_path / f"slurm-{plain}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text(), 60, message="its start")
    assert server.cli("scancel", "-s", "USR1", str(plain)).returncode == 0
    assert server.cli("scancel", "-s", "USR2", "-f", str(plain)).returncode == 0
    wait_until(lambda: state(server, plain) == "FAILED", 30, message="USR2 to end it")
    assert out.read_text() == "ready\n"
    rows = sacct(server, plain, "JobID,State,ExitCode")
    assert rows[0] == f"{plain}|FAILED|0:12", rows  # (USR1 was never sent: 0:10)


def test_a_step_on_the_batch_node_ends_at_its_own_time_limit(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """``srun -t``: SIGTERM at the step's limit, slurmstepd's line "DUE TO TIME LIMIT"
    and srun's "Force Terminated", as Slurm 22.05.8's; the job goes on."""
    job_id = submit(server, tmp_path, f"{SRUN} -t 0:02 sleep 100; echo after=$?\n")
    text = output_once_ended(server, tmp_path, job_id)
    line = step_line("node1", f"{job_id}.0", "DUE TO TIME LIMIT")
    expected = (
        f"{line}srun: error: node1: task 0: Terminated\n"
        f"srun: Force Terminated StepId={job_id}.0\nafter=143\n"
    )
    assert re.fullmatch(expected, text), text
    assert sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode") == [
        f"{job_id}|COMPLETED|0:0|0:15",  # as Slurm 22.05.8's (docs/slurm-checks.md)
        f"{job_id}.batch|COMPLETED|0:0|",
        f"{job_id}.0|TIMEOUT|0:15|",
    ]


def test_a_step_across_nodes_ends_at_its_own_time_limit(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} -t 0:02 sleep 100; echo after=$?\n", "-N2", "-n2")
    text = output_once_ended(server, tmp_path, job_id)
    for node in ("node1", "node2"):
        assert re.search(step_line(node, f"{job_id}.0", "DUE TO TIME LIMIT"), text), text
    assert "srun: error: node1: task 0: Terminated\n" in text, text
    assert text.count(f"srun: Force Terminated StepId={job_id}.0\n") == 1, text
    assert text.endswith("after=143\n"), text
