"""Options HAL once refused, as Slurm 22.05.8 takes them (docs/slurm-checks.md,
"Job options"): ``--exclusive=user``, ``--priority`` and srun's
``--signal``. A real server with two real 2-CPU agents; the commands run as the
installed shims, from a shell with no job around it."""

from __future__ import annotations

import re
from pathlib import Path

from two_agents import (
    run,
)

from hal.testing.live import LiveServer, wait_until


def sbatch(server: LiveServer, shims: Path, cwd: Path, *args: str, token: str | None = None) -> int:
    done = run(server, shims, cwd, "sbatch", "--parsable", "-o", "/dev/null", *args, token=token)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def show_job(server: LiveServer, job: int) -> str:
    done = server.cli("scontrol", "show", "job", str(job))
    assert done.returncode == 0, done.stderr
    return done.stdout


def running_on(server: LiveServer, job: int) -> str:
    with server.client() as c:
        wait_until(lambda: c.job(job).state == "RUNNING", 20, message=f"job {job} running")
        return ",".join(c.job(job).nodes)


def test_exclusive_user_keeps_other_users_jobs_off_its_node(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """The admin's 1-CPU --exclusive=user job leaves a CPU free on its node; Bob's 1-CPU
    job, which best fit would put beside it, goes to the other node, and the admin's own
    next job joins it there (OverSubscribe=USER in scontrol, as Slurm shows it)."""
    bob = server.add_users("bob")["bob"]
    mine = sbatch(server, shims, tmp_path, "--exclusive=user", "-c1", "--wrap", "sleep 60")
    node = running_on(server, mine)
    assert "OverSubscribe=USER" in show_job(server, mine)
    other = "node2" if node == "node1" else "node1"
    his = sbatch(server, shims, tmp_path, "-c1", "--wrap", "sleep 60", token=bob)
    assert running_on(server, his) == other
    again = sbatch(server, shims, tmp_path, "-c1", "-w", node, "--wrap", "sleep 60")
    assert running_on(server, again) == node
    assert "OverSubscribe=OK" in show_job(server, again)
    for job in (mine, his, again):
        server.cli("scancel", str(job))


def test_priority_is_an_administrators_and_a_users_is_dropped(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """``--priority=4242`` from the administrator sets the job's priority; Bob's is taken
    without a word and his job gets the priority it would have had, as Slurm 22.05.8."""
    carol = server.add_users("carol")["carol"]
    later = ("--begin=now+1hour", "--wrap", "true")
    mine = sbatch(server, shims, tmp_path, "--priority=4242", *later)
    assert "Priority=4242 " in show_job(server, mine)
    plain = sbatch(server, shims, tmp_path, *later, token=carol)
    hers = sbatch(server, shims, tmp_path, "--priority=4242", *later, token=carol)
    priority = re.compile(r"Priority=(\d+) ")
    assert priority.findall(show_job(server, hers)) == priority.findall(show_job(server, plain))
    assert "Priority=4242 " not in show_job(server, hers)
    done = run(server, shims, tmp_path, "sbatch", "--priority=-5", "--wrap", "true")
    assert done.returncode != 0
    assert "Priority must be >= 0" in done.stderr
    for job in (mine, plain, hers):
        server.cli("scancel", str(job))


def test_srun_signal_reaches_its_step_before_the_allocations_limit(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """``srun --signal=USR1@3 -t 0:05`` (HAL_EXACT_TIME_LIMITS: seconds) outside a job:
    its allocation's step gets USR1 about 2 s in, as Slurm's srun's did on the peer."""
    script = 'trap "echo got USR1; exit 0" USR1; sleep 30 & wait'
    done = run(server, shims, tmp_path, "srun", "--signal=USR1@3", "-t", "0:05", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "got USR1"


def test_srun_refuses_the_batch_shells_signal(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    done = run(server, shims, tmp_path, "srun", "--signal=B:USR1", "true")
    assert done.returncode != 0
    assert done.stderr.startswith("srun: error: Invalid --signal specification"), done.stderr
