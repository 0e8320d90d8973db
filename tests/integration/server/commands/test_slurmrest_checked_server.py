"""What a real slurmrestd (22.05.8, openapi/v0.0.38, docs/slurm-checks.md "slurmrestd")
answered, and what carries over to v0.0.45, against a live control plane with plain httpx:
refusals from slurmctld (unknown job, partition, missing script, an ended job's update)
are HTTP 500 with Slurm's error number; refusals of the request itself (an unknown field,
a bad signal) are 400 with 9001/9000; cancelling a job that already ended is a success;
``state_reason`` uses Slurm's names for held, completed and failed jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hal.testing.live import LiveServer, wait_until

BASE = "/slurm/v0.0.45"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("hal")
    overrides = {"kill_wait_seconds": 2}
    with LiveServer(data, config_overrides=overrides) as server, server.agents(1, cpus=2):
        yield server


@pytest.fixture(scope="module")
def rest(live: LiveServer) -> Iterator[httpx.Client]:
    headers = {"X-SLURM-USER-NAME": "admin", "X-SLURM-USER-TOKEN": live.token}
    with httpx.Client(base_url=live.url + BASE, headers=headers, timeout=10) as client:
        yield client


def _submit(rest: httpx.Client, tmp: Path, script: str, **job: Any) -> int:
    desc = {"name": "checked", "current_working_directory": str(tmp), **job}
    got = rest.post("/job/submit", json={"script": f"#!/bin/sh\n{script}\n", "job": desc})
    assert got.status_code == 200, got.text
    return int(got.json()["job_id"])


def _job(rest: httpx.Client, job_id: int) -> dict[str, Any]:
    got = rest.get(f"/job/{job_id}")
    assert got.status_code == 200, got.text
    return dict(got.json()["jobs"][0])


def _only_error(got: httpx.Response, status: int, number: int) -> dict[str, Any]:
    assert got.status_code == status, got.text
    body = got.json()
    assert set(body) >= {"meta", "errors", "warnings"}
    assert [e["error_number"] for e in body["errors"]] == [number], body["errors"]
    entry = dict(body["errors"][0])
    assert set(entry) == {"description", "error_number", "error", "source"}
    return entry


def test_an_unknown_job_is_500_invalid_job_id(rest: httpx.Client) -> None:
    got = rest.get("/job/999999")
    entry = _only_error(got, 500, 2017)
    assert entry["error"] == "Invalid job id specified"
    assert entry["description"] == "Unable to find JobId=999999"
    assert got.json()["jobs"] == []
    entry = _only_error(rest.delete("/job/999999"), 500, 2017)
    assert "JobId=999999" in entry["description"]
    _only_error(rest.post("/job/999999", json={"comment": "x"}), 500, 2017)


def test_slurmctld_refusals_of_a_submission_are_500(rest: httpx.Client, tmp_path: Path) -> None:
    job = {"current_working_directory": str(tmp_path), "partition": "nosuch"}
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    entry = _only_error(got, 500, 2000)
    assert entry["error"] == "Invalid partition name specified"
    got = rest.post("/job/submit", json={"job": {"current_working_directory": str(tmp_path)}})
    assert _only_error(got, 500, 2009)["error"] == "Job script not specified"
    _only_error(rest.get("/partition/nosuch"), 500, 2000)
    _only_error(rest.get("/node/nosuch"), 500, 2018)


def test_refusals_of_the_request_itself_are_400(rest: httpx.Client, tmp_path: Path) -> None:
    job = {"current_working_directory": str(tmp_path), "nosuchfield": 1}
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    assert _only_error(got, 400, 9001)["source"] == "job.nosuchfield"
    _only_error(rest.post("/job/submit", content=b"{not json"), 400, 9001)
    job_id = _submit(rest, tmp_path, "true", hold=True)
    got = rest.delete(f"/job/{job_id}", params={"signal": "NOSUCH"})
    assert _only_error(got, 400, 9000)["source"] == "signal"
    assert rest.delete(f"/job/{job_id}").status_code == 200


def test_cancelling_an_ended_job_succeeds_and_updating_it_is_2084(
    rest: httpx.Client, tmp_path: Path
) -> None:
    job_id = _submit(rest, tmp_path, "true")
    wait_until(lambda: _job(rest, job_id)["job_state"] == ["COMPLETED"], message="the job")
    got = rest.delete(f"/job/{job_id}")
    assert got.status_code == 200, got.text
    assert got.json()["errors"] == []
    assert _job(rest, job_id)["job_state"] == ["COMPLETED"]
    got = rest.post(f"/job/{job_id}", json={"time_limit": {"set": True, "number": 5}})
    assert _only_error(got, 500, 2084)["error"] == "Job has already finished"


def test_state_reasons_are_slurms(rest: httpx.Client, tmp_path: Path) -> None:
    held = _submit(rest, tmp_path, "true", hold=True)
    job = _job(rest, held)
    assert (job["job_state"], job["state_reason"]) == (["PENDING"], "JobHeldUser")
    done = _submit(rest, tmp_path, "true")
    three = _submit(rest, tmp_path, "exit 3")
    wait_until(lambda: _job(rest, done)["job_state"] == ["COMPLETED"], message="true to end")
    wait_until(lambda: _job(rest, three)["job_state"] == ["FAILED"], message="exit 3 to fail")
    assert _job(rest, done)["state_reason"] == "None"
    assert _job(rest, three)["state_reason"] == "NonZeroExitCode"
    assert rest.delete(f"/job/{held}").status_code == 200


def test_a_job_id_that_is_not_one_is_400_9002(rest: httpx.Client) -> None:
    _only_error(rest.get("/job/abc"), 400, 9002)
