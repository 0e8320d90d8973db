"""``PATCH /v1/jobs/{id}`` with ``partition`` (``scontrol update job Partition=``) gives
the job its new partition's priority, as a submission there would get it, against a
real server without ``[priority]`` (basic priorities: the partition's tier, less nice)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from hal.config.model import PartitionConfig
from hal.testing import http
from hal.testing.live import LiveServer

SCRIPT = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp"}
PARTITIONS = (
    PartitionConfig(name="low", default=True, priority_tier=1),
    PartitionConfig(name="high", priority_tier=5),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    overrides: dict[str, object] = {"partitions": PARTITIONS}
    with LiveServer(tmp_path_factory.mktemp("srv"), config_overrides=overrides) as live:
        yield live


def call(server: LiveServer, method: str, path: str, token: str, json: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return http.request(method, server.url + path, headers=headers, json=json, timeout=10)


def test_a_job_moved_to_a_lower_tier_does_not_keep_its_old_priority(server: LiveServer) -> None:
    """Moved from ``high`` into ``low``, the job kept high's priority and went ahead of
    every job waiting in ``low``: a user's way around the queue."""
    alice = server.add_users("alice")["alice"]
    waiting = call(server, "POST", "/v1/jobs", alice, SCRIPT).json()["job_id"]
    moved = call(server, "POST", "/v1/jobs", alice, {**SCRIPT, "partition": "high"}).json()
    r = call(server, "PATCH", f"/v1/jobs/{moved['job_id']}", alice, {"partition": "low"})
    assert r.status_code == 200, r.text
    first = call(server, "GET", f"/v1/jobs/{waiting}", alice, None).json()
    assert r.json()["partition"] == "low"
    assert r.json()["priority"] == first["priority"]
    back = call(server, "PATCH", f"/v1/jobs/{waiting}", alice, {"partition": "high"}).json()
    assert back["priority"] > first["priority"]


def test_a_priority_an_administrator_set_is_kept(server: LiveServer) -> None:
    job = call(server, "POST", "/v1/jobs", server.token, SCRIPT).json()["job_id"]
    call(server, "PATCH", f"/v1/jobs/{job}", server.token, {"priority": 7})
    r = call(server, "PATCH", f"/v1/jobs/{job}", server.token, {"partition": "high"})
    assert r.status_code == 200 and r.json()["priority"] == 7, r.text
