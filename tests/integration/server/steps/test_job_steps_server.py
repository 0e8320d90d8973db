"""Job steps on a real server with two real agents (ADR 0012): ``srun`` inside an
``sbatch -N2`` job runs tasks on both nodes, streams their output into the job's output
file, exits with the highest task's code, and a cancelled job's step tasks die on every
node."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("steps")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def submit(server: LiveServer, tmp_path: Path, body: str, *args: str) -> int:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = server.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def test_srun_runs_a_task_on_each_node_and_returns_the_highest_exit_code(
    server: LiveServer, tmp_path: Path
) -> None:
    """The MPI-style launch: one task per node, each with its rank, node id and step id,
    both tasks' lines in the job's output file (labelled with -l), srun's exit code the
    highest task's; the next srun is step 1."""
    task = (
        "echo rank=$SLURM_PROCID node=$SLURM_NODEID step=$SLURM_STEP_ID "
        "host=$SLURMD_NODENAME tasks=$SLURM_STEP_NUM_TASKS nodes=$SLURM_STEP_NODELIST; "
        "exit $((SLURM_PROCID + 3))"
    )
    job_id = submit(
        server,
        tmp_path,
        f"{SRUN} -l sh -c '{task}'\necho srun exit=$?\n{SRUN} true\necho second exit=$?\n",
        "-N2",
    )
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "0: rank=0 node=0 step=0 host=node1 tasks=2 nodes=node[1-2]" in out, out
    assert "1: rank=1 node=1 step=0 host=node2 tasks=2 nodes=node[1-2]" in out, out
    assert "srun exit=4" in out, out
    assert "second exit=0" in out, out
    acct = server.cli("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,ExitCode,NodeList")
    assert f"{job_id}.0|FAILED|4:0|node[1-2]" in acct.stdout, acct.stdout + acct.stderr
    assert f"{job_id}.1|COMPLETED|0:0|node[1-2]" in acct.stdout, acct.stdout


def test_a_step_outside_the_allocation_is_refused(server: LiveServer, tmp_path: Path) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} -N3 true\necho exit=$?\n", "-N2")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert f"srun: error: Unable to create step for job {job_id}: " in out, out
    assert "asks for 3 nodes and the job has 2" in out and "exit=1" in out, out


def test_cancelling_the_job_kills_its_step_on_the_second_node(
    server: LiveServer, tmp_path: Path
) -> None:
    """srun is SIGKILLed first, so it cannot pass the cancel on: the task on node2 is
    ended because its job ended (the server's StepSignal to node2's agent)."""
    job_id = submit(
        server,
        tmp_path,
        f"{SRUN} sh -c 'echo $$ > pid.$SLURM_NODEID; exec sleep 300' &\n"
        "echo $! > srun.pid\nsleep 300\n",
        "-N2",
    )
    pid_file = tmp_path / "pid.1"
    wait_until(
        lambda: pid_file.exists() and pid_file.read_text().strip() != "",
        60,
        message="the task on node2",
    )
    pid = int(pid_file.read_text())
    os.kill(int((tmp_path / "srun.pid").read_text()), signal.SIGKILL)
    assert _alive(pid)  # nobody ends a step whose srun died, while its job runs
    done = server.cli("scancel", str(job_id))
    assert done.returncode == 0, done.stderr
    wait_until(lambda: not _alive(pid), 30, message="the step task on node2 to die")
    wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")
    acct = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", "JobID,State")
    assert acct.stdout.strip() == f"{job_id}.0|CANCELLED", acct.stdout + acct.stderr


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_step_requests_that_cannot_run_are_refused(server: LiveServer, tmp_path: Path) -> None:
    """Another user's job, a NUL in the command, and a job that has ended: each a clear
    refusal, no step."""
    from hal.core.errors import InvalidRequest, PermissionDenied
    from hal.wire.steps import StepCreate

    job_id = submit(server, tmp_path, "sleep 30\n", "-N2")
    tokens = server.add_users("mallory")
    wait_until(lambda: state(server, job_id) == "RUNNING", 30, message="the job to run")
    with server.client(tokens["mallory"]) as c, pytest.raises(PermissionDenied):
        c.create_step(job_id, StepCreate(argv=["true"]))
    with server.client() as c:
        with pytest.raises(InvalidRequest, match="NUL character"):
            c.create_step(job_id, StepCreate(argv=["tr\x00ue"]))
        c.cancel(job_id)
        wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")
        with pytest.raises(InvalidRequest, match="the job is CANCELLED, not RUNNING"):
            c.create_step(job_id, StepCreate(argv=["true"]))


