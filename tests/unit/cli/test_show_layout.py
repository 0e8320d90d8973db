"""`hal show JOB` printed about 80 raw Python fields (``het_job_id: None``,
``cpu_seconds: 0.0065179999999999995``). Now it prints ``scontrol show job``'s layout:
grouped ``Key=Value`` lines, dates, ``[D-]HH:MM:SS``, sizes with units, and what does not
apply left out; ``--json`` keeps the raw object."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from hal.cli.main import main
from hal.cli.show import job_lines
from hal.core.resources import GiB, MiB
from hal.testing.live import LiveServer
from hal.wire.jobs import JobInfo, JobSubmit

T0 = datetime(2026, 3, 1, 9, 30, 0).timestamp()  # local time, as the layout prints it


def info(**fields: object) -> JobInfo:
    base: dict[str, object] = {
        "id": 42, "display_id": "42", "name": "train", "user": "alice", "partition": "gpu",
        "state": "RUNNING", "state_code": "R", "reason": "None", "priority": 1000,
        "submit_time": T0, "eligible_time": T0, "start_time": T0 + 60,
        "time_limit_seconds": 2 * 86_400, "nodes": ["node1", "node2"], "node_count": 2,
        "cpus": 8, "memory_bytes": 16 * GiB, "gpus": 2, "ntasks": 2, "cpus_per_task": 4,
        "workdir": "/home/alice", "stdout": "/home/alice/slurm-42.out",
        "stderr": "/home/alice/slurm-42.out", "cpu_seconds": 0.0065179999999999995,
        "max_rss_bytes": 300 * MiB, "predicted_runtime_seconds": 5400.0,
        "predicted_end": T0 + 60 + 5400,
    }  # fmt: skip
    return JobInfo.model_validate(base | fields)


def test_a_running_job_reads_as_scontrol_lays_it_out() -> None:
    lines = job_lines(info(), now=T0 + 60 + 3725)
    assert lines == [
        "JobId=42 JobName=train",
        "   User=alice Partition=gpu",
        "   JobState=RUNNING",
        "   Priority=1000",
        "   RunTime=01:02:05 TimeLimit=2-00:00:00",
        "   SubmitTime=2026-03-01T09:30:00 EligibleTime=2026-03-01T09:30:00 "
        "StartTime=2026-03-01T09:31:00",
        "   PredictedRunTime=01:30:00 PredictedEnd=2026-03-01T11:01:00",
        "   NodeList=node[1-2]",
        "   NumNodes=2 NumCPUs=8 NumTasks=2 CPUs/Task=4 Memory=16.0 GiB (8.0 GiB a node) GPUs=2",
        "   MaxRSS=300.0 MiB CPUTime=00:00.007",
        "   WorkDir=/home/alice",
        "   StdOut=/home/alice/slurm-42.out",
    ]


def test_fields_that_do_not_apply_are_left_out_and_the_rest_shown() -> None:
    """A pending job has no run time, usage or nodes; a job of an array, with a
    dependency, no requeue and mail shows each where scontrol does."""
    pending = info(
        state="PENDING", state_code="PD", reason="Dependency", start_time=None, nodes=[],
        max_rss_bytes=0, cpu_seconds=0.0, eligible_time=None, dependency="afterok:41",
        dependency_state="afterok:41(unfulfilled)", array_job_id=40, array_task_id=2,
        display_id="40_2", requeue=False, mail_type="END", mail_user="alice@example.org",
        time_limit_seconds=0, predicted_runtime_seconds=None, predicted_end=None,
    )  # fmt: skip
    text = "\n".join(job_lines(pending, now=T0 + 5))
    assert text.startswith("JobId=40_2 JobName=train ArrayJobId=40 ArrayTaskId=2\n")
    assert "   JobState=PENDING Reason=Dependency Dependency=afterok:41(unfulfilled)\n" in text
    assert "   Priority=1000 Requeue=no\n" in text
    assert "   TimeLimit=UNLIMITED\n" in text
    assert "   MailType=END MailUser=alice@example.org" in text
    for absent in ("None", "RunTime", "StartTime", "NodeList", "MaxRSS", "CPUTime", "Predicted",
                   "HetJob", "Comment", "=\n", "= ", "[]"):  # fmt: skip
        assert absent not in text, absent


def test_a_finished_job_shows_its_end_its_exit_code_and_who_cancelled_it() -> None:
    ended = info(state="CANCELLED", end_time=T0 + 120, exit_signal=15,
                 cancelled_by="hal up (the local cluster stopped)")  # fmt: skip
    text = "\n".join(job_lines(ended, now=T0 + 999))
    assert "   JobState=CANCELLED CancelledBy=hal up (the local cluster stopped)\n" in text
    assert "   Priority=1000 ExitCode=0:15\n" in text
    assert "   RunTime=00:01:00 TimeLimit=2-00:00:00\n" in text  # start to end, not to now
    assert "EndTime=2026-03-01T09:32:00" in text
    assert "PredictedEnd" not in text


def test_hal_show_prints_the_layout_and_json_the_raw_object(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with env.client() as c:
        job = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True,
                                 name="held-one")).job_id  # fmt: skip
    try:
        assert main(["show", str(job)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"JobId={job} JobName=held-one\n   User=")
        assert "JobState=PENDING Reason=JobHeldUser Held=yes" in out
        assert ": None" not in out and "het_job_id" not in out
        assert main(["show", "job", str(job), "--json"]) == 0
        raw = json.loads(capsys.readouterr().out)
        assert raw["id"] == job and raw["het_job_id"] is None and "cpu_seconds" in raw
    finally:
        with env.client() as c:
            c.cancel(str(job))
