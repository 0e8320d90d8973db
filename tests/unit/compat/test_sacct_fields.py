"""sacct's fields beyond the defaults, each filled on the lines Slurm 22.05.8 fills it
(checked against sacct 22.05.8 with slurmdbd, docs/slurm-checks.md): who ran the job
(UID, GID, Group), where (Cluster), its limit in minutes, its time suspended, what it
asked for (Constraints, Reservation, WCKey), its tasks' CPU time (AveCPU, MinCPU...) and
the time it waited once eligible (Reserved, ResvCPU, ResvCPURAW)."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, call, job, requeued_run, running

from hal.wire.jobs import JobInfo, StepRecord

ENDED = {"state": "COMPLETED", "start_time": T0, "end_time": T0 + 60, "nodes": ["n1"]}


def lines(jobs: list[JobInfo], fields: str) -> list[str]:
    """The ``-P`` lines of ``jobs`` (named by ``-j``: whoever's, eligible or not)."""
    ids = ",".join(str(j.id) for j in jobs)
    return call(FakeClient(job_list=jobs), "sacct", "-P", "-n", "-o", fields, "-j", ids).lines


def step(step_id: int, ntasks: int, cpu: float, node: str = "n2") -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="sh",
        nodelist=node,
        ntasks=ntasks,
        state="COMPLETED",
        exit_code=0,
        start_time=T0 + 1,
        end_time=T0 + 11,
        max_rss_bytes=1 << 20,
        max_rss_node=node,
        ave_rss_bytes=1 << 20,
        total_cpu_seconds=cpu,
    )


def test_user_group_and_cluster_of_the_job() -> None:
    """UID, GID and Group on the job's line only (the group its agent ran it under: the
    user's primary one, ``nobody``'s is ``nogroup``); Cluster on every line, the
    server's ClusterName. A user this machine does not know has no numbers here."""
    jobs = [
        job(1, user="nobody", steps=[step(0, 1, 1.0)], **ENDED),
        job(2, user="root"),
        job(3, user="ghost-user"),
    ]
    assert lines(jobs, "JobID,UID,GID,Group,Cluster") == [
        "1|65534|65534|nogroup|hal",
        "1.batch||||hal",
        "1.0||||hal",
        "2|0|0|root|hal",
        "3||||hal",
    ]


def test_the_cluster_name_is_asked_only_when_wanted() -> None:
    client = FakeClient(job_list=[job(2)])

    def refuse() -> None:
        raise AssertionError("cluster_config asked for a format without Cluster")

    client.cluster_config = refuse  # type: ignore[assignment,method-assign]
    assert call(client, "sacct", "-P", "-n", "-o", "JobID").lines == ["2"]


@pytest.mark.parametrize(("seconds", "raw"), [(3600, "60"), (90, "2"), (30, "1"), (0, "UNLIMITED")])
def test_timelimit_raw_is_whole_minutes(seconds: int, raw: str) -> None:
    """TimelimitRaw: the limit in minutes, as Slurm keeps it (``-t 0:30`` is 1),
    UNLIMITED without one; the job's line only."""
    done = job(1, time_limit_seconds=seconds, **ENDED)
    assert lines([done], "JobID,TimelimitRaw") == [f"1|{raw}", "1.batch|"]


def test_suspended_is_the_jobs_and_its_batch_steps() -> None:
    """Suspended: 00:00:00 for a job never suspended (and its steps); a job suspended
    for 20 s reads 00:00:20 on its line and its batch step's; a numbered step of such a
    job is blank (HAL keeps how long, not when, so not whether the step was running);
    a job suspended now counts so far (the server's figure)."""
    calm = job(1, steps=[step(0, 1, 1.0)], **ENDED)
    paused = job(2, suspended_seconds=20.7, steps=[step(0, 1, 1.0)], **ENDED)
    now = running(3, state="SUSPENDED", suspended_seconds=65)
    assert lines([calm, paused, now], "JobID,Suspended") == [
        "1|00:00:00",
        "1.batch|00:00:00",
        "1.0|00:00:00",
        "2|00:00:20",
        "2.batch|00:00:20",
        "2.0|",
        "3|00:01:05",
        "3.batch|00:01:05",
    ]


