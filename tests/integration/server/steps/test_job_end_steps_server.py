"""A job cancelled or out of time while its processes run, on a real server with real
agents, as Slurm 22.05.8 (docs/slurm-checks.md, "scancel of a step, and what srun and
slurmstepd say"): every process of the job has KillWait to end on the SIGTERM (a task
saving its work survives its batch shell's end), and srun says the step is ending —
"Job step aborted", "forcing job termination" for a cancel, slurmstepd's ``STEP`` line
on each of its nodes (with "DUE TO TIME LIMIT" for the job's limit), the tasks' ends —
on the batch node and across nodes."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_step_cancel_server import step_line
from two_agents import SRUN, sacct, submit

from hal.slurm.steps import FORCING_TERMINATION, step_aborted
from hal.testing.live import LiveServer, wait_until

# KillWait: srun has this long to relay its step's last lines once the job is ending (the
# tasks here end at once on the SIGTERM; a loaded machine may take seconds to relay them)
KILL_WAIT = 10

# a program that saves its work on SIGTERM, taking half a second to do it
SAVER = (
    f'{sys.executable} -c "import signal, sys, time; '
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), "
    "open(sys.argv[1], 'w').write('saved'), sys.exit(0))); "
    "print('ready', flush=True); time.sleep(100)\""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("jobend")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": KILL_WAIT}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def ended(live: LiveServer, tmp_path: Path, job_id: int) -> str:
    def done() -> bool:
        with live.client() as c:
            return c.job(job_id).state in ("CANCELLED", "TIMEOUT")

    wait_until(done, 60, message=f"job {job_id} to end")
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def cancel_when_ready(live: LiveServer, tmp_path: Path, job_id: int) -> None:
    out = tmp_path / f"slurm-{job_id}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text(), 60, message="its start")
    assert live.cli("scancel", str(job_id)).returncode == 0


def test_the_jobs_processes_have_killwait_to_save_their_work(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """A program of the batch script, and one srun runs, each saving its work on the
    SIGTERM of ``scancel JOB``: both finish saving, though the batch shell ended at once
    (before, whatever it left was killed the moment it ended)."""
    for how, command in (("plain", SAVER), ("srun", f"{SRUN} {SAVER}")):
        saved = tmp_path / f"saved-{how}"
        job_id = submit(server, tmp_path, f"{command} {saved}\necho after=$?\n")
        cancel_when_ready(server, tmp_path, job_id)
        text = ended(server, tmp_path, job_id)
        wait_until(saved.exists, 10, message=f"the {how} program's save")
        assert saved.read_text() == "saved"
        assert "after=" not in text, text  # the batch shell itself ended on the SIGTERM


def test_a_cancelled_jobs_steps_say_so(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    task = "echo ready; exec sleep 100"
    here = submit(server, tmp_path, f"{SRUN} sh -c '{task}'\n")
    cancel_when_ready(server, tmp_path, here)
    text = ended(server, tmp_path, here)
    assert "srun: got SIGCONT\n" in text, text
    assert f"{step_aborted(KILL_WAIT)}\n{FORCING_TERMINATION}\n" in text, text
    assert re.search(step_line("node1", f"{here}.0"), text), text
    assert text.endswith("srun: error: node1: task 0: Terminated\n"), text
    across = submit(server, tmp_path, f"{SRUN} sh -c '{task}'\n", "-N2", "-n2")
    cancel_when_ready(server, tmp_path, across)
    text = ended(server, tmp_path, across)
    assert text.count(f"{step_aborted(KILL_WAIT)}\n{FORCING_TERMINATION}\n") == 1, text
    for node, rank in (("node1", 0), ("node2", 1)):
        assert re.search(step_line(node, f"{across}.0"), text), text
        assert f"srun: error: {node}: task {rank}: Terminated\n" in text, text
    for job_id in (here, across):  # as Slurm 22.05.8's accounting (docs/slurm-checks.md)
        rows = sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode")
        assert re.fullmatch(rf"{job_id}\|CANCELLED by \S+\|0:0\|0:0", rows[0]), rows
        assert rows[1:] == [f"{job_id}.batch|CANCELLED|0:15|", f"{job_id}.0|CANCELLED|0:15|"]


def test_a_job_out_of_time_says_so_for_its_steps(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    for args in ((), ("-N2", "-n2")):
        job_id = submit(server, tmp_path, f"{SRUN} sleep 100\n", "-t", "0:03", *args)
        text = ended(server, tmp_path, job_id)
        assert f"{step_aborted(KILL_WAIT)}\n" in text, text
        assert FORCING_TERMINATION not in text, text  # (a cancel's only)
        for node in ("node1", "node2")[: len(args) // 2 + 1]:
            assert re.search(step_line(node, f"{job_id}.0", "DUE TO TIME LIMIT"), text), text
        job_line = rf"\*\*\* JOB {job_id} ON node1 CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*"
        assert re.search(job_line, text), text
        rows = sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode")
        assert rows[0] == f"{job_id}|TIMEOUT|0:0|0:0", rows  # the step its end killed: not counted
        assert rows[2] == f"{job_id}.0|CANCELLED|0:15|", rows


def test_a_script_trapping_sigterm_goes_on_after_its_step_until_killwait(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Slurm 22.05.8 at the time limit (docs/slurm-checks.md): the steps and the batch
    script get SIGTERM, and a script that traps it goes on once srun returns 143 (to copy
    its results, say) until the SIGKILL KillWait later."""
    body = (
        "trap 'echo batch got TERM' TERM\n"
        f"{SRUN} sleep 100\necho after=$?\necho late1\nsleep 60\necho late2\n"
    )
    job_id = submit(server, tmp_path, body, "-t", "0:03")
    text = ended(server, tmp_path, job_id)  # within a minute: "sleep 60" was killed
    assert sacct(server, job_id, "State")[0] == "TIMEOUT"
    assert "batch got TERM\n" in text, text
    assert "after=143\nlate1\n" in text, text
    assert "late2" not in text, text
    assert re.search(step_line("node1", f"{job_id}.0", "DUE TO TIME LIMIT"), text), text
