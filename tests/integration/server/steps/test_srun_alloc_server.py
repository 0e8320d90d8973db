"""``srun`` outside a job, as Slurm's: an allocation of its own, named after the command,
the command its step 0 on the allocation's nodes, the job ended with the step's exit
code. A real server with two real agents; srun runs as the installed shim, from a shell
with no job around it."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from two_agents import (
    login_env,
    run,
)

from hal.testing.live import LiveServer, wait_until


def srun(
    server: LiveServer, shims: Path, cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return run(server, shims, cwd, "srun", *args)


def sacct(server: LiveServer, job: int, fields: str) -> list[str]:
    done = server.cli("sacct", "-j", str(job), "-n", "-P", "-o", fields)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def last_job(server: LiveServer) -> int:
    with server.client() as c:
        return max(j.id for j in c.jobs(include_finished=True))


def test_srun_makes_an_allocation_runs_its_step_on_both_nodes_and_gives_it_back(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    done = srun(
        server, shims, tmp_path, "-N2", "-n4", "-l",
        "sh", "-c", 'echo "$SLURMD_NODENAME $SLURM_JOB_NAME $SLURM_STEP_ID $SLURM_NTASKS"',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # granted at once, nothing said; a loaded machine's grant that takes longer than
    # salloc's QUEUED_AFTER_SECONDS says it waited, and nothing else
    waited = re.compile(r"srun: job \d+ (queued and waiting for|has been allocated) resources")
    assert all(waited.fullmatch(line) for line in done.stderr.splitlines()), done.stderr
    lines = sorted(done.stdout.splitlines())
    assert lines == [
        "0: node1 sh 0 4", "1: node1 sh 0 4", "2: node2 sh 0 4", "3: node2 sh 0 4",
    ]  # fmt: skip
    job = last_job(server)
    rows = sacct(server, job, "JobID,JobName,State,ExitCode,NNodes")
    assert rows[0] == f"{job}|sh|COMPLETED|0:0|2"
    assert f"{job}.0|sh|COMPLETED|0:0|2" in rows
    with server.client() as c:
        wait_until(lambda: all(n.cpus_alloc == 0 for n in c.nodes()), 10, message="free")


def test_the_steps_exit_code_is_sruns_and_the_jobs(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    done = srun(server, shims, tmp_path, "-J", "named", "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr
    assert "task 0: Exited with exit code 3" in done.stderr
    job = last_job(server)
    assert sacct(server, job, "JobName,State,ExitCode")[0] == "named|FAILED|3:0"


def test_a_request_no_node_holds_is_refused_and_leaves_no_job(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    before = last_job(server)
    done = srun(server, shims, tmp_path, "-c", "64", "true")
    assert done.returncode == 1
    assert done.stderr.startswith("srun: error: Unable to allocate resources: "), done.stderr
    assert last_job(server) == before


def test_immediate_gives_up_on_a_busy_cluster_and_a_waiting_srun_says_so(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    blocker = server.cli("sbatch", "--parsable", "-N2", "-c2", "--wrap", "sleep 60")
    blocker_id = int(blocker.stdout.strip())
    with server.client() as c:
        wait_until(lambda: c.job(blocker_id).state == "RUNNING", 20, message="the blocker")
    busy = srun(server, shims, tmp_path, "-I1", "true")
    assert busy.returncode == 1
    assert "Unable to allocate resources: Requested nodes are busy" in busy.stderr
    with server.client() as c:
        assert c.job(last_job(server)).state == "CANCELLED"
    waiting = subprocess.Popen(
        [str(shims / "srun"), "echo", "at last"],
        env=login_env(server, shims),
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(2)
    server.cli("scancel", str(blocker_id))
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out == "at last\n"
    job = last_job(server)
    assert re.search(rf"^srun: job {job} queued and waiting for resources$", err, re.M), err
    assert re.search(rf"^srun: job {job} has been allocated resources$", err, re.M), err


def test_an_artifact_reaches_the_allocations_nodes_and_is_refused_inside_a_job(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    tool = tmp_path / "greet"
    tool.write_text("#!/bin/sh\necho greetings from $SLURMD_NODENAME\n")
    with server.client() as c:
        c.push_artifact("greet", "1", tool)
    done = srun(server, shims, tmp_path, "-N2", "--artifact=greet", "greet")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "greetings from node1",
        "greetings from node2",
    ]
    inside = server.cli(
        "sbatch", "--parsable", "-o", "in.txt", "--wrap",
        f"{shims / 'srun'} --artifact=greet greet; echo rc=$?",
        cwd=tmp_path,
    )  # fmt: skip
    job = int(inside.stdout.strip())
    with server.client() as c:
        wait_until(lambda: c.job(job).state == "COMPLETED", 30, message="the job")
    text = (tmp_path / "in.txt").read_text()
    assert "srun: error: --artifact: shapes the allocation srun makes outside a job" in text
    assert "rc=1" in text
