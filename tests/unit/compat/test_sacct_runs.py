"""``sacct -D``: a requeued job's earlier runs, each its own record with the steps that
started in it, before the job's latest run; without ``-D`` the latest run alone, with
only its own steps (Slurm 22.05.8's accounting, docs/slurm-checks.md)."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job

from hal.wire.jobs import JobRun, StepRecord

FIELDS = "JobID,State,ExitCode,Start,End,NodeList,MaxRSS"


def step(step_id: int, start: float) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        name="true",
        nodelist="n1",
        ntasks=1,
        state="COMPLETED",
        exit_code=0,
        start_time=start,
        end_time=start + 1,
    )


def run(attempt: int, state: str, start: float, end: float, node: str) -> JobRun:
    return JobRun(
        attempt=attempt,
        state=state,
        exit_code=0,
        exit_signal=15,
        partition="batch",
        submit_time=T0,
        eligible_time=T0,
        start_time=start,
        end_time=end,
        nodes=[node],
        max_rss_bytes=2 * MiB,
    )


def requeued_twice() -> FakeClient:
    latest = job(
        7,
        state="COMPLETED",
        start_time=T0 + 300,
        end_time=T0 + 400,
        nodes=["n3"],
        node_count=1,
        restarts=2,
        max_rss_bytes=5 * MiB,
        steps=[step(0, T0 + 20), step(1, T0 + 150), step(2, T0 + 310)],
        runs=[
            run(1, "PREEMPTED", T0 + 120, T0 + 200, "n2"),
            run(0, "REQUEUED", T0 + 10, T0 + 100, "n1"),
        ],
    )
    return FakeClient(job_list=[latest])


def stamp(offset: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(T0 + offset).strftime("%Y-%m-%dT%H:%M:%S")


def test_duplicates_show_each_run_before_the_latest() -> None:
    lines = call(requeued_twice(), "sacct", "-D", "-P", "-n", "-o", FIELDS).lines
    assert lines == [
        # as Slurm 22.05.8's: the run's line 0:0, its batch step CANCELLED 0:15
        f"7|REQUEUED|0:0|{stamp(10)}|{stamp(100)}|n1|",
        f"7.batch|CANCELLED|0:15|{stamp(10)}|{stamp(100)}|n1|2M",
        f"7.0|COMPLETED|0:0|{stamp(20)}|{stamp(21)}|n1|",
        f"7|PREEMPTED|0:0|{stamp(120)}|{stamp(200)}|n2|",
        f"7.batch|CANCELLED|0:15|{stamp(120)}|{stamp(200)}|n2|2M",
        f"7.1|COMPLETED|0:0|{stamp(150)}|{stamp(151)}|n1|",
        f"7|COMPLETED|0:0|{stamp(300)}|{stamp(400)}|n3|",
        f"7.batch|COMPLETED|0:0|{stamp(300)}|{stamp(400)}|n3|5M",
        f"7.2|COMPLETED|0:0|{stamp(310)}|{stamp(311)}|n1|",
    ]


def test_without_duplicates_the_latest_run_alone() -> None:
    lines = call(requeued_twice(), "sacct", "-P", "-n", "-o", "JobID,State,NodeList").lines
    assert lines == ["7|COMPLETED|n3", "7.batch|COMPLETED|n3", "7.2|COMPLETED|n1"]
    allocations = call(requeued_twice(), "sacct", "-D", "-X", "-P", "-n", "-o", "JobID,State")
    assert allocations.lines == ["7|REQUEUED", "7|PREEMPTED", "7|COMPLETED"]


def test_state_and_time_select_runs() -> None:
    """``-s`` and ``-S``/``-E`` select each run by its own state and times: a preempted
    run is found by ``-s PR``, an administrator's requeue by ``-s RQ``; without ``-D``
    the latest run alone is looked at."""

    def ids(*args: str) -> list[str]:
        argv = ("-j", "7", "-X", "-P", "-n", "-o", "State", *args)
        return call(requeued_twice(), "sacct", *argv, now=T0 + 1000).lines

    assert ids("-D", "-s", "PR") == ["PREEMPTED"]
    assert ids("-D", "-s", "RQ,CD") == ["REQUEUED", "COMPLETED"]
    assert ids("-s", "PR") == []  # the latest run completed
    # the first run ended before -S: left out; the others were there at some moment
    assert ids("-D", "-S", stamp(110), "-E", stamp(250)) == ["PREEMPTED", "COMPLETED"]


def test_an_earlier_run_has_no_user_and_system_split() -> None:
    """The job's split of its CPU time (UserCPU, SystemCPU) is its latest run's; an
    earlier run keeps only the sum (TotalCPU), so its parts are blank, not the latest's
    (even when the sums are the same)."""
    earlier = run(0, "REQUEUED", T0 + 10, T0 + 100, "n1").model_copy(update={"cpu_seconds": 4.0})
    latest = job(
        7,
        state="COMPLETED",
        start_time=T0 + 300,
        end_time=T0 + 400,
        nodes=["n3"],
        node_count=1,
        restarts=1,
        cpu_seconds=4.0,
        user_cpu_seconds=3.0,
        system_cpu_seconds=1.0,
        runs=[earlier],
    )
    out = call(FakeClient(job_list=[latest]), "sacct", "-D", "-P", "-n", "-o",
               "JobID,UserCPU,SystemCPU,TotalCPU")  # fmt: skip
    assert out.lines[1] == "7.batch|||00:04.000", out.lines
    assert out.lines[3] == "7.batch|00:03.000|00:01.000|00:04.000", out.lines
