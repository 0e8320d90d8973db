"""Steps srun runs on the batch node itself, on a real server with real agents: the most
common Slurm job (one node, a script running ``srun ./prog`` a few times) shows
``JOB.0``, ``JOB.1``... in sacct with their own state, exit code, times, node and task
count, ``squeue -s`` and ``scontrol show step`` list them while they run, and numbering
is shared with the steps the agents run across nodes."""

from __future__ import annotations

from pathlib import Path

from two_agents import (
    SRUN,
    sacct,
    state,
    submit,
)

from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until


def test_each_srun_of_a_one_node_job_is_a_step_in_sacct(server: LiveServer, tmp_path: Path) -> None:
    """`srun true; srun false; srun sh -c 'kill -SEGV $$'` in a one-node job: steps 0, 1
    and 2 with Slurm's states and exit codes (a signal: CANCELLED 0:N), the node and task count,
    start and end times within the job's; each srun's exit code is the shell's."""
    job_id = submit(
        server,
        tmp_path,
        f"{SRUN} true; echo a=$?\n{SRUN} false; echo b=$?\n"
        f"{SRUN} sh -c 'kill -SEGV $$'; echo c=$?\n"
        f"{SRUN} sh -c 'echo step=$SLURM_STEP_ID rank=$SLURM_PROCID'\n",
    )
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    # srun's words for a failed task, as Slurm 22.05.8's (docs/slurm-checks.md)
    assert "a=0\nsrun: error: node1: task 0: Exited with exit code 1\nb=1\n" in out, out
    assert "srun: error: node1: task 0: Segmentation fault\nc=139\n" in out, out
    assert "step=3 rank=0" in out, out
    assert "warning" not in out, out
    lines = sacct(server, job_id, "JobID,JobName,State,ExitCode,NodeList,NTasks")
    steps = [line for line in lines if line.split("|")[0].startswith(f"{job_id}.")]
    assert steps == [
        f"{job_id}.batch|batch|COMPLETED|0:0|node1|1",
        f"{job_id}.0|true|COMPLETED|0:0|node1|1",
        f"{job_id}.1|false|FAILED|1:0|node1|1",
        f"{job_id}.2|sh|CANCELLED|0:11|node1|1",
        f"{job_id}.3|sh|COMPLETED|0:0|node1|1",
    ], lines
    times = sacct(server, job_id, "JobID,Start,End")
    job_start, job_end = times[0].split("|")[1:]
    for line in times[2:]:
        start, end = line.split("|")[1:]
        assert job_start <= start <= end <= job_end, times


def test_a_running_local_step_shows_in_squeue_and_scontrol(
    server: LiveServer, tmp_path: Path
) -> None:
    """While `srun sleep` runs: `squeue -s` has its line in Slurm's default step format,
    `scontrol show step JOB.0` its record; an unknown step is said so."""
    job_id = submit(server, tmp_path, f"{SRUN} sleep 30\n", "-J", "napper")
    wait_until(
        lambda: f"{job_id}.0" in server.cli("squeue", "-s", "-h").stdout,
        30,
        message="the step in squeue -s",
    )
    listed = server.cli("squeue", "-s").stdout.splitlines()
    assert listed[0] == "         STEPID     NAME PARTITION     USER      TIME NODELIST", listed
    mine = [line for line in listed if f"{job_id}.0" in line]
    assert len(mine) == 1 and mine[0].split()[1:3] == ["sleep", "debug"], listed
    assert mine[0].split()[-1] == "node1", listed
    shown = server.cli("scontrol", "show", "step", f"{job_id}.0")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"StepId={job_id}.0 UserId="), shown.stdout
    assert "State=RUNNING Partition=debug NodeList=node1" in shown.stdout, shown.stdout
    # the job's one CPU, which the step holds (docs/slurm-checks.md)
    assert "Nodes=1 CPUs=1 Tasks=1 Name=sleep" in shown.stdout, shown.stdout
    assert "TRES=cpu=1,mem=0,node=1" in shown.stdout, shown.stdout
    missing = server.cli("scontrol", "show", "step", f"{job_id}.7")
    assert missing.returncode == 1 and f"Job step {job_id}.7 not found" in missing.stdout
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")
    wait_until(
        lambda: sacct(server, job_id, "JobID,State,ExitCode")[-1] == f"{job_id}.0|CANCELLED|0:15",
        30,
        message="the step to end CANCELLED",
    )
    assert f"{job_id}.0" not in server.cli("squeue", "-s", "-h").stdout


