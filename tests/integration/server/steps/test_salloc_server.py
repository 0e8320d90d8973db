"""``salloc`` on a real server with two real agents: the allocation is a job that holds
its nodes while salloc's command runs on this host, ``srun`` in the command runs job
steps on the allocation's nodes, and the job ends with the command (or, cancelled, ends
the command). salloc and srun run as the installed shims, as a user's shell finds them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, stop_process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("salloc")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def env(server: LiveServer, shims: Path) -> dict[str, str]:
    return {**server.env(), "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}


def salloc(
    server: LiveServer, shims: Path, cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(shims / "salloc"), *args],
        env=env(server, shims),
        cwd=cwd,
        text=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def granted(stderr: str) -> int:
    found = re.search(r"^salloc: Granted job allocation (\d+)$", stderr, re.MULTILINE)
    assert found, stderr
    return int(found.group(1))


def start_granted(
    server: LiveServer, shims: Path, cwd: Path, *args: str
) -> tuple[subprocess.Popen[str], int]:
    """salloc in the background, once its allocation is granted; its job id."""
    proc = subprocess.Popen(
        [str(shims / "salloc"), *args],
        env=env(server, shims),
        cwd=cwd,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    while not any("Granted job allocation" in line for line in lines):
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            raise AssertionError("salloc ended before its allocation: " + "".join(lines))
        lines.append(line)
    return proc, granted("".join(lines))


def job_state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def test_srun_in_salloc_runs_on_both_nodes_and_the_job_ends_with_the_command(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """`salloc -N2 sh -c '...; srun -l ...'`: the command sees the allocation's
    variables, srun's tasks run on node1 and node2, salloc exits 0 and the job has
    ended COMPLETED by then."""
    command = (
        "echo nodes=$SLURM_JOB_NODELIST num=$SLURM_JOB_NUM_NODES name=$SLURM_JOB_NAME; "
        "srun -l sh -c 'echo host=$SLURMD_NODENAME step=$SLURM_STEP_ID'"
    )
    done = salloc(server, shims, tmp_path, "-N2", "-J", "probe", "sh", "-c", command)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = granted(done.stderr)
    # granted at once, Slurm 22.05.8 says no "Pending job allocation" and no "Nodes ...
    # are ready"; on a loaded machine the pass may come after QUEUED_AFTER_SECONDS, and
    # then the wait is said in Slurm's order, each line once
    waited = (
        f"salloc: Pending job allocation {job_id}\n"
        f"salloc: job {job_id} queued and waiting for resources\n"
        f"salloc: job {job_id} has been allocated resources\n"
    )
    granted_line = f"salloc: Granted job allocation {job_id}\n"
    assert done.stderr.startswith((granted_line, waited + granted_line)), done.stderr
    assert done.stderr.count("Pending") <= 1 and "ready" not in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith(f"salloc: Relinquishing job allocation {job_id}")
    assert "nodes=node[1-2] num=2 name=probe" in done.stdout, done.stdout
    assert "0: host=node1 step=0" in done.stdout, done.stdout
    assert "1: host=node2 step=0" in done.stdout, done.stdout
    assert job_state(server, job_id) == "COMPLETED"


def test_salloc_exits_with_the_commands_code_and_srun_there_is_always_a_step(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """A one-node allocation: srun runs on the submit host, so even a one-node step goes
    to the node through the control plane (in a batch job it would run in place). The
    command's exit code 3 is salloc's, and the job's: FAILED, sacct's ExitCode 3:0, under
    salloc's default name."""
    command = "srun sh -c 'echo host=$SLURMD_NODENAME step=$SLURM_STEP_ID'; exit 3"
    done = salloc(server, shims, tmp_path, "-N1", "-w", "node2", "sh", "-c", command)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "host=node2 step=0" in done.stdout, done.stdout + done.stderr
    job_id = granted(done.stderr)
    assert job_state(server, job_id) == "FAILED"
    acct = server.cli("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "JobName,ExitCode")
    assert acct.stdout.strip() == "interactive|3:0", acct.stdout + acct.stderr


def test_an_allocation_shows_batch_flag_0(server: LiveServer, shims: Path, tmp_path: Path) -> None:
    """Slurm 22.05.8: ``scontrol show job`` of salloc's job, from its
    command, says ``BatchFlag=0`` (a batch job's 1); HAL said 1, its allocation being a
    job whose script holds the nodes. And ``Requeue=1``, the cluster's default, as a
    batch job's (HAL said 0)."""
    command = "scontrol show job $SLURM_JOB_ID"
    done = salloc(server, shims, tmp_path, "-N1", "sh", "-c", command)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " BatchFlag=0 " in done.stdout, done.stdout
    assert "   Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0" in done.stdout.splitlines()
    batch = server.cli("sbatch", "--parsable", "--wrap", "true", cwd=tmp_path)
    shown = server.cli("scontrol", "show", "job", batch.stdout.strip())
    assert " BatchFlag=1 " in shown.stdout, shown.stdout + shown.stderr


def test_scancel_revokes_the_allocation_and_ends_the_command(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    proc, job_id = start_granted(server, shims, tmp_path, "-N1", "sleep", "300")
    try:
        assert proc.stderr is not None
        assert job_state(server, job_id) == "RUNNING"
        done = server.cli("scancel", str(job_id))
        assert done.returncode == 0, done.stderr
        rc = proc.wait(60)
        rest = proc.stderr.read()
    finally:
        stop_process(proc, signal.SIGKILL)
    # the command ended by SIGTERM (without a terminal): 1, as Slurm's salloc exits
    assert rc == 1
    assert f"salloc: Job allocation {job_id} has been revoked." in rest, rest
    assert "Relinquishing" not in rest, rest
    assert job_state(server, job_id) == "CANCELLED"


def test_an_interrupt_while_pending_cancels_the_allocation(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """Ctrl-C before the allocation is granted (here it waits for its begin time)."""
    proc = subprocess.Popen(
        [str(shims / "salloc"), "--begin=now+1hour", "true"],
        env=env(server, shims),
        cwd=tmp_path,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        found = re.match(r"salloc: Pending job allocation (\d+)$", first.strip())
        assert found, first
        job_id = int(found.group(1))
        second = proc.stderr.readline()
        assert second.strip() == f"salloc: job {job_id} queued and waiting for resources"
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(60)
        rest = proc.stderr.read()
    finally:
        stop_process(proc, signal.SIGKILL)
    assert rc == 1
    assert f"salloc: Job allocation {job_id} has been revoked." in rest, rest
    assert job_state(server, job_id) == "CANCELLED"


def test_the_time_limit_revokes_the_allocation_with_slurms_message(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """The limit, lowered while the command runs, ends the job: salloc says the job
    exceeded it, ends the command and exits non-zero."""
    proc, job_id = start_granted(server, shims, tmp_path, "-N1", "-t", "10", "sleep", "300")
    try:
        assert proc.stderr is not None
        done = server.cli("scontrol", "update", f"JobId={job_id}", "TimeLimit=0:01")
        assert done.returncode == 0, done.stderr
        rc = proc.wait(60)
        rest = proc.stderr.read()
    finally:
        stop_process(proc, signal.SIGKILL)
    assert rc == 1  # (the command's SIGTERM: Slurm's salloc exits 1)
    expected = f"salloc: Job {job_id} has exceeded its time limit and its allocation has been"
    assert expected in rest, rest
    assert job_state(server, job_id) == "TIMEOUT"


def test_sigterm_to_salloc_revokes_its_allocation_and_it_exits_0(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """Slurm 22.05.8: SIGINT or SIGTERM to salloc while its command runs gives
    the allocation up ("Job allocation N has been revoked.", the job CANCELLED) and salloc
    exits 0; HAL passed the signal to the command and exited 128+N."""
    proc, job_id = start_granted(server, shims, tmp_path, "-N1", "sleep", "300")
    try:
        assert proc.stderr is not None
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        rest = proc.stderr.read()
    finally:
        stop_process(proc, signal.SIGKILL)
    assert rc == 0, rest
    assert f"salloc: Job allocation {job_id} has been revoked." in rest, rest
    assert job_state(server, job_id) == "CANCELLED"