def test_suspend_stops_the_step_tasks_on_every_node_and_resume_continues_them(
    server: LiveServer, tmp_path: Path
) -> None:
    """``scontrol suspend`` stops the step's task on node2 too (Slurm stops every step's
    tasks on every node), not only the batch script on node1; ``scontrol resume`` lets it
    go on, and the step then ends as it would have: COMPLETED, its output whole."""
    from hal.testing.live import tree_stopped

    count = (
        "[ $SLURM_NODEID = 1 ] || exit 0; echo $$ > pid.1; i=0; "
        "while [ $i -lt 40 ]; do i=$((i + 1)); echo $i >> counter; sleep 0.1; done; echo done"
    )
    job_id = submit(server, tmp_path, f"{SRUN} sh -c '{count}'\necho srun exit=$?\n", "-N2")
    counter = tmp_path / "counter"
    wait_until(lambda: _lines(counter) >= 3, 60, message="the task on node2 counting")
    pid = int((tmp_path / "pid.1").read_text())
    with server.client() as admin:
        assert admin.suspend(job_id) == [job_id]
        wait_until(lambda: tree_stopped(pid), 15, message="the task on node2 to stop")
        frozen = _lines(counter)
        time.sleep(1.0)  # a running task would have counted about 10 more meanwhile
        assert tree_stopped(pid) and _lines(counter) == frozen
        assert admin.job(job_id).state == "SUSPENDED"
        admin.resume(job_id)
    wait_until(lambda: _lines(counter) > frozen, 15, message="the task counting again")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    assert _lines(counter) == 40
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "done" in out and "srun exit=0" in out, out
    acct = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    assert acct.stdout.strip() == f"{job_id}.0|COMPLETED|0:0", acct.stdout + acct.stderr


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_step_past_the_jobs_memory_is_out_of_memory_on_every_node(
    server: LiveServer, tmp_path: Path
) -> None:
    """``sbatch -N2 --mem=150M``: each node's task touches 400 MB. Both run inside the
    job's cgroup on their node (node2's made for the step, with the job's 150 MiB), so both
    are killed: the step is OUT_OF_MEMORY with 0:125 in sacct, each node's slurmstepd line
    is in the output, srun exits 1, and the batch script, which stayed within its memory,
    runs on to COMPLETED (Slurm 22.05.8's, docs/slurm-checks.md)."""
    # (srun itself, a Python process of some 50 MB, shares the batch node's limit: the
    # hog must outgrow it clearly before the limit is hit, or the kernel may pick srun)
    hog = f"{sys.executable} -c \"b = b'x' * 400_000_000; import time; time.sleep(60)\""
    job_id = submit(server, tmp_path, f"{SRUN} {hog}\necho srun exit=$?\n", "-N2", "--mem=150M")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "srun exit=1\n" in out, out
    for rank, node in enumerate(("node1", "node2")):
        assert f"srun: error: {node}: task {rank}: Out Of Memory\n" in out, out
        line = f"slurmstepd-{node}: error: Detected 1 oom-kill event(s) in StepId={job_id}.0."
        assert line in out, out
    acct = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    assert acct.stdout.strip() == f"{job_id}.0|OUT_OF_MEMORY|0:125", acct.stdout + acct.stderr


def test_a_step_killed_by_a_signal_shows_it_in_sacct_as_slurm_does(
    server: LiveServer, tmp_path: Path
) -> None:
    """A task ended by SIGSEGV: sacct's ExitCode is ``0:11`` (the signal in the second
    field, as for a job), not ``139:0``, and the step is CANCELLED, as Slurm 22.05.8
    records a step a signal ended (docs/slurm-checks.md); srun itself exits 139."""
    job_id = submit(server, tmp_path, f"{SRUN} sh -c 'kill -SEGV $$'\necho srun exit=$?\n", "-N2")
    wait_until(lambda: state(server, job_id) == "COMPLETED", 60, message="the job to end")
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "srun exit=139" in out, out
    acct = server.cli("sacct", "-j", f"{job_id}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    assert acct.stdout.strip() == f"{job_id}.0|CANCELLED|0:11", acct.stdout + acct.stderr


def test_sstat_shows_a_running_steps_tasks_on_both_nodes(
    server: LiveServer, tmp_path: Path
) -> None:
    """Each node's task holds 60 MB and spins half a CPU second: their agents' samples
    reach ``sstat -j JOB`` (the running step 0, as Slurm's), with two tasks, the most
    memory at least 60 MB on one of the job's nodes, and ``-a`` adds the batch step."""
    hold = (
        f"{sys.executable} -c 'import time; b = bytes(range(256)) * (60 << 12)\n"
        "while time.process_time() < 0.5: pass\n"
        'open("held.%s" % __import__("os").environ["SLURM_PROCID"], "w").close()\n'
        "time.sleep(300)'"
    )
    (tmp_path / "task.sh").write_text(hold + "\n")
    job_id = submit(server, tmp_path, f"{SRUN} sh task.sh\n", "-N2")
    wait_until(
        lambda: (tmp_path / "held.0").exists() and (tmp_path / "held.1").exists(),
        60,
        message="both tasks holding their memory",
    )
    fields = "JobID,MaxRSS,MaxRSSNode,MinCPU,NTasks"

    seen: list[str] = []

    def sampled() -> bool:  # both tasks' samples show their half CPU second
        out = server.cli("sstat", "-n", "-P", "-j", str(job_id), "-o", fields)
        seen[:] = out.stdout.strip().split("|")
        return len(seen) == 5 and bool(seen[3]) and _seconds(seen[3]) >= 0.4

    wait_until(sampled, 30, message="a sample of both tasks")
    step, max_rss, node, _, tasks = seen
    assert (step, tasks) == (f"{job_id}.0", "2")
    assert kib(max_rss) >= 60 << 10 and node in ("node1", "node2"), (max_rss, node)
    every = server.cli("sstat", "-n", "-P", "-a", "-j", str(job_id), "-o", "JobID")
    assert every.stdout.split() == [f"{job_id}.batch", f"{job_id}.0"], every.stdout
    server.cli("scancel", str(job_id))
    wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")


def kib(value: str) -> float:
    units = {"K": 1, "M": 1 << 10, "G": 1 << 20}
    return float(value[:-1]) * units[value[-1]]


def _seconds(cpu: str) -> float:
    minutes, _, seconds = cpu.rpartition(":")
    return int(minutes or 0) * 60 + float(seconds)
