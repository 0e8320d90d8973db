"""A real third-party Slurm REST client against HAL's facade: ``slurmrestapi`` (PyPI), the
Python client OpenAPI Generator makes from SchedMD's Slurm 25.11.4 spec. Its newest data
parser is v0.0.44, which the facade also serves; its pydantic models are strict and check
enum values (``job_state``, node ``state``, ``exit_code.status``), so every answer below
was parsed against Slurm's own schema."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hal.testing.live import LiveServer, wait_until

if importlib.util.find_spec("slurmrestapi") is None:
    pytest.skip("slurmrestapi is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def sr() -> ModuleType:
    """The client package, imported by this module's first test, not at collection: its
    826 model modules take 5 s of CPU to import, and each xdist worker collects this
    module while one runs it."""
    import slurmrestapi

    return slurmrestapi


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as server,
        server.agents(1, cpus=2),
    ):
        yield server


@pytest.fixture(scope="module")
def api(live: LiveServer, sr: ModuleType) -> Iterator[Any]:
    config = sr.Configuration(host=live.url, api_key={"user": "admin", "token": live.token})
    with sr.ApiClient(config) as client:
        yield sr.SlurmApi(client)


def _desc(m: ModuleType, tmp: Path, **fields: Any) -> Any:
    return m.V0044JobDescMsg(
        name="client",
        current_working_directory=str(tmp),
        environment=["PATH=/usr/bin:/bin"],
        time_limit=m.V0044Uint32NoValStruct(set=True, number=2),
        **fields,
    )


def _state(api: Any, job_id: int) -> list[str]:
    jobs = api.slurm_v0044_get_job(str(job_id)).jobs
    return list(jobs[0].job_state)


def test_submit_watch_and_read_the_exit_code(api: Any, sr: ModuleType, tmp_path: Path) -> None:
    m = sr.models
    req = m.V0044JobSubmitReq(script="#!/bin/sh\nexit 3\n", job=_desc(m, tmp_path))
    sub = api.slurm_v0044_post_job_submit(v0044_job_submit_req=req)
    assert sub.errors == [] and sub.step_id == "batch"
    wait_until(lambda: _state(api, sub.job_id) == ["FAILED"], message="exit 3")
    listed = api.slurm_v0044_get_jobs()
    job = next(j for j in listed.jobs if j.job_id == sub.job_id)
    assert job.exit_code.status == ["ERROR"]
    assert job.exit_code.return_code.number == 3
    assert job.time_limit.number == 2 and job.user_name == "admin"


def test_cancel_update_and_refusals(api: Any, sr: ModuleType, tmp_path: Path) -> None:
    m = sr.models
    req = m.V0044JobSubmitReq(script="#!/bin/sh\nsleep 300\n", job=_desc(m, tmp_path, hold=True))
    job_id = api.slurm_v0044_post_job_submit(v0044_job_submit_req=req).job_id
    upd = api.slurm_v0044_post_job(
        str(job_id), m.V0044JobDescMsg(time_limit=m.V0044Uint32NoValStruct(set=True, number=7))
    )
    assert [r.job_id for r in upd.results] == [job_id]
    assert api.slurm_v0044_get_job(str(job_id)).jobs[0].time_limit.number == 7
    api.slurm_v0044_post_job(str(job_id), m.V0044JobDescMsg(hold=False))
    wait_until(lambda: _state(api, job_id) == ["RUNNING"], message="the released job")
    killed = api.slurm_v0044_delete_job(str(job_id))
    assert killed.status[0].job_id.number == job_id
    wait_until(lambda: _state(api, job_id) == ["CANCELLED"], message="the cancel")

    bad = m.V0044JobSubmitReq(
        script="#!/bin/sh\ntrue\n", job=_desc(m, tmp_path, partition="nosuch")
    )
    with pytest.raises(sr.exceptions.ApiException) as refused:
        api.slurm_v0044_post_job_submit(v0044_job_submit_req=bad)
    assert refused.value.status == 500
    errors = m.V0044OpenapiJobSubmitResponse.from_json(refused.value.body).errors
    assert errors[0].error_number == 2000


def test_cluster_views_parse(api: Any, sr: ModuleType, live: LiveServer) -> None:
    nodes = api.slurm_v0044_get_nodes().nodes
    assert len(nodes) == 1 and nodes[0].cpus == 2
    parts = api.slurm_v0044_get_partitions().partitions
    assert parts[0].nodes.total == 1
    assert api.slurm_v0044_get_ping().pings[0].responding is True
    assert api.slurm_v0044_get_diag().statistics.jobs_submitted >= 0
    assert api.slurm_v0044_get_licenses().licenses == []
    anonymous = sr.SlurmApi(sr.ApiClient(sr.Configuration(live.url)))
    with pytest.raises(sr.exceptions.ApiException) as refused:
        anonymous.slurm_v0044_get_jobs()
    assert refused.value.status == 401


def test_meta_names_the_slurm_release_of_the_clients_spec(api: Any) -> None:
    """v0.0.44 is the data parser of the spec this client was generated from (its
    OpenAPI version "Slurm-25.11.4", the package's 25.11.4.0): ``meta.slurm`` says that
    release, not a 25.11.0 nobody checked."""
    from importlib.metadata import version

    major, minor, micro = version("slurmrestapi").split(".")[:3]
    slurm = api.slurm_v0044_get_ping().meta.slurm
    assert (slurm.version.major, slurm.version.minor, slurm.version.micro) == (
        major,
        minor,
        micro,
    )
    assert slurm.release.startswith(f"{major}.{minor}.{micro} ")
