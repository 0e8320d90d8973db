"""``squeue --json`` and the slurmrestd facade's ``GET /jobs/`` write the same v0.0.45
``job_info``: they were two copies that disagreed (a killed job's signal name, the reason
of a job kept off a maintenance reservation, the Slurm release in ``meta``, ``comment``'s
shape). Slurm's own generated client (``slurmrestapi``, strict pydantic models) reads
squeue's output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from compat_fakes import FakeClient, call, job

from hal.api.slurmrest.views import job_info
from hal.wire.jobs import JobInfo

KILLED = job(5, state="FAILED", reason="None", exit_code=0, exit_signal=9, end_time=1e9)
MAINT = job(6, reason="ReqNodeNotAvail, Reserved for maintenance")
COMMENTED = job(7, comment="nightly run")


def squeue_json(*jobs: JobInfo) -> dict[str, Any]:
    client = FakeClient(job_list=list(jobs))
    data: dict[str, Any] = json.loads(call(client, "squeue", "--json", "-t", "all").out)
    return data


def by_id(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {j["job_id"]: j for j in data["jobs"]}


def test_squeue_and_the_facade_write_the_same_job_info() -> None:
    shown = by_id(squeue_json(KILLED, MAINT, COMMENTED))
    for info in (KILLED, MAINT, COMMENTED):
        assert shown[info.id] == job_info(info, "hal"), info.id


def test_a_killed_job_is_signaled_with_the_signals_name_and_exit_0() -> None:
    """sacct's ``0:9``: return code 0, signal 9 named KILL (squeue said "")."""
    code = by_id(squeue_json(KILLED))[5]["exit_code"]
    assert code == {
        "status": ["SIGNALED"],
        "return_code": {"set": True, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"},
    }


def test_a_reason_with_a_description_is_named_by_its_first_part() -> None:
    """The facade sent the whole text as ``state_reason``; Slurm's is the reason's name,
    the text its ``state_description``."""
    record = job_info(MAINT, "hal")
    assert record["state_reason"] == "ReqNodeNotAvail"
    assert record["state_description"] == "ReqNodeNotAvail, Reserved for maintenance"
    plain = job_info(job(8), "hal")
    assert (plain["state_reason"], plain["state_description"]) == ("Resources", "")


def test_squeue_meta_is_the_v0045_release() -> None:
    """v0.0.45's data parser is Slurm 26.11's, whatever ``squeue --version`` says; squeue
    claimed 22.05.8, whose squeue printed v0.0.38 shapes."""
    slurm = squeue_json(job(3))["meta"]["slurm"]
    assert slurm["version"] == {"major": "26", "minor": "11", "micro": "0"}
    assert slurm["release"].startswith("26.11.0-0rc1 ")


def test_slurms_client_reads_squeue_json() -> None:
    """``comment`` is a string in job_info (squeue wrote sacct's ``{"job": ...}``)."""
    models = pytest.importorskip("slurmrestapi.models")
    data = squeue_json(KILLED, MAINT, COMMENTED)
    data["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.44"  # the client's version
    parsed = models.V0044OpenapiJobInfoResp.from_dict(data)
    assert parsed is not None
    comments = {j.job_id: j.comment for j in parsed.jobs}
    assert comments[7] == "nightly run"
    killed = next(j for j in parsed.jobs if j.job_id == 5)
    assert killed.exit_code.signal.name == "KILL"