def test_suspended_of_a_requeued_jobs_runs_is_unknown() -> None:
    """The server keeps one sum for all of a job's runs: with ``-D`` neither run of a
    requeued job that was suspended gets a figure; one never suspended reads 0."""
    run = requeued_run("n1")
    paused = job(1, restarts=1, runs=[run], suspended_seconds=9, **ENDED)
    calm = job(2, restarts=1, runs=[run], **ENDED)
    assert lines([paused, calm], "JobID,State,Suspended") == [
        "1|COMPLETED|",
        "1.batch|COMPLETED|",
        "2|COMPLETED|00:00:00",
        "2.batch|COMPLETED|00:00:00",
    ]
    client = FakeClient(job_list=[paused])
    out = call(client, "sacct", "-D", "-X", "-P", "-n", "-o", "JobID,State,Suspended")
    assert out.lines == ["1|REQUEUED|", "1|COMPLETED|"]
    listed = call(client, "sacct", "-X", "-P", "-n", "-o", "JobID", "-s", "S", "-j", "1")
    assert listed.lines == ["1"]  # still a job that was suspended (``-s S``)


def test_what_the_job_asked_for() -> None:
    """Constraints (as HAL's scontrol shows Features: joined by ``&``), Reservation and
    WCKey: the job's line only."""
    asked = job(1, constraint=["a100", "ib"], reservation="maint", wckey="wk1", **ENDED)
    assert lines([asked, job(2)], "JobID,Constraints,Reservation,WCKey") == [
        "1|a100&ib|maint|wk1",
        "1.batch|||",
        "2|||",
    ]


def test_cpu_time_of_the_tasks() -> None:
    """AveCPU, MinCPU, MinCPUNode, MinCPUTask (HH:MM:SS, as Slurm's): the batch step's
    one task once measured at its end; a numbered step's mean task (its CPU seconds over
    its tasks); the least task of a step of one task, but of several blank, since HAL
    records a step's sum, not each task's. The job's line, a running batch step and a
    step recorded without usage are blank."""
    steps = [step(0, 4, 100.0), step(1, 1, 75.4, node="n3")]
    measured = job(1, cpu_seconds=3725.9, max_rss_bytes=1 << 20, steps=steps, **ENDED)
    unmeasured = job(2, cpu_seconds=5.0, **ENDED)  # no usage: an agent from before
    busy = running(3, cpu_seconds=5.0, max_rss_bytes=1 << 20)
    fields = "JobID,AveCPU,MinCPU,MinCPUNode,MinCPUTask"
    assert lines([measured, unmeasured, busy], fields) == [
        "1||||",
        "1.batch|01:02:05|01:02:05|n1|0",
        "1.0|00:00:25|||",
        "1.1|00:01:15|00:01:15|n3|0",
        "2||||",
        "2.batch||||",
        "3||||",
        "3.batch||||",
    ]


def test_reserved_is_the_wait_once_eligible() -> None:
    """Reserved, ResvCPU (times the CPUs) and ResvCPURAW, as Slurm 22.05.8's sacct: from
    eligibility to the start, or to now while waiting; 0 for a job never eligible
    (held); INVALID while its --begin is ahead (a negative time, whose raw figure wraps
    at 32 bits: 4294966998 for -298 s); Reserved INVALID for a job that ended without
    starting (Slurm's ResvCPU there is an overflow HAL does not copy). The job's line
    only."""
    started = job(1, cpus=4, eligible_time=T0, start_time=T0 + 30, end_time=T0 + 60, nodes=["n1"])
    waiting = job(2, cpus=2, eligible_time=T0)  # now is T0 + 100
    later = job(3, eligible_time=T0 + 398)
    held = job(4, eligible_time=None)
    gone = job(5, state="CANCELLED", eligible_time=T0, end_time=T0 + 50)
    assert lines([started, waiting, later, held, gone], "JobID,Reserved,ResvCPU,ResvCPURAW") == [
        "1|00:00:30|00:02:00|120",
        "1.batch|||",
        "2|00:01:40|00:03:20|200",
        "3|INVALID|INVALID|4294966998",
        "4|00:00:00|00:00:00|0",
        "5|INVALID||",
    ]


def test_titles_and_widths_as_slurms() -> None:
    """Slurm 22.05.8's titles and default widths, every value right-aligned."""
    fmt = (
        "UID,GID,Group,Cluster,TimelimitRaw,Suspended,Constraints,Reservation,WCKey,"
        "AveCPU,MinCPU,MinCPUNode,MinCPUTask,Reserved,ResvCPU,ResvCPURAW"
    )
    header = call(FakeClient(job_list=[]), "sacct", "-o", fmt).lines[0]
    assert header == (
        "   UID    GID     Group    Cluster TimelimitR  Suspended         Constraints "
        "         Reservation      WCKey     AveCPU     MinCPU MinCPUNode MinCPUTask "
        "  Reserved    ResvCPU ResvCPURAW "
    )
    row = call(FakeClient(job_list=[job(2, wckey="wk1")]), "sacct", "-X", "-n", "-o", fmt)
    assert row.lines[0].startswith("     0      0      root        hal  UNLIMITED   00:00:00")
