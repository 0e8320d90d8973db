"""The login-shell workflow on a real server with two real agents: ``salloc --no-shell``
leaves an allocation running, ``srun --jobid=N`` (from a shell with no job variables)
runs steps in it as srun inside it would, ``salloc -I`` gives up on an allocation that
cannot start at once, and sacct records the command's own exit code. salloc and srun
run as the installed shims, as a user's shell finds them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from two_agents import (
    run,
    state,
)

from hal.testing.live import LiveServer, wait_until


def granted(stderr: str) -> int:
    found = re.search(r"^salloc: Granted job allocation (\d+)$", stderr, re.MULTILINE)
    assert found, stderr
    return int(found.group(1))


def exit_code(server: LiveServer, job_id: int) -> str:
    acct = server.cli("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode")
    return acct.stdout.strip()


def test_no_shell_allocation_then_srun_jobid_from_a_login_shell(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """`salloc -N2 --no-shell` exits 0 with the allocation still RUNNING; `srun
    --jobid=N` runs on both of its nodes (-l labels the ranks), `-N1` on one, the
    step's exit code is srun's, and sacct lists the steps; scancel ends it."""
    done = run(server, shims, tmp_path, "salloc", "-N2", "--no-shell")
    assert done.returncode == 0, done.stderr
    job_id = granted(done.stderr)
    assert "Relinquishing" not in done.stderr, done.stderr
    assert state(server, job_id) == "RUNNING"
    try:
        task = "echo host=$SLURMD_NODENAME job=$SLURM_JOB_ID step=$SLURM_STEP_ID"
        both = run(server, shims, tmp_path, "srun", f"--jobid={job_id}", "-l", "sh", "-c", task)
        assert both.returncode == 0, both.stdout + both.stderr
        assert f"0: host=node1 job={job_id} step=0" in both.stdout, both.stdout
        assert f"1: host=node2 job={job_id} step=0" in both.stdout, both.stdout
        one = run(
            server, shims, tmp_path, "srun", "--jobid", str(job_id), "-N1", "sh", "-c",
            "echo on=$SLURMD_NODENAME tasks=$SLURM_STEP_NUM_TASKS; exit 7",
        )  # fmt: skip
        assert one.returncode == 7, one.stdout + one.stderr
        assert one.stdout.strip() == "on=node1 tasks=1", one.stdout
        assert state(server, job_id) == "RUNNING"  # a step's end is not the allocation's
        acct = server.cli("sacct", "-j", f"{job_id}.1", "-n", "-P", "-o", "JobID,ExitCode")
        assert acct.stdout.strip() == f"{job_id}.1|7:0", acct.stdout + acct.stderr
    finally:
        server.cli("scancel", str(job_id))
    wait_until(lambda: state(server, job_id) == "CANCELLED", 30, message="the job to end")


def test_srun_jobid_refuses_a_job_not_running_and_another_users_job(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """A pending allocation, an ended one, a job that does not exist and another
    user's: each refused with Slurm's kind of line and no step."""
    pending = run(server, shims, tmp_path, "sbatch", "--parsable", "-H", "--wrap", "true")
    assert pending.returncode == 0, pending.stderr
    pending_id = int(pending.stdout.strip())
    refused = run(server, shims, tmp_path, "srun", f"--jobid={pending_id}", "true")
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"srun: error: Unable to confirm allocation for job {pending_id}: "
        f"job {pending_id} is PENDING, not running"
    ), refused.stderr
    server.cli("scancel", str(pending_id))
    wait_until(lambda: state(server, pending_id) == "CANCELLED", 30, message="cancelled")
    ended = run(server, shims, tmp_path, "srun", f"--jobid={pending_id}", "true")
    assert ended.returncode == 1
    assert f"job {pending_id} is CANCELLED, not running" in ended.stderr, ended.stderr
    missing = run(server, shims, tmp_path, "srun", "--jobid=999999", "true")
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        "srun: error: Unable to confirm allocation for job 999999: Invalid job id specified"
    ), missing.stderr

    done = run(server, shims, tmp_path, "salloc", "-N1", "--no-shell")
    job_id = granted(done.stderr)
    try:
        tokens = server.add_users("mallory")
        other = run(
            server, shims, tmp_path, "srun", f"--jobid={job_id}", "touch", "mallory-was-here",
            token=tokens["mallory"],
        )  # fmt: skip
        assert other.returncode == 1
        assert other.stderr.startswith(
            f"srun: error: Unable to confirm allocation for job {job_id}: Access/permission denied"
        ), other.stderr
        assert not (tmp_path / "mallory-was-here").exists()
    finally:
        server.cli("scancel", str(job_id))


def test_immediate_gives_up_on_an_allocation_that_cannot_start(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """node1 is held whole by one allocation; `salloc -I -w node1` (and `-I1`) cannot
    have it: Slurm's error, exit 1, and the request is cancelled, not left pending. With
    nothing in the way, `-I` is granted as usual."""
    holder = run(server, shims, tmp_path, "salloc", "-w", "node1", "--exclusive", "--no-shell")
    holder_id = granted(holder.stderr)
    try:
        for flag in ("-I", "--immediate=1"):
            busy = run(server, shims, tmp_path, "salloc", flag, "-w", "node1", "true")
            assert busy.returncode == 1, busy.stderr
            assert busy.stderr.rstrip().endswith(
                "salloc: error: Unable to allocate resources: Requested nodes are busy"
            ), busy.stderr
            found = re.search(r"Pending job allocation (\d+)", busy.stderr)
            assert found, busy.stderr
            assert state(server, int(found.group(1))) == "CANCELLED"
        free = run(server, shims, tmp_path, "salloc", "-I", "-w", "node2", "true")
        assert free.returncode == 0, free.stderr
        granted(free.stderr)
    finally:
        server.cli("scancel", str(holder_id))


def test_sacct_records_the_commands_own_exit_code_and_signal(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """The allocation's ExitCode is the command's: 3:0 for `exit 3`, 0:10 for a command
    SIGUSR1 ended (salloc itself exits 3 and, as Slurm's for a signal other than HUP,
    INT, QUIT or KILL, 1), 0:0 for success."""
    three = run(server, shims, tmp_path, "salloc", "-N1", "sh", "-c", "exit 3")
    assert three.returncode == 3, three.stderr
    assert exit_code(server, granted(three.stderr)) == "FAILED|3:0"
    killed = run(server, shims, tmp_path, "salloc", "-N1", "sh", "-c", "kill -USR1 $$")
    assert killed.returncode == 1, killed.stderr
    assert exit_code(server, granted(killed.stderr)) == "FAILED|0:10"
    fine = run(server, shims, tmp_path, "salloc", "-N1", "true")
    assert fine.returncode == 0, fine.stderr
    assert exit_code(server, granted(fine.stderr)) == "COMPLETED|0:0"


def test_a_recorded_exit_status_counts_only_for_the_scripts_own_end(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """The call salloc makes (``command-exit``): a job whose script then ends by itself
    ends with the recorded status; a cancelled one stays CANCELLED; another user and a
    job that is not running are refused."""
    from hal.core.errors import InvalidRequest, PermissionDenied

    def submit(body: str) -> int:
        done = run(server, shims, tmp_path, "sbatch", "--parsable", "--wrap", body)
        assert done.returncode == 0, done.stderr
        job_id = int(done.stdout.strip())
        wait_until(lambda: state(server, job_id) == "RUNNING", 30, message="the job to run")
        return job_id

    ends = submit("while [ ! -e go ]; do sleep 0.1; done")
    cancelled = submit("sleep 300")
    tokens = server.add_users("eve")
    with server.client() as admin, server.client(tokens["eve"]) as eve:
        with pytest.raises(PermissionDenied):
            eve.set_command_exit(ends, 9)
        assert admin.set_command_exit(ends, 4) == [ends]
        assert admin.set_command_exit(cancelled, 5) == [cancelled]
        (tmp_path / "go").touch()
        wait_until(lambda: state(server, ends) == "FAILED", 30, message="the script's end")
        assert exit_code(server, ends) == "FAILED|4:0"
        admin.cancel(cancelled)
        wait_until(lambda: state(server, cancelled) == "CANCELLED", 30, message="cancelled")
        assert exit_code(server, cancelled) != "CANCELLED|5:0"
        with pytest.raises(InvalidRequest, match="is CANCELLED, not running"):
            admin.set_command_exit(cancelled, 0)
