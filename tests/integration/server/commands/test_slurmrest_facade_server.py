"""The slurmrestd facade (``/slurm/v0.0.45``) against a live control plane and one agent,
spoken to with plain httpx as a Slurm REST client would: submit a ``job_desc_msg``, watch
``job_state`` go ``["RUNNING"]`` → ``["COMPLETED"]``, read the ``exit_code`` struct of a
job that exits 3 and of one killed by a signal, cancel with DELETE, refuse an unknown
partition and unsupported fields in ``errors``, and refuse bad tokens with 401 — every
answer in the ``meta/errors/warnings`` envelope."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer, wait_until

BASE = "/slurm/v0.0.45"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("hal")
    overrides = {"kill_wait_seconds": 2, "licenses": {"matlab": 2}}
    with LiveServer(data, config_overrides=overrides) as server, server.agents(1, cpus=4):
        yield server


@pytest.fixture(scope="module")
def rest(live: LiveServer) -> Iterator[httpx.Client]:
    headers = {"X-SLURM-USER-NAME": "admin", "X-SLURM-USER-TOKEN": live.token}
    with httpx.Client(base_url=live.url + BASE, headers=headers, timeout=10) as client:
        yield client


def _envelope(body: dict[str, Any]) -> None:
    assert set(body) >= {"meta", "errors", "warnings"}
    assert body["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.45"
    # v0.0.45's spec is Slurm 26.11-rc1's (the reference, slurm-conventions.md §1.6)
    version = body["meta"]["slurm"]["version"]
    assert (version["major"], version["minor"], version["micro"]) == ("26", "11", "0")
    assert body["meta"]["slurm"]["release"].startswith("26.11.0-0rc1 (HAL ")


def _submit(rest: httpx.Client, tmp: Path, script: str, **job: Any) -> int:
    desc = {
        "name": "facade",
        "current_working_directory": str(tmp),
        "environment": ["PATH=/usr/bin:/bin", "FACADE=yes"],
        "time_limit": {"set": True, "infinite": False, "number": 5},
        "memory_per_node": {"set": True, "number": 64},
        **job,
    }
    got = rest.post("/job/submit", json={"script": f"#!/bin/sh\n{script}\n", "job": desc})
    assert got.status_code == 200, got.text
    body = got.json()
    _envelope(body)
    assert body["errors"] == [] and body["step_id"] == "batch"
    return int(body["job_id"])


def _job(rest: httpx.Client, job_id: int) -> dict[str, Any]:
    got = rest.get(f"/job/{job_id}")
    assert got.status_code == 200, got.text
    _envelope(got.json())
    jobs = got.json()["jobs"]
    assert [j["job_id"] for j in jobs] == [job_id]
    return dict(jobs[0])


def _in_list(rest: httpx.Client, job_id: int) -> dict[str, Any]:
    got = rest.get("/jobs/")
    assert got.status_code == 200, got.text
    _envelope(got.json())
    found = [j for j in got.json()["jobs"] if j["job_id"] == job_id]
    assert len(found) == 1
    return dict(found[0])


def _state(rest: httpx.Client, job_id: int) -> list[str]:
    return list(_in_list(rest, job_id)["job_state"])


def test_a_job_runs_then_completes_with_its_request_shown(
    rest: httpx.Client, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    job_id = _submit(
        rest,
        tmp_path,
        f'while [ ! -e {go} ]; do sleep 0.1; done; echo "$FACADE" > out.txt',
        cpus_per_task=2,
        standard_output=str(tmp_path / "slurm-%j.out"),
    )
    wait_until(lambda: _state(rest, job_id) == ["RUNNING"], message="the job to run")
    job = _in_list(rest, job_id)
    assert job["nodes"] and job["user_name"] == "admin"
    # submitted through slurmrestd, from slurmrestd's host (Slurm's AllocNode)
    assert job["allocating_node"] == socket.gethostname()
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 5}
    assert job["cpus_per_task"]["number"] == 2
    assert job["memory_per_node"]["number"] == 64
    assert job["standard_output"] == str(tmp_path / f"slurm-{job_id}.out")
    assert job["exit_code"]["status"] == ["PENDING"]
    go.touch()
    wait_until(lambda: _state(rest, job_id) == ["COMPLETED"], message="the job to complete")
    done = _job(rest, job_id)
    assert done["exit_code"]["status"] == ["SUCCESS"]
    assert done["exit_code"]["return_code"] == {"set": True, "infinite": False, "number": 0}
    assert done["end_time"]["set"] and done["end_time"]["number"] >= done["start_time"]["number"]
    assert (tmp_path / "out.txt").read_text() == "yes\n"


def test_exit_3_and_a_signal_in_the_exit_code_struct(rest: httpx.Client, tmp_path: Path) -> None:
    three = _submit(rest, tmp_path, "exit 3")
    killed = _submit(rest, tmp_path, "kill -KILL $$")
    wait_until(lambda: _state(rest, three) == ["FAILED"], message="exit 3 to fail")
    wait_until(lambda: _state(rest, killed) == ["FAILED"], message="the killed job to fail")
    code = _job(rest, three)["exit_code"]
    assert code["status"] == ["ERROR"]
    assert code["return_code"] == {"set": True, "infinite": False, "number": 3}
    assert code["signal"]["id"]["set"] is False
    code = _job(rest, killed)["exit_code"]
    assert code["status"] == ["SIGNALED"]
    assert code["signal"]["id"]["number"] == 9 and code["signal"]["name"] == "KILL"
    assert code["return_code"] == {"set": True, "infinite": False, "number": 0}  # sacct's 0:9


def test_delete_cancels_and_signal_only_signals(rest: httpx.Client, tmp_path: Path) -> None:
    # (the signal goes once the trap is set: RUNNING comes before the script's first line)
    trap = "trap 'exit 7' USR1\ntouch trap-set\nwhile :; do sleep 0.1; done"
    trapped = _submit(rest, tmp_path, trap)
    sleeper = _submit(rest, tmp_path, "sleep 300")
    wait_until((tmp_path / "trap-set").exists, message="the trapping job's trap")
    wait_until(lambda: _state(rest, sleeper) == ["RUNNING"], message="the sleeper")
    got = rest.delete(f"/job/{trapped}", params={"signal": "SIGUSR1", "flags": "BATCH_JOB"})
    assert got.status_code == 200, got.text
    assert got.json()["status"][0]["job_id"]["number"] == trapped
    wait_until(lambda: _state(rest, trapped) == ["FAILED"], message="USR1 to end it")
    assert _job(rest, trapped)["exit_code"]["return_code"]["number"] == 7
    got = rest.delete(f"/job/{sleeper}")
    assert got.status_code == 200, got.text
    _envelope(got.json())
    wait_until(lambda: _state(rest, sleeper) == ["CANCELLED"], message="the cancel")
    again = rest.delete(f"/job/{sleeper}")  # slurmrestd: an ended job's cancel succeeds
    assert again.status_code == 200 and again.json()["errors"] == []
    assert again.json()["status"][0]["error"]["code"] == 2021


def test_update_time_limit_and_hold_of_a_pending_job(rest: httpx.Client, tmp_path: Path) -> None:
    job_id = _submit(rest, tmp_path, "true", hold=True)
    job = _job(rest, job_id)
    assert job["job_state"] == ["PENDING"] and job["hold"] is True
    got = rest.post(f"/job/{job_id}", json={"time_limit": {"set": True, "number": 9}})
    assert got.status_code == 200, got.text
    assert got.json()["results"][0]["job_id"] == job_id
    assert _job(rest, job_id)["time_limit"]["number"] == 9
    refused = rest.post(f"/job/{job_id}", json={"x11": ["FORWARD_ALL_NODES"]})
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["source"] == "job.x11"
    assert rest.post(f"/job/{job_id}", json={"hold": False}).status_code == 200
    wait_until(lambda: _state(rest, job_id) == ["COMPLETED"], message="the released job")


def test_unknown_partition_and_unsupported_fields_are_errors(
    rest: httpx.Client, tmp_path: Path
) -> None:
    before = len(rest.get("/jobs/").json()["jobs"])
    job = {"current_working_directory": str(tmp_path), "partition": "nosuch"}
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    assert got.status_code == 500  # slurmctld's refusal, as slurmrestd answers it
    body = got.json()
    _envelope(body)
    assert body["errors"][0]["error_number"] == 2000
    assert "nosuch" in body["errors"][0]["description"]
    job = {
        "current_working_directory": str(tmp_path),
        "burst_buffer": "#DW jobdw capacity=1GB",
        "partiton": "debug",
        "wckey": "proj",
    }
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    assert got.status_code == 400
    sources = sorted(e["source"] for e in got.json()["errors"])
    assert sources == ["job.burst_buffer", "job.partiton"]
    assert [w["source"] for w in got.json()["warnings"]] == ["job.wckey"]
    assert len(rest.get("/jobs/").json()["jobs"]) == before


@pytest.mark.parametrize(
    ("native", "facade", "field"),
    [
        ({"ntasks": 0}, {"tasks": 0}, "tasks"),
        ({"nice": 20_000}, {"nice": 20_000}, "nice"),
        ({"name": "n" * 300}, {"name": "n" * 300}, "name"),
    ],
)
def test_hals_wire_bounds_refuse_what_v1_refuses(
    rest: httpx.Client,
    live: LiveServer,
    tmp_path: Path,
    native: dict[str, Any],
    facade: dict[str, Any],
    field: str,
) -> None:
    """The same out-of-bounds request through ``POST /v1/jobs`` and the facade: both
    refuse it (400), with the same words; the facade's entry is 9001 naming the
    job_desc_msg field. The facade had submitted them (no pydantic on its path)."""
    before = len(rest.get("/jobs/").json()["jobs"])
    body = {"script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), **native}
    headers = {"Authorization": f"Bearer {live.token}"}
    got = http.post(live.url + "/v1/jobs", json=body, headers=headers, timeout=10)
    assert got.status_code == 400, got.text
    why = got.json()["detail"].split(": ", 1)[1]
    job = {"current_working_directory": str(tmp_path), **facade}
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    assert got.status_code == 400, got.text
    (entry,) = got.json()["errors"]
    assert (entry["error_number"], entry["source"]) == (9001, f"job.{field}")
    assert entry["description"] == f"job.{field}: {why}"
    assert len(rest.get("/jobs/").json()["jobs"]) == before


def test_a_users_negative_nice_is_refused_as_v1_refuses_it(
    live: LiveServer, tmp_path: Path
) -> None:
    """A negative nice raises a job over everyone's: an administrator's only. The facade
    checks it with ``/v1``'s own rule and words (it had its own copy of the check)."""
    token = live.add_users("nicer")["nicer"]
    headers = {"Authorization": f"Bearer {token}"}
    body = {"script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "nice": -5}
    got = http.post(live.url + "/v1/jobs", json=body, headers=headers, timeout=10)
    assert got.status_code == 403, got.text
    job = {"current_working_directory": str(tmp_path), "nice": -5}
    got = http.post(
        live.url + BASE + "/job/submit",
        json={"script": "#!/bin/sh\ntrue\n", "job": job},
        headers={"X-SLURM-USER-TOKEN": token},
        timeout=10,
    )
    assert got.status_code == 500, got.text  # slurmctld's refusal
    (entry,) = got.json()["errors"]
    assert entry["error_number"] == 2002
    assert (
        entry["description"]
        == http.post(live.url + "/v1/jobs", json=body, headers=headers, timeout=10).json()["detail"]
    )


def test_gpu_and_environment_as_a_v0038_dict_are_read(rest: httpx.Client, tmp_path: Path) -> None:
    """A GPU the only node lacks is refused as Slurm does; the v0.0.38 dict environment
    (drift the reference verified) is still accepted."""
    job = {
        "current_working_directory": str(tmp_path),
        "tres_per_node": "gres/gpu:2",
    }
    got = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
    assert got.status_code == 500, got.text
    assert got.json()["errors"][0]["error_number"] in (2014, 22)
    job_id = _submit(rest, tmp_path, 'test "$ENVDICT" = ok', environment={"ENVDICT": "ok"})
    wait_until(lambda: _state(rest, job_id) == ["COMPLETED"], message="the dict-env job")


def test_auth_failures_are_401_in_the_envelope(live: LiveServer) -> None:
    url = live.url + BASE + "/jobs/"
    cases: list[dict[str, str]] = [
        {},
        {"X-SLURM-USER-TOKEN": "not-a-token"},
        {"Authorization": "Bearer nope"},
        {"X-SLURM-USER-NAME": "mallory", "X-SLURM-USER-TOKEN": live.token},
    ]
    for headers in cases:
        got = http.get(url, headers=headers, timeout=5)
        assert got.status_code == 401, (headers, got.text)
        body = got.json()
        _envelope(body)
        assert body["errors"][0]["error_number"] == 1007
    ok = http.get(url, headers={"Authorization": f"Bearer {live.token}"}, timeout=5)
    assert ok.status_code == 200


def test_cluster_views(rest: httpx.Client, live: LiveServer) -> None:
    nodes = rest.get("/nodes/").json()
    _envelope(nodes)
    assert len(nodes["nodes"]) == 1
    node = nodes["nodes"][0]
    assert node["cpus"] == 4 and node["state"][0] in ("IDLE", "MIXED", "ALLOCATED")
    assert rest.get(f"/node/{node['name']}").json()["nodes"][0]["name"] == node["name"]
    missing = rest.get("/node/nosuch")
    assert missing.status_code == 500 and missing.json()["errors"][0]["error_number"] == 2018
    parts = rest.get("/partitions/").json()["partitions"]
    assert parts and parts[0]["nodes"]["total"] == 1 and parts[0]["cpus"]["total"] == 4
    name = parts[0]["name"]
    assert rest.get(f"/partition/{name}").json()["partitions"][0]["name"] == name
    assert rest.get("/partition/nosuch").json()["errors"][0]["error_number"] == 2000
    ping = rest.get("/ping/").json()["pings"][0]
    assert ping["responding"] is True and ping["pinged"] == "UP"
    lic = rest.get("/licenses/").json()["licenses"]
    assert lic == [
        {
            "LicenseName": "matlab",
            "Total": 2,
            "Used": 0,
            "Free": 2,
            "Remote": False,
            "Reserved": 0,
            "LastUpdate": lic[0]["LastUpdate"],
        }
    ]
    stats = rest.get("/diag/").json()["statistics"]
    assert stats["jobs_submitted"] >= 0 and stats["req_time"]["set"] is True
    nothing = rest.get("/nosuch/")
    assert nothing.status_code == 404
    _envelope(nothing.json())
