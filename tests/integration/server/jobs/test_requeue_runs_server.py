"""``sacct -D`` on a real server with a real agent: a job requeued while it runs keeps its
first run as a record of its own, ``REQUEUED 0:0`` with its batch step ``CANCELLED 0:15``
and the step that ran in it, before its latest run; plain ``sacct`` shows the latest
run alone, as Slurm 22.05.8's slurmdbd (docs/slurm-checks.md, "sacct -D")."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from two_agents import (
    SRUN,
    sacct,
    state,
    submit,
)

from hal.testing.live import LiveServer, wait_until


def test_a_requeued_jobs_first_run_is_its_own_record(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} true\nsleep 300\n", "--requeue", "-w", "node1")

    def runs(restarts: int) -> bool:
        with server.client() as c:
            job = c.job(job_id)
        return job.state == "RUNNING" and job.restarts == restarts

    def stepped(count: int) -> bool:  # the run's job, batch and step lines
        return len(sacct(server, job_id, "JobID")) == count

    wait_until(lambda: runs(0) and stepped(3), 60, message="its first run's step")
    assert server.cli("scontrol", "requeue", str(job_id)).returncode == 0
    wait_until(lambda: runs(1) and stepped(3), 60, message="its second run's step")
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 60, message="its end")
    fields = "JobID,State,ExitCode,NodeList"
    plain = sacct(server, job_id, fields)
    assert [line.split("|")[:3] for line in plain] == [
        [str(job_id), plain[0].split("|")[1], "0:0"],
        [f"{job_id}.batch", "CANCELLED", "0:15"],
        [f"{job_id}.0", "COMPLETED", "0:0"],  # its own step only, numbered from 0 again
    ]
    assert plain[0].split("|")[1].startswith("CANCELLED by ")
    done = server.cli("sacct", "-j", str(job_id), "-D", "-n", "-P", "-o", fields)
    assert done.stdout.splitlines() == [
        f"{job_id}|REQUEUED|0:0|node1",
        f"{job_id}.batch|CANCELLED|0:15|node1",
        f"{job_id}.0|COMPLETED|0:0|node1",
        *plain,
    ]


def test_a_requeued_jobs_next_run_numbers_its_steps_from_0_again(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """`srun -N2 printenv SLURM_STEP_ID; srun -N2 sleep 300` requeued while its step 1
    runs on both agents: the next run's steps are 0 and 1 again (their tasks say 0), while
    the first run's step 1 may still be ending on the same nodes; `squeue -s` lists the
    new run's; sacct shows the latest run's steps, `sacct -D` each run's, as Slurm
    22.05.8's (docs/slurm-checks.md, "sacct -D: a requeued job's runs")."""
    body = f"{SRUN} -N2 -l printenv SLURM_STEP_ID\n{SRUN} -N2 sleep 300\n"
    job_id = submit(server, tmp_path, body, "-N2", "--requeue", "--open-mode=append")

    def sleeping(restarts: int) -> bool:
        with server.client() as c:
            job = c.job(job_id)
        listed = server.cli("squeue", "-s", "-h").stdout.split()
        return job.restarts == restarts and f"{job_id}.1" in listed

    wait_until(lambda: sleeping(0), 60, message="its first run's step 1")
    assert server.cli("scontrol", "requeue", str(job_id)).returncode == 0
    wait_until(lambda: sleeping(1), 60, message="its second run's step 1")
    assert f"{job_id}.0" not in server.cli("squeue", "-s", "-h").stdout.split()
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    said = sorted(line for line in out.splitlines() if line[:1].isdigit())  # (srun -l)
    assert said == ["0: 0", "0: 0", "1: 0", "1: 0"], out
    plain = sacct(server, job_id, "JobID,State")
    assert plain == [
        f"{job_id}|RUNNING",
        f"{job_id}.batch|RUNNING",
        f"{job_id}.0|COMPLETED",
        f"{job_id}.1|RUNNING",
    ]
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 60, message="its end")

    def all_ended() -> list[str]:
        done = server.cli("sacct", "-j", str(job_id), "-D", "-n", "-P", "-o", "JobID,State")
        return done.stdout.splitlines()

    wait_until(lambda: "RUNNING" not in " ".join(all_ended()), 30, message="steps ended")
    lines = [
        line if "CANCELLED by" not in line else line[: line.index(" by")] for line in all_ended()
    ]
    assert lines == [
        f"{job_id}|REQUEUED",
        f"{job_id}.batch|CANCELLED",
        f"{job_id}.0|COMPLETED",
        f"{job_id}.1|CANCELLED",
        f"{job_id}|CANCELLED",
        f"{job_id}.batch|CANCELLED",
        f"{job_id}.0|COMPLETED",
        f"{job_id}.1|CANCELLED",
    ]


