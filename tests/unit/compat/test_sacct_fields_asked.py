"""sacct asks the server for the fields its columns and filters read
(``GET /v1/jobs?history=true&fields=``, ``hal.compat.sacct_fields``) and reads the
answer as records: every column of ``sacct.FIELDS`` prints the same from just those as
from every field, over jobs in every shape a column reads differently (steps, earlier
runs, GPUs, a cancel, a window that cuts the times)."""

from __future__ import annotations

from typing import Any

import pytest
from compat_fakes import T0, FakeClient, call, job, requeued_run, running

from hal.compat.sacct import FIELDS
from hal.compat.sacct_fields import BASE_FIELDS, COLUMN_FIELDS, asked_fields
from hal.wire.jobs import GpuUsage, JobInfo, StepGpuUsage, StepRecord

ENDED: dict[str, Any] = {
    "state": "COMPLETED",
    "state_code": "CD",
    "start_time": T0,
    "end_time": T0 + 60,
    "nodes": ["n1", "n2"],
    "node_count": 2,
    "eligible_time": T0 - 5,
    "max_rss_bytes": 5 << 20,
    "cpu_seconds": 7.5,
    "user_cpu_seconds": 5.0,
    "system_cpu_seconds": 2.5,
}


def step(step_id: int, **changes: Any) -> StepRecord:
    values: dict[str, Any] = {
        "step_id": step_id,
        "name": "sh",
        "nodelist": "n[1-2]",
        "ntasks": 2,
        "state": "COMPLETED",
        "exit_code": 0,
        "start_time": T0 + 1,
        "end_time": T0 + 11,
        "max_rss_bytes": 1 << 20,
        "max_rss_node": "n2",
        "max_rss_task": 1,
        "ave_rss_bytes": 1 << 19,
        "total_cpu_seconds": 3.0,
        "user_cpu_seconds": 2.0,
        "system_cpu_seconds": 1.0,
        "cpus": 4,
        "memory_bytes": 1 << 30,
    }
    return StepRecord(**(values | changes))


def history() -> list[JobInfo]:
    gpu = StepGpuUsage(max_mem_bytes=1 << 30, ave_mem_bytes=1 << 29, max_util=90, ave_util=50.0)
    return [
        job(
            1,
            account="physics",
            qos="high",
            comment="note",
            constraint=["ib"],
            reservation="maint",
            wckey="w",
            gpus=2,
            cost=1.25,
            time_limit_seconds=3600,
            gpu_usage=GpuUsage(
                mem_bytes=1, max_mem_bytes=2 << 30, util=1, max_util=80, ave_util=40.0
            ),
            steps=[step(0, gpu=gpu), step(1, exit_code=2, state="FAILED", ntasks=1)],
            **ENDED,
        ),
        job(
            2,
            restarts=1,
            runs=[requeued_run("n1")],
            interrupted_at=T0 - 45,
            lost_work_seconds=5.0,
            suspended_seconds=3.0,
            **ENDED,
        ),
        job(3, state="CANCELLED", state_code="CA", cancelled_by="root", exit_signal=15,
            reason="None", start_time=T0, end_time=T0 + 30, eligible_time=T0 - 1, nodes=["n1"]),
        running(4, eligible_time=T0 - 2, steps=[step(0, end_time=None)], ntasks=4),
        job(5, eligible_time=T0 - 3),
        job(6, array_job_id=6, array_task_id=1, display_id="6_1", eligible_time=T0, **{
            k: v for k, v in ENDED.items() if k != "eligible_time"}),
        job(7, het_job_id=7, het_job_offset=1, display_id="7+1", interactive=True, **{
            k: v for k, v in ENDED.items() if k != "eligible_time"}, eligible_time=T0),
    ]  # fmt: skip


def both(*argv: str) -> tuple[str, str]:
    """sacct's output with the fields it asks for, and with every field."""
    some = FakeClient(job_list=history())
    every = FakeClient(job_list=history(), fields=False)
    asked, whole = call(some, "sacct", *argv), call(every, "sacct", *argv)
    assert asked.rc == whole.rc == 0, asked.err
    assert some.jobs_calls[-1]["fields"]  # (the fields were asked for)
    return asked.out, whole.out


IDS = ",".join(str(j.id) for j in history())


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_every_column_prints_the_same_with_the_fields_sacct_asks_for(name: str) -> None:
    title = FIELDS[name][0]
    for argv in (
        ["-P", "-D", "-o", f"JobID,{title}", "-j", IDS],
        ["-P", "-a", "-o", title, "-T", "-S", "2026-11-21T21:30:30", "-E", "2026-11-21T21:31:00"],
        ["-o", f"{title}%30", "-a", "-s", "CA,CD,R", "-S", "21:00", "-E", "21:33"],
    ):
        asked, whole = both(*argv)
        assert asked == whole, argv
        assert len(asked.splitlines()) >= 3, (argv, asked)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-l"],
        ["-X"],
        ["-b"],
        ["-A", "physics"],
        ["-q", "high"],
        ["-N", "n2"],
        ["-i", "2"],
        ["-I", "1-4"],
        ["-k", "60"],
        ["--name", "sleeper"],
        ["-j", "1.0,4.batch"],
    ],
)
def test_the_formats_and_filters_print_the_same(argv: list[str]) -> None:
    asked, whole = both("-a", "-S", "2026-11-21T21:00:00", *argv)
    assert asked == whole


def test_every_column_says_which_fields_it_reads() -> None:
    assert COLUMN_FIELDS.keys() == FIELDS.keys()
    names = set(JobInfo.model_fields)
    assert set(BASE_FIELDS) <= names
    assert all(set(fields) <= names for fields in COLUMN_FIELDS.values())
    default = asked_fields(["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State"])
    assert len(default) < len(names) / 3  # of JobInfo's 99