def test_local_and_agent_steps_share_one_numbering(server: LiveServer, tmp_path: Path) -> None:
    """In a two-node job, `srun -N1` runs on the batch node and plain `srun` on both
    through the agents: steps 0, 1, 2 in the order srun was called."""
    job_id = submit(
        server, tmp_path, f"{SRUN} -N1 true\n{SRUN} true\n{SRUN} -n1 false\ntrue\n", "-N2"
    )
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    steps = sacct(server, job_id, "JobID,State,ExitCode,NodeList")[2:]
    assert steps == [
        f"{job_id}.0|COMPLETED|0:0|node1",
        f"{job_id}.1|COMPLETED|0:0|node[1-2]",
        f"{job_id}.2|FAILED|1:0|node1",
    ], steps


def test_srun_runs_the_command_when_the_server_is_out_of_reach(
    server: LiveServer, tmp_path: Path
) -> None:
    """A step is a record, not a gate: srun whose server cannot be reached says so once
    on stderr, runs the command, and exits with its code."""
    down = f"http://127.0.0.1:{free_port()}"
    job_id = submit(
        server, tmp_path, f"HAL_URL={down} {SRUN} sh -c 'echo ran; exit 5'; echo rc=$?\n"
    )
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "ran\nsrun: error: node1: task 0: Exited with exit code 5\nrc=5\n" in out, out
    warnings = [line for line in out.splitlines() if line.startswith("srun: warning")]
    assert len(warnings) == 1 and "job step not recorded" in warnings[0], out
    assert sacct(server, job_id, "JobID")[2:] == [], "no step was recorded"


def test_a_local_step_spans_its_command(server: LiveServer, tmp_path: Path) -> None:
    """A local step is opened before the command and closed after it: its start is
    before the command's first output, its end after the command ended."""
    job_id = submit(
        server, tmp_path, f"{SRUN} sh -c 'date +%s.%N > began; sleep 1; date +%s.%N > ended'\n"
    )
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    with server.client() as c:
        (info,) = c.jobs(ids=[str(job_id)], history=True)
    (step,) = info.steps
    began = float((tmp_path / "began").read_text())
    ended = float((tmp_path / "ended").read_text())
    assert step.end_time is not None
    assert step.start_time <= began and ended <= step.end_time, (step, began, ended)


def test_derived_exit_code_is_the_worst_srun_step(server: LiveServer, tmp_path: Path) -> None:
    """The job Slurm 22.05.8 was checked with (docs/slurm-checks.md): a script running
    `srun sh -c 'exit 2'` and a srun killed by SIGTERM, then exiting 7, is FAILED 7:0
    with DerivedExitCode 2:0 (its steps' highest code, not the script's)."""
    job_id = submit(
        server, tmp_path, f"{SRUN} sh -c 'exit 2'\n{SRUN} sh -c 'kill -TERM $$'\nexit 7\n"
    )
    wait_until(lambda: state(server, job_id) == "FAILED", 60, message="the job to end")
    lines = sacct(server, job_id, "JobID,State,ExitCode,DerivedExitCode")
    assert lines == [
        f"{job_id}|FAILED|7:0|2:0",
        f"{job_id}.batch|FAILED|7:0|",
        f"{job_id}.0|FAILED|2:0|",
        f"{job_id}.1|CANCELLED|0:15|",
    ], lines


def test_signalling_a_local_step_is_refused(server: LiveServer, tmp_path: Path) -> None:
    """The server cannot reach the tasks of a step srun runs on the batch node (they are
    srun's children): a signal for it is refused (409), saying to signal srun instead,
    rather than answered as delivered."""
    job_id = submit(server, tmp_path, f"{SRUN} sleep 30\n")
    wait_until(
        lambda: f"{job_id}.0" in server.cli("squeue", "-s", "-h").stdout,
        30,
        message="the step in squeue -s",
    )
    auth = {"Authorization": f"Bearer {server.token}"}
    url = f"{server.url}/v1/jobs/{job_id}/steps/0/signal"
    r = http.post(url, json={"signal": 10}, headers=auth, timeout=30)
    assert r.status_code == 409, r.text
    assert (
        f"srun runs step {job_id}.0 on the batch node itself; signal srun (or scancel the job)"
        in r.json()["detail"]
    ), r.text
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")