def test_a_requeued_run_truncates_its_output_unless_open_mode_append(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """As Slurm 22.05.8: a requeued run starts its output file anew, unless
    the job asked for ``--open-mode=append`` (submitit does, so that a checkpointed job's
    runs share one log); HAL appended always, and refused ``--open-mode``."""
    body = 'echo "run $SLURM_RESTART_COUNT"\n[ "$SLURM_RESTART_COUNT" = 0 ] && sleep 300\ntrue\n'
    jobs = {
        mode: submit(server, tmp_path, body, "-o", f"{mode}.out", *flags)
        for mode, flags in (
            ("default", ()),
            ("append", ("--open-mode=append",)),
            ("truncate", ("--open-mode=t",)),
        )
    }

    def restarts(job_id: int) -> int:
        with server.client() as c:
            job = c.job(job_id)
        return job.restarts if job.state == "RUNNING" else -1

    for job_id in jobs.values():
        wait_until(lambda j=job_id: restarts(j) == 0, 60, message=f"job {job_id} running")
        assert server.cli("scontrol", "requeue", str(job_id)).returncode == 0
    for job_id in jobs.values():
        wait_until(lambda j=job_id: state(server, j) == "COMPLETED", 60, message="its rerun")
    read = {mode: (tmp_path / f"{mode}.out").read_text() for mode in jobs}
    assert read["default"] == read["truncate"] == "run 1\n"
    assert read["append"].startswith("run 0\n") and read["append"].endswith("run 1\n")
    refused = server.cli("sbatch", "--open-mode=bogus", "--wrap", "true", cwd=tmp_path)
    assert refused.returncode != 0 and "Invalid --open-mode specification" in refused.stderr


def show(live: LiveServer, job_id: int) -> dict[str, str]:
    done = live.cli("scontrol", "show", "job", str(job_id), "-o")
    assert done.returncode == 0, done.stderr
    return dict(word.split("=", 1) for word in done.stdout.split() if "=" in word)


def test_requeuehold_brings_a_job_back_held_until_released(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """``scontrol requeuehold`` (Slurm 22.05.8; HAL refused the command): a
    running job ends its run and comes back PENDING with Reason
    ``job_requeued_in_held_state`` and priority 0, and does not run until ``scontrol
    release``; a finished job comes back the same way. While the job runs, its EndTime is
    its start plus its limit, as Slurm's (HAL showed Unknown)."""
    job_id = submit(server, tmp_path, "sleep 300\n", "--requeue", "-t", "10")
    wait_until(lambda: state(server, job_id) == "RUNNING", 60, message="its start")
    running = show(server, job_id)
    start, end = (datetime.fromisoformat(running[k]) for k in ("StartTime", "EndTime"))
    assert (end - start).total_seconds() == 600
    assert server.cli("scontrol", "requeuehold", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "PENDING", 60, message="its requeue")
    held = show(server, job_id)
    assert (held["Reason"], held["Priority"], held["Restarts"]) == (
        "job_requeued_in_held_state",
        "0",
        "1",
    )
    reason = server.cli("squeue", "-h", "-j", str(job_id), "-o", "%r").stdout.strip()
    assert reason == "job requeued in held state"
    time.sleep(2)  # passes run every second while jobs wait: none starts it held
    assert state(server, job_id) == "PENDING"
    assert server.cli("scontrol", "release", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "RUNNING", 60, message="its second run")
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 60, message="its end")
    assert server.cli("scontrol", "requeuehold", str(job_id)).returncode == 0
    again = show(server, job_id)
    assert (again["JobState"], again["Reason"], again["Restarts"]) == (
        "PENDING",
        "job_requeued_in_held_state",
        "2",
    )
    assert server.cli("scancel", str(job_id)).returncode == 0


def test_a_hold_on_a_running_job_keeps_it_from_running_again(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """Slurm 22.05.8: ``scontrol hold`` of a running job shows Priority=0 and
    Reason=JobHeldAdmin, and after ``scontrol requeue`` the job waits, held, until
    released; HAL answered rc 0 and dropped the hold, so the requeued job ran again at
    once. A hold of a job that has ended is refused with Slurm's words."""
    job_id = submit(server, tmp_path, "sleep 300\n", "--requeue")
    wait_until(lambda: state(server, job_id) == "RUNNING", 60, message="its start")
    assert server.cli("scontrol", "hold", str(job_id)).returncode == 0
    running = show(server, job_id)
    assert (running["JobState"], running["Priority"], running["Reason"]) == (
        "RUNNING",
        "0",
        "JobHeldAdmin",
    )
    assert server.cli("scontrol", "requeue", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "PENDING", 60, message="its requeue")
    time.sleep(2)  # passes run every second while jobs wait: none starts it held
    assert show(server, job_id)["Reason"] == "JobHeldAdmin"
    assert state(server, job_id) == "PENDING"
    assert server.cli("scontrol", "release", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "RUNNING", 60, message="its second run")
    assert server.cli("scancel", str(job_id)).returncode == 0
    wait_until(lambda: state(server, job_id) == "CANCELLED", 60, message="its end")
    done = server.cli("scontrol", "hold", str(job_id))
    assert done.returncode == 1
    assert f"Job has already finished for job {job_id}" in done.stderr


def test_a_no_requeue_job_is_not_requeued(
    server: LiveServer,
    tmp_path: Path,
) -> None:
    """scontrol requeue and requeuehold of a --no-requeue job are refused with Slurm's
    words, and the job runs on once (before, it ran again: Restarts=1)."""
    job_id = submit(server, tmp_path, "sleep 300\n", "--no-requeue")
    wait_until(lambda: state(server, job_id) == "RUNNING", 60, message="it to run")
    for verb in ("requeue", "requeuehold"):
        done = server.cli("scontrol", verb, str(job_id))
        assert done.returncode == 1
        assert f"Requested operation is presently disabled for job {job_id}" in done.stderr
    with server.client() as c:
        job = c.job(job_id)
        assert (job.state, job.restarts) == ("RUNNING", 0)
        c.cancel(str(job_id))
