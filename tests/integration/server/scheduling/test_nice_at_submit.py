"""A negative nice raises a job's priority over everyone's: only administrators may give
one at submission (as in Slurm, and as ``scontrol update Nice=`` already required); any
user may give a positive one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer

JOB = {"script": "#!/bin/sh\ntrue\n", "hold": True}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("srv")) as server:
        yield server


def post(live: LiveServer, path: str, token: str, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return http.post(live.url + path, json=body, headers=headers, timeout=10)


def test_only_an_administrator_submits_with_a_negative_nice(live: LiveServer) -> None:
    user = live.add_users("carl")["carl"]
    refused = post(live, "/v1/jobs", user, {**JOB, "nice": -100})
    assert refused.status_code == 403 and "negative nice" in refused.json()["detail"]
    batch = post(live, "/v1/jobs/batch", user, {"jobs": [JOB, {**JOB, "nice": -1}]})
    assert batch.status_code == 403 and batch.json()["detail"].startswith("jobs[1].nice")
    assert post(live, "/v1/jobs", user, {**JOB, "nice": 100}).status_code == 201
    assert post(live, "/v1/jobs", live.token, {**JOB, "nice": -100}).status_code == 201
    out = live.cli("sbatch", "--nice=-5", "--hold", "--wrap", "true", token=user)
    assert out.returncode != 0 and "negative nice" in out.stderr
